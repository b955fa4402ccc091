"""A campaign: the same cases under N sides (torch environments), each unit in fresh processes,
round by round on one machine. `ab` is a campaign of two sides, `matrix` one of N, and
`calibrate` an A/A campaign; each adds only its own record and output.

The unit of work is a `Unit`: what one fresh process runs in a round, a suite's conformance
cases together or one benchmark case alone. A round runs every unit on every side, the sides in
an order rotated from round to round (A B, then B A, for two sides), so that each side goes
first as often as the others, and a state of a shared machine that lasts a minute (a busy
neighbour, the page cache) falls on one round of every side rather than on rounds of one side.
The variance between processes, which dominates on a shared machine, is so sampled on each
side, and a round's sides, measured back to back, pair. A duet unit (`ab --duet`, see
`harness.running.duet`) runs a round's two sides at once instead, each pinned to its half of the
CPUs, the halves swapped every other round, and is judged per swapped pair of rounds.

On disk a campaign is a folder: `rounds/<unit>-<round>-<side>/` holds each process's run,
`logs/side-<side>.log` its output, `side-<side>.json` each side's merged run (samples pooled,
contended rounds left out), beside the record of the command that made it. Two sides are judged
by `harness.comparing.compare`, each figure on its rounds' ratios (`round_values`). A benchmark with
undecided figures gets the further rounds its spread says would decide them, up to a cap
(`extend`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import numpy as np

from harness import records, stats
from harness.comparing import compare
from harness.records import CaseKey, Check, Design, Metric, MetricKey, Outcome, Result, Run

if TYPE_CHECKING:  # calibration measures with this module's rounds
    from harness.comparing.calibration import Calibration

ROOT = Path(__file__).resolve().parents[2]
# worst first
OUTCOME_ORDER = (Outcome.ERROR, Outcome.FAIL, Outcome.INVALID, Outcome.INCONCLUSIVE, Outcome.PASS,
                 Outcome.SKIP, Outcome.NA)


class CampaignError(Exception):
    """An environment that cannot run the suites, or a folder that is not a campaign (the
    message is one line)."""


# ---------------------------------------------------------------- sides

def python_of(spec: str) -> Path:
    """The Python executable of a venv folder, or the executable itself."""
    p = Path(spec)
    if p.is_dir():
        for candidate in (p / "bin" / "python", p / "Scripts" / "python.exe"):
            if candidate.exists():
                return candidate
        raise CampaignError(f"{spec}: not a virtual environment (no bin/python)")
    if p.is_file() and os.access(p, os.X_OK):
        return p
    raise CampaignError(f"{spec}: neither a venv folder nor a Python executable")


def checkout_env() -> dict[str, str]:
    # the project from this checkout, whatever the environment has installed
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return os.environ | {"PYTHONPATH": path}


def torch_version(python: Path) -> str:
    """torch's version in that environment; raises CampaignError when it cannot run the
    suites."""
    try:
        out = subprocess.run([str(python), "-c",
                              "import harness.cli, torch; print(torch.__version__)"],
                             capture_output=True, text=True, env=checkout_env(), cwd=ROOT,
                             timeout=300)
    except OSError as e:  # the executable is gone or cannot be run
        raise CampaignError(f"{python}: cannot run the suites ({e.strerror})") from e
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["exit status " + str(out.returncode)])[-1]
        raise CampaignError(f"{python}: cannot run the suites ({last})")
    return out.stdout.strip()


@dataclass(frozen=True)
class Side:
    """One environment of a campaign: `key` names its folders and files (A and B in an ab,
    the position 0, 1, ... in a matrix), `label` is what the output calls it."""

    key: str
    label: str
    python: Path
    torch: str


# ---------------------------------------------------------------- units and the schedule

@dataclass(frozen=True)
class Unit:
    """What one fresh process runs in a round: a suite's conformance cases together, or one of
    its benchmark cases alone."""

    suite: str
    cases: tuple[str, ...]
    benchmark: bool = False
    # its rounds are this many times the campaign's: more where this machine's calibration
    # found its figures' level drawn per process (harness.comparing.calibration)
    rounds_factor: int = 1
    # how a round measures it: sequential (the sides one after the other); a duet
    # (harness.running.duet: both sides at once, on the CPU, each on its half of the machine,
    # the halves swapped from round to round); bursts (harness.running.turns: both sides'
    # processes alive at once, measuring in turns)
    design: Design = Design.SEQUENTIAL
    # the one device it runs its cases on ("": each device they have); a duet runs on the CPU
    device: str = ""
    # why it runs in its design (what `ab`'s header says of it)
    why: str = ""
    # the campaign's --param options its cases take: (key, value as JSON)
    params: tuple[tuple[str, str], ...] = ()

    @property
    def duet(self) -> bool:
        return self.design == Design.DUET

    @property
    def bursts(self) -> bool:
        return self.design == Design.BURSTS

    @property
    def name(self) -> str:
        """`suite` for its conformance cases, `suite.case` for a benchmark case; a benchmark's
        CUDA runs apart from its CPU duet are `suite.case@cuda`."""
        base = f"{self.suite}.{self.cases[0]}" if self.benchmark else self.suite
        return f"{base}@{self.device}" if self.device not in ("", "cpu") else base

    def covers(self, case: CaseKey) -> bool:
        """Whether a result `case` is one this unit runs."""
        return (case.suite == self.suite and case.case in self.cases
                and (not self.device or case.device.split(":")[0] == self.device))

    def rounds_of(self, rounds: int) -> int:
        """Its rounds in a campaign of `rounds` rounds: a duet's are swapped pairs of rounds,
        each pair in about the wall time of one sequential round (both sides run at once)."""
        return rounds * self.rounds_factor * (2 if self.duet else 1)

    def selection(self) -> list[str]:
        """The `run` options that select this unit's cases."""
        device = ["--device", self.device] if self.device else []
        return ["--suite", self.suite, *(a for case in self.cases for a in ("--only", case)),
                *device, *(a for k, v in self.params for a in ("--param", f"{k}={v}"))]


