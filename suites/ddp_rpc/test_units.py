"""The parameter server's services, called in this process with real inputs (over RPC they
run on TensorPipe's own threads), and what each does checked."""

from __future__ import annotations

import pytest
import torch
from torch.distributed import autograd as dist_autograd

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
