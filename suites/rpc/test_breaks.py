"""Each RPC check, shown to fail when the feature is broken on purpose.

The breaks are `setup` hooks that the launcher runs in every worker before the case's worker
function (and, for async_execution, before the decorated functions are defined: see
remote_async.py). The same cases pass unbroken in test_rpc.py.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pytest
import torch
from torch.distributed import rpc

from harness.adapters.pytest_adapter import unbroken
from harness.records import Result
from harness.running import launch
from harness.running.runner import execute
from suites.rpc import cases

pytestmark = pytest.mark.distributed


def lossy_transport() -> None:
    """Every tensor RPC carries, through the Python pickler or a builtin op's arguments,
    arrives as a different tensor (one element longer, zeros)."""
    from torch.distributed.rpc import api, internal

    def wrong(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros(t.numel() + 1, dtype=t.dtype, device=t.device)

    pickler = internal._internal_rpc_pickler
    reduce = pickler._dispatch_table[torch.Tensor]
    pickler._dispatch_table[torch.Tensor] = lambda t: reduce(wrong(t))
    builtin = api._invoke_rpc_builtin

    def invoke_builtin(dst, name, timeout, *args, **kwargs):
        args = tuple(wrong(a) if isinstance(a, torch.Tensor) else a for a in args)
        return builtin(dst, name, timeout, *args, **kwargs)

    api._invoke_rpc_builtin = invoke_builtin


def complex_tensors_refused() -> None:
    """A call of a Python function carrying a complex tensor fails in the caller, as over a
    transport without complex support; builtin ops' arguments still cross."""
    from torch.distributed.rpc import internal

    pickler = internal._internal_rpc_pickler
    reduce = pickler._dispatch_table[torch.Tensor]

    def refuse_complex(t: torch.Tensor):
        if t.is_complex():
            raise TypeError("complex tensors are not supported")
        return reduce(t)

    pickler._dispatch_table[torch.Tensor] = refuse_complex


def exceptions_lost() -> None:
    """A remote function's exception comes back as a bare RuntimeError without its text."""
    from torch.distributed.rpc import internal

    run = internal._run_function

    def run_function(python_udf):
        result = run(python_udf)
        if isinstance(result, internal.RemoteException):
            return internal.RemoteException("remote call failed", RuntimeError)
        return result

    internal._run_function = run_function


def _with_timeout(timeout: Callable[[float], float]) -> None:
    """rpc_sync and rpc_async of the suite's functions run with `timeout(asked)` seconds
    (-1: the default, 0: none); torch's own calls (init, shutdown) are left alone."""
    from torch.distributed.rpc import api

    invoke = api._invoke_rpc

    def invoke_rpc(to, func, rpc_type, args=None, kwargs=None, rpc_timeout=-1.0):
        if getattr(func, "__module__", "").startswith("suites."):
            rpc_timeout = timeout(rpc_timeout)
        return invoke(to, func, rpc_type, args, kwargs, rpc_timeout)

    api._invoke_rpc = invoke_rpc


def timeouts_ignored() -> None:
    """Every rpc_sync/rpc_async runs with no timeout, whatever was asked."""
    _with_timeout(lambda asked: 0.0)


def timeouts_premature() -> None:
    """Timeouts fire 100 times too early (and the default one after 10 ms)."""
    _with_timeout(lambda asked: 0.01 if asked < 0 else asked / 100)


def peer_death_hangs() -> None:
    """An rpc_sync whose peer has died blocks forever instead of raising."""
    sync = rpc.rpc_sync

    @functools.wraps(sync)
    def rpc_sync(*args, **kwargs):
        try:
            return sync(*args, **kwargs)
        except Exception:
            time.sleep(3600)
            raise

    rpc.rpc_sync = rpc_sync


def async_execution_ignored() -> None:
    """@rpc.functions.async_execution does nothing: the callee returns the Future itself."""
    rpc.functions.async_execution = lambda fn: fn


