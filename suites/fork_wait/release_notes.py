"""TorchScript fork/wait as the 1.6 release notes wrote it (100 forks of `foo` in a scripted
function), and the eager-mode fork that the notes' API also allows.
See harness.releases.api_record."""

from __future__ import annotations

import torch

from harness.releases.api_record import example


def foo(x):
    return torch.neg(x)


@example("fork_wait", "1.6")
def scripted_fork_wait():
    """torch.jit.fork / torch.jit.wait inside @torch.jit.script, the release notes' example"""

    @torch.jit.script
    def example(x):
        futures = [torch.jit.fork(foo, x) for _ in range(100)]
        results = [torch.jit.wait(future) for future in futures]
        return torch.sum(torch.stack(results))

    got = example(torch.ones([]))
    assert got.item() == -100.0, f"gave {got}"


@example("fork_wait", "1.6")
def eager_fork_wait():
    """torch.jit.fork / torch.jit.wait called eagerly (no script): runs serially"""
    fut = torch.jit.fork(foo, torch.ones(2))
    got = torch.jit.wait(fut)
    assert torch.equal(got, -torch.ones(2)), f"gave {got}"