def with_params(units: list[Unit], params: list[tuple[str, Any]], profile: str) -> list[Unit]:
    """Each unit with the parameters (`--param`) its cases take: those a case has in a
    parameter set of `profile` or names among its options (as `run` sets them). A parameter
    that no unit takes is bad input: CampaignError."""
    from harness import registry

    out, taken = [], set()
    for unit in units:
        suite = registry.load(unit.suite)
        keys: set[str] = set()
        for name in unit.cases:
            case = suite.case(name)
            keys |= set(case.options) | {k for device in case.devices
                                         for p in case.param_sets(profile, device) for k in p}
        mine = tuple((k, json.dumps(v)) for k, v in params if k in keys)
        taken |= {k for k, _ in mine}
        out.append(replace(unit, params=mine))
    if missing := [k for k, _ in params if k not in taken]:
        raise CampaignError(f"--param {missing[0]}: no selected case has this parameter")
    return out


def best_design(case: Any) -> tuple[Design, str]:
    """The most precise design a benchmark case declares, and why: a duet where it declares
    one (both sides at once, on swapped halves: the narrowest intervals for one CPU-bound
    process, and for the DDP+RPC step even beside bursts, validation.md), bursts where it
    declares only those (a latency between processes, which a duet's shared CPU would
    distort), sequential rounds otherwise."""
    if case.duet:
        return Design.DUET, "declares duet=True: both sides at once, on swapped halves of the CPUs"
    if case.bursts:
        return Design.BURSTS, ("declares bursts=True (not duet): both sides alive through a "
                               "round, measuring in turns")
    return Design.SEQUENTIAL, "declares neither a duet nor bursts"


