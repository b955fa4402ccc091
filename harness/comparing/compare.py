"""`release-bench compare BASELINE CANDIDATE`: what changed between two runs, and whether any
change is a regression. docs/method.md gives the method in full; in short:

Results are matched by (suite, case, device, params), metrics by name and labels. Each figure
gets one of seven verdicts, read off one 95% interval of its change, judged against its
kind's tolerance (PyTorch HUD's: ratios and throughputs 0.95x, times and latencies 1.15x,
bytes 1.10x; 5% for every kind in `ab`):

- `regression` / `improvement`: a change is shown (significant), and its estimate lies past
  the tolerance in its bad (good) direction;
- `worse` / `better`: a change is shown, in its bad (good) direction, and its estimate lies
  inside the tolerance: a change that fails nothing, never "unchanged" nor "inconclusive"
  (where its interval still reaches past the tolerance, the row says so and it stays open
  to further rounds);
- `unchanged`: its interval lies inside the tolerance band (an equivalence test: two
  one-sided tests at 2.5% each) and the change is not significant, so nothing moved that
  matters;
- `inconclusive`: neither a change nor equivalence shown; the row gives the change it could
  detect and about how many rounds would decide it;
- `unverified`: not judged: no samples, measured contended, no direction, a spread between
  runs nobody measured, or too few rounds to trust one.

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
correction can only hold back a verdict the interval alone would give (a change not shown,
an equivalence not shown), and the row then says so. A conformance case that passed and now
fails is a regression whatever its figures, unless it failed on a rate (a share of fresh
processes that ended badly), which is judged by Fisher's exact test on the trials' counts.
Comparing runs of different machines (CPU model or flags, core count, GPU model, driver
major) is refused unless asked for.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from harness import stats
from harness.cases import metric_id
from harness.comparing.calibration import Calibration
from harness.records import CaseKey, Metric, MetricKey, MetricKind, Run
from harness.running import telemetry

K = MetricKind
# kind -> tolerated relative change in the bad direction: 0.05 means a speedup may fall to
# 0.95x of the baseline, 0.15 that a latency may grow to 1.15x.
DEFAULT_THRESHOLDS: dict[str, float] = {
    K.RATIO: 0.05,
    K.THROUGHPUT: 0.05,
    K.TIME: 0.15,
    K.LATENCY: 0.15,
    K.BYTES: 0.10,
    K.OVERHEAD: 0.15,
    K.ERROR: 0.15,
    # a share of trials that ended badly (processes that aborted at exit): any rise, if
    # significant
    K.RATE: 0.0,
}
# `ab` interleaves both sides in fresh processes on one machine, so drift falls on both alike
# and the test sees the variance between processes: there the tolerance is the 5% that
# release dashboards flag (PyTorch HUD 5%, TorchBench 7%). A rate keeps its 0: any
# significant rise in processes that end badly counts, here as in `compare`.
AB_THRESHOLDS: dict[str, float] = {kind: 0.05 for kind in DEFAULT_THRESHOLDS} | {K.RATE: 0.0}
# Absolute slack for kinds whose baseline may be near zero or negative (an error of 0 B, an
# overhead of -0.3%), where a relative change means nothing.
ABSOLUTE_SLACK = {K.ERROR: 1e-9, K.OVERHEAD: 1.0}
# kinds whose samples are one per fresh process (a trial's 0/1 outcome): the two-sample test
# on them already sees the variance between processes, so no history or rounds are needed
PER_PROCESS = (K.RATE,)
HISTORY_RUNS = 10  # the most recent runs a band is estimated from


class Verdict(enum.StrEnum):
    """A figure's verdict (docs/method.md, section 6), worst first as tables list them."""

    REGRESSION = "regression"  # past the tolerance in the bad direction, and significant
    IMPROVEMENT = "improvement"  # past it in the good direction, and significant
    WORSE = "worse"  # significant in the bad direction, its interval inside the tolerance
    BETTER = "better"  # significant in the good direction, its interval inside the tolerance
    INCONCLUSIVE = "inconclusive"  # neither a change nor its absence shown
    UNCHANGED = "unchanged"  # its interval inside the tolerance, and no change shown
    UNVERIFIED = "unverified"  # not judged
    NEW = "new"  # a case on the candidate's side only
    GONE = "gone"  # a case on the baseline's side only


