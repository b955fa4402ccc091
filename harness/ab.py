"""`release-bench ab A B`: the same cases in two Python environments, interleaved on one machine.

A and B are two torch builds (a venv folder or a Python executable each), or the same one twice
for an A/A check. Each round runs in fresh processes per side: one for a suite's conformance
cases, and one for each of its benchmark cases (`groups`). The comparison goes round by round:
each round runs every group on both sides, A then B or B then A, so that a group's rounds lie
minutes apart and each side goes first in half of them. A passing state of the machine (a
neighbour busy for a minute, the page cache) then falls on one round of both sides, not on two
rounds of one side, and the variance between processes, which dominates on a shared machine,
is sampled on each side. Each side's rounds are merged into one run (samples pooled, contended
rounds left out), and the two merged runs are judged by `harness.compare`, each metric on its
rounds' B/A ratios (`round_values`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import compare, records, stats
from harness.calibration import Calibration

ROOT = Path(__file__).resolve().parent.parent
OUTCOME_ORDER = ("error", "fail", "invalid", "pass", "skip")  # the worst first


class AbError(Exception):
    """An environment that cannot run the suites (the message is one line)."""


def python_of(spec: str) -> Path:
    """The Python executable of a venv folder, or the executable itself."""
    p = Path(spec)
    if p.is_dir():
        for candidate in (p / "bin" / "python", p / "Scripts" / "python.exe"):
            if candidate.exists():
                return candidate
        raise AbError(f"{spec}: not a virtual environment (no bin/python)")
    if p.is_file() and os.access(p, os.X_OK):
        return p
    raise AbError(f"{spec}: neither a venv folder nor a Python executable")


def _env() -> dict[str, str]:
    # the project from this checkout, whatever the environment has installed
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return os.environ | {"PYTHONPATH": path}


def torch_version(python: Path) -> str:
    """torch's version in that environment; raises AbError when it cannot run the
    suites."""
    try:
        out = subprocess.run([str(python), "-c",
                              "import harness.cli, torch; print(torch.__version__)"],
                             capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    except OSError as e:  # the executable is gone or cannot be run
        raise AbError(f"{python}: cannot run the suites ({e.strerror})") from e
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["exit status " + str(out.returncode)])[-1]
        raise AbError(f"{python}: cannot run the suites ({last})")
    return out.stdout.strip()


@dataclass(frozen=True)
class Group:
    """What one fresh process runs in a round: a suite's conformance cases together, or one of
    its benchmark cases alone."""

    suite: str
    cases: tuple[str, ...]
    benchmark: bool = False
    # its rounds are this many times the comparison's: more where this machine's calibration
    # found its figures' level drawn per process (harness.calibration)
    rounds_factor: int = 1

    @property
    def name(self) -> str:
        """`suite` for its conformance cases, `suite.case` for a benchmark case."""
        return f"{self.suite}.{self.cases[0]}" if self.benchmark else self.suite

    def rounds_of(self, rounds: int) -> int:
        """Its rounds in a comparison of `rounds` rounds."""
        return rounds * self.rounds_factor

    def selection(self) -> list[str]:
        """The `run` options that select this group's cases."""
        return ["--suite", self.suite, *(a for case in self.cases for a in ("--only", case))]


def groups(suites: list[str], case_filter: str | None = None,
           skip: Iterable[str] = (), cal: Calibration | None = None) -> list[Group]:
    """The groups of the selected cases, suite by suite: the conformance cases, then each
    benchmark case on its own. A benchmark in a process of its own is measured on both sides
    of a round a process start apart, not a whole suite apart: the level of a DDP+RPC step
    drifts within a minute here (5.1 to 7.7 ms over one ab's rounds), and while its suite ran
    between the two sides it escaped a 25% slowdown that an ab of that case alone caught.
    A benchmark's rounds factor comes from this machine's calibration `cal` (1 without)."""
    from harness import registry, runner

    out = []
    for name in suites:
        cases = [c for c in registry.load(name).cases if runner.selects(c, case_filter, skip)]
        if checks := tuple(c.name for c in cases if c.kind != "benchmark"):
            out.append(Group(name, checks))
        for c in cases:
            if c.kind == "benchmark":
                factor = cal.rounds_factor.get(f"{name}.{c.name}", 1) if cal else 1
                out.append(Group(name, (c.name,), benchmark=True, rounds_factor=factor))
    return out


def schedule(rounds: int) -> list[str]:
    """One unit's sides (a suite's, or a `Group`'s), round after round: A B B A A B ..., each
    side first in half of the rounds."""
    return [s for r in range(rounds) for s in (("A", "B") if r % 2 == 0 else ("B", "A"))]


