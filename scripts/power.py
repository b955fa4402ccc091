#!/usr/bin/env python3
"""What the test suite catches: planted defects, and the tests that break features on purpose.

    python scripts/power.py run [--name NAME] [--only PLANT ...] [--skip-tests]
    python scripts/power.py compare BEFORE.json AFTER.json

`run` writes results/validation/power/<date>-<NAME>.json (date, commit, machine; a record of
the same commit begun earlier goes on where it stopped, so that it can run in parts) with:

- tests: the outcome of every test that breaks a feature on purpose (each suite's
  test_breaks.py: its feature-off and break tests; the telemetry suite's broken readings;
  tests/test_feature_off.py) and of the CUDA rehearsal (tests/test_cuda_rehearsal.py). Such a
  test passes when the check it breaks fails, so "passed" is "caught";
- plants: for each of PLANTS, the tests of its area (as `make test` selects them: the
  project's pytest options) run with the defect planted in every Python process they start
  (tests/planted/sitecustomize.py: a feature turned off, `off=`; a promise broken by a small
  step, `defect=`, tests/planted/defects.py), stopping at the first failure: "caught" with the
  test that failed, "missed" when every test passed, "error" when pytest could not run them.

Each area's tests pass unplanted (`make test`), so a failure is the defect's. `compare` lists
every plant and test caught in BEFORE and not in AFTER, exit 1 if there is one. `python
scripts/validation.py render` puts the records in docs/validation.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "tests" / "planted"
RECORDS = ROOT / "results" / "validation" / "power"
sys.path.insert(0, str(ROOT))

# The tests that plant a defect themselves: a pass is a catch.
BREAK_TESTS = ["suites/amp/test_breaks.py", "suites/profiler/test_breaks.py",
               "suites/rpc/test_breaks.py", "suites/ddp_rpc/test_breaks.py",
               "suites/fork_wait/test_breaks.py", "suites/telemetry/test_breaks.py",
               "suites/telemetry/test_telemetry_suite.py", "tests/test_feature_off.py",
               "tests/test_cuda_rehearsal.py"]


@dataclass(frozen=True)
class Plant:
    """A defect planted in every process of a pytest run of `area` (paths)."""

    spec: str  # RELEASE_BENCH_PLANT
    area: tuple[str, ...]
    kind: str  # "feature off", "factor of 2", "one step"


AMP, PROFILER, RPC, DDP_RPC, FORK_WAIT = (f"suites/{s}" for s in (
    "amp", "profiler", "rpc", "ddp_rpc", "fork_wait"))
COMPARING = ("tests/test_compare.py", "tests/test_ab.py", "tests/test_stored_comparisons.py",
             "tests/test_stats.py", "tests/test_calibration.py")
PLANTS: dict[str, Plant] = {
    # each feature off, its API in place (tests/planted/feature_off.py)
    "autocast off": Plant("off=autocast", (AMP,), "feature off"),
    "grad_scaler off": Plant("off=grad_scaler", (AMP,), "feature off"),
    "memory profiler off": Plant("off=memory_profiler", (PROFILER,), "feature off"),
    "record_function off": Plant("off=record_function", (PROFILER,), "feature off"),
    "rpc local (rpc suite)": Plant("off=rpc", (RPC,), "feature off"),
    "rpc local (ddp_rpc suite)": Plant("off=rpc", (DDP_RPC,), "feature off"),
    "torchscript off": Plant("off=torchscript", (FORK_WAIT,), "feature off"),
    "eager fork runs nothing": Plant("off=eager_fork", (FORK_WAIT,), "feature off"),
    "host telemetry reads zeros": Plant("off=host_telemetry", ("suites/telemetry",
                                                                "tests/test_telemetry.py"),
                                        "feature off"),
    # a promise broken by a factor of 2 (tests/planted/defects.py)
    "profiler bytes x2": Plant("defect=profiler_bytes_doubled", (PROFILER,), "factor of 2"),
    "profiler times x2": Plant("defect=profiler_times_doubled", (PROFILER,), "factor of 2"),
    "rpc timeout x2": Plant("defect=rpc_timeout_doubled", (RPC,), "factor of 2"),
    "DistributedOptimizer lr x2": Plant("defect=dist_optimizer_lr_doubled", (DDP_RPC,),
                                        "factor of 2"),
    "DDP gradients summed (x2)": Plant("defect=ddp_grads_summed", (DDP_RPC,), "factor of 2"),
    "host CPU use halved": Plant("defect=telemetry_cpu_halved",
                                 ("suites/telemetry", "tests/test_telemetry.py"),
                                 "factor of 2"),
    "compare tolerance x2": Plant("defect=tolerance_doubled", COMPARING, "factor of 2"),
    # a contract broken by one step
    "GradScaler backoff 0.25": Plant("defect=scaler_backoff_quarter", (AMP,), "one step"),
    "GradScaler grows a step early": Plant("defect=scaler_grows_a_step_early", (AMP,),
                                           "one step"),
    "autocast mm in fp32": Plant("defect=autocast_mm_in_fp32", (AMP,), "one step"),
    "rpc tensor off by one element": Plant("defect=rpc_tensor_off_by_one", (RPC,),
                                           "one step"),
    "fork/wait on one inter-op thread": Plant("defect=fork_one_interop_thread", (FORK_WAIT,),
                                              "one step"),
    "eager fork on another thread": Plant("fork_threaded=1", (FORK_WAIT,), "one step"),
    "minimal programs exit 3": Plant("defect=minimal_exits_with_status",
                                     (AMP, PROFILER, "tests/test_clean_exit.py"), "one step"),
    "FDR not adjusted": Plant("defect=fdr_unadjusted", COMPARING, "one step"),
    "machine guard off": Plant("defect=machine_guard_off", (*COMPARING, "tests/test_cli.py"),
                               "one step"),
    "campaign order not rotated": Plant("defect=campaign_not_rotated",
                                        ("tests/test_ab.py", "tests/test_duet.py",
                                         "tests/test_turns.py", "tests/test_matrix.py"),
                                        "one step"),
    "bursts: A always first": Plant("defect=turns_a_always_first", ("tests/test_turns.py",),
                                    "one step"),
    "clean exit ignores leftovers": Plant("defect=clean_exit_ignores_leftovers",
                                          ("tests/test_clean_exit.py",), "one step"),
    "clean exit interval at 90%": Plant("defect=clean_exit_interval_90",
                                        ("tests/test_clean_exit.py",), "one step"),
    "expected rate without upper bound": Plant("defect=expectations_rate_unbounded",
                                               ("tests/test_expectations.py",
                                                "tests/test_pytest_adapter.py"), "one step"),
    "nightly green despite the gate": Plant("defect=nightly_ignores_the_gate",
                                            ("tests/test_nightly.py",), "one step"),
}


def _env(spec: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLANTED), env.get("PYTHONPATH")]))
    env["RELEASE_BENCH_PLANT"] = spec
    return env


def _pytest(args: list[str], junit: Path, env: dict[str, str] | None = None,
            log: Path | None = None) -> int:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
           f"--junitxml={junit}", *args]
    with open(log or os.devnull, "w") as out:
        return subprocess.call(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def outcomes(junit: Path) -> dict[str, str]:
    """Each test of a junit file: passed, failed, error or skipped."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        nodeid = f"{path}.py::{case.get('name')}"
        tags = {child.tag for child in case}
        out[nodeid] = ("failed" if "failure" in tags else "error" if "error" in tags
                       else "skipped" if "skipped" in tags else "passed")
    return out