VERDICTS = tuple(Verdict)
CHANGES = (Verdict.REGRESSION, Verdict.IMPROVEMENT)  # past the tolerance
# the fields of a change judged on the spread between runs, kept under "extra" on disk (the
# layout of comparison.json before they were typed)
_BETWEEN_FIELDS = ("judged_on", "p_within", "p_between", "se_log", "df", "judged_factor",
                   "interval_within_runs")


@dataclass(frozen=True)
class Change:
    """One figure's (or case's) verdict, made once from everything `decide` knows of it."""

    case: CaseKey
    metric: str  # the metric's name; "(outcome)" or "(case)" for a case
    labels: dict[str, Any]
    unit: str
    kind: str
    verdict: Verdict
    baseline: float | None = None
    candidate: float | None = None
    factor: float | None = None  # candidate / baseline
    # 95% interval of the change: of the judged change where the spread between runs is known
    # (history, ab's rounds), else of the factor from the two runs' samples
    interval: list[float | None] | None = None
    pvalue: float | None = None  # the two-sample test's, before correction
    adjusted: float | None = None  # of the change, after the false-discovery-rate correction
    why: str = ""
    beyond: int = 0  # +1 past the tolerance in the good direction, -1 in the bad, 0 within
    better: str | None = None  # "higher" or "lower": which way is good
    allowed: float | None = None  # the tolerance, as an absolute change of the baseline
    band: list[float] | None = None  # where the candidate would sit had nothing changed
    detectable: float | None = None  # the minimum detectable change (relative)
    adjusted_equivalence: float | None = None  # the equivalence test's, after the correction
    # about how many rounds in all would decide an inconclusive figure at its spread
    rounds_to_decide: int | None = None
    # whether more rounds could still change what its verdict says (`open_question`)
    undecided: bool = False
    # judged on the spread between runs (None where it is unknown): the two tests' p-values,
    # the judged log change's standard error and degrees of freedom, the judged factor (the
    # mean of the rounds' log ratios, or the run values' against the history's), the
    # samples' own interval, and "sessions" where every run value is its sessions' mean
    p_within: float | None = None
    p_between: float | None = None
    se_log: float | None = None
    df: float | None = None
    judged_factor: float | None = None
    interval_within_runs: list[float | None] | None = None
    judged_on: str | None = None

    @property
    def name(self) -> str:
        return metric_id(self.metric, self.labels)

    @property
    def metric_key(self) -> tuple[CaseKey, MetricKey]:
        """Its figure's identity, as `Replicates` and calibrations key it."""
        return self.case, MetricKey.of(self.metric, self.labels)

    def to_json(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in _BETWEEN_FIELDS}
        doc["case"], doc["verdict"] = str(self.case), self.verdict.value
        doc["extra"] = {k: getattr(self, k) for k in _BETWEEN_FIELDS
                        if getattr(self, k) is not None}
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Change:
        """A stored change (a comparison.json's), ignoring fields this version does not
        know; ValueError on one that is not a change."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in {**doc, **(doc.get("extra") or {})}.items() if k in known}
        values["case"] = CaseKey.parse(values["case"])
        values["verdict"] = Verdict(values["verdict"])
        return cls(**values)


@dataclass(frozen=True)
class Measured:
    """One figure's change as the two runs themselves show it (its samples), before the
    spread between runs and the other figures judge it; `unjudged` says why it will not be
    judged, if so."""

    case: CaseKey
    a: Metric
    b: Metric
    factor: float | None
    interval: list[float | None] | None
    pvalue: float | None
    allowed: float | None
    unjudged: str = ""

    @property
    def kind(self) -> str:
        return self.b.kind

    @property
    def baseline(self) -> float | None:
        return self.a.value

    @property
    def candidate(self) -> float | None:
        return self.b.value

    @property
    def key(self) -> tuple[CaseKey, MetricKey]:
        return self.case, self.b.key

    def change(self, verdict: Verdict, why: str = "", **judged: Any) -> Change:
        """Its verdict, with what judging it found."""
        b = self.b
        return Change(self.case, b.name, dict(b.labels), b.unit, b.kind, verdict,
                      self.a.value, b.value, self.factor, judged.pop("interval", self.interval),
                      self.pvalue, why=why, better=b.better, allowed=self.allowed,
                      beyond=judged.pop("beyond", _beyond(b.better, self.allowed, self.a.value,
                                                          b.value)), **judged)


def case_change(case: CaseKey, what: str, kind: str, verdict: Verdict, why: str = "") -> Change:
    """A verdict on a case rather than a figure: new, gone, or an outcome's regression."""
    return Change(case, what, {}, "", kind, verdict, why=why)


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


