"""Ground truth the profiler suite holds reported figures against.

Nothing here asks the profiler anything: sizes come from tensors' own `nbytes`, the CUDA
caching allocator's documented rounding, and module output shapes seen by forward hooks;
durations come from `time.perf_counter_ns` (CPU) and CUDA events (GPU).
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

# the kernel's clock source, which time.perf_counter reads
CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")

# The CUDA caching allocator's constants (c10/cuda/CUDACachingAllocator.cpp; the "Memory
# management" section of the CUDA semantics notes describes the same behaviour).
MIN_BLOCK = 512  # every request is rounded up to a multiple of 512 B
SMALL_SIZE = 1 << 20  # requests up to 1 MiB come from the small pool
SMALL_BUFFER = 2 << 20  # ... which cudaMallocs 2 MiB segments
LARGE_BUFFER = 20 << 20  # 1 MiB < request < 10 MiB: a 20 MiB segment
MIN_LARGE_ALLOC = 10 << 20  # 10 MiB and up: a segment of the request rounded to 2 MiB
ROUND_LARGE = 2 << 20

CUDA_RULE = (
    "CUDA: reported bytes = the caching allocator's block size. A request of n bytes is "
    "rounded up to a multiple of 512 B (minimum 512); from a fresh segment (empty_cache() "
    "first) the block is split off unless the rest of the segment would be <= 1 MiB "
    "(large pool) or < 512 B (small pool), in which case the whole segment is the block. "
    "Segments: 2 MiB for requests <= 1 MiB, 20 MiB up to 10 MiB, else the request rounded "
    "up to 2 MiB. With expandable_segments every block is split (n rounded to 512 B)."
)


def alloc_conf() -> str:
    """The allocator settings the user gave (empty when the defaults apply)."""
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF", "")


def rounded_block(nbytes: int) -> int:
    """A request of `nbytes` (> 0) rounded up to the allocator's 512 B unit."""
    return max(MIN_BLOCK, MIN_BLOCK * math.ceil(nbytes / MIN_BLOCK))


def cuda_block_size(nbytes: int, expandable: bool | None = None) -> int:
    """Bytes the CUDA caching allocator hands out for a request of `nbytes` from a fresh
    segment, under the default settings (see CUDA_RULE)."""
    if nbytes <= 0:
        return 0
    if expandable is None:
        expandable = "expandable_segments:true" in alloc_conf().replace(" ", "").lower()
    size = rounded_block(nbytes)
    if size <= SMALL_SIZE or expandable:
        return size  # a small-pool segment of 2 MiB always leaves >= 512 B to split off
    if size < MIN_LARGE_ALLOC:
        segment = LARGE_BUFFER
    else:
        segment = ROUND_LARGE * math.ceil(size / ROUND_LARGE)
    return size if segment - size > SMALL_SIZE else segment


def cuda_block_bounds(nbytes: int) -> tuple[int, int]:
    """Smallest and largest block the allocator may hand out for `nbytes` when cached blocks
    may be reused: at least the 512 B rounding; a large-pool block (over 1 MiB) that is not
    split keeps at most 1 MiB more (more than that is always split off); small-pool blocks
    are always split to the rounded size."""
    if nbytes <= 0:
        return 0, 0
    size = rounded_block(nbytes)
    return size, size + (SMALL_SIZE if size > SMALL_SIZE else 0)


def device_bytes(nbytes: int, device: str) -> int:
    """What a memory profiler should report for one allocation of `nbytes` on `device`:
    the tensor's bytes on CPU (the CPU allocator reports the request), the block on CUDA."""
    return cuda_block_size(nbytes) if device == "cuda" else nbytes


# --- durations -------------------------------------------------------------------------------


def busy_wait(seconds: float) -> float:
    """Spin on the CPU for `seconds`; return the seconds actually spent, by perf_counter.

    A spin, not sleep: the thread stays on the CPU, so the profiler's wall-clock region and
    this measurement see the same interval.
    """
    start = time.perf_counter_ns()
    end = start + int(seconds * 1e9)
    now = start
    while now < end:
        now = time.perf_counter_ns()
    return (now - start) / 1e9


def clocksource() -> str | None:
    """The kernel's clock source (tsc, kvm-clock, ...), which perf_counter reads; the
    profiler's own clock is the TSC, converted by a rate measured over each session. None
    where the kernel does not say (no sysfs in a container)."""
    try:
        return CLOCKSOURCE.read_text().strip()
    except OSError:
        return None


class GpuSleep:
    """`torch.cuda._sleep` (a spin kernel) for a requested time, timed by CUDA events."""

    def __init__(self) -> None:
        # cycles per second, calibrated once: the kernel spins a number of clock cycles
        torch.cuda._sleep(1_000_000)
        cycles = 10_000_000
        self.cycles_per_s = cycles / self.run_cycles(cycles)

    @staticmethod
    def run_cycles(cycles: int) -> float:
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        torch.cuda._sleep(int(cycles))  # gpu-only: a kernel's time
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def __call__(self, seconds: float) -> float:
        """Spin the GPU for about `seconds`; return the seconds CUDA events measured."""
        return self.run_cycles(int(seconds * self.cycles_per_s))


# --- resnet18's analytical memory ------------------------------------------------------------


