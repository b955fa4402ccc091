"""`release-bench bisect GOOD BAD --case C [--metric M]`: the first torch release between two
that differ, found by binary search over the releases between them, building only the
environments it visits (as `asv find` does for the commits of one project).

What differs is one of:

- a conformance case's outcome and warnings (no `--metric`): each release visited runs the
  case once, in a fresh process; the search looks for the first release whose state is not
  GOOD's;
- a figure of a benchmark case (`--metric`), judged by the campaign engine: each step is a
  three-sided campaign of the interval's ends and its middle, rotated round by round
  (`matrix`), and the two halves are judged as `matrix` judges neighbours. The change
  is in the half whose verdict is a change past the tolerance in the direction GOOD -> BAD
  shows, the other half unchanged, inconclusive, or changed inside the tolerance (`worse`,
  `better`: too small for the tolerance the search is for). A step where both halves change
  (the change is spread over both) or neither does (it is too small for these rounds) ends
  the search there, saying so; it never guesses.

The record (`bisect.json`) keeps every step: the releases measured, each half's verdict,
factor and interval, and the minutes it took.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import records
from harness.comparing import campaign, compare
from harness.comparing.calibration import Calibration
from harness.comparing.campaign import CampaignError, Unit
from harness.records import MetricKey
from harness.releases import envs, matrix

SCHEMA = "release-bench-bisect/1"
CHANGES = compare.CHANGES  # past the tolerance: a step's change (worse/better are not)


def parse_metric(text: str) -> MetricKey:
    """`time[dtype=autocast-bfloat16, n=256]` (as the output writes a figure) or `time`."""
    m = re.fullmatch(r"\s*([\w.]+)\s*(?:\[(.*)\])?\s*", text)
    if not m:
        raise ValueError(f"{text!r} is not a metric (NAME or NAME[label=value, ...])")
    labels: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in (m.group(2) or "").split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"{text!r}: label {part!r} is not label=value")
        try:
            labels[key.strip()] = json.loads(value)
        except ValueError:
            labels[key.strip()] = value.strip()
    return MetricKey.of(m.group(1), labels)


def _env(version: str, build: bool, local_files: bool, progress: Callable[[str], None],
         built: list[str]) -> envs.TorchEnv:
    env, made = envs.get_or_create(version, build, local_files, progress)
    if made:
        built.append(version)
    return env


def _state(version: str, python: Path, unit: Unit, case: str, scratch: Path,
           progress: Callable[[str], None]) -> dict[str, Any]:
    """The case's outcome and warnings in one release (one fresh process)."""
    side = matrix.summarize_side(campaign.run_alone(
        version, python, [unit], ["--profile", "quick"],
        campaign.new_folder(scratch, f"bisect-{version}"), progress, "bisect"))
    mine = {k: c for k, c in side["cases"].items() if k.startswith(f"{case}[")}
    if not mine:
        raise CampaignError(f"torch {version} ran no {case}")
    return {k: {"outcome": c["outcome"], "warnings": c["warnings"]} for k, c in mine.items()}


def bisect_outcome(releases: list[str], unit: Unit, case: str, scratch: Path,
                   progress: Callable[[str], None], build: bool = True,
                   local_files: bool = False) -> dict[str, Any]:
    """The first release whose outcome and warnings of `case` are not the first release's."""
    t0, built, steps = time.monotonic(), [], []

    def state(i: int) -> dict:
        env = _env(releases[i], build, local_files, progress, built)
        s = _state(releases[i], env.python_path, unit, case, scratch, progress)
        steps.append({"release": releases[i], "state": s})
        progress(f"torch {releases[i]}: {json.dumps(s)}")
        return s

    lo, hi = 0, len(releases) - 1
    good, bad = state(lo), state(hi)
    result: dict[str, Any] = {"kind": "outcome", "good": good, "bad": bad}
    if good == bad:
        result["found"] = None
        result["why"] = (f"torch {releases[lo]} and {releases[hi]} give the same outcome and "
                         "warnings")
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if state(mid) == good:
                lo = mid
            else:
                hi = mid
        result["found"] = releases[hi]
        result["why"] = (f"torch {releases[lo]} is as {releases[0]}, torch {releases[hi]} is "
                         "not")
    return {**result, "steps": steps, "built": built,
            "minutes": round((time.monotonic() - t0) / 60, 1)}