def units(suites: list[str], case_filter: str | None = None,
          skip: Iterable[str] = (), cal: Calibration | None = None,
          design: Design | None = Design.SEQUENTIAL, cuda: bool | None = None) -> list[Unit]:
    """The units of the selected cases, suite by suite: the conformance cases, then each
    benchmark case on its own. A benchmark in a process of its own is measured on the sides
    of a round a process start apart, not a whole suite apart: the level of a DDP+RPC step
    drifts within a minute here (5.1 to 7.7 ms over one ab's rounds), and while its suite ran
    between the two sides it escaped a 25% slowdown that an ab of that case alone caught.
    A benchmark's rounds factor comes from this machine's calibration `cal` (1 without).

    `design` None gives each benchmark its most precise declared design (`best_design`);
    `Design.DUET` (`BURSTS`) runs each benchmark that declares a duet (bursts) so, and the rest
    sequentially; `SEQUENTIAL` runs every one in sequential rounds. Duets are CPU-only (one GPU
    cannot be halved fairly): where `cuda` (default: whether torch sees a GPU here), a duet's
    CUDA runs are a sequential unit of their own (`suite.case@cuda`)."""
    from harness import registry
    from harness.running import runner

    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    out = []
    for name in suites:
        cases = [c for c in registry.load(name).cases if runner.selects(c, case_filter, skip)]
        if checks := tuple(c.name for c in cases if c.kind != "benchmark"):
            out.append(Unit(name, checks))
        for c in cases:
            if c.kind != "benchmark":
                continue
            best, why = best_design(c)
            if design is None:
                chosen = best
            elif design == Design.SEQUENTIAL or not getattr(c, design.value):
                chosen, why = Design.SEQUENTIAL, (
                    f"--design {design}" if design == Design.SEQUENTIAL
                    else f"--design {design}, which it does not declare")
            else:
                chosen, why = design, f"--design {design}"
            unit = Unit(name, (c.name,), benchmark=True, design=chosen, why=why,
                        device="cpu" if chosen == Design.DUET else "")
            out.append(unit)
            if chosen == Design.DUET and cuda and "cuda" in c.devices:
                out.append(replace(unit, design=Design.SEQUENTIAL, device="cuda",
                                   why="its CUDA runs: one GPU cannot be halved for a duet"))
    return with_rounds_factors(out, cal) if cal is not None else out


def with_rounds_factors(units: list[Unit], cal: Any) -> list[Unit]:
    """`units` with the rounds factors of the calibration `cal` (a `Calibration` or a
    `ByDesign`): more rounds where this machine's A/A found a benchmark's level drawn per
    process."""
    return [replace(u, rounds_factor=cal.rounds_factor.get(u.name, 1)) for u in units]


def rotation(n_sides: int, rounds: int) -> list[list[int]]:
    """The order of the sides in each round: rotated by one each round, so that over n rounds
    each side runs first, second, ... once. For two sides: A B, B A, A B, ..."""
    return [[(r + i) % n_sides for i in range(n_sides)] for r in range(rounds)]


class Step(NamedTuple):
    """One process of a campaign: a unit, in a round, on a side (its position)."""

    unit: Unit
    round: int
    side: int


def plan(units: list[Unit], n_sides: int, wanted: dict[str, int],
         done: dict[str, int] | None = None) -> list[Step]:
    """The processes that take each unit from `done` rounds (0 where absent) to `wanted`, in
    the order they run: round by round, every unit's sides in that round's rotation. Two
    rounds of one unit on one side are thus never back to back (run B B, a minute-long state
    of a shared machine falls on both, and an A/A on a 2-core VM flagged an 18% change in a
    busy matmul), and a unit with more rounds than the others goes on with its further rounds
    once the others have had theirs."""
    done = done or {}
    most = max(wanted.values(), default=0)
    return [Step(unit, r, i) for r, order in enumerate(rotation(n_sides, most))
            for unit in units if done.get(unit.name, 0) <= r < wanted.get(unit.name, 0)
            for i in order]


def rounds_wanted(units: list[Unit], rounds: int) -> dict[str, int]:
    """Each unit's rounds in a campaign of `rounds` (its rounds factor applied)."""
    return {u.name: u.rounds_of(rounds) for u in units}


def more_rounds(units: list[Unit], rounds: int) -> dict[str, int]:
    """The rounds of each unit with more than the campaign's (for the record)."""
    return {u.name: u.rounds_of(rounds) for u in units if u.rounds_factor != 1}


