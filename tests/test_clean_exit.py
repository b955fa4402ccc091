"""harness.running.clean_exit sees every way a process can end badly, and a suite's clean_exit case
fails, with the rate, when its program aborts at exit in some processes."""

from __future__ import annotations

import os
import platform
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from harness.comparing import expectations
from harness.running import clean_exit, launch
from harness.running.runner import execute
from suites.fork_wait import cases as fork_wait_cases

PLANTED = Path(__file__).resolve().parent / "planted"


@pytest.fixture
def planted(monkeypatch):
    """Make every Python process started from here run the planted sitecustomize."""

    def plant(spec: str) -> None:
        monkeypatch.setenv("PYTHONPATH", str(PLANTED))
        monkeypatch.setenv("RELEASE_BENCH_PLANT", spec)

    return plant


def test_a_program_that_returns_ends_clean():
    (end,) = clean_exit.run_once(["-c", "print('hello')"])
    assert end.clean and end.status == 0 and end.how() == "clean", end


def test_an_exit_status_is_not_clean():
    (end,) = clean_exit.run_once(["-c", "import sys; sys.exit(3)"])
    assert not end.clean and end.status == 3 and end.how() == "exit status 3"


def test_an_abort_at_exit_is_seen_with_its_message(planted):
    planted("exit_abort=1")
    (end,) = clean_exit.run_once(["-c", "pass"])
    assert not end.clean
    assert end.signal == "SIGABRT" and end.status is None
    assert end.terminate_called
    assert end.last_line == "terminate called without an active exception"
    assert end.how() == "killed by SIGABRT, 'terminate called'"


def test_a_hang_at_exit_is_cut_at_the_timeout():
    # a non-daemon thread keeps the interpreter from exiting, as a stuck pool would
    hang = "import threading, time; threading.Thread(target=time.sleep, args=(600,)).start()"
    t0 = time.monotonic()
    (end,) = clean_exit.run_once(["-c", hang], timeout_s=3)
    assert time.monotonic() - t0 < 15
    assert end.timed_out and not end.clean and end.how().startswith("timed out")


def test_a_process_left_running_is_counted_and_killed(tmp_path):
    pid_file = tmp_path / "child"
    leave = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(600)']); open(sys.argv[1], 'w').write(str(p.pid))")
    (end,) = clean_exit.run_once(["-c", leave, str(pid_file)])
    assert end.status == 0 and end.leftover == 1 and not end.clean
    assert end.how() == "1 process(es) left running"  # as the check's detail says it
    child = int(pid_file.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"


def test_every_rank_of_a_multi_process_trial_is_reported():
    ranks = "import os, sys; sys.exit(int(os.environ['RANK']))"
    ends = clean_exit.run_once(["-c", ranks], world=3)
    assert [(e.rank, e.status) for e in ends] == [(0, 0), (1, 1), (2, 2)]


def test_the_rate_has_an_exact_interval():
    assert clean_exit.fmt_rate(2, 20) == "2/20 [1.2%, 32%]"  # Clopper-Pearson, as issue 16
    lo, hi = clean_exit.rate_interval(0, 100)
    assert lo == 0.0 and 0.03 < hi < 0.04


def test_the_clean_exit_case_fails_on_a_planted_abort_and_gives_the_rate(planted):
    planted("exit_abort=1")  # every process aborts at exit
    case = fork_wait_cases.suite.case("clean_exit")
    entry = execute(case, "cpu", {"trials": 3}, "quick")
    assert entry.outcome == "fail", entry.reason
    failed = [c for c in entry.checks if not c.passed]
    assert len(failed) == 2  # both programs
    for check in failed:
        assert "3/3 [" in check.detail and "killed by SIGABRT" in check.detail
    rates = [m for m in entry.metrics if m.name == "abnormal_exit_rate"]
    assert {m.labels["program"] for m in rates} == {"release_notes", "chains"}
    for m in rates:
        assert m.value == 1 and m.stats["n"] == 3 and m.samples == [1.0, 1.0, 1.0]
        assert m.stats["ci"] == pytest.approx(list(clean_exit.rate_interval(3, 3)))
    for program in ("release_notes", "chains"):  # a row per abnormal trial
        assert len(entry.tables[f"abnormal exits: {program}"]) == 3
    # each way a process ended, for the expectations' signature: the known abort, excused
    assert entry.details["failures"] and all(
        "terminate called without an active exception" in f for f in entry.details["failures"])
    here = {"torch": {"version": torch.__version__}, "python": platform.python_version(),
            "os": platform.platform()}
    judged = expectations.judge_result(entry, here, expectations.load())
    assert judged.status == "expected-fail" and "38228" in judged.issue


@pytest.mark.skipif(sys.platform != "linux", reason="process groups as on Linux")
def test_nothing_of_a_trial_outlives_it(planted):
    planted("exit_abort=1")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    clean_exit.trials(["-c", "pass"], n=4)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


# fork_wait's and profiler's own tests plant this abort in their clean_exit cases (above, and
# suites/profiler/test_breaks.py); these are the other suites' minimal programs
@pytest.mark.parametrize("suite", ["amp", "ddp_rpc", "rpc"])
def test_every_suites_clean_exit_case_fails_when_its_processes_abort(planted, suite):
    from harness import registry

    planted("exit_abort=1")
    case = registry.load(suite).case("clean_exit")
    entry = execute(case, "cpu", {"trials": 1}, "quick")
    assert entry.outcome == "fail", entry.reason
    assert entry.checks and all("1/1 [" in c.detail and not c.passed
                                   for c in entry.checks)


def test_a_leftover_that_ends_before_it_is_killed_is_counted_and_not_waited_for(monkeypatch):
    """A process of the trial's group that exits between the listing and the kill: it was
    left over all the same, and nothing waits for it; a pid that is gone has no group."""
    class Ended:
        pid = os.getpid()  # listed in this process's group

        def kill(self):
            raise psutil.NoSuchProcess(self.pid)

        status = kill

    monkeypatch.setattr(clean_exit.psutil, "process_iter", lambda _attrs: [Ended()])
    t0 = time.monotonic()
    assert clean_exit._leftovers(os.getpgid(0)) == 1
    assert time.monotonic() - t0 < 1  # not the 10 s a process still dying gets
    assert clean_exit._pgid(2**22 + 1) is None  # above Linux's largest pid


def test_an_error_while_a_trial_runs_kills_its_processes_with_their_group(tmp_path, monkeypatch):
    """Should anything fail while a trial's processes run (here: reading how one ended), the
    processes still running are killed with their whole process group, and reaped, before
    the error goes on: nothing of the trial outlives it."""
    pid_file = tmp_path / "child"
    # (60 s: long enough to be killed, short enough to bound a test that failed to kill it)
    leave = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(60)']); open(sys.argv[1], 'w').write(str(p.pid)); "
             "time.sleep(60)")
    trial = []

    def fails_to_read(rank, proc, err_path, deadline):
        trial.append(proc)
        until = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < until:
            time.sleep(0.02)  # the trial's own child runs from here
        raise RuntimeError("reading the trial failed")

    monkeypatch.setattr(clean_exit, "_end", fails_to_read)
    with pytest.raises(RuntimeError, match="reading the trial failed"):
        clean_exit.run_once(["-c", leave, str(pid_file)])
    (proc,) = trial
    assert proc.returncode == -signal.SIGKILL  # killed, and reaped
    child = int(pid_file.read_text())
    until = time.monotonic() + 5  # SIGKILL is delivered asynchronously
    while (alive := launch.still_running([child])) and time.monotonic() < until:
        time.sleep(0.02)
    assert not alive