def compare_metric(case: CaseKey, a: Metric, b: Metric, thresholds: dict[str, float],
                   invalid: str | None = None) -> Measured:
    """One metric's change as the two runs' samples show it (`decide` judges it)."""
    kind = b.kind
    va, vb = a.value, b.value
    factor = vb / va if va not in (None, 0) and vb is not None else None
    sa, sb = a.samples or [], b.samples or []
    q = b.quantile
    interval = None
    pvalue = None
    by_session = (stats.session_shift(a.sessions, b.sessions)
                  if not invalid and a.sessions and b.sessions else None)
    if not invalid and sa and sb and kind == K.RATE:
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
    unjudged = ""
    if invalid:
        unjudged = invalid
    elif b.better not in ("higher", "lower") or kind not in thresholds:
        unjudged = "a figure for context: no direction or tolerance"
    elif pvalue is None:
        unjudged = "no samples" if not (sa and sb) else f"fewer than {stats.MIN_SAMPLES} samples"
    return Measured(case, a, b, factor, interval, pvalue, _allowed(kind, va, thresholds),
                    unjudged)


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
Replicates = dict[tuple[CaseKey, MetricKey], RoundValues]


def _family(m: Measured) -> tuple[str, str]:
    """Metrics whose run-to-run spread is alike: one case's figures of one kind (its times,
    its latencies, its ratios), across parameters and labels (models, sizes, paths)."""
    return m.case.case_id, m.kind


# kinds whose figures sit near zero or change sign (an error of 0 B, an overhead of -0.3%):
# no relative spread between runs; changes past their (absolute) tolerance stay unverified
NO_RELATIVE_SPREAD = (K.ERROR, K.OVERHEAD, K.VALUE, K.COUNT, K.RATE)
MAX_LOG_BAND = math.log(1000.0)  # a band wider than 1000x is reported as none
# Paired rounds (or a duet's swapped pairs) that a verdict either way needs when no calibration
# of this machine floors their spread. A figure whose level is drawn per process (a profiler
# step here: 78 or 100 ms, process by process) can line up on 3 rounds, every A slow and every
# B fast, and a t-test on 2 degrees of freedom calls that a change: three 3-round A/As of the
# profiler's overhead gave two false improvements and one false regression. 5 is ab's default.
MIN_ROUNDS_UNCALIBRATED = 5


class Between(NamedTuple):
    """The moderated test of a figure's run-level values."""

    p: float  # of no change
    se: float  # of the log change
    df: float
    change: float  # the log change of the run values (the judged change)
    paired: bool  # judged on rounds' ratios (ab), or runs against a history
    rounds: int  # the baseline's run values (the rounds, in ab)
    on_sessions: bool  # every run value is its sessions' geometric mean


