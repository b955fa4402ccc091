"""`release-bench matrix`: the release checklist and the headline figures across torch versions.

Each side is an environment (`release-bench env create VERSION`, or any venv). The matrix is a
campaign of N sides (`harness.comparing.campaign`): every unit (a suite's conformance cases, each
benchmark case alone) runs in a fresh process per side and round, the order of the sides
rotated from round to round so that each goes first as often as the others. Each version is
judged against the one before it, the rounds giving the spread between processes. The matrix
record keeps, per version:

- each conformance case's outcome, and each case's warnings (FutureWarning,
  DeprecationWarning, ... as the runner recorded them);
- each headline metric with its interval;
- the verdicts against the previous version;

and lists as changes every case whose outcome moved, and every warning that appeared or went.
The merged runs and the rounds stay beside it for `report`, `compare` and `matrix --judge`.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import records
from harness.cases import metric_id
from harness.comparing import campaign, compare, expectations
from harness.comparing.calibration import Calibration
from harness.comparing.campaign import CampaignError, Unit
from harness.records import MetricKey, Result, Run
from harness.releases import envs
from harness.running import machine

SCHEMA = "release-bench-matrix/1"
# the runner records each warning a case raised as "<Category> (recorded, not shown): <text>"
WARNING_NOTE = re.compile(r"^(\w*Warning) \(recorded, not shown\): (.*)$")
# where a warning names a file and line, the line moves between releases: not a change
LOCATION = re.compile(r"(/[\w./-]+\.py)(:\d+)?")


def side_python(spec: str) -> tuple[str, Path]:
    """(label, Python) of a side: a torch version with an environment in .envs/, else a venv
    folder or a Python executable (labelled by its path)."""
    if envs.VERSION.fullmatch(spec):
        try:
            env = envs.get(spec)
        except envs.EnvError as e:
            raise CampaignError(str(e)) from e
        return spec, campaign.python_of(env.path)  # refuses a folder whose Python is gone
    return spec, campaign.python_of(spec)


def warnings_of(entry: Result) -> list[str]:
    """The warnings a case raised, as "Category: text", with file locations left out."""
    out = []
    for note in entry.notes:
        if m := WARNING_NOTE.match(note):
            out.append(f"{m.group(1)}: {LOCATION.sub('<file>', m.group(2))}")
    return sorted(set(out))


def summarize_side(run: Run) -> dict[str, Any]:
    """What the matrix keeps of one version's merged run."""
    cases, headlines = {}, []
    for e in run.results:
        cases[e.key] = {"suite": e.suite, "kind": e.kind, "outcome": e.outcome,
                        "reason": e.reason[:300], "warnings": warnings_of(e)}
        if e.check_version is not None:  # the version of the checks that judged it
            cases[e.key]["check_version"] = e.check_version
        if e.expected:  # its status under the expectations file
            cases[e.key]["expected"] = e.expected
        for m in e.metrics:
            if m.headline:
                headlines.append({"case": e.key, "metric": metric_id(m.name, m.labels),
                                  "name": m.name, "labels": m.labels, "value": m.value,
                                  "unit": m.unit, "ci": (m.stats or {}).get("ci"),
                                  "n": (m.stats or {}).get("n")})
    return {"cases": cases, "headlines": headlines}


# the flag on a case that ran in one version and is n/a in the next
LOST = "went n/a: the later version lacks what the case exercised before"


def lost(before: str, after: str) -> bool:
    """A case that ran (passed or failed) and is `n/a` in the next version: that version
    lost what it exercises, news whatever the expectations say."""
    return after == "n/a" and before not in ("n/a", "skip")


def outcome_changes(prev: dict, this: dict, prev_label: str, label: str) -> list[dict]:
    """Cases whose outcome moved, and warnings that appeared or went, from one version to the
    next."""
    out = []
    for cid in sorted(prev["cases"].keys() | this["cases"].keys()):
        a, b = prev["cases"].get(cid), this["cases"].get(cid)
        if a is None or b is None:
            out.append({"case": cid, "what": "case", "from": a and a["outcome"],
                        "to": b and b["outcome"], "versions": [prev_label, label]})
            continue
        if a["outcome"] != b["outcome"]:
            out.append({"case": cid, "what": "outcome", "from": a["outcome"],
                        "to": b["outcome"], "reason": b["reason"],
                        "versions": [prev_label, label]}
                       | ({"flag": LOST} if lost(a["outcome"], b["outcome"]) else {}))
        for w in sorted(set(b["warnings"]) - set(a["warnings"])):
            out.append({"case": cid, "what": "warning appeared", "warning": w,
                        "versions": [prev_label, label]})
        for w in sorted(set(a["warnings"]) - set(b["warnings"])):
            out.append({"case": cid, "what": "warning went", "warning": w,
                        "versions": [prev_label, label]})
    return out


