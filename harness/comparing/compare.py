"""`release-bench compare BASELINE CANDIDATE`: what changed between two runs, and whether any
change is a regression. docs/method.md gives the method in full; in short:

Results are matched by (suite, case, device, params), metrics by name and labels. Each figure
gets one of seven verdicts, read off one 95% interval of its change, judged against its
kind's tolerance (PyTorch HUD's: ratios and throughputs 0.95x, times and latencies 1.15x,
bytes 1.10x; 5% for every kind in `ab`):

- `regression` / `improvement`: it moved past the tolerance in its bad (good) direction,
  and the change is significant;
- `worse` / `better`: the change is significant, in its bad (good) direction, but its
  interval lies inside the tolerance band: a change that fails nothing, never "unchanged";
- `unchanged`: its interval lies inside the tolerance band (an equivalence test: two
  one-sided tests at 2.5% each) and the change is not significant, so nothing moved that
  matters;
- `inconclusive`: neither; the row gives the change it could detect and about how many
  rounds would decide it;
- `unverified`: not judged: no samples, measured contended, no direction, or a spread between
  runs nobody measured.

A change is significant when both tests say so: within runs, a two-sample test on the two
runs' samples (Mann-Whitney U for a median, a Fisher exact quantile test for p90/p99, Welch's
t on the sessions' log values for a figure measured in sessions); between runs, a t-test on
log values against the spread of the figure from run to run (or process to process), which
on a shared machine dwarfs the spread within a run. That spread comes from the machine's
history (`--history`, by default the baseline's folder of runs) or from `ab`'s rounds (paired
by round: a round's B/A ratio cancels the machine's state of those minutes), with each
figure's variance moderated towards its family's (the same figure at other sizes), as limma
does, and held at least at what this machine's calibration (`release-bench calibrate`)
measured. The interval is of the judged change (the rounds' or runs' log values), so that
it excludes 1 when the between-run test is significant at 5%.

Multiple figures: the p-values of both claims, a change and an equivalence, are corrected
for the number of figures judged (Benjamini-Hochberg, false-discovery rate 5%). The
correction can only turn a verdict the interval alone would give into `inconclusive`, and
the row then says so. A conformance case that passed and now fails is a regression whatever
its figures, unless it failed on a rate (a share of fresh processes that ended badly), which
is judged by Fisher's exact test on the trials' counts. Comparing runs of different machines
(CPU model or flags, core count, GPU model, driver major) is refused unless asked for.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

from harness import stats
from harness.cases import metric_id
from harness.comparing.calibration import Calibration
from harness.records import Metric, MetricKey, Run

# kind -> tolerated relative change in the bad direction: 0.05 means a speedup may fall to
# 0.95x of the baseline, 0.15 that a latency may grow to 1.15x.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "ratio": 0.05,
    "throughput": 0.05,
    "time": 0.15,
    "latency": 0.15,
    "bytes": 0.10,
    "overhead": 0.15,
    "error": 0.15,
    # a share of trials that ended badly (processes that aborted at exit): any rise, if
    # significant
    "rate": 0.0,
}
# `ab` interleaves both sides in fresh processes on one machine, so drift falls on both alike
# and the test sees the variance between processes: there the tolerance is the 5% that
# release dashboards flag (PyTorch HUD 5%, TorchBench 7%). A rate keeps its 0: any
# significant rise in processes that end badly counts, here as in `compare`.
AB_THRESHOLDS: dict[str, float] = {kind: 0.05 for kind in DEFAULT_THRESHOLDS} | {"rate": 0.0}
# Absolute slack for kinds whose baseline may be near zero or negative (an error of 0 B, an
# overhead of -0.3%), where a relative change means nothing.
ABSOLUTE_SLACK = {"error": 1e-9, "overhead": 1.0}
# kinds whose samples are one per fresh process (a trial's 0/1 outcome): the two-sample test
# on them already sees the variance between processes, so no history or rounds are needed
PER_PROCESS = ("rate",)
HISTORY_RUNS = 10  # the most recent runs a band is estimated from
# `worse` / `better`: a significant change inside the tolerance (docs/method.md, section 6)
VERDICTS = ("regression", "improvement", "worse", "better", "inconclusive", "unchanged",
            "unverified", "new", "gone")


@dataclass
class Change:
    case: str  # suite/case[device params]
    metric: str  # the metric's name
    labels: dict[str, Any]
    unit: str
    kind: str
    baseline: float | None
    candidate: float | None
    factor: float | None  # candidate / baseline
    # confidence interval of the factor: from the spread between runs when it is known
    # (history, ab's rounds), else from the two runs' samples (see `decide`)
    interval: list[float | None] | None
    pvalue: float | None  # the two-sample test's, before correction
    adjusted: float | None = None  # after the false-discovery-rate correction
    verdict: str = "inconclusive"  # until `decide` judges it
    why: str = ""
    beyond: int = 0  # +1 past the tolerance in the good direction, -1 in the bad, 0 within
    better: str | None = None  # "higher" or "lower": which way is good
    allowed: float | None = None  # the tolerance, as an absolute change of the baseline
    band: list[float] | None = None  # the history's band for the candidate value
    detectable: float | None = None  # the history's minimum detectable change (relative)
    adjusted_equivalence: float | None = None  # the equivalence test's, after the correction
    # about how many rounds in all would decide an inconclusive figure at its spread
    rounds_to_decide: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return metric_id(self.metric, self.labels)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Change:
        """A stored change (a comparison.json's), ignoring fields this version does not
        know."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


def _allowed(kind: str, va: float | None, thresholds: dict[str, float]) -> float | None:
    """How far a figure of this kind may move from `va` before it counts (absolute)."""
    tolerance = thresholds.get(kind)
    if tolerance is None or va is None:
        return None
    return max(tolerance * abs(va), ABSOLUTE_SLACK.get(kind, 0.0))


def _beyond(better: str | None, allowed: float | None, va: float | None,
            vb: float | None) -> int:
    if better not in ("higher", "lower") or allowed is None or None in (va, vb):
        return 0
    gain = (vb - va) if better == "higher" else (va - vb)  # > 0 means better
    return -1 if gain < -allowed else (1 if gain > allowed else 0)


def compare_metric(case: str, a: Metric, b: Metric, thresholds: dict[str, float],
                   invalid: str | None = None) -> Change:
    """One metric's change; its verdict is provisional until `decide` sees all p-values."""
    kind, better = b.kind, b.better
    va, vb = a.value, b.value
    factor = vb / va if va not in (None, 0) and vb is not None else None
    sa, sb = a.samples or [], b.samples or []
    q = b.quantile
    interval = None
    pvalue = None
    by_session = (stats.session_shift(a.sessions, b.sessions)
                  if not invalid and a.sessions and b.sessions else None)
    if not invalid and sa and sb and kind == "rate":
        pvalue = stats.rate_pvalue(sa, sb)
    elif by_session is not None:
        # measured in sessions: the sessions are the independent draws, not the calls pooled
        # from them; the interval is of their geometric means' ratio, moved to the factor
        pvalue, lo, hi = by_session
        own = run_value(b) / run_value(a)  # the sessions' geometric means
        scale = factor / own if factor else 1.0
        interval = [None if x is None else x * scale for x in (lo, hi)]
    elif not invalid and sa and sb:
        lo, hi = stats.quantile_ratio_ci(sa, sb, q)
        if lo is not None and min(sa + sb) > 0:
            # The bootstrap bounds the samples' own ratio; the factor shown is of the reported
            # values, which need not be the samples' quantile (ab's merged value is the median
            # of its rounds' values, a speedup is a ratio of medians). Its interval is the
            # bootstrap's, relative to the samples' ratio, around the factor.
            own = float(np.quantile(sb, q) / np.quantile(sa, q))
            scale = factor / own if factor and own > 0 else 1.0
            interval = [lo * scale, None if hi is None else hi * scale]
        pvalue = stats.shift_pvalue(sa, sb, q)
    allowed = _allowed(kind, va, thresholds)
    c = Change(case, b.name, dict(b.labels), b.unit, kind, va, vb, factor,
               interval, pvalue, beyond=_beyond(better, allowed, va, vb), better=better,
               allowed=allowed)
    if invalid:
        c.verdict, c.why = "unverified", invalid
    elif better not in ("higher", "lower") or kind not in thresholds:
        c.verdict, c.why = "unverified", "a figure for context: no direction or tolerance"
    elif pvalue is None:
        c.verdict = "unverified"
        c.why = "no samples" if not (sa and sb) else f"fewer than {stats.MIN_SAMPLES} samples"
    return c


class RoundValues(NamedTuple):
    """A metric's run-level values (`run_value`): from history, the earlier runs and the
    candidate run (None: the candidate's reported value); from `ab`, each side's rounds, one
    value per fresh process."""

    baseline: list[float]
    candidate: list[float] | None
    # baseline[i] and candidate[i] ran in one round, back to back: judged by their ratios
    paired: bool = False
    # (variance, degrees of freedom) of a round's log ratio as the metric's own sessions
    # within the rounds predict it (campaign.round_values), for a figure measured in sessions
    within: tuple[float, float] | None = None


# (result key, metric key) -> that metric's run-level values
Replicates = dict[tuple[str, MetricKey], RoundValues]


def _family(c: Change) -> tuple[str, str]:
    """Metrics whose run-to-run spread is alike: one case's figures of one kind (its times,
    its latencies, its ratios), across parameters and labels (models, sizes, paths)."""
    return c.case.split("[")[0], c.kind


# kinds whose figures sit near zero or change sign (an error of 0 B, an overhead of -0.3%):
# no relative spread between runs; changes past their (absolute) tolerance stay unverified
NO_RELATIVE_SPREAD = ("error", "overhead", "value", "count", "rate")
MAX_LOG_BAND = math.log(1000.0)  # a band wider than 1000x is reported as none
# Paired rounds (or a duet's swapped pairs) that a verdict either way needs when no calibration
# of this machine floors their spread. A figure whose level is drawn per process (a profiler
# step here: 78 or 100 ms, process by process) can line up on 3 rounds, every A slow and every
# B fast, and a t-test on 2 degrees of freedom calls that a change: three 3-round A/As of the
# profiler's overhead gave two false improvements and one false regression. 5 is ab's default.
MIN_ROUNDS_UNCALIBRATED = 5


def _key(c: Change) -> tuple[str, MetricKey]:
    return c.case, MetricKey.of(c.metric, c.labels)


def between_runs(changes: list[Change], replicates: Replicates, floors: dict | None = None,
                 cal: Calibration | None = None) -> dict[int, tuple]:
    """For each change (by index) the moderated test of its run-level values: (p, se, df,
    log change of the run values). A figure's prior spread is its family's, held at least at
    the floors: `floors` (metric key -> variance of its log values in the machine's history)
    and the calibration's (`cal`), since a figure that flips between two levels from one
    process to the next (a small autocast GEMM here: 0.13 or 0.20 ms) can look steady in a
    few rounds. Without a calibration a family is held at least as wide as its whole kind:
    three alike figures of one case (one loop timed three ways) move together, so their own
    spread says nothing of a level drawn per process."""
    # a family lends its spread to members judged the same way: paired rounds (the spread of
    # B/A ratios) or not (the spread of each side's values)
    groups: dict[tuple[str, str, bool], list[list[list[float]]]] = {}
    sides = {}
    for i, c in enumerate(changes):
        rep = replicates.get(_key(c))
        if rep is None or c.candidate is None or c.kind in NO_RELATIVE_SPREAD:
            continue
        a, b, paired, within = rep
        b = b if b is not None else [c.candidate]
        if min(a + b, default=0) <= 0:
            continue  # log values: a figure at or below zero has no relative spread
        family = (*_family(c), paired)
        sides[i] = (a, b, family, within)
        ratios = [y / x for x, y in zip(a, b, strict=True)] if paired else None
        groups.setdefault(family, []).append([ratios] if paired else [a, b])
    priors = {f: stats.family_prior(g) for f, g in groups.items()}
    if cal is None:
        kinds: dict[tuple[str, bool], list[list[list[float]]]] = {}
        for (_, kind, paired), g in groups.items():
            kinds.setdefault((kind, paired), []).extend(g)
        kind_priors = {k: stats.family_prior(g) for k, g in kinds.items()}
        for (case, kind, paired) in groups:
            if (wide := kind_priors[(kind, paired)]) is not None:
                own = priors[(case, kind, paired)]
                priors[(case, kind, paired)] = wide if own is None else max(own, wide)
    out = {}
    for i, (a, b, family, within) in sides.items():
        c = changes[i]
        paired = family[2]
        prior, prior_df = priors[family], stats.PRIOR_DF
        trusted = cal is not None and cal.trusts_sessions(_key(c))
        if (paired and within is not None and trusted
                and not _rounds_exceed(a, b, within)):
            # the metric's own spread, from its sessions, where this machine's calibration
            # found that they predict its rounds: what its family's spread (raw TCP and Gloo
            # latencies beside TensorPipe's) says of it is then beside the point
            prior, prior_df = within
        elif within is not None and len(a) >= 2:
            # a run's (or round's) value varies at least as much as its sessions predict,
            # however alike the few runs happen to be (two runs of Gloo's 64 KiB p90 at 4.0 ms
            # each, then a run at 0.14 ms from the same code)
            prior = within[0] if prior is None else max(prior, within[0])
        floor = (floors or {}).get(_key(c))
        if floor is not None:
            # the history's variance is of one run's value; a ratio of two has twice that
            floor = 2 * floor if paired else floor
            prior = floor if prior is None else max(prior, floor)
        if cal is not None and (floor := cal.floor(_key(c), family[:2], paired)) is not None:
            prior = floor if prior is None else max(prior, floor)
        if paired:
            res = stats.moderated_paired_test(a, b, prior, prior_df)
        else:
            res = stats.moderated_test(a, b, prior, prior_df)
        if res is not None:
            # the log change on the scale judged (run values), to centre the band with
            change = float(np.mean(np.log(b)) - np.mean(np.log(a)))
            if within is not None:  # every run value is its sessions' geometric mean
                c.extra["judged_on"] = "sessions"
            out[i] = (*res, change, paired, len(a))
    return out


def _rounds_exceed(a: list[float], b: list[float], within: tuple[float, float]) -> bool:
    """Whether the rounds' log ratios vary more than the sessions within them predict (a
    one-sided F-test at 5%): then something between processes adds spread the sessions do
    not see, and the metric is judged with its family's spread instead."""
    d = np.log(np.asarray(b, dtype=float) / np.asarray(a, dtype=float))
    var, df = within
    if var <= 0:
        return True  # sessions that agree exactly predict nothing
    if d.size < 2:
        return False  # no spread of the rounds to hold against theirs
    return stats.variance_exceeds(float(np.var(d, ddof=1)), d.size - 1, var, df)


def _band(c: Change) -> tuple[float, float] | None:
    """The tolerance band of the factor, as log bounds: [log(1 - t), log(1 + t)] for a
    relative tolerance t (the kind's, or its absolute slack over the baseline)."""
    if c.allowed is None or not c.baseline:
        return None
    t = c.allowed / abs(c.baseline)
    return (math.log1p(-t) if t < 1 else -math.inf), math.log1p(t)


def _equivalence_p(centre: float, se: float, df: float, band: tuple[float, float]) -> float:
    """Two one-sided tests that the log change `centre` lies inside `band`, at the level of
    the two-sided interval: below 0.05 exactly when the 95% interval lies inside it."""
    lo, hi = band
    if se == 0:
        return 0.0 if lo < centre < hi else 1.0
    p_low = stats.t_sf((centre - lo) / se, df)  # H0: change at or below the lower bound
    p_high = stats.t_sf((hi - centre) / se, df)  # H0: change at or above the upper bound
    return min(1.0, 2 * max(p_low, p_high))


def _rounds_to_decide(centre: float, half: float, band: tuple[float, float],
                      rounds: int) -> int | None:
    """About how many rounds in all would decide a figure whose interval is centre +- half
    (log scale) after `rounds` rounds, its spread and change staying as they are: inside
    the band, its interval must shrink to the nearer edge; outside it, to exclude no change.
    None where no number of rounds would (a change right at the tolerance)."""
    lo, hi = band
    need = min(centre - lo, hi - centre) if lo < centre < hi else abs(centre)
    if need <= 0 or half <= 0:
        return None
    return max(rounds + 1, math.ceil(rounds * (half / need) ** 2))


def _pct(t: float) -> str:
    return f"{100 * t:.3g}%"


def decide(changes: list[Change], replicates: Replicates | None,
           alpha: float = stats.ALPHA, floors: dict | None = None,
           cal: Calibration | None = None) -> None:
    """Verdicts, in place (see the module's docstring). Without replicates the spread between
    runs is unknown: every figure is then unverified (but for rates, whose trials are
    independent processes)."""
    between = between_runs(changes, replicates, floors, cal) if replicates else {}
    tested = [i for i, c in enumerate(changes)
              if c.pvalue is not None and c.verdict == "inconclusive" and not c.why]
    t95 = {}
    diff_p, equiv_p = [], []
    for i in tested:
        c = changes[i]
        if i not in between:
            diff_p.append(c.pvalue)
            equiv_p.append(1.0)  # no interval of the change between runs: nothing shown
            continue
        p_between, se, df, change, _, _ = between[i]
        # The interval is of the change judged (the mean log ratio of the rounds, or the
        # difference of mean log values of the runs), so that it excludes 1 exactly when the
        # between-run test is significant at 5%; the factor of the reported values (ab's
        # merged value is the median of its rounds') may sit beside it. Its tolerance is held
        # against the judged change too: a pooled quantile of calls whose level flips by
        # session moves where the sessions do not (a 4 MiB TCP p90 was 1.054x pooled, 1.04x
        # on its sessions).
        centre = math.exp(change)
        c.extra.update(p_within=c.pvalue, p_between=p_between, se_log=se, df=df,
                       judged_factor=centre, interval_within_runs=c.interval)
        c.beyond = _beyond(c.better, c.allowed, c.baseline, c.baseline * centre)
        t = t95.setdefault(df, stats.t_quantile(1 - alpha / 2, df))
        c.interval = [centre * math.exp(-t * se), centre * math.exp(t * se)]
        diff_p.append(max(c.pvalue, p_between))  # both must be significant
        band = _band(c)
        equiv_p.append(_equivalence_p(change, se, df, band) if band else 1.0)
    adjusted = stats.adjust(diff_p)
    adjusted_eq = stats.adjust(equiv_p)
    crit = {}
    for i, p, q in zip(tested, adjusted, adjusted_eq, strict=True):
        c = changes[i]
        c.adjusted, c.adjusted_equivalence = p, q
        band = _band(c)
        if i in between:
            _, se, df, change, paired, rounds = between[i]
            # the smallest change this many tests and this spread let through
            t = crit.setdefault(df, stats.t_quantile(1 - alpha / (2 * len(tested)), df))
            if t * se < MAX_LOG_BAND:  # else no change of any size could be told from noise
                c.detectable = float(np.expm1(t * se))
                # where the candidate would sit had nothing changed, on the reported scale
                centre = c.candidate / math.exp(change) if c.candidate > 0 else c.baseline
                c.band = [centre * float(np.exp(-t * se)), centre * float(np.exp(t * se))]
            if paired and band:
                c.rounds_to_decide = _rounds_to_decide(
                    change, t95[df] * se, band, rounds)
        _verdict(c, p, q, alpha, i in between, len(tested))
        if (cal is None and i in between and between[i][4]
                and between[i][5] < MIN_ROUNDS_UNCALIBRATED
                and c.verdict in ("regression", "improvement", "worse", "better", "unchanged")):
            c.why = (f"would be {c.verdict} ({c.why}), but {between[i][5]} paired rounds "
                     f"decide nothing without this machine's calibration (at least "
                     f"{MIN_ROUNDS_UNCALIBRATED}: a level drawn per process lines up on fewer "
                     f"by chance)")
            c.verdict = "inconclusive"
        if c.extra.get("judged_on") == "sessions":
            c.why += f"; judged on its sessions' geometric mean, {c.extra['judged_factor']:.3g}x"


def _gain(c: Change) -> float:
    """The judged log change in the good direction (> 0: better)."""
    change = math.log(c.extra.get("judged_factor") or c.factor)
    return change if c.better == "higher" else -change


def _verdict(c: Change, p: float, q: float, alpha: float, spread_known: bool,
             tested: int) -> None:
    """One figure's verdict and why, from its adjusted p-values: `p` of a change, `q` of its
    equivalence."""
    if c.allowed == 0:
        tol = "0"  # a rate: any rise counts
    else:
        tol = _pct(c.allowed / abs(c.baseline)) if c.allowed is not None and c.baseline else "?"
    if not spread_known and c.kind not in PER_PROCESS:
        c.verdict = "unverified"
        c.why = ("the spread between runs is unknown (no history: --history, or ab); "
                 f"within-run p {c.pvalue:.2g}")
        return
    lo, hi = c.interval if c.interval and None not in c.interval else (None, None)
    excludes_one = lo is not None and (lo > 1 or hi < 1)
    if c.beyond and p < alpha:
        c.verdict = "regression" if c.beyond < 0 else "improvement"
        c.why = f"past the {tol} tolerance and significant (adjusted p {p:.2g})"
        return
    if q < alpha and p < alpha:
        # a change shown, inside the tolerance: a change all the same, never "unchanged" (drift
        # below a tolerance piles up unseen until it breaks it)
        c.verdict = "worse" if _gain(c) < 0 else "better"
        c.why = (f"significant (adjusted p {p:.2g}) but inside the {tol} tolerance "
                 f"(equivalence, adjusted p {q:.2g})")
        return
    if q < alpha:
        c.verdict = "unchanged"
        c.why = f"inside the {tol} tolerance (equivalence, adjusted p {q:.2g})"
        return
    c.verdict = "inconclusive"
    if c.kind in PER_PROCESS:
        c.why = (f"a rate's tolerance is {tol}: no interval shows it unchanged; its rise "
                 f"was not significant (adjusted p {p:.2g})")
        return
    if c.beyond:
        c.why = f"past the {tol} tolerance but not significant (adjusted p {p:.2g})"
        if excludes_one:
            c.why += f": its interval excludes 1, but not after the correction over {tested}"
    elif p < alpha:
        c.why = f"a significant change (adjusted p {p:.2g}) that may reach past the {tol} tolerance"
    elif excludes_one:
        c.why = (f"its interval excludes 1, but over {tested} figures the change is not "
                 f"significant (adjusted p {p:.2g}), and it reaches past the {tol} tolerance")
    elif lo is not None and math.log(lo) > (b := _band(c))[0] and math.log(hi) < b[1]:
        c.why = (f"its interval lies inside the {tol} tolerance, but not after the correction "
                 f"over {tested} figures (adjusted equivalence p {q:.2g})")
    else:
        c.why = f"its interval reaches past the {tol} tolerance"
    if c.detectable is not None:
        c.why += f"; detectable change {_pct(c.detectable)}"
    if c.rounds_to_decide is not None:
        c.why += f"; about {c.rounds_to_decide} rounds would decide it"


def compare_runs(base: Run, cand: Run, thresholds: dict[str, float] | None = None,
                 history: list[Run] | None = None, alpha: float = stats.ALPHA,
                 replicates: Replicates | None = None,
                 cal: Calibration | None = None) -> list[Change]:
    """The changes from `base` to `cand`. The spread between runs comes from `history` (the
    machine's earlier runs, oldest first) or from `replicates` (ab's rounds); given both, the
    history's spread of each metric is a floor under the rounds'. `cal` is this machine's
    calibration (None: the conservative rules, see harness.comparing.calibration)."""
    th = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    base_by_key = {e.key: e for e in base.results}
    changes: list[Change] = []
    for e in cand.results:
        key = e.key
        old = base_by_key.pop(key, None)
        if old is None:
            changes.append(Change(key, "(case)", {}, "", "case", None, None, None, None, None,
                                  verdict="new"))
            continue
        # A case that failed on a rate (some of its fresh processes aborted at exit) may pass
        # or fail by chance from run to run: its rate metrics are judged instead, below.
        by_rate = e.outcome == "fail" and any(m.kind == "rate" for m in e.metrics)
        if old.outcome == "pass" and e.outcome in ("fail", "error") and not by_rate:
            changes.append(Change(key, "(outcome)", {}, "", "conformance", None, None, None,
                                  None, None, verdict="regression",
                                  why=f"passed, now {e.outcome}: {e.reason[:200]}"))
        invalid = old.contended() or e.contended()
        old_metrics = {m.key: m for m in old.metrics}
        for m in e.metrics:
            if m.key in old_metrics:
                changes.append(compare_metric(key, old_metrics[m.key], m, th, invalid))
    changes.extend(Change(k, "(case)", {}, "", "case", None, None, None, None, None,
                          verdict="gone") for k in base_by_key)
    floors = None
    if history and replicates is None:
        replicates = history_replicates(history, cand)
    elif history:  # ab's rounds, with the machine's history as a floor under each spread
        floors = history_floors(history)
    decide(changes, replicates, alpha, floors, cal)
    return changes


# --- history ----------------------------------------------------------------------------


def _current_segment(values: list[float]) -> list[float]:
    """The values since the last step asv's step detection finds in the series: a past
    regression (or fix) must not count as run-to-run noise for ever."""
    from asv.step_detect import detect_steps

    if len(values) < 3:
        return values
    steps = detect_steps(values)
    left = steps[-1][0] if steps else 0
    return values[left:] if len(values) - left >= 2 else values


def history_floors(runs: list[Run]) -> dict:
    """Each metric's variance of log run values over the history (at least 3 runs)."""
    out = {}
    for key, rep in history_replicates(runs).items():
        x = np.log([v for v in rep.baseline if v > 0])
        if x.size >= 3:
            out[key] = float(np.var(x, ddof=1))
    return out


def run_value(m: Metric) -> float | None:
    """A metric's value as the spread between runs (or rounds) is judged on: for a figure
    measured in sessions, the geometric mean of its sessions, whose spread the sessions
    predict; a pooled quantile of a figure whose level flips by session jumps whenever its
    share of slow calls crosses the quantile (Gloo's 64 KiB p90 here: 4.0 ms in two runs,
    0.14 ms in the next, its sessions alike in all three). Else the metric's value."""
    sessions = m.sessions
    if sessions and len(sessions) >= 2 and min(sessions) > 0:
        return float(np.exp(np.mean(np.log(sessions))))
    v = m.value
    return float(v) if v is not None and math.isfinite(v) else None


def history_replicates(runs: list[Run], cand: Run | None = None) -> Replicates:
    """Each metric's run values (`run_value`) in the machine's earlier `runs` (oldest first,
    the last HISTORY_RUNS, valid results only), since its last step, and in the candidate run
    `cand`. A figure measured in sessions also brings the variance of one run's value that
    its sessions predict (pooled over those runs): a floor under its spread between runs,
    which two or three runs can understate (`between_runs`)."""
    series: dict[tuple[str, MetricKey], list[tuple[float, list | None]]] = {}
    for run in runs[-HISTORY_RUNS:]:
        for e in run.results:
            if not e.valid:
                continue
            for m in e.metrics:
                if (v := run_value(m)) is not None:
                    series.setdefault((e.key, m.key), []).append((v, m.sessions))
    in_cand = {(e.key, m.key): m for e in (cand.results if cand else ()) if e.valid
               for m in e.metrics}
    out = {}
    for k, v in series.items():
        values = _current_segment([x for x, _ in v])
        m = in_cand.get(k)
        cand_value = run_value(m) if m else None
        groups = [g for g in [s for _, s in v[len(v) - len(values):]]
                  + [m and m.sessions] if g]
        pooled = stats.pooled_log_variance(groups)
        within = None
        if pooled is not None:
            within = (pooled[0] / np.mean([len(g) for g in groups]), pooled[1])
        out[k] = RoundValues(values, None if cand_value is None else [cand_value],
                             within=within)
    return out


# --- presentation -------------------------------------------------------------------------


def fmt_change(c: Change) -> str:
    """`1.18x [1.09, 1.27]`: the change judged and its interval; where the reported values'
    factor differs from it, that too (`1.18x [1.09, 1.27] (values 1.21x)`)."""
    if c.factor is None:
        return ""
    judged = c.extra.get("judged_factor") or c.factor
    text = f"{judged:.3g}x"
    if c.interval and None not in c.interval:
        text += f" [{c.interval[0]:.3g}, {c.interval[1]:.3g}]"
    if judged != c.factor and c.factor > 0 and abs(math.log(c.factor / judged)) > 0.01:
        text += f" (values {c.factor:.3g}x)"
    return text


def counts(changes: list[Change]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in changes) for v in VERDICTS}


def changes_table(changes: list[Change], show_all: bool = False) -> list[dict[str, Any]]:
    order = {v: i for i, v in enumerate(VERDICTS)}
    rows = []
    for c in sorted(changes, key=lambda c: (order[c.verdict], c.case, c.name)):
        # regressions, improvements and inconclusive figures are always listed; unchanged
        # and unverified ones with --all, or where a figure moved past its tolerance
        if not show_all and c.verdict in ("unchanged", "unverified") and not c.beyond:
            continue
        rows.append({
            "verdict": c.verdict, "case": c.case, "metric": c.name, "kind": c.kind,
            "baseline": c.baseline, "candidate": c.candidate, "change": fmt_change(c),
            "p_adj": "" if c.adjusted is None else f"{c.adjusted:.2g}",
            "why": c.why,
        })
    return rows