def between_runs(changes: list[Measured], replicates: Replicates, floors: dict | None = None,
                 cal: Calibration | None = None) -> dict[int, Between]:
    """For each figure (by index) the moderated test of its run-level values (`Between`).
    A figure's prior spread is its family's, held at least at
    the floors: `floors` (metric key -> variance of its log values in the machine's history)
    and the calibration's (`cal`), since a figure that flips between two levels from one
    process to the next (a small autocast GEMM here: 0.13 or 0.20 ms) can look steady in a
    few rounds. Without a calibration a family is held at least as wide as its whole kind:
    three alike figures of one case (one loop timed three ways) move together, so their own
    spread says nothing of a level drawn per process."""
    # a family lends its spread to members judged the same way: paired rounds (the spread of
    # B/A ratios) or not (the spread of each side's values)
    groups: dict[tuple[str, str, bool], list[list[list[float]]]] = {}
    uncalibrated: set[tuple[str, str, bool]] = set()  # families no calibration covers
    sides = {}
    for i, c in enumerate(changes):
        rep = replicates.get(c.key)
        if rep is None or c.candidate is None or c.kind in NO_RELATIVE_SPREAD:
            continue
        a, b, paired, within = rep
        b = b if b is not None else [c.candidate]
        if min(a + b, default=0) <= 0:
            continue  # log values: a figure at or below zero has no relative spread
        family = (*_family(c), paired)
        if cal is None or not cal.covers(c.case):
            uncalibrated.add(family)
        sides[i] = (a, b, family, within)
        ratios = [y / x for x, y in zip(a, b, strict=True)] if paired else None
        groups.setdefault(family, []).append([ratios] if paired else [a, b])
    priors = {f: stats.family_prior(g) for f, g in groups.items()}
    if uncalibrated:
        kinds: dict[tuple[str, bool], list[list[list[float]]]] = {}
        for (_, kind, paired), g in groups.items():
            kinds.setdefault((kind, paired), []).extend(g)
        kind_priors = {k: stats.family_prior(g) for k, g in kinds.items()}
        for (case, kind, paired) in uncalibrated:
            if (wide := kind_priors[(kind, paired)]) is not None:
                own = priors[(case, kind, paired)]
                priors[(case, kind, paired)] = wide if own is None else max(own, wide)
    out = {}
    for i, (a, b, family, within) in sides.items():
        c = changes[i]
        paired = family[2]
        prior, prior_df = priors[family], stats.PRIOR_DF
        trusted = cal is not None and cal.trusts_sessions(c.key)
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
        floor = (floors or {}).get(c.key)
        if floor is not None:
            # the history's variance is of one run's value; a ratio of two has twice that
            floor = 2 * floor if paired else floor
            prior = floor if prior is None else max(prior, floor)
        if cal is not None and (floor := cal.floor(c.key, family[:2], paired)) is not None:
            prior = floor if prior is None else max(prior, floor)
        if paired:
            res = stats.moderated_paired_test(a, b, prior, prior_df)
        else:
            res = stats.moderated_test(a, b, prior, prior_df)
        if res is not None:
            # the log change on the scale judged (run values), to centre the band with
            change = float(np.mean(np.log(b)) - np.mean(np.log(a)))
            out[i] = Between(*res, change, paired, len(a), on_sessions=within is not None)
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


def _band(allowed: float | None, baseline: float | None) -> tuple[float, float] | None:
    """The tolerance band of the factor, as log bounds: [log(1 - t), log(1 + t)] for a
    relative tolerance t (the kind's, or its absolute slack over the baseline)."""
    if allowed is None or not baseline:
        return None
    t = allowed / abs(baseline)
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


class _Judging(NamedTuple):
    """What judging a figure on the spread between runs found, before its verdict."""

    interval: list[float]
    centre: float  # the judged factor
    beyond: int
    detectable: float | None
    band: list[float] | None
    rounds_to_decide: int | None


