"""One set of statistics for every metric, and the tests `compare` judges changes with.

Every measured metric keeps its samples (at most `MAX_SAMPLES`, thinned evenly, with the true
count) and the same statistics: n, median, p25, p75 and a confidence interval for the quantile
the metric reports (the median for a time, 0.9 for a p90), distribution-free, from
`scipy.stats.quantile_test`. A derived metric (a ratio of medians, a speedup) gets its interval
from a bootstrap over its inputs' samples (`scipy.stats.bootstrap`). Nothing here is
hand-written statistics: scipy computes, this module chooses.

Two metrics are compared with a two-sample test on their samples: Mann-Whitney U for a
median, and for a tail quantile a Fisher exact test on how many samples of each side fall
above the baseline's quantile (a Mood-type quantile test): a shift of p99 need not move the
median. `adjust` corrects the p-values of many metrics for their number (Benjamini-Hochberg).
"""

from __future__ import annotations

import enum
import inspect
import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats as sps

MAX_SAMPLES = 256  # samples kept per metric in a record
CI_LEVEL = 0.95
ALPHA = 0.05  # false-discovery rate over all the metrics one comparison judges
MIN_SAMPLES = 3  # fewer per side cannot make any test significant: the metric is unverified
BOOTSTRAP_RESAMPLES = 999


def seed_keyword(bootstrap: Callable[..., object]) -> str:
    """The keyword scipy.stats.bootstrap takes its generator by: `rng` from SciPy 1.15,
    `random_state` before (harness/dependencies.py: the oldest SciPy this code runs on)."""
    return "rng" if "rng" in inspect.signature(bootstrap).parameters else "random_state"


SEED_KEYWORD = seed_keyword(sps.bootstrap)


def thin(samples: Sequence[float], limit: int = MAX_SAMPLES) -> list[float]:
    """At most `limit` of `samples`, evenly spaced, in their order (order is time order), to
    6 significant digits (timers resolve less; records stay small)."""
    n = len(samples)
    idx = range(n) if n <= limit else np.linspace(0, n - 1, limit).round().astype(int)
    return [float(f"{float(samples[i]):.6g}") for i in idx]


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def quantile_ci(samples: Sequence[float], q: float = 0.5,
                level: float = CI_LEVEL) -> tuple[float | None, float | None]:
    """Distribution-free confidence interval of the `q` quantile (order statistics); an end
    that `samples` are too few to give is None."""
    x = np.asarray(samples, dtype=float)
    if x.size < 2:
        return None, None
    ci = sps.quantile_test(x, q=float(np.quantile(x, q)), p=q).confidence_interval(level)
    return _finite(ci.low), _finite(ci.high)


def summarize(samples: Sequence[float], q: float = 0.5, count: int | None = None,
              ci: tuple[float | None, float | None] | None = None) -> dict:
    """The statistics a record keeps beside a metric: n, median, p25, p75, the quantile `q`
    the metric reports, and its confidence interval (`ci` when given: a derived metric's)."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        return {"n": count or 0}
    p25, p50, p75 = np.percentile(x, [25, 50, 75])
    lo, hi = ci if ci is not None else quantile_ci(x, q)
    out = {"n": int(count if count is not None else x.size), "median": float(p50),
           "p25": float(p25), "p75": float(p75), "q": q, "ci": [lo, hi], "ci_level": CI_LEVEL}
    if q != 0.5:
        out[f"p{round(q * 100):g}"] = float(np.quantile(x, q))
    return out


def bootstrap_ci(statistic: Callable[..., np.ndarray], *samples: Sequence[float],
                 level: float = CI_LEVEL,
                 paired: bool = False) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of `statistic(*samples, axis=-1)` (vectorised), with a
    fixed seed so that a record is reproducible; (None, None) when a sample is too small."""
    data = [np.asarray(s, dtype=float) for s in samples]
    if any(d.size < 2 for d in data) or (paired and len({d.size for d in data}) > 1):
        return None, None
    res = sps.bootstrap(data, statistic, paired=paired, vectorized=True, method="percentile",
                        n_resamples=BOOTSTRAP_RESAMPLES, confidence_level=level,
                        **{SEED_KEYWORD: np.random.default_rng(0)})
    return _finite(res.confidence_interval.low), _finite(res.confidence_interval.high)


def median_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(a, axis=axis) / np.median(b, axis=axis)


def ratio_of_medians_ci(num: Sequence[float], den: Sequence[float],
                        level: float = CI_LEVEL) -> tuple[float | None, float | None]:
    """Interval of median(num) / median(den) for two independent sets of samples."""
    return bootstrap_ci(median_ratio, num, den, level=level)


