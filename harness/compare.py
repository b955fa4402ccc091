"""`release-bench compare BASELINE CANDIDATE`: what changed between two runs, and whether any
change is a regression.

Results are matched by (suite, case, device, params), metrics by name and labels. A metric
regresses only when all three hold:

- practical: it moved past its kind's tolerance in its bad direction. Defaults follow
  PyTorch's HUD: ratios and throughputs must stay at 0.95x of the baseline or above, times
  and latencies at 1.15x or below, bytes at 1.10x;
- within runs: a two-sample test on the two runs' samples (Mann-Whitney U for a median, a
  Fisher exact quantile test for p90/p99; for a figure measured in sessions, Welch's t on
  the sessions' log values, since a session's calls share its level) is significant;
- between runs: the change stands out against the spread of the figure from run to run (or
  process to process), which on a shared machine dwarfs the spread within a run. That spread
  comes from the machine's history (`--history`, by default the baseline's folder of runs) or
  from `ab`'s rounds; a t-test on log values with the variance moderated towards the
  family's (the same figure at other sizes), as limma does, since a few runs cannot estimate
  a metric's own spread. `ab`'s rounds run both sides back to back, so they are judged in
  pairs, on each round's B/A ratio, in which the machine's state of those minutes cancels.
  Since a past regression must not count as noise for ever, the history of each metric
  starts at the last step asv's step detection finds.

Both tests are combined (the larger p-value) and corrected for the number of metrics tested
(Benjamini-Hochberg at a false-discovery rate of 5%). Improvements are judged the same way.
A metric without samples is "unverified", never a regression; so is one whose case ran
contended (telemetry invalid), and one past its tolerance whose spread between runs nobody
measured. A conformance case that passed and now fails is a regression whatever its figures,
unless it failed on a rate (a share of fresh processes that ended badly, which passes or
fails by chance): its rate is then judged, with Fisher's exact test on the trials' counts.
Comparing runs of different machines (CPU model or flags, core count, GPU model, driver
major) is refused unless asked for (`machine_differences`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from harness import stats
from harness.cases import metric_id, param_id

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
# release dashboards flag (PyTorch HUD 5%, TorchBench 7%).
AB_THRESHOLDS: dict[str, float] = {kind: 0.05 for kind in DEFAULT_THRESHOLDS}
# Absolute slack for kinds whose baseline may be near zero or negative (an error of 0 B, an
# overhead of -0.3%), where a relative change means nothing.
ABSOLUTE_SLACK = {"error": 1e-9, "overhead": 1.0}
# kinds whose samples are one per fresh process (a trial's 0/1 outcome): the two-sample test
# on them already sees the variance between processes, so no history or rounds are needed
PER_PROCESS = ("rate",)
HISTORY_RUNS = 10  # the most recent runs a band is estimated from
VERDICTS = ("regression", "improvement", "unchanged", "unverified", "new", "gone")


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
    verdict: str = "unchanged"
    why: str = ""
    beyond: int = 0  # +1 past the tolerance in the good direction, -1 in the bad, 0 within
    better: str | None = None  # "higher" or "lower": which way is good
    allowed: float | None = None  # the tolerance, as an absolute change of the baseline
    band: list[float] | None = None  # the history's band for the candidate value
    detectable: float | None = None  # the history's minimum detectable change (relative)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return metric_id(self.metric, self.labels)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def result_key(e: dict) -> str:
    return f"{e['suite']}/{e['case']}[{e.get('device', '')} {param_id(e['params'])}]"


def metric_key(m: dict) -> tuple[str, str]:
    """A metric's identity within its case: name and labels, in a hashable form."""
    labels = m.get("labels") or {}
    return m["name"], repr(sorted(labels.items()))


def _invalid(e: dict) -> str | None:
    """Why a result's samples must not be judged (contended), or None."""
    if e.get("outcome") == "invalid":
        return "measured contended (outcome invalid)"
    tel = e.get("telemetry") or {}
    if tel.get("valid") is False:
        return "measured contended: " + "; ".join(tel.get("invalid_reasons", []))
    return None


def _quantile(m: dict) -> float:
    return float((m.get("stats") or {}).get("q", 0.5))


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


