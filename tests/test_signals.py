"""SIGINT and SIGTERM stop a run within seconds, keep its record, and leave no process behind.

The unit tests signal this very process while `runner.run` is in a case; the others start
`release-bench run` on a multi-process case and signal it once its workers exist.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from harness import records
from harness.cases import Context, Suite
from harness.running import runner

ROOT = Path(__file__).resolve().parent.parent
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]

stoppable = Suite("stoppable", feature="f", status="beta", summary="cases to interrupt")
in_case = threading.Event()  # set once the case to interrupt is under way


@stoppable.conformance(devices=("cpu",))
def first(ctx: Context):
    ctx.check("ran", True)


@stoppable.conformance(devices=("cpu",))
def sleeps(ctx: Context):
    in_case.set()
    time.sleep(30)  # the signal's Interrupted ends the sleep
    ctx.check("slept", True)


@stoppable.conformance(devices=("cpu",))
def swallows(ctx: Context):
    in_case.set()
    try:
        time.sleep(30)
    except BaseException:  # what a careless case does; the run must still stop
        pass
    ctx.check("went on", True)


@stoppable.conformance(devices=("cpu",))
def never(ctx: Context):
    raise AssertionError("a case after the interrupt ran")


def _signal_when_in_case(sig: int) -> threading.Thread:
    """Send `sig` to this process once a case is under way, but only if the run has replaced
    the handler (else SIGTERM would end pytest, or SIGINT stop the whole session)."""
    before = signal.getsignal(sig)
    in_case.clear()

    def fire():
        if in_case.wait(30) and signal.getsignal(sig) is not before:
            time.sleep(0.2)
            os.kill(os.getpid(), sig)

    t = threading.Thread(target=fire, daemon=True)
    t.start()
    return t


def _run_until_interrupted(tmp_path, names, sig):
    planned = runner.plan([stoppable], "quick", ["cpu"])
    planned = [p for n in names for p in planned if p.case.name == n]
    before = {s: signal.getsignal(s) for s, _ in SIGNALS}
    t = _signal_when_in_case(sig)
    t0 = time.monotonic()
    with pytest.raises(runner.Interrupted) as info:
        runner.run(planned, "quick", tmp_path, progress=lambda s: None)
    elapsed = time.monotonic() - t0
    t.join(5)
    assert {s: signal.getsignal(s) for s, _ in SIGNALS} == before, "handlers not restored"
    return info.value, elapsed


@pytest.mark.parametrize(("sig", "status"), SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_signal_ends_the_case_and_marks_the_record(tmp_path, sig, status):
    stop, elapsed = _run_until_interrupted(tmp_path, ["first", "sleeps", "never"], sig)
    assert elapsed < 10, f"the run took {elapsed:.1f} s to stop"
    assert (stop.signum, stop.exit_status) == (sig, status)
    assert "stoppable/sleeps" in stop.where
    doc = records.read_run(stop.path)
    assert doc.interrupted is True and doc.finished is None
    assert [e.case for e in doc.results] == ["first"]
    (note,) = doc.notes
    assert signal.Signals(sig).name in note and "during stoppable/sleeps" in note


def test_a_case_that_swallows_the_interrupt_still_ends_the_run(tmp_path):
    stop, _ = _run_until_interrupted(tmp_path, ["swallows", "never"], signal.SIGINT)
    doc = records.read_run(stop.path)
    assert doc.interrupted is True
    assert [e.case for e in doc.results] == ["swallows"]  # it finished, so it is kept
    assert "after stoppable/swallows" in doc.notes[0]


def test_run_outside_the_main_thread_leaves_signals_alone(tmp_path):
    planned = [p for p in runner.plan([stoppable], "quick", ["cpu"]) if p.case.name == "first"]
    out = {}
    t = threading.Thread(target=lambda: out.update(
        doc=runner.run(planned, "quick", tmp_path, progress=lambda s: None)[1]))
    t.start()
    t.join(60)
    assert out["doc"].finished and out["doc"].interrupted is False


# --- the command, on real multi-process cases ------------------------------------------------


def _alive(procs: list[psutil.Process]) -> list[int]:
    """The pids of `procs` still running (a zombie has ended: it only waits to be reaped)."""
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_for_worker(run: psutil.Process, timeout_s: float = 120.0) -> None:
    """Until a launched worker (not only multiprocessing's resource tracker) runs under `run`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if any("spawn_main" in " ".join(k.cmdline()) for k in run.children(recursive=True)):
                return
        except psutil.Error:
            pass
        assert run.is_running(), "the run ended before any worker started"
        time.sleep(0.05)
    raise AssertionError(f"no worker process after {timeout_s:g} s")


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "status", "select"),
    [(signal.SIGINT, 130, ["--suite", "rpc", "--case", "round_trip"]),
     (signal.SIGTERM, 143, ["--suite", "ddp_rpc", "--case", "step_time"])],
    ids=["SIGINT-rpc-round_trip", "SIGTERM-ddp_rpc-step_time"],
)
def test_signal_stops_a_multiprocess_run(tmp_path, sig, status, select):
    out = tmp_path / "runs"
    log = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "harness.cli", "run", *select, "--device", "cpu",
           "--no-telemetry", "--out", str(out)]
    # Started with SIGINT ignored, as a script's `release-bench run ... &` starts it: Python
    # then raises no KeyboardInterrupt, which is how Ctrl-C came to be ignored.
    cmd = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *cmd]
    with open(log, "w") as err, open(tmp_path / "stdout.txt", "w") as so:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=so, stderr=err, start_new_session=True)
    run = psutil.Process(proc.pid)
    tree: list[psutil.Process] = []
    try:
        _wait_for_worker(run)
        time.sleep(1)
        tree = [run, *run.children(recursive=True)]
        t0 = time.monotonic()
        proc.send_signal(sig)
        try:
            rc = proc.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run was still going 10 s after {signal.Signals(sig).name}")
        took = time.monotonic() - t0
        print(f"{signal.Signals(sig).name}: exit {rc} {took:.2f} s after the signal, "
              f"{len(tree)} processes in the tree")
        assert rc == status, log.read_text()[-2000:]
        psutil.wait_procs(tree[1:], timeout=3)
        assert not _alive(tree), f"left running: {_alive(tree)} of {[p.pid for p in tree]}"
        (path,) = out.rglob("*.json")
        doc = records.read_run(path)
        assert doc.interrupted is True
        assert signal.Signals(sig).name in doc.notes[-1]
        last = log.read_text().strip().splitlines()[-1]
        assert last.startswith("release-bench: run interrupted by") and str(path) in last
    finally:
        # whatever the outcome, nothing of this run outlives the test
        for p in [run, *tree]:
            try:
                p.kill()
            except psutil.Error:
                pass
        proc.wait()