def plan_rounds(units: list[Group], rounds: int) -> list[tuple[str, int, str]]:
    """(unit's name, index in that unit's schedule, side) in the order they run: round by
    round, every unit's two sides in each round (a unit is what one process runs: a `Group`).
    Two rounds of one unit on one side are thus never back to back: run B B, a minute-long
    state of a shared machine falls on both, and an A/A check on a 2-core VM flagged an 18%
    change in a busy matmul. A unit with a `rounds_factor` goes on with its further rounds
    once the others have had theirs."""
    return _plan(units, {}, {u.name: u.rounds_of(rounds) for u in units})


def _plan(units: list[Group], done: dict[str, int],
          wanted: dict[str, int]) -> list[tuple[str, int, str]]:
    """The rounds from `done` (0 where absent) up to `wanted` of each unit named there, in
    `plan_rounds`' order: round by round, each unit's sides continuing its A B B A schedule."""
    most = max(wanted.values(), default=0)
    order = schedule(most)
    return [(unit.name, i, order[i]) for r in range(most) for unit in units
            if done.get(unit.name, 0) <= r < wanted.get(unit.name, 0)
            for i in (2 * r, 2 * r + 1)]


def unit_of(case_key: str) -> str:
    """The benchmark group that measured a result (`compare.result_key`: suite/case[...])."""
    return case_key.split("[", 1)[0].replace("/", ".", 1)


def rounds_to_decide(changes: list[compare.Change], units: list[Group],
                     done: dict[str, int], max_rounds: int) -> dict[str, int]:
    """How many rounds in all each benchmark needs to decide its inconclusive figures, where
    that is more than it had (`done`): {group's name: rounds}, at most `max_rounds` (times its
    rounds_factor).

    A figure's `rounds_to_decide` is what its interval needs to shrink to the nearer of its
    decisions (inside the tolerance, or clear of no change) at its spread; a figure no number
    of rounds decides (a change right at the tolerance) asks for the cap. A benchmark whose
    figures are all decided costs nothing more; the rounds go where the doubt is."""
    by_unit: dict[str, list[float]] = {}
    for c in changes:
        if c.verdict == "inconclusive" and c.extra.get("se_log") is not None:
            by_unit.setdefault(unit_of(c.case), []).append(
                math.inf if c.rounds_to_decide is None else c.rounds_to_decide)
    out = {}
    for unit in units:
        if not unit.benchmark or not (need := by_unit.get(unit.name)):
            continue
        had, cap = done.get(unit.name, 0), unit.rounds_of(max_rounds)
        want = min(cap, max(need))
        if want > had:
            out[unit.name] = int(want)
    return out


def longest(units: list[Group], rounds: int) -> int:
    """The most rounds any unit has in a comparison of `rounds` (its further rounds included)."""
    return max((u.rounds_of(rounds) for u in units), default=rounds)


def more_rounds(units: list[Group], rounds: int) -> dict[str, int]:
    """The rounds of each unit with more than the comparison's (for the record)."""
    return {u.name: u.rounds_of(rounds) for u in units if u.rounds_factor != 1}


def run_round(python: Path, selection: list[str], args: list[str], out: Path,
              log: Path) -> Path | None:
    """One fresh process running the cases `selection` names (`--suite S`, maybe `--only C`);
    the run file it wrote, or None."""
    cmd = [str(python), "-m", "harness.cli", "run", *selection, "--out", str(out), *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT,
                       check=False)
    try:
        return records.resolve_run(out)
    except records.RecordError:
        return None


def _merge_metric(ms: list[dict]) -> dict:
    """Several rounds' figures of one metric as one: the median of the rounds' values, their
    samples and sessions pooled."""
    first = ms[0]
    out = {k: v for k, v in first.items() if k not in ("samples", "stats", "value", "sessions")}
    values = [m["value"] for m in ms if m.get("value") is not None]
    out["value"] = float(np.median(values)) if values else None
    if any(m.get("sessions") for m in ms):
        out["sessions"] = [x for m in ms for x in (m.get("sessions") or [])]
    pooled = [x for m in ms for x in (m.get("samples") or [])]
    if pooled:
        q = float((first.get("stats") or {}).get("q", 0.5))
        out["samples"] = stats.thin(pooled)
        out["stats"] = stats.summarize(pooled, q=q,
                                       count=sum((m.get("stats") or {}).get("n", 0) for m in ms))
    return out