def compare_metric(case: str, a: dict, b: dict, thresholds: dict[str, float],
                   invalid: str | None = None) -> Change:
    """One metric's change; its verdict is provisional until `decide` sees all p-values."""
    kind, better = b.get("kind", "value"), b.get("better")
    va, vb = a["value"], b["value"]
    factor = vb / va if va not in (None, 0) and vb is not None else None
    sa, sb = a.get("samples") or [], b.get("samples") or []
    q = _quantile(b)
    interval = None
    pvalue = None
    by_session = (stats.session_shift(a["sessions"], b["sessions"])
                  if not invalid and a.get("sessions") and b.get("sessions") else None)
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
    c = Change(case, b["name"], dict(b.get("labels") or {}), b["unit"], kind, va, vb, factor,
               interval, pvalue, beyond=_beyond(better, allowed, va, vb), better=better,
               allowed=allowed)
    if invalid:
        c.verdict, c.why = "unverified", invalid
    elif better not in ("higher", "lower") or kind not in thresholds:
        c.verdict, c.why = "unchanged", "no direction or tolerance: not judged"
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
    # within the rounds predict it (ab.round_values), for a figure measured in sessions
    within: tuple[float, float] | None = None


# (result key, metric key) -> that metric's run-level values
Replicates = dict[tuple[str, tuple[str, str]], RoundValues]


def _family(c: Change) -> tuple[str, str]:
    """Metrics whose run-to-run spread is alike: one case's figures of one kind (its times,
    its latencies, its ratios), across parameters and labels (models, sizes, paths)."""
    return c.case.split("[")[0], c.kind


# kinds whose figures sit near zero or change sign (an error of 0 B, an overhead of -0.3%):
# no relative spread between runs; changes past their (absolute) tolerance stay unverified
NO_RELATIVE_SPREAD = ("error", "overhead", "value", "count", "rate")
MAX_LOG_BAND = math.log(1000.0)  # a band wider than 1000x is reported as none
# Rounds a figure measured in sessions needs before its sessions' spread is trusted: the
# F-test that guards it (_rounds_exceed) has too few degrees of freedom below this to see a
# level drawn per process that the sessions miss. Here the forced-shm launch's 4 MiB round
# trips vary 0.7-3.1 ms between sessions of one process, and the first four A processes of an
# A/A were all slower than the four B ones: judged on 3 or 4 rounds the test did not trip and
# the A/A flagged 4 and 6 of the forced-shm and forced-uv launches' 4 MiB figures; on 5 it
# tripped.
SESSIONS_MIN_ROUNDS = 5
# Members a family needs to stand on its own spread; a smaller one also borrows its kind's
# (between_runs). The telemetry sampler's cost on a fixed loop is three times of one loop
# that move together; one process draws its level about +-10% from the next, and a
# whole-profile A/A whose five B processes all drew slow flagged two of the three (1.1x,
# adjusted p 0.02-0.04) on their own spread alone.
SMALL_FAMILY = 5