# ---------------------------------------------------------------- running and the folder

def start_round(python: Path, selection: list[str], args: list[str], out: Path,
                log: Path) -> tuple[subprocess.Popen, IO[bytes]]:
    """Start one fresh process running the cases `selection` names (`--suite S`, maybe
    `--only C`), its output appended to `log`: the process and the open log."""
    cmd = [str(python), "-m", "harness.cli", "run", *selection, "--out", str(out), *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    f = open(log, "ab")  # noqa: SIM115 (closed by the caller once the process ended)
    return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=checkout_env(),
                            cwd=ROOT), f


def _written(out: Path) -> Path | None:
    try:
        return records.resolve_run(out)
    except records.RecordError:
        return None


def run_round(python: Path, selection: list[str], args: list[str], out: Path,
              log: Path) -> Path | None:
    """One fresh process running the cases `selection` names; the run file it wrote, or
    None."""
    proc, f = start_round(python, selection, args, out, log)
    with f:
        proc.wait()
    return _written(out)


def log_path(base: Path, key: str) -> Path:
    """Where the processes of a side write their output."""
    return base / "logs" / f"side-{key}.log"


def merged_path(base: Path, key: str) -> Path:
    """Where a side's merged run is written."""
    return base / f"side-{key}.json"


@dataclass
class Campaign:
    """The sides and units of one campaign, and the folder `base` its rounds go to."""

    base: Path
    sides: list[Side]
    units: list[Unit]
    run_args: list[str]
    progress: Callable[[str], None]

    def run(self, steps: list[Step]) -> None:
        """Run the processes of `steps`, each writing its run under `rounds/`; raises
        CampaignError on the first that wrote none. The steps of a duet unit's round run
        together (`run_duet`)."""
        n, total = 0, len(steps)
        for (unit, r), group in itertools.groupby(steps, key=lambda s: (s.unit, s.round)):
            sides = [self.sides[i] for _, _, i in group]
            # a duet's or a bursts round's sides run at once: one line for both
            together = unit.design != Design.SEQUENTIAL
            for batch in [sides] if together else [[side] for side in sides]:
                t0 = time.perf_counter()
                n += len(batch)
                what = " with ".join(s.label for s in batch)
                self.progress(f"[{n}/{total}] {what} {unit.name} (round {r + 1}"
                              f"{f', a {unit.design}' if together else ''}) ...")
                if unit.duet:
                    self.run_duet(unit, r, batch)
                elif unit.bursts:
                    self.run_bursts(unit, r, batch)
                else:
                    self.run_one(unit, r, batch[0])
                self.progress(f"[{n}/{total}] done in {time.perf_counter() - t0:.0f} s")

    def _where(self, unit: Unit, r: int, side: Side) -> Path:
        return self.base / "rounds" / f"{unit.name}-{r:02d}-{side.key}"

    def _missing(self, unit: Unit, side: Side) -> CampaignError:
        return CampaignError(f"{side.label} (torch {side.torch}) wrote no run for {unit.name}; "
                             f"see {log_path(self.base, side.key)}")

    def run_one(self, unit: Unit, r: int, side: Side) -> None:
        if run_round(side.python, unit.selection(), self.run_args, self._where(unit, r, side),
                     log_path(self.base, side.key)) is None:
            raise self._missing(unit, side)

    def run_duet(self, unit: Unit, r: int, sides: list[Side]) -> None:
        """Both sides of a round at once, each pinned to its half of the machine (the halves
        swapped every other round), starting each case together at a barrier."""
        from harness.running import duet

        halves = duet.halves()
        barrier = self.base / "barriers" / f"{unit.name}-{r:02d}"
        procs = []
        for side in sides:
            # A on the first half in even rounds, on the second in odd ones
            cpus = halves[(self.sides.index(side) + r) % 2]
            extra = ["--cpus", duet.cpu_list_text(cpus), "--barrier", str(barrier)]
            procs.append((side, start_round(side.python, unit.selection(),
                                            [*self.run_args, *extra],
                                            self._where(unit, r, side),
                                            log_path(self.base, side.key))))
        for _, (proc, log) in procs:
            proc.wait()
            log.close()
        shutil.rmtree(barrier, ignore_errors=True)
        with contextlib.suppress(OSError):  # the last round's leaves the folder empty
            barrier.parent.rmdir()
        for side, _ in procs:
            if _written(self._where(unit, r, side)) is None:
                raise self._missing(unit, side)


    def run_bursts(self, unit: Unit, r: int, sides: list[Side]) -> None:
        """Both sides of a round started together and measuring in turns granted by a referee
        (harness.running.turns), the side first in the round's rotation first. Each side's
        exit is told to the referee as it happens: a side that failed ends its partner's round
        with an error rather than a wait. The referee's log of the turns is kept under
        `turns/`."""
        from harness.running import turns

        # the referee's A is the side that goes first in this round's rotation (`sides` is in
        # that order): each campaign side goes first in half of the rounds
        order = list(sides)
        with turns.Referee() as referee:
            procs = []
            for side in sides:
                label = turns.SIDES[order.index(side)]
                procs.append((order.index(side), side, start_round(
                    side.python, unit.selection(),
                    [*self.run_args, "--turns", f"{label}@{referee.address}"],
                    self._where(unit, r, side), log_path(self.base, side.key))))

            def tell_end(index: int, proc: subprocess.Popen, log: IO) -> None:
                status = proc.wait()
                log.close()
                referee.ended(index, status)

            # a thread per side waits for its process, so each exit reaches the referee at once
            watchers = [threading.Thread(target=tell_end, args=(index, *started), daemon=True)
                        for index, _, started in procs]
            for watcher in watchers:
                watcher.start()
            for watcher in watchers:
                watcher.join()
            log_doc = {"unit": unit.name, "round": r,
                       "sides": {turns.SIDES[i]: side.key for i, side, _ in procs},
                       **referee.summary()}
        records.write_json_atomic(self.base / "turns" / f"{unit.name}-{r:02d}.json", log_doc)
        for _, side, _ in procs:
            if _written(self._where(unit, r, side)) is None:
                raise self._missing(unit, side)