@dataclass
class OpBytes:
    """What one profiler op should report in a forward pass: the tensors it leaves alive."""

    op: str  # the profiler's name, as in key_averages()
    calls: int | None = None  # None where no module's hook counts the calls
    tensors: list[int] = field(default_factory=list)  # bytes of each tensor the op keeps
    why: str = ""

    def total(self, device: str) -> int:
        """Bytes on `device`, each tensor in a fresh block; a negative entry is a tensor
        freed, not kept."""
        return sum(device_bytes(n, device) if n >= 0 else -device_bytes(-n, device)
                   for n in self.tensors)

    def bounds(self, device: str) -> tuple[int, int]:
        """(least, most) bytes the op may report on `device`: the exact total on CPU; on
        CUDA, where blocks of earlier frees are reused, the range of cuda_block_bounds."""
        if device != "cuda":
            return self.total(device), self.total(device)
        lo = hi = 0
        for n in self.tensors:
            b_lo, b_hi = cuda_block_bounds(abs(n))
            lo, hi = (lo + b_lo, hi + b_hi) if n >= 0 else (lo - b_hi, hi - b_lo)
        return lo, hi


# The row for memory freed in the forward outside any op (between ops, in Python code).
OUTSIDE_OPS = "(outside any op)"


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def resnet_forward_bytes(model: nn.Module, x: torch.Tensor) -> dict[str, OpBytes]:
    """Per profiler op, the tensors a forward of `model` (torchvision's resnet18) keeps,
    computed from module output shapes seen by forward hooks.

    Training mode with autograd on, as in the release notes' example: batch norm keeps its
    per-channel mean and inverse std for backward and max pooling its int64 indices.
    """
    seen: dict[type, list[tuple[nn.Module, torch.Tensor]]] = defaultdict(list)

    def hook(module, _inputs, output):
        seen[type(module)].append((module, output))
        if names[module].endswith("downsample.1"):
            dropped.append(_nbytes(output))

    names = {m: name for name, m in model.named_modules()}
    dropped: list[int] = []

    watched = (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.Linear)
    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, watched)]
    try:
        out = model(x)
    finally:
        for h in handles:
            h.remove()
    saves = torch.is_grad_enabled() and model.training
    ops = {
        "aten::conv2d": OpBytes("aten::conv2d", len(seen[nn.Conv2d]),
                                [_nbytes(o) for _, o in seen[nn.Conv2d]],
                                "output"),
        "aten::batch_norm": OpBytes(
            "aten::batch_norm", len(seen[nn.BatchNorm2d]),
            [n for m, o in seen[nn.BatchNorm2d]
             for n in [_nbytes(o)] + ([m.num_features * 4] * 2 if saves and m.training else [])],
            "output" + (" + save_mean + save_invstd (C float32 each, kept for backward)"
                        if saves else "")),
        "aten::relu_": OpBytes("aten::relu_", len(seen[nn.ReLU]), [],
                               "in place (ReLU(inplace=True)): nothing new"),
        "aten::max_pool2d": OpBytes(
            "aten::max_pool2d", len(seen[nn.MaxPool2d]),
            [n for _, o in seen[nn.MaxPool2d] for n in [_nbytes(o)] + ([o.numel() * 8] if saves
                                                                        else [])],
            "output" + (" + int64 indices of the same shape (kept for backward)"
                        if saves else "")),
        "aten::adaptive_avg_pool2d": OpBytes(
            "aten::adaptive_avg_pool2d", len(seen[nn.AdaptiveAvgPool2d]),
            [_nbytes(o) for _, o in seen[nn.AdaptiveAvgPool2d]],
            "output (mean's 4-byte divisor temporary is freed inside the op)"),
        "aten::add_": OpBytes("aten::add_", None, [],
                              "in place (residual `out += identity`, num_batches_tracked)"),
        "aten::flatten": OpBytes("aten::flatten", None, [], "a view: nothing new"),
        "aten::linear": OpBytes("aten::linear", len(seen[nn.Linear]),
                                [_nbytes(o) for _, o in seen[nn.Linear]],
                                "output (allocated by its child aten::addmm)"),
        # A downsampling block adds its shortcut (the downsample batch norm's output) in
        # place into the main path; nothing keeps the shortcut for backward, so it is freed
        # when the block returns, in Python, between ops.
        OUTSIDE_OPS: OpBytes(OUTSIDE_OPS, None, [-n for n in dropped],
                             "frees of the downsample shortcuts when their blocks return"),
    }
    del out
    return ops


# --- a controlled allocation sequence for peak reconstruction -------------------------------


def allocation_sequence(device: str, unit: int = 1_000_000) -> tuple[Callable[[], None], int]:
    """A sequence of allocations and frees with a known peak; returns (run, peak bytes).

    float32 tensors of 3, 5 and 4 units; live sets over time: {a}, {a,b}, {b}, {b,c},
    {b,c,d}, {c,d}, {d}, {}: the peak is b + c + d.
    """
    n = {k: v * unit // 4 for k, v in {"a": 3, "b": 5, "c": 4}.items()}

    def run() -> None:
        a = torch.empty(n["a"], device=device)
        b = torch.empty(n["b"], device=device)
        del a
        c = torch.empty(n["c"], device=device)
        d = b[: n["c"]] + c  # a new tensor of c's size
        del b
        del c
        del d

    sizes = {k: device_bytes(v * 4, device) for k, v in n.items()}
    peak = max(sizes["a"] + sizes["b"], sizes["b"] + 2 * sizes["c"])
    return run, peak
