"""The stored comparisons judged again by this checkout and by an earlier commit, and how
their verdicts differ: what a change of the judging does to the verdicts it gave before.

    python scripts/rejudge.py [--against REV] [--json FILE]

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
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what")
    v = sub.add_parser("verdicts", help="write the verdicts of the harness under --code")
    v.add_argument("--code", required=True)
    v.add_argument("out")
    parser.add_argument("--against", default="HEAD", help="the earlier commit (default HEAD)")
    parser.add_argument("--json", help="also write the differences as JSON")
    args = parser.parse_args(argv)
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