def run_tests(tmp: Path) -> dict[str, str]:
    junit = tmp / "breaks.xml"
    _pytest(BREAK_TESTS, junit, log=tmp / "breaks.log")
    return outcomes(junit)


def run_plant(name: str, plant: Plant, tmp: Path) -> dict:
    junit = tmp / "plant.xml"
    junit.unlink(missing_ok=True)
    t0 = time.monotonic()
    status = _pytest(["-x", *plant.area], junit, _env(plant.spec), tmp / "plant.log")
    seconds = round(time.monotonic() - t0, 1)
    failed = [k for k, v in outcomes(junit).items() if v in ("failed", "error")] \
        if junit.exists() else []
    outcome = {0: "missed", 1: "caught"}.get(status, "error")
    row = {"spec": plant.spec, "area": list(plant.area), "kind": plant.kind,
           "outcome": outcome, "by": failed[0] if failed else None, "seconds": seconds}
    if outcome == "error":
        row["why"] = f"pytest exited {status}: " + (tmp / "plant.log").read_text()[-300:]
    print(f"{name}: {outcome}" + (f" by {row['by']}" if row["by"] else "") + f" ({seconds} s)",
          flush=True)
    return row


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()


def run(name: str, only: list[str], skip_tests: bool) -> Path:
    from harness import records
    from harness.running import machine

    unknown = [p for p in only if p not in PLANTS]
    if unknown:
        raise SystemExit(f"power: no plant named {unknown[0]!r} (see PLANTS)")
    started = datetime.now(UTC)
    doc = {"name": name, "date": started.date().isoformat(), "commit": _commit(),
           "machine": machine.machine_name(), "started": started.isoformat(timespec="seconds"),
           "tests": {}, "plants": {}}
    path = RECORDS / f"{doc['date']}-{name}.json"
    if path.exists():  # a record of this commit begun earlier goes on where it stopped
        earlier = json.loads(path.read_text())
        if earlier["commit"] == doc["commit"]:
            doc = earlier
    with tempfile.TemporaryDirectory() as tmp:
        if not skip_tests and not doc["tests"]:
            doc["tests"] = run_tests(Path(tmp))
            print(f"break tests: {sum(v == 'passed' for v in doc['tests'].values())} of "
                  f"{len(doc['tests'])} passed", flush=True)
        for plant_name, plant in PLANTS.items():
            if (only and plant_name not in only) or plant_name in doc["plants"]:
                continue
            doc["plants"][plant_name] = run_plant(plant_name, plant, Path(tmp))
            records.write_json_atomic(path, doc)  # what is done so far survives a stop
    doc["minutes"] = round(doc.get("minutes", 0)
                           + (datetime.now(UTC) - started).total_seconds() / 60, 1)
    records.write_json_atomic(path, doc)
    return path


