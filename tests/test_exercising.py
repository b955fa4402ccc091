"""`Context.exercising`: torch raising while a case exercises a documented behaviour is that
behaviour's check failing, the case going on; the harness's own exception still errors it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.cases import Context, raised_in_torch
from harness.records import Check
from harness.running import launch


def test_an_exception_torch_raises_fails_the_behaviours_check_and_the_case_goes_on():
    ctx = Context(device="cpu", profile="quick", params={})
    with ctx.exercising("GradScaler refuses a growth factor of 1"):
        torch.amp.GradScaler("cpu", growth_factor=1.0)  # torch's own AssertionError
    ctx.check("next behaviour", True)
    first, second = ctx.checks
    assert (first.name, first.passed) == ("GradScaler refuses a growth factor of 1", False)
    assert first.detail.startswith("torch raised AssertionError: The growth factor must be")
    assert "(at amp/grad_scaler.py:" in first.detail
    assert second.passed
    # the run record keeps that it raised (mutation analysis counts it an error, not a wrong
    # value caught), and a check failed on a value is not marked so
    assert first.raised and not second.raised
    assert Check.from_json(first.to_json()) == first and "raised" not in second.to_json()


def test_an_exception_of_the_harness_is_an_error_not_a_check():
    ctx = Context(device="cpu", profile="quick", params={})
    with pytest.raises(KeyError), ctx.exercising("a behaviour"):
        {}["missing"]
    assert ctx.checks == []


def test_where_torch_raised_is_its_innermost_frame():
    try:
        torch.amp.GradScaler("cpu", backoff_factor=2.0)
    except AssertionError as e:
        assert raised_in_torch(e).startswith("amp/grad_scaler.py:")
    try:
        raise ValueError("here")
    except ValueError as e:
        assert raised_in_torch(e) is None


def _sent(last_file: str, error: str = "RuntimeError: boom") -> str:
    return ('Traceback (most recent call last):\n'
            '  File "/somewhere/suites/ddp_rpc/workers.py", line 10, in hybrid_worker\n'
            '    rpc.shutdown()\n'
            f'  File "{last_file}", line 42, in shutdown\n'
            '    raise RuntimeError("boom")\n'
            f'{error}\n')


def _worker_raised(last_file: str) -> launch.LaunchError:
    return launch.LaunchError([launch.WorkerFailure(1, "exception", "raised RuntimeError: boom",
                                                    _sent(last_file))], label="hybrid")


def test_a_worker_that_torch_raised_in_fails_the_behaviours_check():
    in_torch = f"{Path(torch.__file__).parent}/distributed/rpc/api.py"
    assert raised_in_torch(_worker_raised(in_torch)) == "distributed/rpc/api.py:42"
    ctx = Context(device="cpu", profile="quick", params={})
    with ctx.exercising("the hybrid trains to the end"):
        raise _worker_raised(in_torch)
    (check,) = ctx.checks
    assert not check.passed
    assert check.detail == ("hybrid rank 1 raised RuntimeError: boom "
                            "(at distributed/rpc/api.py:42)")
    # a worker that failed in the harness's own code is an error of the case
    with pytest.raises(launch.LaunchError), ctx.exercising("the hybrid trains to the end"):
        raise _worker_raised("/somewhere/suites/ddp_rpc/workers.py")


def test_a_peer_that_torch_raised_in_counts_whichever_worker_reported_first():
    # Ranks that time out in one collective report in no fixed order; the first may be one
    # whose innermost Python frame is the harness's call into a torch binding
    # (dist_autograd.backward raising RuntimeError). Where torch raised in a peer, the
    # behaviour failed either way, and the detail names that peer when it was not the first.
    in_torch = f"{Path(torch.__file__).parent}/nn/parallel/distributed.py"
    in_harness = "/somewhere/suites/ddp_rpc/workers.py"

    def failed(*sent: str) -> launch.LaunchError:
        return launch.LaunchError([launch.WorkerFailure(rank, "exception", "raised", text)
                                   for rank, text in enumerate(sent)], label="hybrid")

    where = "nn/parallel/distributed.py:42"
    assert raised_in_torch(failed(_sent(in_torch), _sent(in_harness))) == where
    assert raised_in_torch(failed(_sent(in_harness), _sent(in_torch))) == f"{where} in rank 1"
    timed_out = "torch.distributed.DistBackendError: Timed out waiting 20000ms for recv"
    assert raised_in_torch(failed(_sent(in_harness, timed_out), _sent(in_torch))) == \
        f"{where} in rank 1"
    # the harness's own bug first (no binding raises AttributeError): its peers that torch
    # then raised in do not make it a failed behaviour; nor do two errors outside torch
    bug = "AttributeError: 'Spec' object has no attribute 'optim'"
    assert raised_in_torch(failed(_sent(in_harness, bug), _sent(in_torch))) is None
    assert raised_in_torch(failed(_sent(in_harness), _sent(in_harness))) is None
