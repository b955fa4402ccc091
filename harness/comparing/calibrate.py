"""Measuring this machine's noise (`release-bench calibrate`): from the rounds of an A/A
campaign (the same Python on both sides), each figure's spread of a round's B/A log ratio,
whether its level is drawn per process, each family's spread, and the rounds factor of each
benchmark; the result is a `harness.comparing.calibration.Calibration`, which the judges read.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from harness import records, stats
from harness.comparing import campaign, compare
from harness.comparing.calibration import Calibration, Key, Spread, rounds_for
from harness.records import Run

# The most rounds a benchmark gets by default, in multiples of `ab`'s rounds: a cost bound
# (`--max-rounds` gives more to the figures a comparison leaves inconclusive).
MAX_ROUNDS_FACTOR = 4


def _within_process(runs: list[Run]) -> dict[Key, dict[int, float]]:
    """Each figure's variance of its log value within its process, by round: from its
    sessions where it has them, else from its samples' interval of its quantile."""
    out: dict[Key, dict[int, float]] = {}
    seen: dict[str, int] = {}
    z = stats.t_quantile(1 - (1 - stats.CI_LEVEL) / 2, 1e6)
    for run in runs:
        for e in run.results:
            case = e.case_key
            if e.valid:
                for m in e.metrics:
                    sessions = m.sessions
                    lo, hi = m.interval
                    if sessions and len(sessions) >= 2 and min(sessions) > 0:
                        var = float(np.var(np.log(sessions), ddof=1)) / len(sessions)
                    elif lo and hi and lo > 0 and hi > 0:
                        var = (math.log(hi / lo) / (2 * z)) ** 2
                    else:
                        continue
                    out.setdefault((case, m.key), {})[seen.get(case, 0)] = var
            seen[case] = seen.get(case, 0) + 1
    return out


def measure(a_runs: list[Run], b_runs: list[Run], machine: dict,
            units: list[str], rounds: int, measured: dict[str, Any]) -> Calibration:
    """The calibration from an A/A's rounds (each side's runs, as `campaign.load_rounds` gives
    them); `units` are the benchmark groups it ran, `rounds` the default rounds of `ab`
    against which each unit's factor is set."""
    reps = campaign.round_values(a_runs, b_runs)
    within_a, within_b = _within_process(a_runs), _within_process(b_runs)
    kinds = {(e.case_key, m.key): m.kind for run in a_runs for e in run.results for m in e.metrics}
    figures: dict[Key, Spread] = {}
    for key, rep in reps.items():
        if not rep.paired or kinds.get(key) in compare.NO_RELATIVE_SPREAD:
            continue
        a, b = np.asarray(rep.baseline, float), np.asarray(rep.candidate, float)
        if a.size < 3 or min(a.min(), b.min()) <= 0:
            continue
        d = np.log(b / a)
        var = float(np.var(d, ddof=1))
        pa, pb = within_a.get(key, {}), within_b.get(key, {})
        both = [pa[r] + pb[r] for r in pa.keys() & pb.keys()]
        per_process = None
        if both and var > 0:
            predicted = float(np.mean(both))
            # the within-process variance is estimated from many samples: its df is large
            per_process = predicted <= 0 or stats.variance_exceeds(var, d.size - 1, predicted,
                                                                   1e6)
        figures[key] = Spread(var, float(d.size - 1), per_process)
    families: dict[tuple[str, str], list[tuple[Key, Spread]]] = {}
    for key, s in figures.items():
        families.setdefault((key[0].case_id, kinds[key]), []).append((key, s))
    family_spreads = {}
    for fam, members in families.items():
        variances = [s.variance for _, s in members]
        flags = [s.per_process for _, s in members if s.per_process is not None]
        family_spreads[fam] = Spread(
            float(np.quantile(variances, stats.FAMILY_QUANTILE)),
            float(sum(s.df for _, s in members)),
            None if not flags else sum(flags) > len(flags) / 2)
    target = 2 * compare.AB_THRESHOLDS["time"]  # a change of twice the tolerance
    need: dict[str, list[float]] = {}
    for key, s in figures.items():
        n = rounds_for(s.variance, target)
        need.setdefault(key[0].unit, []).append(math.inf if n is None else n)
    factors = {u: min(MAX_ROUNDS_FACTOR, max(1, math.ceil(float(np.median(need[u])) / rounds)))
               for u in units if u in need}
    return Calibration(records.scrub_paths(machine), figures, family_spreads, factors, "",
                       measured)
