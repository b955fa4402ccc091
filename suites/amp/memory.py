"""Peak memory of one training step, measured the same way in spirit on CPU and CUDA.

peak = resident + transient, where
- resident is the bytes of the tensors that live across steps (parameters, buffers,
  optimizer state, data), counted once per storage;
- transient is the highest point, during one step, of (bytes allocated - bytes freed) since
  the step began. On CUDA it is `max_memory_allocated - memory_allocated` around the step,
  after `reset_peak_memory_stats`. On CPU it is derived from the profiler's allocation events
  (`torch.profiler` with `profile_memory=True`), walked in time order: host RSS cannot show
  it, because freed blocks stay in the process and other tensors share the pages.

Gradients are set to None before the measured step so that every byte the step frees was
allocated inside it; the profiler cannot report the size of a block allocated before
profiling began. CPU figures count tensors from PyTorch's CPU allocator: oneDNN's internal
scratch buffers are outside it and not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class StepMemory:
    resident: int  # bytes of tensors that live across steps
    transient: int  # highest bytes allocated-minus-freed during the step
    net: int  # bytes allocated-minus-freed over the whole step (the new gradients)
    events: int  # allocation and free events seen (CPU) or 0 (CUDA)

    @property
    def peak(self) -> int:
        return self.resident + self.transient

    def to_json(self) -> dict[str, int]:
        return {**asdict(self), "peak": self.peak}


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views and aliases counted once)."""
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        # untyped_storage() since torch 2.0; storage() before, with the same two methods
        s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        seen[(str(t.device), s.data_ptr())] = s.nbytes()
    return sum(seen.values())


def allocation_walk(sizes: Iterable[int]) -> tuple[int, int]:
    """(highest running total, final total) of signed allocation sizes in time order."""
    running = peak = 0
    for size in sizes:
        running += size
        peak = max(peak, running)
    return peak, running


def cpu_allocation_events(fn: Callable[[], object]) -> list[int]:
    """Signed sizes of the CPU allocations (+) and frees (-) `fn` makes, in time order.

    Reads the profiler's event tree, the same record `torch.profiler`'s own memory timeline
    (`torch.profiler._memory_profiler`) is built from; it is a private interface, so a torch
    without it raises RuntimeError with the reason.
    """
    from torch.profiler import ProfilerActivity, profile

    try:
        from torch._C._profiler import _EventType
    except ImportError as e:
        raise RuntimeError(f"this torch's profiler has no event types: {e}") from e
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    tree = prof.profiler.kineto_results.experimental_event_tree()
    allocations = []
    stack = list(tree)
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            allocations.append((node.start_time_ns, node.extra_fields.alloc_size))
    # sort by time only (stable), keeping the recorded order of events with equal stamps
    allocations.sort(key=lambda a: a[0])
    return [size for _, size in allocations]


def cuda_step_memory(resident: int, before: int, after: int, peak: int) -> StepMemory:
    """A step's memory from the CUDA allocator's readings around it: memory_allocated before
    and after, and max_memory_allocated after reset_peak_memory_stats before it."""
    if not before <= peak >= after:
        raise ValueError(f"max_memory_allocated {peak} B below memory_allocated "
                         f"({before} B before, {after} B after the step)")
    return StepMemory(resident, peak - before, after - before, 0)


def step_memory(step, device: str) -> StepMemory:
    """Resident and transient bytes of one call of `step` (a `training.TrainStep`)."""
    step.optimizer.zero_grad(set_to_none=True)
    resident = storage_bytes(step.resident_tensors())
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        after = torch.cuda.memory_allocated(device)
        peak = torch.cuda.max_memory_allocated(device)  # gpu-only: the caching allocator
        return cuda_step_memory(resident, before, after, peak)
    sizes = cpu_allocation_events(step)
    transient, net = allocation_walk(sizes)
    return StepMemory(resident, transient, net, len(sizes))
