"""The TorchScript programs the fork/wait suite runs, and builders for them.

Functions are scripted when a builder is called, not at import, so that a test can patch
torch first (and so importing the suite does not trigger the TorchScript deprecation warnings).
"""

from __future__ import annotations

import torch


def neg(x: torch.Tensor) -> torch.Tensor:
    return torch.neg(x)


def release_notes_example(x: torch.Tensor) -> torch.Tensor:
    """The 1.6 release notes' example: 100 forks of neg, waited and summed."""
    futures = [torch.jit.fork(neg, x) for _ in range(100)]
    results = [torch.jit.wait(future) for future in futures]
    return torch.sum(torch.stack(results))


def task(x: torch.Tensor, w: torch.Tensor, steps: int) -> torch.Tensor:
    """One independent unit of work: a chain of matmul + tanh on its own input."""
    for _ in range(steps):
        x = torch.tanh(torch.mm(x, w))
    return x


def forked(xs: list[torch.Tensor], w: torch.Tensor, steps: int) -> list[torch.Tensor]:
    futures = [torch.jit.fork(task, x, w, steps) for x in xs]
    return [torch.jit.wait(f) for f in futures]


def serial(xs: list[torch.Tensor], w: torch.Tensor, steps: int) -> list[torch.Tensor]:
    return [task(x, w, steps) for x in xs]


def script(fn):
    return torch.jit.script(fn)


def forks_in(fn) -> int:
    """The `prim::fork` nodes of a scripted function's graph; 0 for a function that was not
    scripted (fork then runs eagerly, on the caller's thread: no parallelism at all)."""
    if not isinstance(fn, torch.jit.ScriptFunction):
        return 0
    return len(fn.graph.findAllNodes("prim::fork"))


def threads_running(fn, args: tuple, op: str) -> tuple[int, set[int]]:
    """Run `fn(*args)` under the profiler: the caller's thread, and the threads the forked
    tasks' `op` (e.g. "aten::mm") ran on. Forked tasks run on the inter-op pool, so their
    threads differ from the caller's; a fork that ran inline shows only the caller's."""
    from torch.autograd.profiler import record_function

    with torch.profiler.profile() as prof, record_function("caller"):
        fn(*args)
    events = prof.events()
    caller = next(e.thread for e in events if e.name == "caller")
    return caller, {e.thread for e in events if e.name == op}


def inputs(tasks: int, size: int, seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One input per task (identical inputs would let the JIT merge the calls), and a weight
    scaled so that tanh stays out of saturation."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(size, size, generator=g) for _ in range(tasks)]
    w = torch.randn(size, size, generator=g) / size**0.5
    return xs, w
