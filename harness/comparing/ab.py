"""`release-bench ab A B`: the same cases in two Python environments, interleaved on one machine.

A and B are two torch builds (a venv folder or a Python executable each), or the same one twice
for an A/A check. The comparison is a campaign of two sides (`campaign`): each round
runs every unit (a suite's conformance cases, each benchmark case alone) on both sides, A then
B or B then A, so that each side goes first in half of the rounds. Each side's rounds are
merged into one run, and B is judged against A by `compare`, each metric on its rounds'
B/A ratios. The folder keeps `ab.json` (what was run), the rounds, each side's merged run and
`comparison.json` (the verdicts); `judge` gives the verdicts again from it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import records
from harness.comparing import campaign, compare
from harness.comparing.calibration import Calibration
from harness.comparing.campaign import CampaignError, Unit
from harness.records import Design

SIDES = ("A", "B")


def ab(a: str, b: str, units: list[Unit], run_args: list[str], rounds: int, out_dir: Path,
       progress: Callable[[str], None], thresholds: dict[str, float] | None = None,
       history: list[records.Run] | None = None, max_rounds: int | None = None,
       cal: Calibration | None = None) -> dict[str, Any]:
    """Run the A/B comparison; returns {"A": run, "B": run, "changes": [...], "dir": Path, ...}.
    With `max_rounds` above `rounds`, a benchmark with undecided figures after its rounds
    (inconclusive, or a change whose interval reaches past the tolerance) gets the further
    rounds they need (`campaign.extend`), until every figure is decided or it
    has `max_rounds` (times its rounds factor). `cal` is this machine's calibration, which the
    verdicts use."""
    pythons = {"A": campaign.python_of(a), "B": campaign.python_of(b)}
    sides = [campaign.Side(key, key, pythons[key], campaign.torch_version(pythons[key]))
             for key in SIDES]
    run = campaign.Campaign(campaign.new_folder(out_dir, "ab"), sides, units, run_args,
                            progress)
    meta = {**{s.key: {"python": str(s.python), "torch": s.torch} for s in sides},
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "rounds": rounds, "schedule": schedule(rounds), "order": "round by round",
            "design": design_of(units),
            "more_rounds": campaign.more_rounds(units, rounds),
            "suites": list(dict.fromkeys(u.suite for u in units)),
            "groups": [u.name for u in units]}
    started = time.monotonic()
    run.run(campaign.plan(units, len(sides), campaign.rounds_wanted(units, rounds)))
    records.write_json_atomic(run.base / "ab.json", meta)
    if not max_rounds or max_rounds <= rounds:
        return judge(run.base, thresholds, history, cal)

    def on_stage(ext: campaign.Extension, done: dict[str, int]) -> None:
        meta["max_rounds"] = ext.to_json()
        meta["more_rounds"] = {**meta["more_rounds"], **ext.stages[-1]}
        records.write_json_atomic(run.base / "ab.json", meta)

    last: dict[str, Any] = {}

    def judge_now() -> list:
        last.update(judge(run.base, thresholds, history, cal))
        return last["changes"]

    ext = campaign.extend(run, judge_now, rounds, max_rounds, started, on_stage)
    meta["max_rounds"] = ext.to_json()
    records.write_json_atomic(run.base / "ab.json", meta)
    return {**last, "judged": ext.judged}


def design_of(units: list[Unit]) -> dict[str, Any]:
    """How the campaign measures each benchmark: sequential rounds, a duet (each side on a
    half of these CPUs in a round, harness.running.duet) or bursts (both sides alive through a
    round, in turns, harness.running.turns), and why (`units`: name -> design and why). Each
    unit's figures are judged with the calibration of its design. `kind` names the design
    when the benchmarks share one, else "mixed"."""
    duets = [u.name for u in units if u.duet]
    bursts = [u.name for u in units if u.bursts]
    benchmarks = {u.name: {"design": u.design, "why": u.why} for u in units if u.benchmark}
    kinds = {d["design"] for d in benchmarks.values()}
    out: dict[str, Any] = {"kind": kinds.pop() if len(kinds) == 1 else "mixed",
                           "units": benchmarks}
    if duets:
        from harness.running import duet

        out |= {"duet_units": duets, "halves": [list(h) for h in duet.halves()],
                "swap": "the halves swap every other round; judged per swapped pair"}
    if bursts:
        out |= {"bursts_units": bursts,
                "turns": "both sides alive through a round, in turns A B, B A, ...; a turn "
                         "only while the other side waits; judged per round"}
    return out


def stored_units(base: Path) -> list[Unit]:
    """The benchmark units of a stored ab folder, each in the design it was measured in
    (`measured_designs`): what its verdicts are judged with again."""
    out = []
    for name, design in measured_designs(base).items():
        unit, _, device = name.partition("@")
        suite, case = unit.split(".", 1)
        out.append(Unit(suite, (case,), benchmark=True, design=design,
                        device=device or ("cpu" if design == Design.DUET else "")))
    return out


def measured_designs(base: Path) -> dict[str, Design]:
    """How a stored ab folder measured each benchmark (each unit's verdicts read its design's
    calibration): {unit name: design}, from its ab.json (folders from before designs were
    recorded per unit: their lists of duet and bursts units, the rest sequential); empty for
    a folder that is not one (`judge` says why)."""
    try:
        design = json.loads((base / "ab.json").read_text()).get("design") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    if "units" in design:
        return {name: Design(u["design"]) for name, u in design["units"].items()}
    listed = {name: Design.DUET for name in design.get("duet_units", [])}
    listed |= {name: Design.BURSTS for name in design.get("bursts_units", [])}
    rounds = {f.name.rsplit("-", 2)[0] for f in (base / "rounds").glob("*")
              if (base / "rounds").is_dir()}
    return {name: listed.get(name, Design.SEQUENTIAL) for name in sorted(rounds)
            if "." in name}


def schedule(rounds: int) -> str:
    """The sides of a unit round after round, as the record writes them: ABBAAB..."""
    return "".join(SIDES[i] for order in campaign.rotation(2, rounds) for i in order)


def judge(base: Path, thresholds: dict[str, float] | None = None,
          history: list[records.Run] | None = None,
          cal: Calibration | None = None) -> dict[str, Any]:
    """The verdicts of an A/B comparison from its stored rounds: each side merged, judged
    with the rounds' spread (and the history's and the calibration's as floors under it)."""
    try:
        meta = json.loads((base / "ab.json").read_text())
    except (OSError, ValueError) as e:
        raise CampaignError(f"{base}: not an ab folder ({e})") from e
    rounds_of = {"A": [], "B": [], **campaign.load_rounds(base)}
    if empty := [side for side, runs in rounds_of.items() if not runs]:
        raise CampaignError(f"{base}: no rounds of side {' or '.join(empty)} in rounds/ "
                            "(nothing to judge by)")
    merged = {side: campaign.merge_runs(runs, "ab") for side, runs in rounds_of.items()}
    versions = {side: meta[side]["torch"] for side in merged}
    more = meta.get("more_rounds", {})  # none before benchmarks had rounds of their own
    for side in merged:
        merged[side] = replace(merged[side], ab={
            "side": side, **meta[side], "rounds": meta["rounds"], "schedule": meta["schedule"],
            "more_rounds": more})
        records.write_run(campaign.merged_path(base, side), merged[side], scrub=True)
    changes = campaign.judge_pair(rounds_of["A"], rounds_of["B"], merged["A"], merged["B"],
                                  thresholds, history, cal)
    records.write_json_atomic(base / "comparison.json", {
        "A": versions["A"], "B": versions["B"], "rounds": meta["rounds"],
        "more_rounds": more, "history_runs": len(history or []),
        "calibration": cal.source if cal else None,
        "counts": compare.counts(changes), "changes": [c.to_json() for c in changes]})
    return {**merged, "changes": changes, "dir": base, "versions": versions,
            "rounds": meta["rounds"], "schedule": meta["schedule"], "more_rounds": more,
            "design": meta.get("design", {"kind": "sequential"})}