def decide(measured: list[Measured], replicates: Replicates | None,
           alpha: float = stats.ALPHA, floors: dict | None = None,
           cal: Calibration | None = None) -> list[Change]:
    """Each figure's verdict (see the module's docstring), made once it is known how every
    figure tested. Without replicates the spread between runs is unknown: every figure is
    then unverified (but for rates, whose trials are independent processes)."""
    between = between_runs(measured, replicates, floors, cal) if replicates else {}
    tested = [i for i, m in enumerate(measured) if m.pvalue is not None and not m.unjudged]
    t95 = {df: stats.t_quantile(1 - alpha / 2, df) for df in {b.df for b in between.values()}}
    diff_p, equiv_p = [], []
    for i in tested:
        m = measured[i]
        if (b := between.get(i)) is None:
            diff_p.append(m.pvalue)
            equiv_p.append(1.0)  # no interval of the change between runs: nothing shown
            continue
        diff_p.append(max(m.pvalue, b.p))  # both must be significant
        band = _band(m.allowed, m.baseline)
        equiv_p.append(_equivalence_p(b.change, b.se, b.df, band) if band else 1.0)
    adjusted = dict(zip(tested, stats.adjust(diff_p), strict=True))
    adjusted_eq = dict(zip(tested, stats.adjust(equiv_p), strict=True))
    crit = {df: stats.t_quantile(1 - alpha / (2 * len(tested)), df)
            for df in {b.df for b in between.values()}} if tested else {}
    out = []
    for i, m in enumerate(measured):
        if i not in adjusted:  # not judged: what its run values are, all the same
            on_sessions = i in between and between[i].on_sessions
            out.append(m.change(Verdict.UNVERIFIED, m.unjudged,
                                judged_on="sessions" if on_sessions else None))
            continue
        p, q, b = adjusted[i], adjusted_eq[i], between.get(i)
        judging = _judging(m, b, t95, crit) if b is not None else None
        verdict, why = _verdict(m, judging, p, q, alpha, len(tested))
        undecided = open_question(verdict, q, alpha)
        rounds = judging.rounds_to_decide if judging is not None and undecided else None
        if ((cal is None or not cal.covers(m.case)) and b is not None and b.paired
                and b.rounds < MIN_ROUNDS_UNCALIBRATED
                and verdict not in (Verdict.INCONCLUSIVE, Verdict.UNVERIFIED)):
            # the test itself is not trusted on so few rounds: not judged, rather than a
            # verdict a significant p-value would contradict
            why = (f"not judged: {b.rounds} paired rounds decide nothing without this "
                   f"machine's calibration (at least {MIN_ROUNDS_UNCALIBRATED}: a level drawn "
                   f"per process lines up on fewer by chance); would be {verdict} ({why})")
            verdict, undecided = Verdict.UNVERIFIED, True
            rounds = max(MIN_ROUNDS_UNCALIBRATED, rounds or 0)
        if b is not None and b.on_sessions:
            why += f"; judged on its sessions' geometric mean, {judging.centre:.3g}x"
        if b is None:
            out.append(m.change(verdict, why, adjusted=p, adjusted_equivalence=q,
                                undecided=undecided))
            continue
        # The interval is of the change judged (the mean log ratio of the rounds, or the
        # difference of mean log values of the runs), so that it excludes 1 exactly when the
        # between-run test is significant at 5%; the factor of the reported values (ab's
        # merged value is the median of its rounds') may sit beside it. Its tolerance is held
        # against the judged change too: a pooled quantile of calls whose level flips by
        # session moves where the sessions do not (a 4 MiB TCP p90 was 1.054x pooled, 1.04x
        # on its sessions).
        out.append(m.change(
            verdict, why, adjusted=p, adjusted_equivalence=q, interval=judging.interval,
            beyond=judging.beyond, detectable=judging.detectable, band=judging.band,
            rounds_to_decide=rounds, undecided=undecided, p_within=m.pvalue, p_between=b.p,
            se_log=b.se, df=b.df, judged_factor=judging.centre,
            interval_within_runs=m.interval, judged_on="sessions" if b.on_sessions else None))
    return out


def _judging(m: Measured, b: Between, t95: dict[float, float],
             crit: dict[float, float]) -> _Judging:
    """A figure's interval, position against its tolerance, detectable change, band and the
    rounds that would decide it, from its test between runs."""
    centre = math.exp(b.change)
    half = t95[b.df] * b.se
    detectable = band = None
    t = crit[b.df]  # the smallest change this many tests and this spread let through
    if t * b.se < MAX_LOG_BAND:  # else no change of any size could be told from noise
        detectable = float(np.expm1(t * b.se))
        # where the candidate would sit had nothing changed, on the reported scale
        mid = m.candidate / centre if m.candidate > 0 else m.baseline
        band = [mid * float(np.exp(-t * b.se)), mid * float(np.exp(t * b.se))]
    tolerance = _band(m.allowed, m.baseline)
    rounds = (_rounds_to_decide(b.change, half, tolerance, b.rounds)
              if b.paired and tolerance else None)
    return _Judging([centre * math.exp(-half), centre * math.exp(half)], centre,
                    _beyond(m.b.better, m.allowed, m.baseline, m.baseline * centre),
                    detectable, band, rounds)


def open_question(verdict: Verdict, q: float | None, alpha: float = stats.ALPHA) -> bool:
    """Whether more rounds could change what a verdict says: an inconclusive figure, or a
    change inside the tolerance whose interval reaches past it (shown to have moved, not yet
    shown to have stayed inside: it may yet be a regression or an improvement)."""
    return verdict == Verdict.INCONCLUSIVE or (
        verdict in (Verdict.WORSE, Verdict.BETTER) and not (q is not None and q < alpha))