# Tests renamed since an earlier record (old id -> new id), so that a comparison follows them;
# a test gone otherwise counts as lost. The feature-off train_step runs the smallest encoder
# step, and is named by those parameters.
RENAMED = {
    f"{path}::{test}[train_step-model=encoder{tail}]":
        f"{path}::{test}[train_step-model=encoder-batch=2-side=16{tail}]"
    for path, test, tails in (
        ("suites/amp/test_breaks.py", "test_each_case_fails_with_its_feature_off",
         ("-cpu", "-cuda")),
        ("tests/test_cuda_rehearsal.py", "test_each_cuda_case_fails_with_its_feature_off",
         ("",)))
    for tail in tails}


def lost(before: dict, after: dict) -> list[str]:
    """What `before` caught and `after` did not (a test gone counts as lost)."""
    out = [f"plant {n}: {after['plants'].get(n, {}).get('outcome', 'not run')}"
           for n, row in before["plants"].items()
           if row["outcome"] == "caught" and n in after["plants"]
           and after["plants"][n]["outcome"] != "caught"]
    if after["tests"]:
        for t, v in before["tests"].items():
            now = after["tests"].get(RENAMED.get(t, t), "gone")
            if v == "passed" and now != "passed":
                out.append(f"test {t}: {now}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the break tests and the plants; write a record")
    r.add_argument("--name", default="power")
    r.add_argument("--only", nargs="*", default=[], metavar="PLANT")
    r.add_argument("--skip-tests", action="store_true", help="only the plants")
    c = sub.add_parser("compare", help="what BEFORE caught and AFTER did not")
    c.add_argument("before")
    c.add_argument("after")
    args = parser.parse_args(argv)
    if args.command == "run":
        print(f"written: {run(args.name, args.only, args.skip_tests).relative_to(ROOT)}")
        return 0
    try:
        before, after = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
    except (OSError, ValueError) as e:
        print(f"power: {e}", file=sys.stderr)
        return 2
    gone = lost(before, after)
    for line in gone:
        print(f"lost: {line}")
    print(f"{len(gone)} caught before and not after")
    return 1 if gone else 0


if __name__ == "__main__":
    sys.exit(main())