def matrix(sides: list[str], units: list[Unit], run_args: list[str], rounds: int,
           out_dir: Path, progress: Callable[[str], None],
           thresholds: dict[str, float] | None = None,
           expected: tuple[list, str] | None = None,
           cal: Calibration | None = None, max_rounds: int | None = None) -> dict[str, Any]:
    """Run the matrix; returns its record (also written as `<dir>/matrix.json`). With
    `max_rounds` above `rounds`, a benchmark with undecided figures in any step gets the
    further rounds they need (`campaign.extend`), on every side."""
    if len(sides) < 2:
        raise CampaignError("a matrix needs at least two environments")
    labelled = [side_python(s) for s in sides]
    labels = [label for label, _ in labelled]
    if len(set(labels)) != len(labels):
        raise CampaignError(f"an environment is named twice: {' '.join(labels)}")
    # a side's files are named by its position: a label may be a path
    run = campaign.Campaign(
        campaign.new_folder(out_dir, "matrix"),
        [campaign.Side(str(i), label, python, campaign.torch_version(python))
         for i, (label, python) in enumerate(labelled)], units, run_args, progress)
    versions = {s.label: s.torch for s in run.sides}
    started = time.monotonic()
    run.run(campaign.plan(units, len(labels), campaign.rounds_wanted(units, rounds)))
    more = campaign.more_rounds(units, rounds)

    def judge_now() -> dict[str, Any]:
        return judge(run.base, labels, versions, _runs(run.base, labels), rounds, thresholds,
                     more, expected, cal)

    if not max_rounds or max_rounds <= rounds:
        return judge_now()
    last: dict[str, Any] = {}

    def on_stage(ext: campaign.Extension, done: dict[str, int]) -> None:
        more.update(ext.stages[-1])

    def changes() -> list:
        last.update(judge_now())
        return last["all_changes"]

    ext = campaign.extend(run, changes, rounds, max_rounds, started, on_stage)
    # the last stage is judged already: its record only gains what the further rounds were
    record = {k: v for k, v in last.items() if k not in ("dir", "all_changes", "step_changes")}
    record["max_rounds"] = ext.to_json()
    records.write_json_atomic(run.base / "matrix.json", records.scrub_paths(record))
    return {**last, "max_rounds": record["max_rounds"]}


def _runs(base: Path, labels: list[str]) -> dict[str, list[Run]]:
    """Each side's stored rounds, by label (the folders name a side by its position)."""
    by_side = campaign.load_rounds(base)
    return {label: by_side.get(str(i), []) for i, label in enumerate(labels)}


def judge_again(base: Path, thresholds: dict[str, float] | None = None,
                expected: tuple[list, str] | None = None,
                cal: Calibration | None = None) -> dict[str, Any]:
    """The verdicts of an earlier matrix from its stored rounds (`<base>/rounds/`), e.g. after
    `compare` changed; its matrix.json is rewritten."""
    try:
        meta = json.loads((base / "matrix.json").read_text())
    except (OSError, ValueError) as e:
        raise CampaignError(f"{base}: not a matrix folder ({e})") from e
    labels = [v["label"] for v in meta["versions"]]
    return judge(base, labels, {v["label"]: v["torch"] for v in meta["versions"]},
                 _runs(base, labels), meta["rounds"], thresholds, meta.get("more_rounds"),
                 expected, cal, meta.get("max_rounds"))


def stale_units(base: Path) -> dict[Unit, list[int]]:
    """The units of an earlier matrix with a result judged by checks that have changed since
    (`harness.cases.stale_reason`), each with the sides (positions) to run it on again: the
    sides where a conformance unit is stale, every side for a benchmark, whose figures are
    judged side against side round by round and so must be measured in the same rounds."""
    from harness import registry
    from harness.cases import stale_reason

    by_side = campaign.load_rounds(base)
    found: dict[tuple[str, bool], dict[str, Any]] = {}
    for side, runs in by_side.items():
        for run in runs:
            for e in run.results:
                bench = e.kind == "benchmark"
                unit = found.setdefault((f"{e.suite}.{e.case}" if bench else e.suite, bench),
                                        {"suite": e.suite, "cases": [], "sides": set(),
                                         "profile": run.profile})
                if e.case not in unit["cases"]:
                    unit["cases"].append(e.case)
                if stale_reason(registry.find_case(e.suite, e.case), e.check_version):
                    unit["sides"].add(int(side))
    every = sorted(int(side) for side in by_side)
    return {Unit(u["suite"], tuple(u["cases"]), benchmark=bench): every if bench else
            sorted(u["sides"]) for (_, bench), u in found.items() if u["sides"]}


