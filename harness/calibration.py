"""What this machine's noise is: `release-bench calibrate` runs an A/A comparison here (the same
Python on both sides, `ab`'s rounds) and keeps, per figure and per family of figures, how much
a round's B/A ratio wanders, in `results/calibration/<machine>.json`.

`compare` and `ab` read it instead of constants tuned on one machine:

- each figure's spread between processes is at least what the calibration measured (a floor
  under its prior, as the history's spread is: a figure that flips between two levels from
  one process to the next looks steady in a few rounds by chance);
- a figure measured in sessions is judged by its sessions' spread only where the calibration
  found that its rounds vary no more than its sessions predict (its level is not drawn per
  process); elsewhere by its family's;
- a benchmark whose figures need more rounds than the default to detect a change of twice
  the tolerance gets that many more (its `rounds_factor`, at most `MAX_ROUNDS_FACTOR`).

Without a calibration of this machine's hardware they fall back on conservative rules (no
sessions trusted alone, every family at least as wide as its whole kind, no further rounds)
and say so in one line. A calibration of other hardware is never used.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness import records, stats

ROOT = Path(__file__).resolve().parent.parent
CALIBRATIONS = ROOT / "results" / "calibration"
SCHEMA = "release-bench-calibration/1"
DEFAULT_ROUNDS = 8  # an A/A's rounds: df 7 per figure, more for a family
# The most rounds a benchmark gets by default, in multiples of `ab`'s rounds: a cost bound
# (`--max-rounds` gives more to the figures a comparison leaves inconclusive).
MAX_ROUNDS_FACTOR = 4
# a round's log ratio is normal enough for its variance; the F-test that tells a level drawn
# per process compares it with what each process's own samples or sessions predict
Key = tuple[str, tuple[str, str]]  # (result key, metric key), as compare.Replicates


@dataclass(frozen=True)
class Spread:
    """How a figure's (or a family's) round-to-round B/A log ratio varies on this machine."""

    variance: float  # of one round's log ratio
    df: float
    # whether its rounds vary more than its processes' own samples (or sessions) predict:
    # its level is drawn per process (None: nothing within a process to compare with)
    per_process: bool | None = None

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)


def detectable(variance: float, rounds: int, prior_df: float = stats.PRIOR_DF) -> float:
    """The smallest relative change a paired comparison of `rounds` rounds tells from noise at
    the 95% level (one figure, no correction for others), with the moderated test's degrees of
    freedom."""
    se = math.sqrt(variance / rounds)
    return math.expm1(stats.t_quantile(1 - stats.ALPHA / 2, rounds - 1 + prior_df) * se)


def rounds_for(variance: float, target: float, most: int = 100_000) -> int | None:
    """The fewest rounds whose detectable change is at most `target` (None past `most`)."""
    if variance <= 0:
        return 2
    n = 2
    while n <= most:
        if detectable(variance, n) <= target:
            return n
        # the change shrinks with the square root of the rounds: jump close to the answer
        guess = int(n * (math.log1p(detectable(variance, n)) / math.log1p(target)) ** 2)
        n = max(n + 1, min(guess, most + 1) if guess > n + 1 else n + 1)
    return None


@dataclass
class Calibration:
    """A machine's calibration: per figure and per family, the spread of a round's ratio."""

    machine: dict[str, Any]
    figures: dict[Key, Spread]
    families: dict[tuple[str, str], Spread]  # (suite/case, kind) -> the family's spread
    rounds_factor: dict[str, int]  # benchmark unit (ab.Group.name) -> multiple of the rounds
    source: str = ""
    measured: dict[str, Any] = field(default_factory=dict)

    def floor(self, key: Key, family: tuple[str, str], paired: bool) -> float | None:
        """The variance a figure's prior must reach: of a round's log ratio (paired), or of
        one run's log value (separate runs: half of it, a lower bound, since separate runs
        drift too)."""
        spread = self.figures.get(key) or self.families.get(family)
        if spread is None:
            return None
        return spread.variance if paired else spread.variance / 2

    def trusts_sessions(self, key: Key) -> bool:
        """Whether the figure's sessions predict its rounds here (its level is not drawn per
        process, as this machine's A/A found)."""
        spread = self.figures.get(key)
        return spread is not None and spread.per_process is False

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "machine": self.machine, "measured": self.measured,
            "figures": [{"case": k[0], "metric": k[1][0],
                         "labels": dict(ast.literal_eval(k[1][1])),
                         "variance": s.variance, "df": s.df, "per_process": s.per_process}
                        for k, s in sorted(self.figures.items())],
            "families": [{"case": f[0], "kind": f[1], "variance": s.variance, "df": s.df,
                          "sd_log_ratio": s.sd,
                          "detectable_at": {str(n): detectable(s.variance, n)
                                            for n in (5, 10, 20)},
                          "rounds_for": {f"{t:g}": rounds_for(s.variance, t)
                                         for t in (0.10, 0.05)},
                          "per_process": s.per_process}
                         for f, s in sorted(self.families.items())],
            "rounds_factor": dict(sorted(self.rounds_factor.items())),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = "") -> Calibration:
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"not a calibration ({doc.get('schema')!r})")
        figures = {(f["case"], (f["metric"], repr(sorted(f["labels"].items())))):
                   Spread(f["variance"], f["df"], f["per_process"]) for f in doc["figures"]}
        families = {(f["case"], f["kind"]): Spread(f["variance"], f["df"], f["per_process"])
                    for f in doc["families"]}
        return cls(doc["machine"], figures, families, dict(doc["rounds_factor"]), source,
                   doc.get("measured", {}))