def between_runs(changes: list[Change], replicates: Replicates,
                 floors: dict | None = None) -> dict[int, tuple]:
    """For each change (by index) the moderated test of its run-level values: (p, se, df,
    log change of the run values). `floors` (metric key -> variance of its log values in the
    machine's history) keeps a metric's prior spread at least what its history showed: a
    figure that flips between two levels from one process to the next (a small autocast
    GEMM here: 0.13 or 0.20 ms) can look steady in ab's few rounds."""
    # a family lends its spread to members judged the same way: paired rounds (the spread of
    # B/A ratios) or not (the spread of each side's values)
    groups: dict[tuple[str, str, bool], list[list[list[float]]]] = {}
    sides = {}
    for i, c in enumerate(changes):
        rep = replicates.get((c.case, (c.metric, repr(sorted(c.labels.items())))))
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
    # a small family borrows from its whole kind (every family of its kind judged the same
    # way) where that is wider: three figures of one case that are one measurement seen three
    # ways move together, so their own spread says nothing of a level drawn per process
    kinds: dict[tuple[str, bool], list[list[list[float]]]] = {}
    for (_, kind, paired), g in groups.items():
        kinds.setdefault((kind, paired), []).extend(g)
    kind_priors = {k: stats.family_prior(g) for k, g in kinds.items()}
    for (case, kind, paired), g in groups.items():
        if len(g) < SMALL_FAMILY and (wide := kind_priors[(kind, paired)]) is not None:
            own = priors[(case, kind, paired)]
            priors[(case, kind, paired)] = wide if own is None else max(own, wide)
    out = {}
    for i, (a, b, family, within) in sides.items():
        c = changes[i]
        paired = family[2]
        prior, prior_df = priors[family], stats.PRIOR_DF
        if (paired and within is not None and len(a) >= SESSIONS_MIN_ROUNDS
                and not _rounds_exceed(a, b, within)):
            # the metric's own spread, from its sessions: what its family's spread (raw TCP
            # and Gloo latencies beside TensorPipe's) says of it is then beside the point
            prior, prior_df = within
        elif not paired and within is not None and len(a) >= 2:
            # separate runs: a run's value varies at least as much as its sessions predict,
            # however alike the few runs of the history happen to be (two runs of Gloo's
            # 64 KiB p90 at 4.0 ms each, then a run at 0.14 ms from the same code)
            prior = within[0] if prior is None else max(prior, within[0])
        floor = (floors or {}).get((c.case, (c.metric, repr(sorted(c.labels.items())))))
        if floor is not None:
            # the history's variance is of one run's value; a ratio of two has twice that
            floor = 2 * floor if paired else floor
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
            out[i] = (*res, change)
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


def decide(changes: list[Change], replicates: Replicates | None,
           alpha: float = stats.ALPHA, floors: dict | None = None) -> None:
    """Verdicts, in place. A change is a regression (improvement) when it is past its kind's
    tolerance in the bad (good) direction and significant, after the false-discovery-rate
    correction over every metric tested, both against the samples within the runs and
    against the spread between runs (`replicates`). Without replicates the spread between
    runs is unknown: a change past the tolerance is then unverified, not a verdict."""
    between = between_runs(changes, replicates, floors) if replicates else {}
    for i, (_, se, df, change) in between.items():
        # The samples' interval misses the spread between processes, which the verdict
        # weighs: it would show 1.14x [1.11, 1.17] beside "unchanged". The interval of a
        # factor judged against that spread is the factor times exp(+-t se), se being the
        # standard error of the log change between runs; it contains the factor by
        # construction (the samples' bootstrap estimates another statistic, the pooled
        # quantile, and could lie beside it: 1.44x [1.40, 1.43]). A figure measured in
        # sessions is judged on their geometric means (`run_value`), whose change can differ
        # from its reported values' (1.09x reported, 1.17x judged): its interval is the
        # judged change's, so that it agrees with the verdict, and the row says so. Its
        # tolerance is held against the judged change too: the pooled quantile of calls
        # whose level flips by session is what judging on sessions avoids (a 4 MiB TCP p90
        # was 1.054x pooled, 1.04x on its sessions, and flagged as past 5% and significant).
        c = changes[i]
        if c.factor and c.factor > 0:
            half = stats.t_quantile((1 + stats.CI_LEVEL) / 2, df) * se
            centre = c.factor
            if c.extra.get("judged_on") == "sessions":
                centre = math.exp(change)
                c.extra["judged_factor"] = centre
                c.beyond = _beyond(c.better, c.allowed, c.baseline, c.baseline * centre)
            c.extra["interval_within_runs"] = c.interval
            c.interval = [centre * math.exp(-half), centre * math.exp(half)]
    tested = [i for i, c in enumerate(changes)
              if c.pvalue is not None and c.verdict == "unchanged" and not c.why]
    combined = []
    for i in tested:
        c = changes[i]
        if i in between:
            p_between, se, df, _ = between[i]
            c.extra.update(p_within=c.pvalue, p_between=p_between, se_log=se, df=df)
            combined.append(max(c.pvalue, p_between))  # both must be significant
        else:
            combined.append(c.pvalue)
    adjusted = stats.adjust(combined)
    crit = {}
    for i, p in zip(tested, adjusted, strict=True):
        c = changes[i]
        c.adjusted = p
        if i in between:
            _, se, df, change = between[i]
            # the smallest change this many tests and this spread let through
            t = crit.setdefault(df, stats.t_quantile(1 - alpha / (2 * len(tested)), df))
            if t * se < MAX_LOG_BAND:  # else no change of any size could be told from noise
                c.detectable = float(np.expm1(t * se))
                # where the candidate would sit had nothing changed, on the reported scale
                centre = c.candidate / math.exp(change) if c.candidate > 0 else c.baseline
                c.band = [centre * float(np.exp(-t * se)), centre * float(np.exp(t * se))]
        significant = p < alpha
        if c.beyond and i not in between and c.kind not in PER_PROCESS:
            c.verdict = "unverified"
            c.why = ("past the tolerance, but the spread between runs is unknown (no history: "
                     f"--history, or ab); within-run p {c.pvalue:.2g}")
        elif c.beyond and significant:
            c.verdict = "regression" if c.beyond < 0 else "improvement"
            c.why = f"past the tolerance and significant (adjusted p {p:.2g})"
        elif c.beyond:
            c.why = f"past the tolerance but not significant (adjusted p {p:.2g})"
        elif significant:
            c.why = "significant but within the tolerance"
        else:
            c.why = "within the tolerance"
        if (judged := c.extra.get("judged_factor")) is not None:
            c.why += f"; judged on its sessions' geometric mean, {judged:.3g}x"