def async_execution_blocking() -> None:
    """@rpc.functions.async_execution waits for the Future on the RPC thread (what a handler
    without async_execution does)."""

    def blocking(fn):
        @functools.wraps(fn)
        def wait(*args, **kwargs):
            return fn(*args, **kwargs).wait()

        return wait

    rpc.functions.async_execution = blocking


def init_refused() -> None:
    """init_rpc refuses to start the group: torch's own argument check raises in every
    worker (a TypeError in torch/distributed/rpc/__init__.py), as a broken init would."""
    rpc.init_rpc = functools.partial(rpc.init_rpc, backend="not a backend")


def shutdown_not_graceful() -> None:
    """rpc.shutdown() leaves at once, as graceful=False does: a worker's shutdown no longer
    waits for the others to reach theirs (neither torch's Python barrier nor the agent's join
    through the store)."""
    rpc.shutdown = functools.partial(rpc.shutdown, graceful=False)


def _broken(case_name: str, setup) -> Result:
    """The case's result entry, `setup` having run in each of its workers (where unbroken it
    passes)."""
    unbroken(cases.suite.case(case_name), "cpu")
    return execute(cases.suite.case(case_name), "cpu", {}, "quick", worker_setup=setup)


def _failed(entry: Result) -> set[str]:
    return {c.name for c in entry.checks if not c.passed}


# Breaks under which every check of the case fails.
@pytest.mark.parametrize(("case", "breaks"), [
    ("roundtrip", lossy_transport),
    ("remote_exception", exceptions_lost),
    ("rpc_timeout", timeouts_premature),
    ("async_execution", async_execution_ignored),
    ("async_batch_no_deadlock", async_execution_blocking),
], ids=["lossy-transport", "exceptions-lost", "timeouts-fire-early", "async-ignored",
        "handlers-block-threads"])
def test_every_check_fails_under_its_break(case, breaks):
    entry = _broken(case, breaks)
    # every check but the one that the calls crossed to the callee, which they still do
    crossing = {c.name for c in entry.checks if c.name.startswith("calls ran on")}
    assert entry.checks and _failed(entry) == {c.name for c in entry.checks} - crossing


def test_a_group_that_fails_before_its_peer_dies_fails_the_peer_death_check_as_raised():
    """worker_killed: torch raising before the peer kills itself is no peer death handled:
    the check of the caller's error fails, marked raised (a crash, not a hang or a wrong
    error on the peer's death)."""
    entry = _broken("worker_killed", init_refused)
    bad = {c.name: c.raised for c in entry.checks if not c.passed}
    assert bad == {"the caller's RPC raises when its peer dies (no hang)": True}, entry.checks


@pytest.mark.parametrize(("case", "workers"), [
    ("roundtrip", 2), ("remote_exception", 2), ("rpc_timeout", 2), ("async_execution", 3),
    ("async_batch_no_deadlock", 2)])
def test_torch_raising_in_a_worker_fails_the_workers_check(case, workers):
    """Not an error of the case: the check that the workers run to the end fails, naming
    what torch raised and where."""
    entry = _broken(case, init_refused)
    assert entry.outcome == "fail", entry.reason
    detail = {c.name: c.detail for c in entry.checks if not c.passed}
    assert list(detail) == [f"the {workers} RPC workers start, call and shut down without an "
                            "error"]
    assert "Argument backend must be a member of BackendType" in next(iter(detail.values()))
    assert "(at distributed/rpc/__init__.py:" in next(iter(detail.values()))


def test_a_round_trip_whose_call_fails_is_a_failed_check_with_the_error():
    """A call that raises instead of returning fails its tensor's check, with the error as
    the check's detail; the other tensors and paths are still checked, and pass."""
    entry = _broken("roundtrip", complex_tensors_refused)
    assert {c.name: c.detail for c in entry.checks if not c.passed} == {
        "complex64 via python echo": "raised TypeError: complex tensors are not supported"}
    assert {"complex64 via builtin torch.clone", "4 MiB float32 via python echo"} <= {
        c.name for c in entry.checks if c.passed}
    # a raise, not a wrong tensor: the record says so (mutation analysis counts an error)
    assert [c.raised for c in entry.checks if not c.passed] == [True]