def merge_entries(entries: list[dict]) -> dict:
    """One result entry from the rounds of one case; contended rounds are left out of its
    figures (and said so), unless every round was contended."""
    valid = [e for e in entries if not compare.contended(e)]
    used = valid or entries
    merged = dict(used[0])
    merged["outcome"] = min((e["outcome"] for e in entries), key=OUTCOME_ORDER.index)
    merged["reason"] = next((e["reason"] for e in entries if e["outcome"] == merged["outcome"]
                             and e["reason"]), "")
    by_metric: dict[Any, list[dict]] = {}
    for e in used:
        for m in e["metrics"]:
            by_metric.setdefault(compare.metric_key(m), []).append(m)
    merged["metrics"] = [_merge_metric(ms) for ms in by_metric.values()]
    merged["notes"] = list(dict.fromkeys(n for e in entries for n in e.get("notes", [])))
    if len(valid) < len(entries):
        merged["notes"].append(f"ab: {len(entries) - len(valid)} of {len(entries)} rounds "
                               f"measured contended; "
                               + ("left out of the figures" if valid else "all kept: none valid"))
    merged["telemetry"] = used[0].get("telemetry")
    merged["elapsed_s"] = sum(e.get("elapsed_s", 0) for e in entries)
    merged["details"] = {"rounds": len(entries), "rounds_used": len(used)}
    return merged


def merge_runs(runs: list[dict]) -> dict:
    """One run per side: its cases in first-seen order, each merged over the rounds."""
    grouped: dict[str, list[dict]] = {}
    for run in runs:
        for e in run["results"]:
            grouped.setdefault(compare.result_key(e), []).append(e)
    merged = dict(runs[0])
    merged["results"] = [merge_entries(es) for es in grouped.values()]
    merged["started"] = min(r["started"] for r in runs)
    merged["finished"] = max((r["finished"] or r["started"]) for r in runs)
    merged["notes"] = [f"merged from {len(runs)} runs (fresh processes, interleaved)"]
    return merged


def _values(runs: list[dict]) -> dict[tuple, dict[int, tuple[float, list[float] | None]]]:
    """Each metric's value in each valid round, by round (the run's place among this side's
    runs of its case): one value per fresh process, with the figure in each of that
    process's sessions where the case measures in sessions."""
    out: dict[tuple, dict[int, tuple[float, list[float] | None]]] = {}
    seen: dict[str, int] = {}  # case -> runs of it so far, contended ones too
    for run in runs:
        for e in run["results"]:
            case = compare.result_key(e)
            if not compare.contended(e):
                for m in e["metrics"]:
                    if (v := compare.run_value(m)) is not None:
                        out.setdefault((case, compare.metric_key(m)), {})[
                            seen.get(case, 0)] = (v, m.get("sessions"))
            seen[case] = seen.get(case, 0) + 1
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


def round_values(a_runs: list[dict], b_runs: list[dict]) -> compare.Replicates:
    """The spread between processes, for compare: each side's per-round values, paired by
    round where both sides have at least two rounds in common. A round runs both sides back
    to back, so a state of the machine that lasts minutes moves both alike (in one A/A here a
    GEMM's time varied 10% from process to process, its B/A ratio within a round 4%). A figure
    measured in sessions also brings the spread its sessions predict for a round's ratio."""
    a, b = _values(a_runs), _values(b_runs)
    out: compare.Replicates = {}
    for k in a.keys() & b.keys():
        common = sorted(a[k].keys() & b[k].keys())
        if len(common) >= 2:
            out[k] = compare.RoundValues(
                [a[k][r][0] for r in common], [b[k][r][0] for r in common], paired=True,
                within=within_rounds([a[k][r][1] for r in common], [b[k][r][1] for r in common]))
        else:
            out[k] = compare.RoundValues([v for v, _ in a[k].values()],
                                         [v for v, _ in b[k].values()])
    return out