def _verdict(m: Measured, judging: _Judging | None, p: float, q: float, alpha: float,
             tested: int) -> tuple[Verdict, str]:
    """One figure's verdict and why, from its adjusted p-values: `p` of a change, `q` of its
    equivalence; `judging` is None where the spread between runs is unknown.

    A change is *shown* when `p` is below `alpha` (both tests reject no change, after the
    correction over the figures judged); it is shown *past the tolerance* when, shown, its
    estimate (the judged factor) lies past the tolerance. A shown change is always counted
    in its direction: a regression or improvement past the tolerance, worse or better inside
    it, whether or not its interval reaches past (the row says so, and how many rounds would
    tell). `unchanged` needs equivalence and no change shown; `inconclusive` is left for
    neither."""
    if m.allowed == 0:
        tol = "0"  # a rate: any rise counts
    else:
        tol = _pct(m.allowed / abs(m.baseline)) if m.allowed is not None and m.baseline else "?"
    if judging is None and m.kind not in PER_PROCESS:
        return Verdict.UNVERIFIED, ("the spread between runs is unknown (no history: "
                                    f"--history, or ab); within-run p {m.pvalue:.2g}")
    if judging is not None:
        interval, beyond, centre = judging.interval, judging.beyond, judging.centre
    else:  # a rate, judged on its trials
        interval = m.interval
        beyond = _beyond(m.b.better, m.allowed, m.baseline, m.candidate)
        centre = m.factor
    lo, hi = interval if interval and None not in interval else (None, None)
    excludes_one = lo is not None and (lo > 1 or hi < 1)
    if beyond and p < alpha:
        return (Verdict.REGRESSION if beyond < 0 else Verdict.IMPROVEMENT,
                f"past the {tol} tolerance and significant (adjusted p {p:.2g})")
    if p < alpha:
        # a change shown, its estimate inside the tolerance: a change all the same, counted in
        # its direction, never "unchanged" (drift below a tolerance piles up unseen until it
        # breaks it) nor "inconclusive" (a change was shown)
        gain = math.log(centre) * (1 if m.b.better == "higher" else -1)
        verdict = Verdict.WORSE if gain < 0 else Verdict.BETTER
        if q < alpha:
            return verdict, (f"significant (adjusted p {p:.2g}) but inside the {tol} tolerance "
                             f"(equivalence, adjusted p {q:.2g})")
        why = (f"significant (adjusted p {p:.2g}), its estimate inside the {tol} tolerance, "
               f"but its interval reaches past it: not yet shown inside or past")
        if judging is not None and judging.rounds_to_decide is not None:
            why += f"; about {judging.rounds_to_decide} rounds would tell"
        return verdict, why
    if q < alpha:
        return Verdict.UNCHANGED, f"inside the {tol} tolerance (equivalence, adjusted p {q:.2g})"
    if m.kind in PER_PROCESS:
        return Verdict.INCONCLUSIVE, (f"a rate's tolerance is {tol}: no interval shows it "
                                      f"unchanged; its rise was not significant (adjusted p "
                                      f"{p:.2g})")
    if beyond:
        why = f"past the {tol} tolerance but not significant (adjusted p {p:.2g})"
        if excludes_one:
            why += f": its interval excludes 1, but not after the correction over {tested}"
    elif excludes_one:
        why = (f"its interval excludes 1, but over {tested} figures the change is not "
               f"significant (adjusted p {p:.2g}), and it reaches past the {tol} tolerance")
    elif (lo is not None and (band := _band(m.allowed, m.baseline))
          and math.log(lo) > band[0] and math.log(hi) < band[1]):
        why = (f"its interval lies inside the {tol} tolerance, but not after the correction "
               f"over {tested} figures (adjusted equivalence p {q:.2g})")
    else:
        why = f"its interval reaches past the {tol} tolerance"
    if judging is not None and judging.detectable is not None:
        why += f"; detectable change {_pct(judging.detectable)}"
    if judging is not None and judging.rounds_to_decide is not None:
        why += f"; about {judging.rounds_to_decide} rounds would decide it"
    return Verdict.INCONCLUSIVE, why