def run_alone(label: str, python: Path, units: list[Unit], run_args: list[str], folder: Path,
              progress: Callable[[str], None], by: str) -> Run:
    """One round of `units` in one environment (a campaign of one side, as `history` and an
    outcome `bisect` record a release): its run, merged by the command `by`."""
    run = Campaign(folder, [Side("0", label, python, torch_version(python))], units, run_args,
                   progress)
    run.run(plan(units, 1, rounds_wanted(units, 1)))
    return merge_runs(load_rounds(run.base).get("0", []), by)


def new_folder(out_dir: Path, kind: str) -> Path:
    """A campaign's folder under `out_dir`, named by its kind and start (UTC)."""
    return out_dir / f"{kind}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"


def load_rounds(base: Path) -> dict[str, list[Run]]:
    """The stored runs of `<base>/rounds/<unit>-<round>-<side>`, by side, each unit's in round
    order (what `round_values` pairs by). Folders of ab before the campaign engine were named
    by the unit's place in its A B B A schedule (0 to 2 x rounds - 1) rather than by round:
    the same order per side."""
    def order(folder: Path) -> tuple[str, int]:
        # by the index's number: "-100-" sorts before "-11-" as text
        unit, index, _ = folder.name.rsplit("-", 2)
        return unit, int(index)

    out: dict[str, list[Run]] = {}
    if not (base / "rounds").is_dir():
        return out
    for folder in sorted((base / "rounds").iterdir(), key=order):
        out.setdefault(folder.name.rsplit("-", 1)[1], []).append(
            records.read_run(records.resolve_run(folder)))
    return out


# ---------------------------------------------------------------- merging a side's rounds