def compare_runs(base: dict, cand: dict, thresholds: dict[str, float] | None = None,
                 history: list[dict] | None = None, alpha: float = stats.ALPHA,
                 replicates: Replicates | None = None) -> list[Change]:
    """The changes from `base` to `cand`. The spread between runs comes from `history` (the
    machine's earlier runs, oldest first) or from `replicates` (ab's rounds); given both, the
    history's spread of each metric is a floor under the rounds'."""
    th = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    base_by_key = {result_key(e): e for e in base["results"]}
    changes: list[Change] = []
    for e in cand["results"]:
        key = result_key(e)
        old = base_by_key.pop(key, None)
        if old is None:
            changes.append(Change(key, "(case)", {}, "", "case", None, None, None, None, None,
                                  verdict="new"))
            continue
        # A case that failed on a rate (some of its fresh processes aborted at exit) may pass
        # or fail by chance from run to run: its rate metrics are judged instead, below.
        by_rate = e["outcome"] == "fail" and any(m.get("kind") == "rate" for m in e["metrics"])
        if old["outcome"] == "pass" and e["outcome"] in ("fail", "error") and not by_rate:
            changes.append(Change(key, "(outcome)", {}, "", "conformance", None, None, None,
                                  None, None, verdict="regression",
                                  why=f"passed, now {e['outcome']}: {e['reason'][:200]}"))
        invalid = _invalid(old) or _invalid(e)
        old_metrics = {metric_key(m): m for m in old["metrics"]}
        for m in e["metrics"]:
            if (k := metric_key(m)) in old_metrics:
                changes.append(compare_metric(key, old_metrics[k], m, th, invalid))
    changes.extend(Change(k, "(case)", {}, "", "case", None, None, None, None, None,
                          verdict="gone") for k in base_by_key)
    floors = None
    if history and replicates is None:
        replicates = history_replicates(history, cand)
    elif history:  # ab's rounds, with the machine's history as a floor under each spread
        floors = history_floors(history)
    decide(changes, replicates, alpha, floors)
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


def history_floors(runs: list[dict]) -> dict:
    """Each metric's variance of log run values over the history (at least 3 runs)."""
    out = {}
    for key, rep in history_replicates(runs).items():
        x = np.log([v for v in rep.baseline if v > 0])
        if x.size >= 3:
            out[key] = float(np.var(x, ddof=1))
    return out


def run_value(m: dict) -> float | None:
    """A metric's value as the spread between runs (or rounds) is judged on: for a figure
    measured in sessions, the geometric mean of its sessions, whose spread the sessions
    predict; a pooled quantile of a figure whose level flips by session jumps whenever its
    share of slow calls crosses the quantile (Gloo's 64 KiB p90 here: 4.0 ms in two runs,
    0.14 ms in the next, its sessions alike in all three). Else the metric's value."""
    sessions = m.get("sessions")
    if sessions and len(sessions) >= 2 and min(sessions) > 0:
        return float(np.exp(np.mean(np.log(sessions))))
    v = m.get("value")
    return float(v) if v is not None and math.isfinite(v) else None