def test_the_shutdown_check_fails_when_shutdown_does_not_wait():
    entry = _broken("graceful_shutdown", shutdown_not_graceful)
    assert _failed(entry) == {"worker0's shutdown waits for worker1, which reaches it 1 s later"}
    assert entry.details["leader_shutdown_wait_s"] < 0.5


def test_timeout_checks_fail_when_timeouts_are_ignored():
    entry = _broken("rpc_timeout", timeouts_ignored)
    assert len(entry.checks) == 4
    assert _failed(entry) == {c.name for c in entry.checks if "raises within" in c.name}


def test_peer_death_check_fails_when_rpc_hangs():
    entry = _broken("worker_killed", peer_death_hangs)
    assert _failed(entry) == {"the caller's RPC raises when its peer dies (no hang)"}


def test_reaping_check_fails_when_the_launcher_does_not_reap(monkeypatch):
    unbroken(cases.suite.case("worker_killed"), "cpu")  # before the launcher is broken
    monkeypatch.setattr(launch, "_reap", lambda procs: None)
    entry = _broken("worker_killed", peer_death_hangs)
    try:
        assert "every worker process is reaped" in _failed(entry)
    finally:  # the hung worker this test left running
        launch.kill_leftovers(entry.details["pids"])


# What turns each case's feature off (tests/planted/feature_off.py: rpc_sync, rpc_async and
# remote run the function in the caller; for graceful_shutdown, a shutdown that does not
# wait), with the parameters it is run with. Each must then fail: never pass on values that
# never crossed a process, never n/a.
FEATURE_OFF = {
    ("roundtrip", "default"): ("rpc", {}),
    ("remote_exception", "default"): ("rpc", {}),
    ("rpc_timeout", "default"): ("rpc", {}),
    ("worker_killed", "default"): ("rpc", {}),
    ("graceful_shutdown", "default"): (shutdown_not_graceful, {}),
    ("async_execution", "default"): ("rpc", {}),
    ("async_batch_no_deadlock", "default"): ("rpc", {}),
    ("clean_exit", "trials=2"): ("rpc", {"trials": 2}),
}


# entries whose plant a test above already runs, asserting more than the failure
RUN_ABOVE = {
    ("graceful_shutdown", "default"): test_the_shutdown_check_fails_when_shutdown_does_not_wait,
}


@pytest.mark.parametrize(("name", "params_id"), [k for k in FEATURE_OFF if k not in RUN_ABOVE],
                         ids=[f"{n}-{p}" for n, p in FEATURE_OFF if (n, p) not in RUN_ABOVE])
def test_each_case_fails_with_its_feature_off(feature_off, name, params_id):
    feature_off.assert_fails(cases.suite, FEATURE_OFF, name, params_id)


def test_the_round_trip_check_sees_a_flipped_bit_a_signed_zero_and_a_non_tensor():
    """The comparison behind the round-trip checks, on what a subtly lossy transport returns:
    same dtype, shape and device, other bits (which torch.equal can miss: -0.0 == 0.0)."""
    from suites.rpc.workers import bitwise_diff

    sent = torch.tensor([1.0, -0.0, float("nan"), 3.0])
    assert bitwise_diff(sent, sent.clone()) == ""
    flipped = sent.clone()
    flipped.view(torch.int32)[3] ^= 1  # the lowest mantissa bit of 3.0
    assert bitwise_diff(sent, flipped) == "1 of 16 bytes differ"
    unsigned = torch.tensor([1.0, 0.0, float("nan"), 3.0])
    assert torch.equal(sent.nan_to_num(), unsigned.nan_to_num())
    assert bitwise_diff(sent, unsigned) == "1 of 16 bytes differ"
    assert bitwise_diff(sent, sent.tolist()) == "got list"
    assert bitwise_diff(sent, sent.double()) == "dtype torch.float32 came back as torch.float64"