def _merge_metric(ms: list[Metric]) -> Metric:
    """Several rounds' figures of one metric as one: the median of the rounds' values, their
    samples and sessions pooled."""
    first = ms[0]
    values = [m.value for m in ms if m.value is not None]
    sessions = [x for m in ms for x in (m.sessions or [])] if any(m.sessions for m in ms) else None
    pooled = [x for m in ms for x in (m.samples or [])]
    return replace(
        first, value=float(np.median(values)) if values else None, sessions=sessions,
        samples=stats.thin(pooled) if pooled else None,
        stats=stats.summarize(pooled, q=first.quantile, count=sum(m.count for m in ms))
        if pooled else None)


def _worst_check(checks: list[Check]) -> Check:
    """Of one check's readings over the rounds, the one to keep: the first failure, else the
    first inconclusive one, else the first pass."""
    return min(checks, key=lambda c: 0 if c.failed else (1 if c.inconclusive else 2))


def merge_entries(entries: list[Result], by: str) -> Result:
    """One result entry from the rounds of one case, merged by the command `by` (ab, matrix,
    history, ...): the worst outcome, with the reason and details of a round that had it;
    every check, each at its worst reading over the rounds (a merged fail carries the checks
    that failed, whichever round failed them); every round's listed failures
    (`details["failures"]`, which expectation signatures are matched against). Contended
    rounds are left out of its figures (and said so), unless every round was contended."""
    valid = [e for e in entries if e.valid]
    used = valid or entries
    outcome = min((Outcome(e.outcome) for e in entries), key=OUTCOME_ORDER.index)
    worst = next(e for e in entries if e.outcome == outcome)
    by_metric: dict[MetricKey, list[Metric]] = {}
    for e in used:
        for m in e.metrics:
            by_metric.setdefault(m.key, []).append(m)
    # a check's identity in a round: its name and which of that name it is (a case may check
    # one thing twice), so that no reading of another round stands in for it
    by_check: dict[tuple[str, int], list[Check]] = {}
    for e in entries:
        seen: dict[str, int] = {}
        for c in e.checks:
            n = seen[c.name] = seen.get(c.name, -1) + 1
            by_check.setdefault((c.name, n), []).append(c)
    # each distinct failure once, in the order seen (a failure may be a message or a record)
    failures = list({json.dumps(f, sort_keys=True, default=str): f for e in entries
                     for f in e.details.get("failures") or ()}.values())
    notes = list(dict.fromkeys(n for e in entries for n in e.notes))
    if len(valid) < len(entries):
        notes.append(f"{by}: {len(entries) - len(valid)} of {len(entries)} rounds "
                     f"measured contended; "
                     + ("left out of the figures" if valid else "all kept: none valid"))
    # a duet round's partner flag is of that round: the merged entry's validity is its
    # telemetry's (a round measured alone is already left out of the figures)
    details = {k: v for k, v in worst.details.items() if k != "duet"}
    details |= {"rounds": len(entries), "rounds_used": len(used)}
    if failures:
        details["failures"] = failures
    # the oldest checks that judged any of its rounds (none: a round from before the versions)
    versions = [e.check_version for e in entries]
    return replace(
        used[0], outcome=outcome.value, reason=worst.reason,
        metrics=tuple(_merge_metric(ms) for ms in by_metric.values()),
        checks=tuple(_worst_check(cs) for cs in by_check.values()), notes=tuple(notes),
        elapsed_s=sum(e.elapsed_s for e in entries), details=details,
        check_version=None if None in versions else min(versions))


def merge_runs(runs: list[Run], by: str) -> Run:
    """One run per side: its cases in first-seen order, each merged over the rounds by the
    command `by` (its notes name it)."""
    if not runs:
        raise CampaignError(f"{by}: no rounds to merge (a side that ran nothing)")
    grouped: dict[str, list[Result]] = {}
    for run in runs:
        for e in run.results:
            grouped.setdefault(e.key, []).append(e)
    return replace(runs[0], results=tuple(merge_entries(es, by) for es in grouped.values()),
                   started=min(r.started for r in runs),
                   finished=max((r.finished or r.started) for r in runs),
                   notes=(f"{by}: merged from {len(runs)} runs (fresh processes, "
                          "interleaved)",))


# ---------------------------------------------------------------- judging two sides