def history_replicates(runs: list[dict], cand: dict | None = None) -> Replicates:
    """Each metric's run values (`run_value`) in the machine's earlier `runs` (oldest first,
    the last HISTORY_RUNS, valid results only), since its last step, and in the candidate run
    `cand`. A figure measured in sessions also brings the variance of one run's value that
    its sessions predict (pooled over those runs): a floor under its spread between runs,
    which two or three runs can understate (`between_runs`)."""
    series: dict[tuple[str, tuple[str, str]], list[tuple[float, list | None]]] = {}
    for run in runs[-HISTORY_RUNS:]:
        for e in run["results"]:
            if _invalid(e):
                continue
            for m in e["metrics"]:
                if (v := run_value(m)) is not None:
                    series.setdefault((result_key(e), metric_key(m)), []).append(
                        (v, m.get("sessions")))
    in_cand = {(result_key(e), metric_key(m)): m
               for e in (cand or {}).get("results", []) if not _invalid(e)
               for m in e["metrics"]}
    out = {}
    for k, v in series.items():
        values = _current_segment([x for x, _ in v])
        m = in_cand.get(k)
        cand_value = run_value(m) if m else None
        groups = [g for g in [s for _, s in v[len(v) - len(values):]]
                  + [m and m.get("sessions")] if g]
        pooled = stats.pooled_log_variance(groups)
        within = None
        if pooled is not None:
            within = (pooled[0] / np.mean([len(g) for g in groups]), pooled[1])
        out[k] = RoundValues(values, None if cand_value is None else [cand_value],
                             within=within)
    return out


# --- machines -----------------------------------------------------------------------------


def hardware_identity(machine: dict) -> dict[str, Any]:
    """The fingerprint fields a verdict depends on."""
    cpu = machine.get("cpu") or {}
    gpus = machine.get("gpus") or []
    driver = str(machine.get("nvidia_driver") or "")
    return {
        "cpu model": cpu.get("model"),
        "cpu flags": sorted(f for f, on in (cpu.get("flags") or {}).items() if on),
        "logical cores": cpu.get("logical_cores"),
        "gpu models": sorted(g.get("name", "") for g in gpus),
        "driver major": driver.split(".")[0] if driver else None,
    }


def machine_differences(a: dict, b: dict) -> list[str]:
    """The hardware fields in which two runs' machines differ, with both values."""
    ia, ib = hardware_identity(a), hardware_identity(b)
    out = []
    for k in ia:
        if ia[k] != ib[k]:
            if k == "cpu flags":
                only_a = sorted(set(ia[k]) - set(ib[k]))[:6]
                only_b = sorted(set(ib[k]) - set(ia[k]))[:6]
                out.append(f"cpu flags (only baseline: {' '.join(only_a) or '-'}; only "
                           f"candidate: {' '.join(only_b) or '-'})")
            else:
                out.append(f"{k} ({ia[k]} vs {ib[k]})")
    return out


# --- presentation -------------------------------------------------------------------------


def fmt_change(c: Change) -> str:
    """`1.18x [1.09, 1.27]`: the factor and its interval."""
    if c.factor is None:
        return ""
    text = f"{c.factor:.3g}x"
    if c.interval and None not in c.interval:
        text += f" [{c.interval[0]:.3g}, {c.interval[1]:.3g}]"
    return text


def counts(changes: list[Change]) -> dict[str, int]:
    return {v: sum(c.verdict == v for c in changes) for v in VERDICTS}


def changes_table(changes: list[Change], show_all: bool = False) -> list[dict[str, Any]]:
    order = {v: i for i, v in enumerate(VERDICTS)}
    rows = []
    for c in sorted(changes, key=lambda c: (order[c.verdict], c.case, c.name)):
        if not show_all and c.verdict == "unchanged" and not c.beyond:
            continue
        if not show_all and c.verdict == "unverified" and not c.beyond:
            continue
        rows.append({
            "verdict": c.verdict, "case": c.case, "metric": c.name, "kind": c.kind,
            "baseline": c.baseline, "candidate": c.candidate, "change": fmt_change(c),
            "p_adj": "" if c.adjusted is None else f"{c.adjusted:.2g}",
            "why": c.why,
        })
    return rows