def run_stale_again(base: Path, progress: Callable[[str], None]) -> dict[str, list[str]]:
    """Run again, in an earlier matrix's folder, the units `stale_units` finds, in every round
    they had, replacing their stored rounds (each unit's old rounds kept until its new ones
    are written); `judge_again` then gives the record. Returns each unit's sides run again,
    by label."""
    try:
        meta = json.loads((base / "matrix.json").read_text())
    except (OSError, ValueError) as e:
        raise CampaignError(f"{base}: not a matrix folder ({e})") from e
    labels = [v["label"] for v in meta["versions"]]
    todo = stale_units(base)
    if not todo:
        return {}
    sides = []
    for i, label in enumerate(labels):
        python = side_python(label)[1]
        sides.append(campaign.Side(str(i), label, python, campaign.torch_version(python)))
    done: dict[str, list[str]] = {}
    for unit, positions in todo.items():
        n = len([p for p in (base / "rounds").glob(f"{unit.name}-*-{positions[0]}")])
        profile = next(iter(campaign.load_rounds(base).values()))[0].profile
        run = campaign.Campaign(base, sides, [unit], ["--profile", profile], progress)
        steps = [step for step in campaign.plan([unit], len(sides), {unit.name: n})
                 if step.side in positions]
        aside = base / "stale-rounds"
        for step in steps:
            old = base / "rounds" / f"{unit.name}-{step.round:02d}-{step.side}"
            if old.exists():
                aside.mkdir(exist_ok=True)
                old.rename(aside / old.name)
        try:
            run.run(steps)
        except CampaignError:
            for kept in aside.glob(f"{unit.name}-*"):  # the unit's old rounds back
                shutil.rmtree(base / "rounds" / kept.name, ignore_errors=True)
                kept.rename(base / "rounds" / kept.name)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        done[unit.name] = [labels[p] for p in positions]
    return done


def judge(base: Path, labels: list[str], versions: dict[str, str],
          runs: dict[str, list[Run]], rounds: int,
          thresholds: dict[str, float] | None = None,
          more_rounds: dict[str, int] | None = None,
          expected: tuple[list, str] | None = None,
          cal: Calibration | None = None,
          extension: dict | None = None) -> dict[str, Any]:
    """The matrix record of the rounds `runs` (by label): each version's merged run, judged by
    the expectations (`expected`: entries and their source; None: raw outcomes) and against
    the version before it. `extension` is what further rounds were run (`campaign.extend`).
    The record returned also holds every step's verdicts as `all_changes`, and each step's
    as `step_changes` (neither written)."""
    merged = {label: campaign.merge_runs(runs[label], "matrix") for label in labels}
    judged = {}
    for label in labels:
        if expected is not None:  # each version by its own torch: entries name versions
            judged[label] = expectations.judge_run(merged[label], expected[0], expected[1],
                                                   expectations.known_cases())
            merged[label] = expectations.annotate(merged[label], judged[label])
        records.write_run(campaign.merged_path(base, str(labels.index(label))), merged[label],
                          scrub=True)
    summary = {label: summarize_side(merged[label]) for label in labels}
    for label, j in judged.items():
        summary[label]["expectations"] = j.to_json()
    steps, every, by_step = [], [], []
    for prev, this in zip(labels, labels[1:], strict=False):
        changes = campaign.judge_pair(runs[prev], runs[this], merged[prev], merged[this],
                                      thresholds, cal=cal)
        every += changes
        by_step.append(changes)
        headline_ids = {(h["case"], MetricKey.of(h["name"], h["labels"]))
                        for h in summary[this]["headlines"]}
        steps.append({
            "from": prev, "to": this, "counts": compare.counts(changes),
            "verdicts": [c.to_json() for c in changes if c.verdict in compare.CHANGES],
            "headline_verdicts": [c.to_json() for c in changes
                                  if (str(c.case), c.metric_key[1]) in headline_ids],
            "changes": outcome_changes(summary[prev], summary[this], prev, this)})
    record = {
        "schema": SCHEMA, "machine": machine.fingerprint(), "started": merged[labels[0]].started,
        "rounds": rounds, "more_rounds": more_rounds or {}, "order": "rotated round by round",
        "versions": [{"label": label, "torch": versions[label]} for label in labels],
        "sides": summary, "steps": steps}
    if extension:
        record["max_rounds"] = extension
    records.write_json_atomic(base / "matrix.json", records.scrub_paths(record))
    return {**record, "dir": base, "all_changes": every, "step_changes": by_step}
