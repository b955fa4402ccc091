"""The stored comparisons judged again by this checkout and by an earlier commit, and how
their verdicts differ: what a change of the judging does to the verdicts it gave before.

    python scripts/rejudge.py [--against REV] [--json FILE]
    python scripts/rejudge.py stored [--write]

The comparisons are those the project keeps with the rounds or runs behind them: the stored
`ab` and `matrix` folders of tests/data (judged again as `ab --judge` and `matrix --judge`
would), and each consecutive pair of the committed runs of a machine in results/runs
(judged as `compare` would: against the other runs of the folder, with the machine's
calibration). A pair of runs of one clean commit is an A/A: nothing changed, so any verdict
of a change in it is a false one. Each comparison's verdicts are counted by what they were
at REV and what they are now (`unchanged -> worse: 3`), every figure by
`case metric[labels]`.

The earlier code is exported with `git archive` into a scratch folder and run in a process
of its own (`verdicts --code DIR`), on the same stored data.

`stored` covers the records whose rounds are not kept, only their verdicts and why (the
nightly gate's verdicts under results/nightly, the halves of each bisect step under
results/bisect): each verdict the words of today would give otherwise, read from what its
`why` says the tests found, is listed, and with `--write` rewritten in place, the record's
counts with it and a `rejudged` note saying what moved. The words it applies: a shown change
(significant after the correction) is counted in its direction, `worse` or `better` inside
the tolerance, never `inconclusive`; fewer than 5 paired rounds without a calibration are
not judged (`unverified`). A figure's direction is that of its metric in the committed runs.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORED = {"ab": ROOT / "tests" / "data" / "ab-planted-gemm",
          "matrix": ROOT / "tests" / "data" / "matrix-planted-rate"}
RUNS = ROOT / "results" / "runs"


def _verdicts(changes) -> dict[str, str]:
    return {f"{c.case} {c.name}": c.verdict for c in changes}


def verdicts(scratch: Path) -> dict[str, dict]:
    """Every stored comparison's verdicts under the `harness` on sys.path."""
    from harness import records
    from harness.commands import judging
    from harness.comparing import ab, calibration, compare
    from harness.releases import matrix

    out: dict[str, dict] = {}
    res = ab.judge(shutil.copytree(STORED["ab"], scratch / "ab"))
    out[f"ab {STORED['ab'].name}"] = {"aa": False, "verdicts": _verdicts(res["changes"])}
    record = matrix.judge_again(shutil.copytree(STORED["matrix"], scratch / "matrix"))
    out[f"matrix {STORED['matrix'].name}"] = {"aa": False,
                                              "verdicts": _verdicts(record["all_changes"])}
    for folder in sorted(p for p in RUNS.iterdir() if p.is_dir()):
        paths = sorted(folder.glob("*.json"))
        runs = [records.read_run(p) for p in paths]
        for (pa, a), (pb, b) in zip(zip(paths, runs, strict=True),
                                    list(zip(paths, runs, strict=True))[1:], strict=False):
            history = judging.history_runs(folder, b, {pb.resolve()}, required=False)
            cal, _ = calibration.for_machine(b.machine, design="sequential")
            changes = compare.compare_runs(a, b, history=history, cal=cal)
            pa_, pb_ = a.machine.get("project") or {}, b.machine.get("project") or {}
            same = (pa_.get("commit") == pb_.get("commit") and not pa_.get("dirty")
                    and not pb_.get("dirty"))
            out[f"compare {folder.name}/{pa.stem} {pb.stem}"] = {
                "aa": same, "verdicts": _verdicts(changes)}
    return out


