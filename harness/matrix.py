"""`release-bench matrix`: the release checklist and the headline figures across torch versions.

Each side is an environment (`release-bench env create VERSION`, or any venv). The comparison
is `ab`'s, widened to N sides: a suite's conformance cases, and each of its benchmark cases
(`ab.groups`), run in a fresh process per side and round, round by round, with the order of
the sides rotated from round to round so that each goes first as often as the others. Each
side's rounds are merged (`ab.merge_runs`), and each version is judged against the one before
it with `compare`, the rounds giving the spread between processes. The matrix record keeps,
per version:

- each conformance case's outcome, and each case's warnings (FutureWarning,
  DeprecationWarning, ... as the runner recorded them);
- each headline metric with its interval;
- the verdicts against the previous version;

and lists as changes every case whose outcome moved, and every warning that appeared or went.
The merged runs and the rounds stay beside it for `report`, `compare` and `ab --judge`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import ab, compare, envs, expectations, machine, records
from harness.calibration import Calibration
from harness.cases import metric_id

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
            raise ab.AbError(str(e)) from e
        return spec, ab.python_of(env.path)  # refuses a folder whose Python is gone
    return spec, ab.python_of(spec)


def rotation(n_sides: int, rounds: int) -> list[list[int]]:
    """The order of the sides in each round: rotated by one each round, so that over n rounds
    each side runs first, second, ... once."""
    return [[(r + i) % n_sides for i in range(n_sides)] for r in range(rounds)]


def warnings_of(entry: dict) -> list[str]:
    """The warnings a case raised, as "Category: text", with file locations left out."""
    out = []
    for note in entry.get("notes", []):
        if m := WARNING_NOTE.match(note):
            out.append(f"{m.group(1)}: {LOCATION.sub('<file>', m.group(2))}")
    return sorted(set(out))


def summarize_side(run: dict) -> dict[str, Any]:
    """What the matrix keeps of one version's merged run."""
    cases, headlines = {}, []
    for e in run["results"]:
        cid = compare.result_key(e)
        cases[cid] = {"suite": e["suite"], "kind": e["kind"], "outcome": e["outcome"],
                      "reason": e.get("reason", "")[:300], "warnings": warnings_of(e)}
        if expected := e.get("expected"):  # its status under the expectations file
            cases[cid]["expected"] = expected
        for m in e["metrics"]:
            if m.get("headline"):
                st = m.get("stats") or {}
                headlines.append({"case": cid, "metric": metric_id(m["name"], m.get("labels")),
                                  "name": m["name"], "labels": m.get("labels") or {},
                                  "value": m["value"], "unit": m["unit"],
                                  "ci": st.get("ci"), "n": st.get("n")})
    return {"cases": cases, "headlines": headlines}


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
                        "versions": [prev_label, label]})
        for w in sorted(set(b["warnings"]) - set(a["warnings"])):
            out.append({"case": cid, "what": "warning appeared", "warning": w,
                        "versions": [prev_label, label]})
        for w in sorted(set(a["warnings"]) - set(b["warnings"])):
            out.append({"case": cid, "what": "warning went", "warning": w,
                        "versions": [prev_label, label]})
    return out


def plan(units: list[ab.Group], n_sides: int, rounds: int) -> list[tuple[int, ab.Group, int]]:
    """(round, unit, side's position) in the order they run: round by round, each unit's
    sides in that round's rotation; a unit with a `rounds_factor` goes on with its further
    rounds once the others have had theirs."""
    most = ab.longest(units, rounds)
    return [(r, unit, i) for r, order in enumerate(rotation(n_sides, most))
            for unit in units if r < unit.rounds_of(rounds) for i in order]