def compare_runs(base: Run, cand: Run, thresholds: dict[str, float] | None = None,
                 history: list[Run] | None = None, alpha: float = stats.ALPHA,
                 replicates: Replicates | None = None,
                 cal: Calibration | None = None) -> list[Change]:
    """The changes from `base` to `cand`. The spread between runs comes from `history` (the
    machine's earlier runs, oldest first) or from `replicates` (ab's rounds); given both, the
    history's spread of each metric is a floor under the rounds'. `cal` is this machine's
    calibration (None: the conservative rules, see harness.comparing.calibration)."""
    th = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    base_by_key = {e.case_key: e for e in base.results}
    cases: list[Change] = []  # verdicts on whole cases, listed before their figures' verdicts
    measured: list[Measured] = []
    order: list[tuple[str, int]] = []  # where each verdict goes among the cases' and figures'
    for e in cand.results:
        key = e.case_key
        old = base_by_key.pop(key, None)
        if old is None:
            cases.append(case_change(key, "(case)", "case", Verdict.NEW))
            order.append(("case", len(cases) - 1))
            continue
        # A case that failed on a rate (some of its fresh processes aborted at exit) may pass
        # or fail by chance from run to run: its rate metrics are judged instead, below.
        by_rate = e.outcome == "fail" and any(m.kind == K.RATE for m in e.metrics)
        if old.outcome == "pass" and e.outcome in ("fail", "error") and not by_rate:
            cases.append(case_change(key, "(outcome)", "conformance", Verdict.REGRESSION,
                                     f"passed, now {e.outcome}: {e.reason[:200]}"))
            order.append(("case", len(cases) - 1))
        # a GPU held at a clock limit (its power cap) on one side only: measured at other
        # clocks, so the change is not the build's alone
        invalid = (old.contended() or e.contended()
                   or telemetry.limit_change(old.telemetry, e.telemetry))
        old_metrics = {m.key: m for m in old.metrics}
        for m in e.metrics:
            if m.key in old_metrics:
                measured.append(compare_metric(key, old_metrics[m.key], m, th, invalid))
                order.append(("figure", len(measured) - 1))
    for k in base_by_key:
        cases.append(case_change(k, "(case)", "case", Verdict.GONE))
        order.append(("case", len(cases) - 1))
    floors = None
    if history and replicates is None:
        replicates = history_replicates(history, cand)
    elif history:  # ab's rounds, with the machine's history as a floor under each spread
        floors = history_floors(history)
    figures = decide(measured, replicates, alpha, floors, cal)
    return [cases[i] if what == "case" else figures[i] for what, i in order]


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
    series: dict[tuple[CaseKey, MetricKey], list[tuple[float, list | None]]] = {}
    for run in runs[-HISTORY_RUNS:]:
        for e in run.results:
            if not e.valid:
                continue
            for m in e.metrics:
                if (v := run_value(m)) is not None:
                    series.setdefault((e.case_key, m.key), []).append((v, m.sessions))
    in_cand = {(e.case_key, m.key): m for e in (cand.results if cand else ()) if e.valid
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
    judged = c.judged_factor or c.factor
    text = f"{judged:.3g}x"
    if c.interval and None not in c.interval:
        text += f" [{c.interval[0]:.3g}, {c.interval[1]:.3g}]"
    if judged != c.factor and c.factor > 0 and abs(math.log(c.factor / judged)) > 0.01:
        text += f" (values {c.factor:.3g}x)"
    return text


def counts(changes: list[Change]) -> dict[str, int]:
    """How many figures got each verdict (every verdict, 0 where none did)."""
    return {v.value: sum(c.verdict == v for c in changes) for v in VERDICTS}


def changes_table(changes: list[Change], show_all: bool = False) -> list[dict[str, Any]]:
    order = {v: i for i, v in enumerate(VERDICTS)}
    rows = []
    for c in sorted(changes, key=lambda c: (order[c.verdict], str(c.case), c.name)):
        # regressions, improvements and inconclusive figures are always listed; unchanged
        # and unverified ones with --all, or where a figure moved past its tolerance
        if not show_all and c.verdict in ("unchanged", "unverified") and not c.beyond:
            continue
        rows.append({
            "verdict": c.verdict.value, "case": str(c.case), "metric": c.name, "kind": c.kind,
            "baseline": c.baseline, "candidate": c.candidate, "change": fmt_change(c),
            "p_adj": "" if c.adjusted is None else f"{c.adjusted:.2g}",
            "why": c.why,
        })
    return rows