def _run_verdicts(code: Path, out: Path) -> dict:
    subprocess.run([sys.executable, __file__, "verdicts", "--code", str(code), str(out)],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def differences(before: dict, after: dict) -> dict[str, dict]:
    """Per comparison: the figures judged, and each change of verdict counted."""
    out = {}
    for name, now in after.items():
        was = before.get(name, {"verdicts": {}})["verdicts"]
        moved = Counter(f"{was.get(k, 'absent')} -> {v}" for k, v in now["verdicts"].items()
                        if was.get(k) != v)
        out[name] = {"aa": now["aa"], "figures": len(now["verdicts"]), "changed": dict(moved),
                     "now": dict(Counter(now["verdicts"].values()).most_common())}
    return out


# the words before a shown change was always counted in its direction
FEW_ROUNDS = re.compile(r"^would be (\w+) \((.*)\), but (\d+ paired rounds decide nothing without "
                        r"this machine's calibration \(.*\))$")
SHOWN = re.compile(r"^a significant change \(adjusted p ([^)]+)\) that may reach past the (\S+) "
                   r"tolerance(.*)$")


def directions() -> dict[tuple[str, str], str]:
    """(suite/case, metric) -> which way is good, from the committed runs."""
    from harness import records

    out = {}
    for path in RUNS.rglob("*.json"):
        try:
            run = records.read_run(path)
        except records.RecordError:
            continue
        for e in run.results:
            for m in e.metrics:
                if m.better:
                    out[(e.case_id, m.name)] = m.better
    return out


def reword(change: dict, better: dict[tuple[str, str], str]) -> dict | None:
    """A stored verdict (a dict with `verdict`, `why`, `factor`) as today's words give it, or
    None where they give the same."""
    why = change.get("why") or ""
    if change.get("verdict") != "inconclusive":
        return None
    if m := FEW_ROUNDS.match(why):
        return {**change, "verdict": "unverified",
                "why": f"not judged: {m.group(3)}; would be {m.group(1)} ({m.group(2)})"}
    if m := SHOWN.match(why):
        case = (change.get("case") or "").split("[")[0]
        name = (change.get("figure") or change.get("metric") or "").split("[")[0]
        good = better.get((case, name))
        if good is None or not change.get("factor"):
            return None  # its direction is not known: left as it was, and listed
        bad = (change["factor"] > 1) == (good == "lower")
        tail = m.group(3).replace("would decide it", "would tell")
        return {**change, "verdict": "worse" if bad else "better",
                "why": f"significant (adjusted p {m.group(1)}), its estimate inside the "
                       f"{m.group(2)} tolerance, but its interval reaches past it: not yet "
                       f"shown inside or past{tail}"}
    return None


def stored(write: bool) -> list[str]:
    """Each stored verdict without its rounds that today's words give otherwise (`reword`),
    as one line each; with `write`, the records rewritten."""
    better = directions()
    lines = []
    for path in sorted((ROOT / "results").rglob("*.json")):
        doc = json.loads(path.read_text())
        moved: dict[str, int] = {}
        if isinstance(doc.get("gate"), dict) and doc["gate"].get("inconclusive"):
            gate = doc["gate"]
            kept = []
            for c in gate["inconclusive"]:
                new = reword(c, better)
                if new is None:
                    kept.append(c)
                    continue
                key = "unverified" if new["verdict"] == "unverified" else "moved"
                gate.setdefault(key, []).append(new)
                moved[f"inconclusive -> {new['verdict']}"] = moved.get(
                    f"inconclusive -> {new['verdict']}", 0) + 1
                lines.append(f"{path.relative_to(ROOT)}: {c['case']} {c['figure']}: "
                             f"inconclusive -> {new['verdict']}")
            gate["inconclusive"] = kept
            counts: dict[str, int] = {}
            for key in ("moved", "inconclusive", "unverified"):
                for c in gate.get(key, []):
                    counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
            counts["unchanged"] = gate["counts"].get("unchanged", 0)
            gate["counts"] = {k: n for k, n in counts.items() if n}
        for step in doc.get("steps", []) if doc.get("schema", "").startswith(
                "release-bench-bisect") else []:
            for i, half in enumerate(step.get("halves", [])):
                new = reword({**half, "case": doc.get("case"), "metric": doc.get("metric")},
                             better)
                if new is not None:
                    step["halves"][i] = {k: new[k] for k in half}
                    moved[f"inconclusive -> {new['verdict']}"] = moved.get(
                        f"inconclusive -> {new['verdict']}", 0) + 1
                    lines.append(f"{path.relative_to(ROOT)}: step {step['releases']}: "
                                 f"inconclusive -> {new['verdict']}")
        if moved and write:
            doc["rejudged"] = {"words": "a shown change is counted in its direction; fewer "
                                        "than 5 paired rounds without a calibration are not "
                                        "judged", "moved": moved}
            from harness import records

            records.write_json_atomic(path, doc)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what")
    v = sub.add_parser("verdicts", help="write the verdicts of the harness under --code")
    v.add_argument("--code", required=True)
    v.add_argument("out")
    s = sub.add_parser("stored", help="the stored verdicts without rounds that today's words "
                                      "give otherwise")
    s.add_argument("--write", action="store_true", help="rewrite them in their records")
    parser.add_argument("--against", default="HEAD", help="the earlier commit (default HEAD)")
    parser.add_argument("--json", help="also write the differences as JSON")
    args = parser.parse_args(argv)
    if args.what == "stored":
        sys.path.insert(0, str(ROOT))
        lines = stored(args.write)
        print("\n".join(lines) or "no stored verdict moves")
        return 0
    if args.what == "verdicts":
        sys.path.insert(0, args.code)
        with tempfile.TemporaryDirectory() as scratch:
            Path(args.out).write_text(json.dumps(verdicts(Path(scratch)), indent=1))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        old = Path(scratch) / "old"
        old.mkdir()
        archive = subprocess.run(["git", "archive", args.against, "harness", "suites",
                                  "expectations.toml"], cwd=ROOT,
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        before = _run_verdicts(old, Path(scratch) / "before.json")
        after = _run_verdicts(ROOT, Path(scratch) / "after.json")
    diff = differences(before, after)
    for name, d in diff.items():
        moved = ", ".join(f"{k}: {n}" for k, n in sorted(d["changed"].items())) or "none"
        now = ", ".join(f"{n} {v}" for v, n in d["now"].items())
        print(f"{name}{' (A/A)' if d['aa'] else ''}: {d['figures']} figures ({now}); "
              f"changed: {moved}")
    if args.json:
        Path(args.json).write_text(json.dumps(diff, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