def matrix(sides: list[str], units: list[ab.Group], run_args: list[str], rounds: int,
           out_dir: Path, progress: Callable[[str], None],
           thresholds: dict[str, float] | None = None,
           expected: tuple[list, str] | None = None,
           cal: Calibration | None = None) -> dict[str, Any]:
    """Run the matrix; returns its record (also written as `<dir>/matrix.json`)."""
    if len(sides) < 2:
        raise ab.AbError("a matrix needs at least two environments")
    labelled = [side_python(s) for s in sides]
    labels = [label for label, _ in labelled]
    if len(set(labels)) != len(labels):
        raise ab.AbError(f"an environment is named twice: {' '.join(labels)}")
    pythons = dict(labelled)
    versions = {label: ab.torch_version(p) for label, p in labelled}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = out_dir / f"matrix-{stamp}"
    steps = [(r, unit, labels[i]) for r, unit, i in plan(units, len(labels), rounds)]
    runs: dict[str, list[dict]] = {label: [] for label in labels}
    for step, (r, unit, label) in enumerate(steps, 1):
        where = base / "rounds" / f"{unit.name}-{r:02d}-{labels.index(label)}"
        progress(f"[{step}/{len(steps)}] torch {versions[label]} {unit.name} (round {r + 1}) ...")
        t0 = time.perf_counter()
        # a label may be a path: the log is named by the side's position
        log = base / "logs" / f"side-{labels.index(label)}.log"
        path = ab.run_round(pythons[label], unit.selection(), run_args, where, log)
        if path is None:
            raise ab.AbError(f"torch {versions[label]} ({label}) wrote no run for "
                             f"{unit.name}; see {log}")
        runs[label].append(records.read_run(path))
        progress(f"[{step}/{len(steps)}] done in {time.perf_counter() - t0:.0f} s")
    return judge(base, labels, versions, runs, rounds, thresholds, ab.more_rounds(units, rounds),
                 expected, cal)


def judge_again(base: Path, thresholds: dict[str, float] | None = None,
                expected: tuple[list, str] | None = None,
                cal: Calibration | None = None) -> dict[str, Any]:
    """The verdicts of an earlier matrix from its stored rounds (`<base>/rounds/`), e.g. after
    `compare` changed; its matrix.json is rewritten."""
    try:
        meta = json.loads((base / "matrix.json").read_text())
    except (OSError, ValueError) as e:
        raise ab.AbError(f"{base}: not a matrix folder ({e})") from e
    labels = [v["label"] for v in meta["versions"]]
    by_side = ab.load_rounds(base)  # sides are named by their position among the labels
    runs = {label: by_side.get(str(i), []) for i, label in enumerate(labels)}
    return judge(base, labels, {v["label"]: v["torch"] for v in meta["versions"]}, runs,
                 meta["rounds"], thresholds, meta.get("more_rounds"), expected, cal)


def judge(base: Path, labels: list[str], versions: dict[str, str],
          runs: dict[str, list[dict]], rounds: int,
          thresholds: dict[str, float] | None = None,
          more_rounds: dict[str, int] | None = None,
          expected: tuple[list, str] | None = None,
          cal: Calibration | None = None) -> dict[str, Any]:
    """The matrix record of the rounds `runs` (by label): each version's merged run, judged by
    the expectations (`expected`: entries and their source; None: raw outcomes) and against
    the version before it."""
    merged = {label: ab.merge_runs(runs[label]) for label in labels}
    judged = {}
    for label in labels:
        if expected is not None:  # each version by its own torch: entries name versions
            judged[label] = expectations.judge_run(merged[label], expected[0], expected[1],
                                                   expectations.known_cases())
            expectations.annotate(merged[label], judged[label])
        records.write_json_atomic(base / f"torch-{label}.json",
                                  records.scrub_paths(merged[label]))
    summary = {label: summarize_side(merged[label]) for label in labels}
    for label, j in judged.items():
        summary[label]["expectations"] = j.to_json()
    steps = []
    for prev, this in zip(labels, labels[1:], strict=False):
        changes = compare.compare_runs(merged[prev], merged[this],
                                       {**compare.AB_THRESHOLDS, **(thresholds or {})},
                                       replicates=ab.round_values(runs[prev], runs[this]),
                                       cal=cal)
        headline_ids = {(h["case"], compare.metric_key(h)) for h in summary[this]["headlines"]}
        steps.append({
            "from": prev, "to": this, "counts": compare.counts(changes),
            "verdicts": [c.to_json() for c in changes if c.verdict in ("regression",
                                                                       "improvement")],
            "headline_verdicts": [c.to_json() for c in changes
                                  if (c.case, compare.metric_key({"name": c.metric,
                                                                  "labels": c.labels}))
                                  in headline_ids],
            "changes": outcome_changes(summary[prev], summary[this], prev, this)})
    record = {"schema": SCHEMA, "machine": machine.fingerprint(), "started": merged[
        labels[0]]["started"], "rounds": rounds, "more_rounds": more_rounds or {},
        "order": "rotated round by round",
        "versions": [{"label": label, "torch": versions[label]} for label in labels],
        "sides": summary, "steps": steps}
    records.write_json_atomic(base / "matrix.json", records.scrub_paths(record))
    return {**record, "dir": base}
