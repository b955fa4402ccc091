"""The hybrid's pieces that run where coverage cannot follow, called in this process.

The parameter server's functions are served over RPC, on TensorPipe's own threads, and the
breaks that hang or kill run in workers that the launcher ends by a signal: the cases run
them, but no line of theirs is seen running there. Here each is called in the test's own
thread, with real inputs, and what it does is checked. (`workers` is imported inside the
tests: the DDP test's workers import this module, and need only the light `breaks`.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types

import pytest
import torch
from torch.distributed import autograd as dist_autograd

from harness.running import launch
from suites.ddp_rpc import breaks
from suites.ddp_rpc.model import (
    PS_RANK,
    Shape,
    make_batches,
    new_embedding,
)


def new_spec(task: str = "train", mode: str = "none", **kw):
    """A hybrid run's spec on the CPU, as the cases make it, of two steps' batches."""
    from suites.ddp_rpc import cases

    shape = Shape()
    return cases.new_spec(task, mode, "cpu", make_batches(shape, 2), shape, **kw)


def _dense(rank: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """The same seeded layer on every rank, and an input of that rank's own."""
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2), torch.full((4, 3), float(rank + 1))


def ddp_without_allreduce(rank: int, world: int) -> list[torch.Tensor]:
    """One backward of a DDP-wrapped layer over Gloo, ddp_allreduce_disabled applied; the
    layer's gradients as DDP left them."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    breaks.ddp_allreduce_disabled()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        layer, x = _dense(rank)
        ddp = DistributedDataParallel(layer)  # alive through backward, which its hooks join
        ddp(x).sum().backward()
        return [p.grad for p in layer.parameters()]
    finally:
        dist.destroy_process_group()


@pytest.mark.distributed
def test_the_allreduce_break_leaves_each_ddp_replica_its_own_gradients():
    """ddp_allreduce_disabled's comm hook hands each bucket back unreduced: each of two ranks
    keeps the gradients of its own input, which DDP would have averaged."""
    got = launch.launch(ddp_without_allreduce, 2, timeout_s=120)
    own = []
    for rank in range(2):
        layer, x = _dense(rank)
        layer(x).sum().backward()
        own.append([p.grad for p in layer.parameters()])
    for rank in range(2):
        assert all(torch.equal(g, w) for g, w in zip(got[rank], own[rank], strict=True))
    assert not torch.equal(own[0][0], own[1][0])  # so an average would have changed both


def test_the_victim_hangs_break_keeps_the_victim_alive_in_a_sleep(monkeypatch):
    """victim_hangs: the fault injection's SIGKILL becomes an hour's sleep (recorded here,
    not slept), and the process it was meant for lives on."""
    slept = []
    monkeypatch.setattr(breaks, "time", types.SimpleNamespace(sleep=slept.append))
    monkeypatch.setattr(os, "kill", os.kill)  # put back after the break replaces it
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        breaks.victim_hangs()
        os.kill(victim.pid, signal.SIGKILL)
        assert slept == [3600]
        with pytest.raises(subprocess.TimeoutExpired):  # not killed: still running
            victim.wait(0.5)
    finally:
        monkeypatch.undo()  # the real os.kill again, for Popen.kill
        victim.kill()
        victim.wait(10)


def test_the_swallowing_break_turns_a_failed_step_into_a_wait(monkeypatch):
    """survivors_swallow_errors: a training step that succeeds returns its loss as before;
    one that raises (a dead peer's error) sleeps an hour (recorded here) and raises
    nothing, so the survivor never fails on its own."""
    from suites.ddp_rpc import workers

    slept = []
    monkeypatch.setattr(breaks, "time", types.SimpleNamespace(sleep=slept.append))

    def step(loss: float) -> float:
        if loss < 0:
            raise RuntimeError("RPC to trainer1 failed: peer gone")
        return loss

    monkeypatch.setattr(workers, "train_step", step)  # put back after the break wraps it
    breaks.survivors_swallow_errors()
    assert workers.train_step(0.5) == 0.5 and slept == []
    assert workers.train_step(-1.0) is None
    assert slept == [3600]


def test_a_parameter_server_set_to_die_dies_at_the_first_lookup_of_its_step(monkeypatch):
    """With the kill at (parameter server, step 1), the server answers step 0's two lookups
    (one per trainer) and dies at the next, step 1's first; each lookup it answers is the
    embedding's own."""
    from suites.ddp_rpc import workers

    spec = new_spec(kill=(PS_RANK, 1))
    died = []
    monkeypatch.setattr(workers, "_PS", {})
    monkeypatch.setattr(workers, "die", died.append)
    workers._start_parameter_server(spec)
    b = spec.batches[0][0]
    want = new_embedding(spec.shape, spec.init.embedding)(b.indices, b.offsets)
    for lookup in (1, 2, 3):
        got = workers._PS["embedding"].forward(b.indices, b.offsets)
        assert torch.equal(got, want)
        assert died == ([spec] if lookup == 3 else []), lookup


def test_the_servers_weight_and_gradient_calls_answer_from_its_embedding(monkeypatch,
                                                                        rpc_group_of_one):
    """embedding_weight is a detached copy of the server's weights (the trainers' local
    check builds its module from it); embedding_grad is the embedding's gradient in one
    distributed-autograd context: local autograd's, and never left in `.grad`."""
    from suites.ddp_rpc import workers

    spec = new_spec()
    emb = new_embedding(spec.shape, spec.init.embedding)
    monkeypatch.setattr(workers, "_PS", {"embedding": emb})
    weight = workers.embedding_weight()
    assert torch.equal(weight, spec.init.embedding) and not weight.requires_grad
    weight.add_(1.0)
    assert torch.equal(emb.weight, spec.init.embedding)

    b = spec.batches[0][0]
    with rpc_group_of_one("ps"), dist_autograd.context() as context_id:
        dist_autograd.backward(context_id, [emb(b.indices, b.offsets).square().sum()])
        got = workers.embedding_grad(context_id)
    local = new_embedding(spec.shape, spec.init.embedding)
    local(b.indices, b.offsets).square().sum().backward()
    assert torch.equal(got, local.weight.grad)
    assert emb.weight.grad is None


def test_the_local_gradient_comparison_refuses_ddp_around_the_whole_model():
    """Task "grads" with the local check cannot reach the dense module inside DDP around the
    hybrid model: it says so before building anything."""
    from suites.ddp_rpc import workers

    spec = new_spec(task="grads", mode="outside", local_check=True)
    with pytest.raises(ValueError, match="needs the dense module outside any wrapper"):
        workers.grads_task(1, spec, group=None)
