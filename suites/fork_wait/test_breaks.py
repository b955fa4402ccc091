"""Each fork/wait check, shown to fail when the feature is broken on purpose."""

from __future__ import annotations

import threading

import pytest
import torch

from harness.adapters.pytest_adapter import unbroken
from harness.records import Result
from harness.running.runner import execute
from suites.fork_wait import cases


def lost_wait(fut: torch.jit.Future[torch.Tensor]) -> torch.Tensor:
    """A broken torch.jit.wait: it never collects the forked result."""
    return torch.zeros(1)


def threaded_fork(fn, *args, **kwargs):
    """A broken eager torch.jit.fork: runs the function on another thread, later."""
    fut = torch.futures.Future()
    threading.Timer(0.05, lambda: fut.set_result(fn(*args, **kwargs))).start()
    return fut


def script_disabled() -> None:
    """Runs in the benchmark worker: scripting becomes a no-op, so fork takes its eager,
    serial path."""
    torch.jit.script = lambda fn, *a, **k: fn


@pytest.fixture
def fresh_jit():
    """torch.jit.script caches compiled functions by function object; a patched torch is
    only seen by a fresh compile, so empty the cache before and after (a private API)."""
    torch.jit._state._jit_caching_layer.clear()
    yield
    torch.jit._state._jit_caching_layer.clear()


def run(name: str, params: dict | None = None) -> Result:
    case = cases.suite.case(name)
    return execute(case, "cpu", params or case.param_sets("quick")[0], "quick")


@pytest.mark.parametrize(("name", "result_checks"), [
    ("release_notes_example", {"returns -100"}),
    # each task's result is lost, not the count of results: one per task still holds
    ("scripted_equals_serial", {f"task {i} equals serial" for i in range(4)}),
])
def test_result_checks_fail_when_wait_loses_results(monkeypatch, fresh_jit, name,
                                                    result_checks):
    unbroken(cases.suite.case(name), "cpu")
    monkeypatch.setattr(torch.jit, "wait", lost_wait)
    torch.jit._state._jit_caching_layer.clear()
    entry = run(name)
    assert entry.outcome == "fail", entry.reason
    assert {c.name for c in entry.checks if not c.passed} == result_checks


def test_eager_serial_check_fails_when_fork_is_threaded(monkeypatch):
    unbroken(cases.suite.case("eager_fork_is_serial"), "cpu")
    monkeypatch.setattr(torch.jit, "fork", threaded_fork)
    # torch.jit.wait holds the GIL while it blocks, which would starve the fork's thread;
    # Future.wait releases it.
    monkeypatch.setattr(torch.jit, "wait", lambda fut: fut.wait())
    entry = run("eager_fork_is_serial")
    assert entry.outcome == "fail"
    failed = {c.name for c in entry.checks if not c.passed}
    assert failed == {"future complete when fork returns", "ran on the calling thread"}


@pytest.mark.distributed
def test_scaling_check_fails_when_fork_runs_serially():
    case = cases.suite.case("scaling")
    unbroken(case, "cpu", {"interop_threads": 2})
    entry = execute(case, "cpu", {"interop_threads": 2}, "quick", worker_setup=script_disabled)
    parallel = [c for c in entry.checks if c.name.startswith("parallel at")]
    assert parallel and not any(c.passed for c in parallel), entry.checks
    assert case.kind == "benchmark"


# What turns each case's feature off (tests/planted/feature_off.py): TorchScript off, so that
# fork runs inline and forked results equal serial ones trivially; for the eager case, a fork
# that runs nothing. Each must then fail: never pass, never n/a.
FEATURE_OFF = {
    ("release_notes_example", "default"): ("torchscript", {}),
    ("scripted_equals_serial", "tasks=4"): ("torchscript", {"tasks": 4}),
    ("eager_fork_is_serial", "default"): ("eager_fork", {}),
    ("clean_exit", "trials=2"): ("torchscript", {"trials": 2}),
}


@pytest.mark.parametrize(("name", "params_id"), list(FEATURE_OFF),
                         ids=[f"{n}-{p}" for n, p in FEATURE_OFF])
def test_each_case_fails_with_its_feature_off(feature_off, name, params_id):
    feature_off.assert_fails(cases.suite, FEATURE_OFF, name, params_id)


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["release_notes_example", "scripted_equals_serial"])
def test_off_thread_check_fails_when_forks_run_inline(name):
    """Scripting off in the profiler worker only: the results (computed here) are right, but
    the profiled forks run on the caller's thread, and the off-thread check must fail."""
    case = cases.suite.case(name)
    unbroken(case, "cpu")
    entry = execute(case, "cpu", case.param_sets("quick")[0], "quick",
                    worker_setup=script_disabled)
    failed = {c.name for c in entry.checks if not c.passed}
    assert entry.outcome == "fail" and failed == {"forked tasks ran off the caller's thread"}, \
        entry.checks