def _values(runs: list[Run]) -> tuple[dict[tuple, dict[int, tuple[float, list[float] | None]]],
                                       set[str]]:
    """Each metric's value in each valid round, by round (the run's place among this side's
    runs of its case): one value per fresh process, with the figure in each of that
    process's sessions where the case measures in sessions. Also the cases measured in a
    duet (`Run.measured`)."""
    out: dict[tuple, dict[int, tuple[float, list[float] | None]]] = {}
    seen: dict[str, int] = {}  # case -> runs of it so far, contended ones too
    duets = set()
    for run in runs:
        for e in run.results:
            if (run.measured or {}).get("design") == Design.DUET:
                duets.add(e.case_key)
            if e.valid:
                for m in e.metrics:
                    if (v := compare.run_value(m)) is not None:
                        out.setdefault((e.case_key, m.key), {})[seen.get(e.case_key, 0)] = (
                            v, m.sessions)
            seen[e.case_key] = seen.get(e.case_key, 0) + 1
    return out, duets


def _swapped_pairs(values: dict[int, tuple[float, list[float] | None]],
                   rounds: list[int]) -> dict[int, tuple[float, list[float] | None]]:
    """A duet's rounds 2k and 2k+1 (the halves swapped between them) as one value each: the
    geometric mean of the two (so that a pair's ratio is the mean of its rounds' log ratios),
    their sessions together. A pair with a round missing is left out."""
    out = {}
    for k in sorted({r // 2 for r in rounds}):
        if 2 * k in rounds and 2 * k + 1 in rounds:
            (x, xs), (y, ys) = values[2 * k], values[2 * k + 1]
            sessions = [*xs, *ys] if xs and ys else None
            out[k] = (math.sqrt(x * y), sessions)
    return out


def within_rounds(a: list[list[float] | None],
                  b: list[list[float] | None]) -> tuple[float, float] | None:
    """(variance, degrees of freedom) of a round's log ratio B/A as the sessions predict it:
    the sessions' variance of log values, pooled over every round of both sides, over the
    sessions a side's figure pools (sum of 1/n for the two sides, averaged over rounds).
    None unless every round of both sides has at least two sessions."""
    if (pooled := stats.pooled_log_variance([*a, *b])) is None:
        return None
    per_round = float(np.mean([1 / len(x) + 1 / len(y) for x, y in zip(a, b, strict=True)]))
    return pooled[0] * per_round, pooled[1]


def round_values(a_runs: list[Run], b_runs: list[Run]) -> compare.Replicates:
    """The spread between processes, for compare: each side's per-round values, paired by
    round where both sides have at least two rounds in common. A round runs the sides back
    to back, so a state of the machine that lasts minutes moves both alike (in one A/A here a
    GEMM's time varied 10% from process to process, its B/A ratio within a round 4%). A figure
    measured in sessions also brings the spread its sessions predict for a round's ratio."""
    (a, duet_a), (b, duet_b) = _values(a_runs), _values(b_runs)
    out: compare.Replicates = {}
    for k in a.keys() & b.keys():
        common = sorted(a[k].keys() & b[k].keys())
        if k[0] in duet_a and k[0] in duet_b:
            # a duet is judged per swapped pair of rounds, in which a slow half of the
            # machine weighs on both sides alike; a round that either side measured
            # contended (or alone) leaves its pair out for both
            a[k], b[k] = _swapped_pairs(a[k], common), _swapped_pairs(b[k], common)
            common = sorted(a[k])
        if len(common) >= 2:
            out[k] = compare.RoundValues(
                [a[k][r][0] for r in common], [b[k][r][0] for r in common], paired=True,
                within=within_rounds([a[k][r][1] for r in common], [b[k][r][1] for r in common]))
        else:
            out[k] = compare.RoundValues([v for v, _ in a[k].values()],
                                         [v for v, _ in b[k].values()])
    return out


def judge_pair(a_runs: list[Run], b_runs: list[Run], merged_a: Run, merged_b: Run,
               thresholds: dict[str, float] | None = None, history: list[Run] | None = None,
               cal: Calibration | None = None) -> list[compare.Change]:
    """The verdicts of side B against side A: their merged runs judged with the rounds'
    spread (and the history's and the calibration's as floors under it)."""
    return compare.compare_runs(merged_a, merged_b,
                                {**compare.AB_THRESHOLDS, **(thresholds or {})},
                                history=history, replicates=round_values(a_runs, b_runs),
                                cal=cal)


# ---------------------------------------------------------------- further rounds

def rounds_to_decide(changes: list[compare.Change], units: list[Unit],
                     done: dict[str, int], max_rounds: int) -> dict[str, int]:
    """How many rounds in all each benchmark needs to decide its undecided figures
    (`Change.undecided`: inconclusive, a change whose interval reaches past the tolerance, or
    too few rounds to judge), where that is more than it had (`done`): {unit's name: rounds},
    at most `max_rounds` (times its rounds_factor).

    A figure's `rounds_to_decide` is what its interval needs to shrink to the nearer of its
    decisions (inside the tolerance, or clear of no change, or clear of the tolerance) at its
    spread; a figure no number of rounds decides (a change right at the tolerance) asks for
    the cap. A benchmark whose
    figures are all decided costs nothing more; the rounds go where the doubt is. `changes`
    may hold several pairs of sides (a matrix's steps): a unit gets what its most doubtful
    figure in any of them needs."""
    by_unit: dict[str, list[float]] = {}
    for c in changes:
        if c.undecided and c.se_log is not None:
            by_unit.setdefault(c.case.unit, []).append(
                math.inf if c.rounds_to_decide is None else c.rounds_to_decide)
    out = {}
    for unit in units:
        if not unit.benchmark or not (need := by_unit.get(unit.name)):
            continue
        had, cap = done.get(unit.name, 0), unit.rounds_of(max_rounds)
        # a duet's figures are judged per swapped pair: what they need is pairs of rounds
        want = min(cap, max(need) * (2 if unit.duet else 1))
        if want > had:
            out[unit.name] = int(want)
    return out


def stage(changes: list[compare.Change], done: dict[str, int], started: float) -> dict:
    """One judging of a growing campaign: each benchmark's rounds so far, the verdict counts,
    each figure's verdict, and the minutes since the first round."""
    return {"rounds": dict(done), "minutes": round((time.monotonic() - started) / 60, 1),
            "counts": compare.counts(changes),
            "verdicts": {f"{c.case} {c.name}": c.verdict.value for c in changes}}


@dataclass
class Extension:
    """What `extend` did: the rounds asked for at each stage, and each judging, the first
    being what the campaign's own rounds decided (what the further rounds bought, and at what
    cost). `to_json` is what the records keep under "max_rounds"."""

    cap: int
    stages: list[dict[str, int]]
    judged: list[dict]

    def to_json(self) -> dict[str, Any]:
        return {"cap": self.cap, "stages": self.stages, "judged": self.judged}


def extend(campaign: Campaign, judge: Callable[[], list[compare.Change]], rounds: int,
           max_rounds: int, started: float,
           on_stage: Callable[[Extension, dict[str, int]], None]) -> Extension:
    """Further rounds for the benchmarks with undecided figures, stage by stage, until
    every figure is decided or each has `max_rounds` (times its rounds factor). `judge` gives
    the verdicts of the rounds so far (every pair of sides the campaign judges); `on_stage`
    hears of each stage (what was done so far, and each unit's rounds in all) before its
    rounds are judged, so that the record the judging writes can say so."""
    done = rounds_wanted(campaign.units, rounds)
    changes = judge()
    ext = Extension(max_rounds, [], [stage(changes, done, started)])
    while wanted := rounds_to_decide(changes, campaign.units, done, max_rounds):
        campaign.progress("further rounds for the undecided figures: " + ", ".join(
            f"{name} {n}" for name, n in wanted.items()))
        campaign.run(plan(campaign.units, len(campaign.sides), wanted, done))
        done.update(wanted)
        ext.stages.append(wanted)
        on_stage(ext, done)
        changes = judge()
        ext.judged.append(stage(changes, done, started))
    return ext
