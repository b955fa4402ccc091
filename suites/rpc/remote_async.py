"""The `@rpc.functions.async_execution` functions the suite runs on its peers.

They are decorated when this module is imported. Workers import it lazily, inside the worker
function and after the launcher's `setup` hook has run, so that the tests can replace the
decorator on purpose (see test_breaks.py) before it is applied. Nothing that a launched
worker unpickles at start-up may import this module.
"""

from __future__ import annotations

import torch
from torch.distributed import rpc

from suites.rpc import remote


@rpc.functions.async_execution
def async_add_chained(to: str, x: torch.Tensor, y: float, z: float):
    """The release notes' example: torch.add on `to`, then `+ z` in a callback."""
    return rpc.rpc_async(to, torch.add, args=(x, y)).then(lambda fut: fut.wait() + z)


@rpc.functions.async_execution
def add_chain(to: str, x: torch.Tensor, steps: int):
    """x + 0 on `to`, then `steps` chained callbacks, each adding 1."""
    fut = rpc.rpc_async(to, torch.add, args=(x, 0))
    for _ in range(steps):
        fut = fut.then(lambda f: f.wait() + 1)
    return fut


@rpc.functions.async_execution
def add_nested(via: str, to: str, x: torch.Tensor, y: float, z: float):
    """Calls async_add_chained on `via` (which calls `to`), then adds `z` once more."""
    return rpc.rpc_async(via, async_add_chained, args=(to, x, y, z)).then(
        lambda fut: fut.wait() + z)


@rpc.functions.async_execution
def add_fanout(tos: list[str], x: torch.Tensor, step: float):
    """torch.add(x, step) on every worker of `tos` at once; the sum of their results."""
    futs = [rpc.rpc_async(to, torch.add, args=(x, step)) for to in tos]
    return torch.futures.collect_all(futs).then(
        lambda fut: torch.stack([f.wait() for f in fut.wait()]).sum(0))


@rpc.functions.async_execution
def returns_tensor(x: torch.Tensor):
    """Wrong on purpose: an async_execution function must return a Future."""
    return x + 1


@rpc.functions.async_execution
def async_update(name: str, grad: torch.Tensor):
    """The batched update with async_execution: returns the batch's Future at once."""
    return remote.servers[name].submit(grad)