def _verdict(changes: list, case: str, metric: MetricKey) -> dict[str, Any] | None:
    mine = [c for c in changes if c.case.case_id == case and c.metric_key[1] == metric]
    if not mine:
        return None
    c = mine[0]
    return {"verdict": c.verdict.value, "factor": c.factor, "interval": c.interval, "why": c.why}


def bisect_metric(releases: list[str], unit: Unit, case: str, metric: MetricKey,
                  rounds: int, max_rounds: int | None, out: Path,
                  progress: Callable[[str], None], thresholds: dict[str, float] | None = None,
                  cal: Calibration | None = None, build: bool = True,
                  local_files: bool = False) -> dict[str, Any]:
    """The first release where a figure of `case` changes (see the module's docstring)."""
    t0, built, steps = time.monotonic(), [], []
    lo, hi, direction = 0, len(releases) - 1, None
    result: dict[str, Any] = {"kind": "metric", "metric": str(metric), "found": None}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        sides = [releases[lo], releases[mid], releases[hi]]
        for v in sides:
            _env(v, build, local_files, progress, built)
        s0 = time.monotonic()
        progress(f"step {len(steps) + 1}: torch {' | '.join(sides)}")
        rec = matrix.matrix(sides, [unit], ["--profile", "quick"], rounds, out, progress,
                            thresholds, None, cal, max_rounds)
        halves = [_verdict(changes, case, metric) for changes in rec["step_changes"]]
        if None in halves:
            raise CampaignError(f"{case} recorded no {metric} (the figures it records are in "
                                f"{rec['dir']})")
        step = {"releases": sides, "halves": halves, "dir": records.shown_path(rec["dir"]),
                "minutes": round((time.monotonic() - s0) / 60, 1)}
        steps.append(step)
        changed = [h["verdict"] in CHANGES and (direction in (None, h["verdict"]))
                   for h in halves]
        progress(f"step {len(steps)}: {sides[0]} -> {sides[1]}: {_said(halves[0])}; "
                 f"{sides[1]} -> {sides[2]}: {_said(halves[1])}")
        if changed == [True, False]:
            direction, hi = halves[0]["verdict"], mid
        elif changed == [False, True]:
            direction, lo = halves[1]["verdict"], mid
        else:
            result["why"] = ("both halves changed: the change is spread over "
                             f"{sides[0]}..{sides[2]}" if all(changed) else
                             "neither half changed decidedly at these rounds (more --rounds or "
                             "--max-rounds may decide it)")
            result["stopped_at"] = sides
            break
    else:
        result["found"] = releases[hi]
        last = steps[-1] if steps else None
        if last:  # the half that ends at the release found
            half = last["halves"][0] if last["releases"][1] == releases[hi] else last["halves"][1]
            result.update(verdict=half["verdict"], factor=half["factor"],
                          interval=half["interval"])
        result["why"] = f"the figure changes from torch {releases[lo]} to {releases[hi]}"
    return {**result, "steps": steps, "built": built, "rounds": rounds,
            "minutes": round((time.monotonic() - t0) / 60, 1)}


def _said(half: dict) -> str:
    lo, hi = half["interval"] or (None, None)
    ci = f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else ""
    factor = f"{half['factor']:.3g}x" if half["factor"] is not None else "n/a"
    return f"{factor}{ci} {half['verdict']}"


def write(out: Path, record: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bisect.json"
    records.write_json_atomic(path, records.scrub_paths({"schema": SCHEMA, **record}))
    return path
