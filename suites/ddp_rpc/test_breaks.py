"""Each DDP+RPC check, shown to fail when the feature is broken on purpose.

The breaks run inside the launcher's workers (`worker_setup=` hooks of `execute`, in
tests/planted/ddp_rpc_breaks.py, a module kept light because every worker imports it). Each
case first passes unbroken (the verdict the pytest view gives, shared); then the same case runs
with one break and the checks that guard against it fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.adapters.pytest_adapter import unbroken
from harness.records import Result
from harness.running import launch
from harness.running.runner import execute
from suites.ddp_rpc import cases

# The breaks live with the other planted code, out of the package; spawn pickles a hook by its
# module's name, so that folder is on the path here and in the workers, which inherit it (and
# wherever this module is imported: asv's discovery imports every module under suites/).
PLANTED = str(Path(__file__).resolve().parents[2] / "tests" / "planted")
if PLANTED not in sys.path:
    sys.path.append(PLANTED)
from ddp_rpc_breaks import (  # noqa: E402
    ddp_allreduce_disabled,
    dist_backward_seed_doubled,
    join_disabled,
    join_divides_by_ranks_still_training,
    join_final_sync_skipped,
    kill_ignored,
    remote_output_detached,
    survivors_swallow_errors,
    victim_hangs,
)

pytestmark = pytest.mark.distributed


def run(name: str, params: dict, setup=None) -> Result:
    """The case's result entry, `setup` having run in each of its workers (where unbroken it
    passes: asked first, before a test changes anything)."""
    unbroken(cases.suite.case(name), "cpu", params)
    return execute(cases.suite.case(name), "cpu", params, "quick", worker_setup=setup)


def failed(entry: Result) -> set[str]:
    return {c.name for c in entry.checks if not c.passed}


def passed(entry: Result) -> set[str]:
    return {c.name for c in entry.checks if c.passed}


def init_refused() -> None:
    """init_rpc refuses to start the group: torch's own argument check raises in every
    process (a TypeError in torch/distributed/rpc/__init__.py), as a broken init would."""
    import functools

    from torch.distributed import rpc

    rpc.init_rpc = functools.partial(rpc.init_rpc, backend="not a backend")


@pytest.mark.parametrize(("name", "params"), [("matches_reference", {"ddp": "inside"}),
                                              ("mirrored_pairs", {"ddp": "inside"}),
                                              ("dist_grads_equal_local", {"ddp": "inside"})])
def test_torch_raising_in_a_process_fails_the_hybrids_check(name, params):
    """Not an error of the case: the check that the hybrid runs to the end fails, naming
    what torch raised and where."""
    entry = run(name, params, init_refused)
    assert entry.outcome == "fail", entry.reason
    detail = {c.name: c.detail for c in entry.checks if not c.passed}
    assert list(detail) == ["trainers and parameter server run the hybrid to the end without "
                            "an error"]
    assert "(at distributed/rpc/__init__.py:" in next(iter(detail.values()))


def test_a_hybrid_that_fails_before_its_fault_fails_the_fault_checks_as_raised():
    """faults: torch raising before the victim is killed is no fault handled: the checks of
    the error report fail, marked raised (a crash, not a wrong report of the death)."""
    entry = run("faults", {"victim": "trainer"}, init_refused)
    assert entry.outcome == "fail", entry.reason
    bad = {c.name: c.raised for c in entry.checks if not c.passed}
    # whether every peer had raised on its own by then, or was still waiting when it was
    # stopped, varies from run to run; either way the failure is the crash's
    assert "error reports the dead rank killed" in bad and all(bad.values()), entry.checks
    assert set(bad) <= {"error reports the dead rank killed", "survivors failed on their own"}


def test_reference_checks_fail_without_ddp_allreduce():
    entry = run("matches_reference", {"ddp": "inside"}, ddp_allreduce_disabled)
    assert entry.outcome == "fail", entry.reason
    assert {"trainer replicas identical", "trainer 1 dense parameters match reference",
            "trainer 2 dense parameters match reference", "trainer 1 losses match reference",
            "trainer 2 losses match reference"} <= failed(entry), entry.reason


def test_reference_embedding_check_fails_when_rpc_output_detached():
    entry = run("matches_reference", {"ddp": "none"}, remote_output_detached)
    assert entry.outcome == "fail", entry.reason
    assert "embedding matches reference" in failed(entry), entry.reason


def test_mirrored_zero_check_fails_without_ddp_allreduce():
    entry = run("mirrored_pairs", {"ddp": "inside"}, ddp_allreduce_disabled)
    assert "DDP gradients exactly zero" in failed(entry), entry.reason
    # The embedding still gets gradients; they stop being opposites once the unsynchronised
    # dense replicas differ (from the second step on).
    assert "embedding gradients non-zero" in passed(entry)


def test_mirrored_embedding_checks_fail_when_rpc_output_detached():
    entry = run("mirrored_pairs", {"ddp": "outside"}, remote_output_detached)
    assert failed(entry) == {"embedding gradients non-zero",
                             "trainers' embedding gradients exact opposites"}, entry.reason


def test_local_grad_checks_fail_when_rpc_output_detached():
    entry = run("dist_grads_equal_local", {"ddp": "inside"}, remote_output_detached)
    assert failed(entry) == {f"trainer {r} embedding gradients equal local autograd"
                             for r in (1, 2)}, entry.reason


def test_local_grad_checks_fail_when_dist_backward_is_wrong():
    entry = run("dist_grads_equal_local", {"ddp": "inside"}, dist_backward_seed_doubled)
    assert failed(entry) == {f"trainer {r} {part} gradients equal local autograd"
                             for r in (1, 2) for part in ("dense", "embedding")}, entry.reason


def test_join_reference_checks_fail_when_join_divides_by_the_ranks_still_training():
    """A factor of 2 on trainer 1's steps after trainer 2 joined: its parameters, and its
    losses from the next step on, leave the reference; join's final sync still makes the
    replicas equal."""
    entry = run("uneven_inputs", {"ddp": "inside"}, join_divides_by_ranks_still_training)
    assert failed(entry) == {"trainer 1 dense parameters match the joined reference",
                             "trainer 1 losses match the joined reference"}, entry.reason


def test_join_replica_check_fails_when_joins_final_sync_is_skipped():
    """Trainer 2 keeps the parameters of its last own step: only the replicas differ."""
    entry = run("uneven_inputs", {"ddp": "inside"}, join_final_sync_skipped)
    assert failed(entry) == {"trainer replicas identical after join"}, entry.reason


def test_join_reference_checks_fail_without_ddp_allreduce():
    """Each trainer steps with its own gradients (the joined one's shadowed all-reduces go
    through the same hook): both trainers' losses leave the reference from the second step
    on, and trainer 1's parameters; join's final sync still makes the replicas equal."""
    entry = run("uneven_inputs", {"ddp": "inside"}, ddp_allreduce_disabled)
    assert failed(entry) == {"trainer 1 dense parameters match the joined reference",
                             "trainer 1 losses match the joined reference",
                             "trainer 2 losses match the joined reference"}, entry.reason


def test_fault_error_checks_fail_when_nobody_dies():
    entry = run("faults", {"victim": "trainer"}, kill_ignored)
    assert failed(entry) == {"error reports the dead rank killed",
                             "survivors failed on their own"}, entry.reason


# The tests that change the suite or the launcher ask for the unbroken verdict themselves,
# first: `run` asks after their changes, which must not reach the shared verdict.
def test_survivor_check_fails_when_errors_are_swallowed(monkeypatch):
    unbroken(cases.suite.case("faults"), "cpu", {"victim": "trainer"})
    monkeypatch.setattr(cases, "GRACE_S", 3.0)
    entry = run("faults", {"victim": "trainer"}, survivors_swallow_errors)
    assert failed(entry) == {"survivors failed on their own"}, entry.reason


def test_no_hang_check_fails_when_the_victim_hangs(monkeypatch):
    unbroken(cases.suite.case("faults"), "cpu", {"victim": "trainer"})
    # Gloo's own timeout would otherwise end the survivors' wait before the launcher's.
    monkeypatch.setattr(cases, "FAULT_PG_TIMEOUT_S", 600.0)
    monkeypatch.setattr(cases, "FAULT_LAUNCH_TIMEOUT_S", 20.0)
    entry = run("faults", {"victim": "trainer"}, victim_hangs)
    assert {"no hang", "error reports the dead rank killed"} <= failed(entry), entry.reason


def test_reaped_check_fails_when_the_launcher_does_not_reap(monkeypatch):
    unbroken(cases.suite.case("faults"), "cpu", {"victim": "ps"})
    monkeypatch.setattr(cases, "GRACE_S", 3.0)
    monkeypatch.setattr(launch, "_reap", lambda procs: None)
    entry = run("faults", {"victim": "ps"}, survivors_swallow_errors)
    try:
        assert failed(entry) == {"every process reaped", "survivors failed on their own"}, \
            entry.reason
    finally:
        launch.kill_leftovers(entry.details.get("pids", {}).values())


# What turns each case's feature off: DDP's all-reduce (the dense half), RPC's gradient
# (the remote half), DDP's join (uneven inputs), the fault injection's kill, or RPC made a
# local call (tests/planted/feature_off.py). Each must then fail: never pass, never n/a. The
# entries the tests above already run are named by them; the rest run below.
FEATURE_OFF = {
    ("matches_reference", "ddp=none"): (remote_output_detached, {"ddp": "none"}),
    ("matches_reference", "ddp=outside"): (ddp_allreduce_disabled, {"ddp": "outside"}),
    ("matches_reference", "ddp=inside"): (ddp_allreduce_disabled, {"ddp": "inside"}),
    ("mirrored_pairs", "ddp=outside"): (remote_output_detached, {"ddp": "outside"}),
    ("mirrored_pairs", "ddp=inside"): (ddp_allreduce_disabled, {"ddp": "inside"}),
    ("dist_grads_equal_local", "ddp=inside"): (remote_output_detached, {"ddp": "inside"}),
    ("uneven_inputs", "ddp=inside"): (join_disabled, {"ddp": "inside"}),
    ("faults", "victim=trainer"): (kill_ignored, {"victim": "trainer"}),
    ("faults", "victim=ps"): (kill_ignored, {"victim": "ps"}),
    ("clean_exit", "trials=2"): ("rpc", {"trials": 2}),
}
RUN_ABOVE = {
    ("matches_reference", "ddp=none"):
        test_reference_embedding_check_fails_when_rpc_output_detached,
    ("matches_reference", "ddp=inside"): test_reference_checks_fail_without_ddp_allreduce,
    ("mirrored_pairs", "ddp=outside"):
        test_mirrored_embedding_checks_fail_when_rpc_output_detached,
    ("mirrored_pairs", "ddp=inside"): test_mirrored_zero_check_fails_without_ddp_allreduce,
    ("dist_grads_equal_local", "ddp=inside"):
        test_local_grad_checks_fail_when_rpc_output_detached,
    ("faults", "victim=trainer"): test_fault_error_checks_fail_when_nobody_dies,
}


@pytest.mark.parametrize(("name", "params_id"), [k for k in FEATURE_OFF if k not in RUN_ABOVE],
                         ids=[f"{n}-{p}" for n, p in FEATURE_OFF if (n, p) not in RUN_ABOVE])
def test_each_case_fails_with_its_feature_off(feature_off, name, params_id):
    feature_off.assert_fails(cases.suite, FEATURE_OFF, name, params_id)
