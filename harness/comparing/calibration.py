"""What this machine's noise is: `release-bench calibrate` runs an A/A comparison here (the
same Python on both sides, `ab`'s rounds; `harness.comparing.calibrate` measures it) and keeps, per
figure and per family of figures, how much a round's B/A ratio wanders, in
`results/calibration/<machine>.json`.

`compare` and `ab` read it instead of constants tuned on one machine:

- each figure's spread between processes is at least what the calibration measured (a floor
  under its prior, as the history's spread is: a figure that flips between two levels from
  one process to the next looks steady in a few rounds by chance);
- a figure measured in sessions is judged by its sessions' spread only where the calibration
  found that its rounds vary no more than its sessions predict (its level is not drawn per
  process); elsewhere by its family's;
- a benchmark whose figures need more rounds than the default to detect a change of twice
  the tolerance gets that many more (its `rounds_factor`, at most
  `calibrate.MAX_ROUNDS_FACTOR`).

Without a calibration of this machine's hardware they fall back on conservative rules (no
sessions trusted alone, every family at least as wide as its whole kind, no further rounds)
and say so in one line. A calibration of other hardware is never used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import records, stats
from harness.records import CaseKey, Design, MetricKey

ROOT = Path(__file__).resolve().parents[2]
CALIBRATIONS = ROOT / "results" / "calibration"
SCHEMA = "release-bench-calibration/1"
DEFAULT_ROUNDS = 8  # an A/A's rounds: df 7 per figure, more for a family
# a round's log ratio is normal enough for its variance; the F-test that tells a level drawn
# per process compares it with what each process's own samples or sessions predict
Key = tuple[CaseKey, MetricKey]  # (result key, metric key), as compare.Replicates


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
    rounds_factor: dict[str, int]  # benchmark unit (campaign.Unit.name) -> multiple of the rounds
    source: str = ""
    measured: dict[str, Any] = field(default_factory=dict)

    @property
    def design(self) -> Design:
        """The rounds it calibrates: sequential (ab's) or duet (ab --duet's)."""
        return Design(self.measured.get("design", Design.SEQUENTIAL))

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

    def covers(self, case: CaseKey) -> bool:
        """Whether the rules of a calibrated machine judge this case's figures (one design's
        calibration covers a whole comparison, as it always has; `ByDesign` only its units)."""
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "machine": self.machine, "measured": self.measured,
            "figures": [{"case": str(k[0]), "metric": k[1].name, "labels": dict(k[1].labels),
                         "variance": s.variance, "df": s.df, "per_process": s.per_process}
                        # in the order of their names as people read them
                        for k, s in sorted(self.figures.items(),
                                           key=lambda ks: (str(ks[0][0]), ks[0][1].name,
                                                           repr(list(ks[0][1].labels))))],
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
        figures = {(CaseKey.parse(f["case"]), MetricKey.of(f["metric"], f["labels"])):
                   Spread(f["variance"], f["df"], f["per_process"]) for f in doc["figures"]}
        families = {(f["case"], f["kind"]): Spread(f["variance"], f["df"], f["per_process"])
                    for f in doc["families"]}
        return cls(doc["machine"], figures, families, dict(doc["rounds_factor"]), source,
                   doc.get("measured", {}))


@dataclass
class ByDesign:
    """The calibrations of a campaign whose benchmarks run in different designs (a duet, bursts,
    sequential rounds: `ab` gives each its best by default): each figure is judged with the
    calibration of its unit's design, and a figure of a design this machine has no calibration
    of by the conservative rules. It answers what a `Calibration` answers, per figure."""

    parts: dict[Design, Calibration]
    design_of: Callable[[CaseKey], Design]  # a result's design (its unit's)
    rounds_factor: dict[str, int]  # each unit's, from its design's calibration
    source: str

    def _part(self, case: CaseKey) -> Calibration | None:
        return self.parts.get(self.design_of(case))

    def covers(self, case: CaseKey) -> bool:
        return self._part(case) is not None

    def floor(self, key: Key, family: tuple[str, str], paired: bool) -> float | None:
        part = self._part(key[0])
        return part.floor(key, family, paired) if part else None

    def trusts_sessions(self, key: Key) -> bool:
        part = self._part(key[0])
        return part is not None and part.trusts_sessions(key)


def path_for(machine_name: str, root: Path = CALIBRATIONS,
             design: Design = Design.SEQUENTIAL) -> Path:
    """`<machine>.json` for sequential rounds, `<machine>.duet.json` for a duet's,
    `<machine>.bursts.json` for bursts'."""
    return root / (f"{machine_name}.json" if design == Design.SEQUENTIAL
                   else f"{machine_name}.{design}.json")


def read(path: Path | str) -> Calibration:
    """The calibration in the file `path`; raises OSError, ValueError, KeyError or TypeError
    when it is not one."""
    return Calibration.from_json(json.loads(Path(path).read_text()), str(path))


def for_machine(fingerprint: dict, root: Path = CALIBRATIONS,
                design: Design = Design.SEQUENTIAL) -> tuple[Calibration | None, str]:
    """This machine's calibration of `design` rounds, and one line saying which one is used
    (or why none)."""
    from harness.running import machine

    path = path_for(fingerprint.get("name", "?"), root, design)
    fallback = ("conservative defaults: no sessions trusted alone, every family at least as "
                "wide as its kind, no further rounds")
    if not path.exists():
        again = "release-bench calibrate" + (f" --design {design}"
                                             if design != Design.SEQUENTIAL else "")
        return None, (f"no calibration of {fingerprint.get('name')} ({path.name}): "
                      f"{fallback}; run `{again}`")
    try:
        cal = read(path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"calibration {path.name} unreadable ({e}): {fallback}"
    if differ := machine.differences(cal.machine, fingerprint):
        return None, (f"calibration {path.name} is of other hardware ({differ[0]}): {fallback}; "
                      "run `release-bench calibrate` again")
    when = cal.measured.get("started", "?")[:10]
    return cal, (f"calibration: {path.name} ({cal.measured.get('rounds', '?')} rounds of an "
                 f"A/A, {when})")


def write(cal: Calibration, root: Path = CALIBRATIONS) -> Path:
    return records.write_json_atomic(path_for(cal.machine.get("name", "unknown"), root,
                                              cal.design), cal.to_json())