def ab(a: str, b: str, units: list[Group], run_args: list[str], rounds: int, out_dir: Path,
       progress: Callable[[str], None], thresholds: dict[str, float] | None = None,
       history: list[dict] | None = None, max_rounds: int | None = None,
       cal: Calibration | None = None) -> dict[str, Any]:
    """Run the A/B comparison; returns {"A": run, "B": run, "changes": [...], "dir": Path}.
    With `max_rounds` above `rounds`, a benchmark with inconclusive figures after its rounds
    gets the further rounds they need (`rounds_to_decide`), judged again after each stage,
    until every figure is decided or it has `max_rounds` (times its rounds factor). `cal` is
    this machine's calibration, which the verdicts use.

    Every round's run is kept under `<dir>/rounds/`, so that `judge` can give the verdicts
    again (other thresholds, another history) without measuring again."""
    pythons = {"A": python_of(a), "B": python_of(b)}
    versions = {side: torch_version(p) for side, p in pythons.items()}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = out_dir / f"ab-{stamp}"
    by_name = {g.name: g for g in units}
    meta = {"A": {"python": str(pythons["A"]), "torch": versions["A"]},
            "B": {"python": str(pythons["B"]), "torch": versions["B"]},
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "rounds": rounds, "schedule": "".join(schedule(rounds)), "order": "round by round",
            "more_rounds": more_rounds(units, rounds),
            "suites": list(dict.fromkeys(g.suite for g in units)), "groups": list(by_name)}

    def run(plan: list[tuple[str, int, str]]) -> None:
        for step, (name, i, side) in enumerate(plan, 1):
            where = base / "rounds" / f"{name}-{i:02d}-{side}"
            progress(f"[{step}/{len(plan)}] {side} {name} (round {i // 2 + 1}) ...")
            t0 = time.perf_counter()
            if run_round(pythons[side], by_name[name].selection(), run_args, where,
                         base / f"{side}.log") is None:
                raise AbError(f"side {side} wrote no run for {name}; see {base / f'{side}.log'}")
            progress(f"[{step}/{len(plan)}] {side} {name} done in "
                     f"{time.perf_counter() - t0:.0f} s")

    started = time.monotonic()
    run(plan_rounds(units, rounds))
    records.write_json_atomic(base / "ab.json", meta)
    res = judge(base, thresholds, history, cal)
    if not max_rounds or max_rounds <= rounds:
        return res
    done = {u.name: u.rounds_of(rounds) for u in units}
    # each stage's verdicts, the first being what the default rounds alone decided: what
    # the further rounds bought, and at what cost
    meta["max_rounds"] = {"cap": max_rounds, "stages": [],
                          "judged": [_stage(res["changes"], done, started)]}
    while wanted := rounds_to_decide(res["changes"], units, done, max_rounds):
        progress("further rounds for the inconclusive figures: " + ", ".join(
            f"{name} {n}" for name, n in wanted.items()))
        run(_plan(units, done, wanted))
        done.update(wanted)
        meta["max_rounds"]["stages"].append(wanted)
        meta["more_rounds"] = {**meta["more_rounds"], **wanted}
        records.write_json_atomic(base / "ab.json", meta)
        res = judge(base, thresholds, history, cal)
        meta["max_rounds"]["judged"].append(_stage(res["changes"], done, started))
    records.write_json_atomic(base / "ab.json", meta)
    return {**res, "judged": meta["max_rounds"]["judged"]}


def _stage(changes: list[compare.Change], done: dict[str, int], started: float) -> dict:
    """One judging of a growing comparison: each benchmark's rounds so far, the verdict
    counts, each figure's verdict, and the minutes since the first round."""
    return {"rounds": dict(done), "minutes": round((time.monotonic() - started) / 60, 1),
            "counts": compare.counts(changes),
            "verdicts": {f"{c.case} {c.name}": c.verdict for c in changes}}


def load_rounds(base: Path) -> dict[str, list[dict]]:
    """The stored runs of `<base>/rounds/<unit>-<round>-<side>`, by side, each unit's in round
    order (what `round_values` pairs by)."""
    def order(folder: Path) -> tuple[str, int]:
        # by the index's number: "-100-" sorts before "-11-" as text
        unit, index, _ = folder.name.rsplit("-", 2)
        return unit, int(index)

    out: dict[str, list[dict]] = {}
    for folder in sorted((base / "rounds").iterdir(), key=order):
        out.setdefault(folder.name.rsplit("-", 1)[1], []).append(
            records.read_run(records.resolve_run(folder)))
    return out


def judge(base: Path, thresholds: dict[str, float] | None = None,
          history: list[dict] | None = None, cal: Calibration | None = None) -> dict[str, Any]:
    """The verdicts of an A/B comparison from its stored rounds: each side merged, judged
    with the rounds' spread (and the history's and the calibration's as floors under it)."""
    try:
        meta = json.loads((base / "ab.json").read_text())
    except (OSError, ValueError) as e:
        raise AbError(f"{base}: not an ab folder ({e})") from e
    rounds_of = {"A": [], "B": [], **load_rounds(base)}
    merged = {side: merge_runs(runs) for side, runs in rounds_of.items()}
    versions = {side: meta[side]["torch"] for side in merged}
    more = meta.get("more_rounds", {})  # none before benchmarks had rounds of their own
    for side in merged:
        merged[side]["ab"] = {"side": side, **meta[side], "rounds": meta["rounds"],
                              "schedule": meta["schedule"], "more_rounds": more}
        records.write_json_atomic(base / f"{side}.json", records.scrub_paths(merged[side]))
    changes = compare.compare_runs(merged["A"], merged["B"],
                                   {**compare.AB_THRESHOLDS, **(thresholds or {})},
                                   history=history,
                                   replicates=round_values(rounds_of["A"], rounds_of["B"]),
                                   cal=cal)
    records.write_json_atomic(base / "comparison.json", {
        "A": versions["A"], "B": versions["B"], "rounds": meta["rounds"],
        "more_rounds": more, "history_runs": len(history or []),
        "calibration": cal.source if cal else None,
        "counts": compare.counts(changes), "changes": [c.to_json() for c in changes]})
    return {**merged, "changes": changes, "dir": base, "versions": versions,
            "rounds": meta["rounds"], "schedule": meta["schedule"], "more_rounds": more}