def quantile_ratio_ci(a: Sequence[float], b: Sequence[float], q: float = 0.5,
                      level: float = CI_LEVEL) -> tuple[float | None, float | None]:
    """Interval of quantile_q(b) / quantile_q(a): a change between two runs."""

    def stat(x, y, axis=-1):
        return np.quantile(y, q, axis=axis) / np.quantile(x, q, axis=axis)

    return bootstrap_ci(stat, a, b, level=level)


def shift_pvalue(a: Sequence[float], b: Sequence[float], q: float = 0.5) -> float | None:
    """Two-sided p-value that `a` and `b` differ at their `q` quantile; None when either side
    has fewer than MIN_SAMPLES samples."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < MIN_SAMPLES or y.size < MIN_SAMPLES:
        return None
    if q == 0.5:
        return float(sps.mannwhitneyu(x, y, alternative="two-sided").pvalue)
    # how many calls of each side are slower than the baseline's q quantile: (1 - q) of
    # them on both sides when nothing changed
    cut = np.quantile(x, q)
    table = [[int((x > cut).sum()), int((x <= cut).sum())],
             [int((y > cut).sum()), int((y <= cut).sum())]]
    return float(sps.fisher_exact(table).pvalue)


def session_shift(a: Sequence[float], b: Sequence[float],
                  level: float = CI_LEVEL) -> tuple[float, float | None, float | None] | None:
    """For a figure measured in sessions (one value per session: a fresh RPC session, or a
    fresh launch of a case's processes): Welch's t-test on the sessions' log values, and the
    interval of the ratio of their geometric means. The session is the unit: calls within
    one share its level, which is drawn once per session (Gloo's 64 KiB round trip sits near
    0.1 ms or 4 ms, by session), so a test on the pooled calls counts one draw hundreds of
    times. Returns (two-sided p, low, high); None when a side has fewer than MIN_SAMPLES
    sessions, a session at or below zero, or no spread."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < MIN_SAMPLES or y.size < MIN_SAMPLES or min(x.min(), y.min()) <= 0:
        return None
    res = sps.ttest_ind(np.log(y), np.log(x), equal_var=False)
    if not math.isfinite(res.pvalue):
        return None  # both sides without spread
    ci = res.confidence_interval(level)
    return float(res.pvalue), _finite(math.exp(ci.low)), _finite(math.exp(ci.high))


def pooled_log_variance(
        groups: Sequence[Sequence[float] | None]) -> tuple[float, float] | None:
    """(variance, degrees of freedom) of log values within groups (e.g. a run's sessions),
    pooled over the groups; None when a group is missing, has fewer than two values or one at
    or below zero."""
    if not groups or any(g is None or len(g) < 2 or min(g) <= 0 for g in groups):
        return None
    logs = [np.log(np.asarray(g, dtype=float)) for g in groups]
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
    return ss / sum(x.size - 1 for x in logs), float(sum(x.size - 1 for x in logs))


def rate_pvalue(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p-value that two rates differ, from one 0/1 sample per trial on each side
    (Fisher's exact test on the counts); None when either side has fewer than MIN_SAMPLES
    trials."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < MIN_SAMPLES or y.size < MIN_SAMPLES:
        return None
    table = [[int(x.sum()), int(x.size - x.sum())], [int(y.sum()), int(y.size - y.sum())]]
    return float(sps.fisher_exact(table).pvalue)


def adjust(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false-discovery rate over all the tests)."""
    if not pvalues:
        return []
    return [float(p) for p in sps.false_discovery_control(np.asarray(pvalues), method="bh")]


PRIOR_DF = 4.0  # weight of a metric family's spread against a metric's own (limma's d0)
FAMILY_MIN = 3  # members with a spread of their own a family needs to lend it to them
# The family's spread is a high quantile of its members' rather than their median: with two
# or three runs a noisy member can look quiet by chance, and must not then borrow a quiet
# family's confidence (judged on A/A runs of this machine: docs/validation.md; a calibration
# measures the quantile's spread for its machine, see harness/comparing/calibration.py).
FAMILY_QUANTILE = 0.75


def family_prior(groups: Sequence[Sequence[Sequence[float]]]) -> float | None:
    """The typical run-to-run variance of log values in a family of metrics (the same figure
    at other sizes or settings): a high quantile of their pooled within-group variances (None
    for a family of fewer than FAMILY_MIN members). Each item
    of `groups` is one metric's groups of replicate values (e.g. the runs of each side)."""
    variances = []
    for metric in groups:
        ss, df = 0.0, 0
        for g in metric:
            x = np.log(np.asarray(g, dtype=float))
            if x.size > 1:
                ss += float(((x - x.mean()) ** 2).sum())
                df += x.size - 1
        if df:
            variances.append(ss / df)
    if len(variances) < FAMILY_MIN:
        return None
    return float(np.quantile(variances, FAMILY_QUANTILE))


def _moderated(ss: float, df: int, prior_var: float | None,
               prior_df: float) -> tuple[float, float] | None:
    """(variance, degrees of freedom) from a sum of squares on `df` degrees of freedom, shrunk
    towards `prior_var` as if it were `prior_df` more; None when there is no spread at all."""
    if prior_var is None:
        return (ss / df, float(df)) if df else None
    return (prior_df * prior_var + ss) / (prior_df + df), prior_df + df


def moderated_test(a: Sequence[float], b: Sequence[float], prior_var: float | None,
                   prior_df: float = PRIOR_DF) -> tuple[float, float, float] | None:
    """Two-sample t-test on log values, one value per run or process, with the variance
    moderated towards the family's (Smyth's empirical-Bayes t of limma): a metric with two or
    three runs cannot estimate its own run-to-run spread, its family can.

    Returns (two-sided p-value, standard error of the log change, degrees of freedom), or None
    when neither the runs nor the family give any spread."""
    x, y = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    if x.size == 0 or y.size == 0:
        return None
    ss = float(((x - x.mean()) ** 2).sum() + ((y - y.mean()) ** 2).sum())
    if (moderated := _moderated(ss, x.size + y.size - 2, prior_var, prior_df)) is None:
        return None
    var, dof = moderated
    se = float(np.sqrt(var * (1 / x.size + 1 / y.size)))
    if se == 0:
        return (0.0 if y.mean() != x.mean() else 1.0), 0.0, dof
    t = (y.mean() - x.mean()) / se
    return float(2 * sps.t.sf(abs(t), dof)), se, dof


def moderated_paired_test(a: Sequence[float], b: Sequence[float], prior_var: float | None,
                          prior_df: float = PRIOR_DF) -> tuple[float, float, float] | None:
    """The same test on rounds that ran both sides back to back: a one-sample t-test on the
    log ratios b[i] / a[i], whose variance is moderated towards the family's variance of such
    ratios (`prior_var`). What a round shares (the machine's state for a few minutes) cancels
    in its ratio.

    Returns (two-sided p-value, standard error of the log change, degrees of freedom), or None
    when neither the rounds nor the family give any spread."""
    d = np.log(np.asarray(b, dtype=float)) - np.log(np.asarray(a, dtype=float))
    if d.size == 0:
        return None
    ss = float(((d - d.mean()) ** 2).sum())
    if (moderated := _moderated(ss, d.size - 1, prior_var, prior_df)) is None:
        return None
    var, dof = moderated
    se = float(np.sqrt(var / d.size))
    if se == 0:
        return (0.0 if d.mean() != 0 else 1.0), 0.0, dof
    return float(2 * sps.t.sf(abs(d.mean() / se), dof)), se, dof


def variance_exceeds(var: float, df: int, expected: float, expected_df: float,
                     alpha: float = 0.05) -> bool:
    """Whether a variance on `df` degrees of freedom is significantly larger than an
    expected one estimated on `expected_df` (one-sided F-test)."""
    return bool(sps.f.sf(var / expected, df, expected_df) < alpha)


def t_quantile(p: float, df: float) -> float:
    return float(sps.t.ppf(p, df))


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    return float(sps.t.sf(t, df))


class Within(enum.StrEnum):
    """Where an interval lies against a limit |x| <= limit: a check's three answers."""

    INSIDE = "inside"  # the whole interval within the limit: pass
    OUTSIDE = "outside"  # the whole interval past it: fail
    ACROSS = "across"  # reaching across it: inconclusive, more measurements may decide


def within(low: float, high: float, limit: float) -> Within:
    """Where [low, high] lies against the band [-limit, limit]."""
    if -limit <= low and high <= limit:
        return Within.INSIDE
    if low > limit or high < -limit:
        return Within.OUTSIDE
    return Within.ACROSS


def mean_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval of the mean of independent samples (>= 2)."""
    xs = np.asarray(samples, float)
    if xs.size < 2:
        raise ValueError("an interval of the mean needs at least 2 samples")
    mean = float(xs.mean())
    half = t_quantile(0.5 + confidence / 2, xs.size - 1) * float(xs.std(ddof=1)) / xs.size**0.5
    return mean, mean - half, mean + half