def path_for(machine_name: str, root: Path = CALIBRATIONS) -> Path:
    return root / f"{machine_name}.json"


def for_machine(fingerprint: dict, root: Path = CALIBRATIONS) -> tuple[Calibration | None, str]:
    """This machine's calibration, and one line saying which one is used (or why none)."""
    from harness import compare

    path = path_for(fingerprint.get("name", "?"), root)
    fallback = ("conservative defaults: no sessions trusted alone, every family at least as "
                "wide as its kind, no further rounds")
    if not path.exists():
        return None, (f"no calibration of {fingerprint.get('name')} ({path.name}): "
                      f"{fallback}; run `release-bench calibrate`")
    try:
        cal = Calibration.from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"calibration {path.name} unreadable ({e}): {fallback}"
    if differ := compare.machine_differences(cal.machine, fingerprint):
        return None, (f"calibration {path.name} is of other hardware ({differ[0]}): {fallback}; "
                      "run `release-bench calibrate` again")
    when = cal.measured.get("started", "?")[:10]
    return cal, (f"calibration: {path.name} ({cal.measured.get('rounds', '?')} rounds of an "
                 f"A/A, {when})")


# --- measuring one ----------------------------------------------------------------------


def _within_process(runs: list[dict]) -> dict[Key, dict[int, float]]:
    """Each figure's variance of its log value within its process, by round: from its
    sessions where it has them, else from its samples' interval of its quantile."""
    from harness import compare

    out: dict[Key, dict[int, float]] = {}
    seen: dict[str, int] = {}
    z = stats.t_quantile(1 - (1 - stats.CI_LEVEL) / 2, 1e6)
    for run in runs:
        for e in run["results"]:
            case = compare.result_key(e)
            if not compare.contended(e):
                for m in e["metrics"]:
                    sessions = m.get("sessions")
                    lo, hi = ((m.get("stats") or {}).get("ci") or (None, None))[:2]
                    if sessions and len(sessions) >= 2 and min(sessions) > 0:
                        var = float(np.var(np.log(sessions), ddof=1)) / len(sessions)
                    elif lo and hi and lo > 0 and hi > 0:
                        var = (math.log(hi / lo) / (2 * z)) ** 2
                    else:
                        continue
                    out.setdefault((case, compare.metric_key(m)), {})[seen.get(case, 0)] = var
            seen[case] = seen.get(case, 0) + 1
    return out


def measure(a_runs: list[dict], b_runs: list[dict], machine: dict,
            units: list[str], rounds: int, measured: dict[str, Any]) -> Calibration:
    """The calibration from an A/A's rounds (each side's runs, as `ab.load_rounds` gives
    them); `units` are the benchmark groups it ran, `rounds` the default rounds of `ab`
    against which each unit's factor is set."""
    from harness import ab, compare

    reps = ab.round_values(a_runs, b_runs)
    within_a, within_b = _within_process(a_runs), _within_process(b_runs)
    kinds = {(compare.result_key(e), compare.metric_key(m)): m.get("kind", "value")
             for run in a_runs for e in run["results"] for m in e["metrics"]}
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
        families.setdefault((key[0].split("[")[0], kinds[key]), []).append((key, s))
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
        need.setdefault(ab.unit_of(key[0]), []).append(math.inf if n is None else n)
    factors = {u: min(MAX_ROUNDS_FACTOR, max(1, math.ceil(float(np.median(need[u])) / rounds)))
               for u in units if u in need}
    return Calibration(records.scrub_paths(machine), figures, family_spreads, factors, "",
                       measured)


def write(cal: Calibration, root: Path = CALIBRATIONS) -> Path:
    return records.write_json_atomic(path_for(cal.machine.get("name", "unknown"), root),
                                     cal.to_json())
