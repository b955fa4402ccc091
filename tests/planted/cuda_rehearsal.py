"""A CUDA rehearsal on the CPU: the suites' CUDA code paths run on this machine, with the
calls only a GPU answers answered by stand-ins, so that everything a GPU run executes except
the device work itself has run before a GPU is lent.

Tensors live on the CPU. What stands in:

- the device: `torch.cuda.is_available()` and the device's name, properties (uuid, memory,
  multiprocessors) and compute capability, as a GPU of `GPUS` reports them;
- placement: every `device="cuda"` (a factory's keyword, `Tensor.to`, `Module.to`,
  `Tensor.cuda`, `torch.Generator`) lands on the CPU (a torch function mode);
- CUDA events and synchronisation (`torch.cuda.Event`, `synchronize`, `_sleep`): the host's
  clock, and a spin for `_sleep` at the GPU's clock rate;
- the caching allocator (`memory_allocated`, `max_memory_allocated`,
  `reset_peak_memory_stats`, `memory_stats`, `memory_reserved`, `empty_cache`): a torch
  dispatch mode gives every storage an op makes a block by the caching allocator's own rules
  (512 B rounding, the small and large pools, 2 MiB and 20 MiB segments, best fit, splitting,
  merging; `CachingAllocator`, from the allocator's source) until the last tensor on it dies;
- the profilers' device memory: the allocations made on the host reach every profiler API
  (torch.profiler, torch.autograd.profiler, the legacy one) as CUDA memory records of those
  blocks;
- the spin kernel of `_sleep` in the Kineto profilers (torch.profiler, torch.autograd.profiler):
  each spin reaches them as a CUDA kernel event over the spin's time on Kineto's clock; no
  other kernel, and no CUDA events at the legacy profiler's region ends;
- autocast and GradScaler with device "cuda": CPU autocast to the same dtype (float16 as on a
  GPU; CPU autocast takes float16 from torch 2.2) and a CPU GradScaler;
- the device's generator state (`get_rng_state`, `set_rng_state`, as torch.random.fork_rng
  uses them): the host's;
- TensorPipe's device maps: the options keep what a case sets, and `init_rpc` starts
  TensorPipe without them (its agent opens a map's devices when it starts).

NVML stands in through tests/fake_pynvml.py (`fake_nvml`: a whole GPU, or a GPU in MIG mode
for a slice; the test's fixture installs it), and the GPU's device file through a file every
rehearsing process holds open (`DEVICE_FILE`). `install()` is what the tests' fixture and the
planted sitecustomize (`cuda=H200`, for worker processes) call.

What the rehearsal shows is that the code around the device runs and decides as it should
against these stand-ins, which this project wrote from the documentation and sources it
cites; not that a GPU behaves as they do. What only a GPU shows: kernels and their times; the
profiler's CUDA activity beyond the spin kernel (the kernels of ops, CUPTI, the legacy
profiler's device times); the real allocator (temporaries inside ops, which the dispatch mode
never sees, streams, fragmentation over a long run); TensorPipe's CUDA channels (the
rehearsal starts TensorPipe without device maps); NVML on real hardware (its readings, which
calls a driver and a container support, the pids it lists).
"""

from __future__ import annotations

import functools
import math
import re
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

Setter = Callable[[Any, str, Any], None]


@dataclass(frozen=True)
class Gpu:
    """A GPU (or a MIG slice of one) as torch and NVML report it."""

    name: str
    capability: tuple[int, int]
    memory_bytes: int
    multiprocessors: int
    clock_hz: float  # SM clock: what torch.cuda._sleep's cycles run at
    uuid: str = "11111111-2222-3333-4444-555555555555"
    power_limit_w: float = 700
    slice_of: str | None = None  # a MIG slice: the name of its GPU (NVML's MIG device)


# Every GPU family the suites know, the parts of one family that only their measures and
# datasheets tell apart, a MIG slice, one without a datasheet entry, one without bfloat16.
GPUS = {
    "H200": Gpu("NVIDIA H200", (9, 0), 150_754_820_096, 132, 1.98e9),
    "H200 NVL": Gpu("NVIDIA H200 NVL", (9, 0), 150_754_820_096, 132, 1.98e9,
                    power_limit_w=600),
    "H100": Gpu("NVIDIA H100 80GB HBM3", (9, 0), 85_045_379_072, 132, 1.98e9),
    "H100 PCIe": Gpu("NVIDIA H100 PCIe", (9, 0), 85_093_187_584, 114, 1.755e9,
                     power_limit_w=350),
    "H100 NVL": Gpu("NVIDIA H100 NVL", (9, 0), 100_485_038_080, 132, 1.785e9,
                    power_limit_w=400),
    "H100 MIG 1g.10gb": Gpu("NVIDIA H100 80GB HBM3 MIG 1g.10gb", (9, 0), 10_468_982_784, 16,
                            1.98e9, uuid="66666666-7777-8888-9999-000000000000",
                            slice_of="NVIDIA H100 80GB HBM3"),
    "A100": Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 85_097_971_712, 108, 1.41e9,
                power_limit_w=400),
    "L4": Gpu("NVIDIA L4", (8, 9), 23_580_639_232, 58, 2.04e9, power_limit_w=72),  # no sheet
    "V100": Gpu("Tesla V100-SXM2-16GB", (7, 0), 16_935_419_904, 80, 1.53e9,  # no bfloat16
                power_limit_w=300),
}


def fake_nvml(gpu: Gpu, fake: Any) -> Any:
    """NVML as it sees `gpu` (tests/fake_pynvml.py, the module `fake`): a whole GPU, or a GPU
    in MIG mode whose one slice is `gpu`, each with the UUID torch reports, prefixed as NVML
    prefixes it."""
    if gpu.slice_of is None:
        return fake.FakeNvml([fake.FakeGpu(name=gpu.name, uuid=f"GPU-{gpu.uuid}",
                                           power_limit_mw=int(gpu.power_limit_w * 1e3),
                                           mem_total=gpu.memory_bytes)])
    mig = fake.FakeMig(name=gpu.name, uuid=f"MIG-{gpu.uuid}", mem_total=gpu.memory_bytes)
    return fake.FakeNvml([fake.FakeGpu(name=gpu.slice_of, mig_mode=1, mig=[mig],
                                       power_limit_mw=int(gpu.power_limit_w * 1e3))])


# ---- the CUDA caching allocator ---------------------------------------------------------

# Its rules for the default settings (no expandable segments, max_split_size or
# roundup_power2_divisions). The constants are those of the pinned torch 2.14.1's own header,
# torch/include/c10/core/AllocatorConfig.h (lines 16-25; the large segment, 20 MiB by default,
# is `large_segment_size_` at line 340); the functions are those of
# c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch, read at 001074d: round_size,
# get_pool, get_allocation_size, get_free_block, should_split, alloc_found_block, free_block,
# release_cached_blocks):
#   kMinBlockSize = 512        round_size(): every request rounded up to a multiple of 512 B
#   kSmallSize = 1 MiB         get_pool(): a rounded request <= 1 MiB takes the small pool
#   kSmallBuffer = 2 MiB       get_allocation_size(): a small-pool segment is 2 MiB
#   kLargeBuffer = 20 MiB      ... a large request under kMinLargeAlloc gets a 20 MiB segment
#   kMinLargeAlloc = 10 MiB
#   kRoundLarge = 2 MiB        ... a larger one its size rounded up to 2 MiB
#   get_free_block(): the smallest free block of the pool that fits (pool.blocks.lower_bound)
#   should_split(): split off the rest when it is >= kMinBlockSize (small pool) or
#                   > kSmallSize (large pool); else the whole block is handed out
#   alloc_found_block(): allocated_bytes (memory_allocated) and the profiler's record count
#                        the block's size; free() and free_block(): the same size back, and
#                        a freed block merges with the free blocks beside it in its segment
#   release_cached_blocks() (empty_cache): cudaFree every segment wholly free
MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    return max(MIN_BLOCK, MIN_BLOCK * math.ceil(nbytes / MIN_BLOCK))


def small_pool(size: int) -> bool:
    return size <= SMALL_SIZE


def segment_size(size: int) -> int:
    if small_pool(size):
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * math.ceil(size / ROUND_LARGE)


def should_split(small: bool, remaining: int) -> bool:
    return remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE


@dataclass
class Block:
    segment: int
    offset: int
    size: int
    small: bool
    free: bool = True


class CachingAllocator:
    """Segments and blocks as the caching allocator keeps them, by its rules above."""

    def __init__(self) -> None:
        self.segments: dict[int, list[Block]] = {}  # segment -> its blocks by offset
        self._next = 0

    def malloc(self, nbytes: int) -> Block:
        size = round_size(nbytes)
        small = small_pool(size)
        fits = [b for blocks in self.segments.values() for b in blocks
                if b.free and b.small == small and b.size >= size]
        if fits:
            block = min(fits, key=lambda b: (b.size, b.segment, b.offset))
        else:
            block = Block(self._next, 0, segment_size(size), small)
            self.segments[self._next] = [block]
            self._next += 1
        if should_split(small, block.size - size):
            blocks = self.segments[block.segment]
            rest = Block(block.segment, block.offset + size, block.size - size, small)
            blocks.insert(blocks.index(block) + 1, rest)
            block.size = size
        block.free = False
        return block

    def free(self, block: Block) -> None:
        block.free = True
        blocks = self.segments[block.segment]
        i = blocks.index(block)
        if i + 1 < len(blocks) and blocks[i + 1].free:
            block.size += blocks.pop(i + 1).size
        if i > 0 and blocks[i - 1].free:
            blocks[i - 1].size += blocks.pop(i).size

    def empty_cache(self) -> None:
        for seg in [k for k, blocks in self.segments.items()
                    if len(blocks) == 1 and blocks[0].free]:
            del self.segments[seg]

    @property
    def reserved(self) -> int:
        return sum(b.size for blocks in self.segments.values() for b in blocks)


def _is_cuda(d: Any) -> bool:
    import torch

    if isinstance(d, torch.device):
        return d.type == "cuda"
    return isinstance(d, str) and d.partition(":")[0] == "cuda"


def _cpu(d: Any) -> Any:
    """A CUDA device (a device index is one: torch.tensor(..., device=0)) as the CPU."""
    return "cpu" if _is_cuda(d) or (isinstance(d, int) and not isinstance(d, bool)) else d


# how soon after the tensor on a storage dies the host's profiler records the storage's free
FREE_LAG_NS = 5_000_000


class Allocator:
    """The caching allocator's statistics, counted from the storages ops make (dispatch
    mode), each storage in the block the caching allocator's rules give it. `reported` scales
    what it reports (1.0: the true blocks), so that a test can make it report wrong bytes.
    Every allocation is logged (when, where on the host, its bytes and its block), so that
    the profilers' records of the host's allocations can carry the blocks (`blocks_for`)."""

    def __init__(self) -> None:
        self.blocks = CachingAllocator()
        self.live: dict[int, list[Any]] = {}  # address -> [block, tensors on it, host bytes]
        self.allocated = self.peak = 0
        self.reported = 1.0
        # (host address, host bytes) -> [(when, block bytes)] of each storage allocated there
        self.allocations: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.freed: list[tuple[int, int, int]] = []  # (when, host bytes, block bytes)
        self.mode: Any = None

    def track(self, t: Any) -> None:
        s = t.untyped_storage()
        key = s.data_ptr()
        if key == 0:
            return
        entry = self.live.get(key)
        if entry is None:
            block = self.blocks.malloc(s.nbytes())
            entry = self.live[key] = [block, 0, s.nbytes()]
            self.allocated += block.size
            self.peak = max(self.peak, self.allocated)
            self.allocations.setdefault((key, s.nbytes()), []).append(
                (time.time_ns(), block.size))
        entry[1] += 1
        weakref.finalize(t, self._release, key, entry)

    def _release(self, key: int, entry: list[Any]) -> None:
        entry[1] -= 1
        if entry[1] == 0 and self.live.get(key) is entry:
            del self.live[key]
            block, _, nbytes = entry
            self.allocated -= block.size
            self.freed.append((time.time_ns(), nbytes, block.size))
            self.blocks.free(block)  # merges: the block may grow into its free neighbours

    def blocks_for(self, records: list[tuple[int, int, int | None]]) -> list[int]:
        """The signed block of each of a profiler's memory records of the host's allocations
        ((when, signed host bytes, host address or None where the profiler keeps none), in
        any order). A record of an allocation or free the dispatch mode never saw (a
        temporary inside an op) takes its bytes rounded to 512 B, so that the two cancel.

        With addresses (the Kineto profilers): an allocation takes the block of the storage
        the dispatch mode saw allocated at its address and of its bytes within its lifetime
        (from the record to the next free record of its address), and that free the same
        block, negative. Without (the legacy profiler): each storage the dispatch mode saw
        allocated takes the last allocation record of its bytes before it was seen, and each
        it saw freed the first free record of its bytes after (within FREE_LAG_NS)."""
        out = [-round_size(-n) if n < 0 else round_size(n) for _, n, _ in records]
        order = sorted(range(len(records)), key=lambda i: records[i][0])
        if any(ptr is None for _, _, ptr in records):
            self._by_time(records, order, out)
        else:
            self._by_address(records, order, out)
        return [int(v * self.reported) for v in out]

    def _by_address(self, records, order, out) -> None:
        waiting: dict[tuple[int | None, int], list[int]] = {}
        free_of: dict[int, int] = {}
        for i in order:  # each allocation's free: the next free record of its address
            _, n, ptr = records[i]
            if n > 0:
                waiting.setdefault((ptr, n), []).append(i)
            elif waiting.get((ptr, -n)):
                free_of[waiting[(ptr, -n)].pop(0)] = i
        taken: set[tuple[int, int, int]] = set()
        for i in order:
            when, n, ptr = records[i]
            if n <= 0:
                continue
            end = records[free_of[i]][0] if i in free_of else math.inf
            found = next((a for a in self.allocations.get((ptr, n), ())
                          if when <= a[0] <= end and (ptr, n, a[0]) not in taken), None)
            if found is not None:
                taken.add((ptr, n, found[0]))
                out[i] = found[1]
                if i in free_of:
                    out[free_of[i]] = -found[1]

    def _by_time(self, records, order, out) -> None:
        start, end = (records[order[0]][0], records[order[-1]][0]) if order else (0, 0)
        seen = sorted((at, n, size) for (_, n), allocs in self.allocations.items()
                      for at, size in allocs if start <= at)
        free = set(order)
        for at, n, size in seen:  # the last allocation record of its bytes before it
            i = next((i for i in reversed(order) if i in free and records[i][1] == n
                      and records[i][0] <= at), None)
            if i is not None:
                free.discard(i)
                out[i] = size
        for gone, n, size in sorted(f for f in self.freed if start <= f[0] <= end):
            i = next((i for i in order if i in free and records[i][1] == -n
                      and gone <= records[i][0] <= gone + FREE_LAG_NS), None)
            if i is not None:
                free.discard(i)
                out[i] = -size

    def memory_allocated(self, device: Any = None) -> int:
        return int(self.allocated * self.reported)

    def max_memory_allocated(self, device: Any = None) -> int:
        return int(self.peak * self.reported)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.peak = self.allocated

    def memory_reserved(self, device: Any = None) -> int:
        return int(self.blocks.reserved * self.reported)

    def empty_cache(self) -> None:
        self.blocks.empty_cache()

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {"allocated_bytes.all.current": self.memory_allocated(),
                "allocated_bytes.all.peak": self.max_memory_allocated(),
                "reserved_bytes.all.current": self.memory_reserved(),
                "num_alloc_retries": 0, "num_ooms": 0}


class Event:
    """torch.cuda.Event on the host's clock."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait(self, stream: Any = None) -> None:
        pass

    def elapsed_time(self, end: Event) -> float:
        if self.t is None or end.t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.t - self.t) * 1e3


def _modes(allocator: Allocator) -> tuple[Any, Any]:
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    moves = {torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros,
             torch.Tensor.new_ones, torch.Tensor.new_full, torch.Tensor.new_tensor}

    class OnTheCpu(TorchFunctionMode):
        """device="cuda" anywhere in a call lands on the CPU."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = _cpu(kwargs["device"])
            if func is torch.Tensor.cuda:
                return args[0]
            if func in moves:
                args = tuple(_cpu(a) for a in args)
            return func(*args, **kwargs)

    class Counted(TorchDispatchMode):
        """Every storage an op makes, counted by the stand-in allocator."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    allocator.track(t)
            return out

    return OnTheCpu(), Counted()


class _Wrapped:
    """One of the profiler's objects, with some of its answers replaced."""

    def __init__(self, wrapped: Any, allocator: Allocator) -> None:
        self._wrapped = wrapped
        self._allocator = allocator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


class _DeviceMemoryRecord(_Wrapped):
    """A Kineto memory record of the CPU allocator as the caching allocator would make it: on
    the CUDA device, of its block (`size`, signed: `BlockMatcher`)."""

    def __init__(self, wrapped: Any, allocator: Allocator, size: int) -> None:
        super().__init__(wrapped, allocator)
        self._size = size

    def device_type(self) -> Any:
        from torch.autograd import DeviceType

        return DeviceType.CUDA

    def nbytes(self) -> int:
        return self._size


class Spins:
    """The spins `_sleep` ran, on Kineto's clock (the host's wall clock, in ns); a profiler
    reports each one's time x `reported` (1: as a GPU would)."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int]] = []
        self.reported = 1.0

    def since(self, start_ns: int) -> list[tuple[int, int]]:
        return [(a, a + round((b - a) * self.reported)) for a, b in self.spans if a >= start_ns]


class _SpinKernel(_Wrapped):
    """The spin kernel of one `_sleep` as Kineto records a CUDA kernel: a device event over
    the spin, linked to no host op. What it does not override, it takes from `template`, a
    host event of the same result (thread, scope, empty metadata)."""

    def __init__(self, template: Any, span: tuple[int, int], ident: int,
                 allocator: Allocator) -> None:
        super().__init__(template, allocator)
        self._span, self._id = span, ident

    def name(self) -> str:
        return "spin_kernel(long)"

    def device_type(self) -> Any:
        from torch.autograd import DeviceType

        return DeviceType.CUDA

    def start_ns(self) -> int:
        return self._span[0]

    def end_ns(self) -> int:
        return self._span[1]

    def duration_ns(self) -> int:
        return self._span[1] - self._span[0]

    def correlation_id(self) -> int:
        return self._id

    def linked_correlation_id(self) -> int:
        return self._id

    def is_async(self) -> bool:
        return False

    def device_index(self) -> int:
        return 0

    def activity_type(self) -> str:
        return "kernel"

    def shapes(self) -> list:
        return []

    def stack(self) -> list:
        return []


class _DeviceMemoryResult(_Wrapped):
    """A Kineto profiler result whose memory records are the stand-in GPU's, with a kernel
    event for each spin run since the profiler started."""

    def __init__(self, wrapped: Any, allocator: Allocator, spins: Spins) -> None:
        super().__init__(wrapped, allocator)
        self._spins = spins
        self._events: list | None = None

    def events(self) -> list:
        if self._events is None:
            self._events = self._device_events()
        return self._events

    def _device_events(self) -> list:
        from torch._C._profiler import _EventType
        from torch.autograd import DeviceType

        raw = self._wrapped.events()
        memory = [e for e in raw if e.name() == "[memory]" and e.device_type() == DeviceType.CPU]
        # the host address of each record, from the profiler's event tree (its allocation
        # nodes carry it; the events do not)
        address, stack = {}, list(self._wrapped.experimental_event_tree())
        while stack:
            node = stack.pop()
            stack.extend(node.children)
            if node.tag == _EventType.Allocation:
                f = node.extra_fields
                address[node.start_time_ns, f.alloc_size] = f.ptr
        sizes = self._allocator.blocks_for([(e.start_ns(), e.nbytes(),
                                             address.get((e.start_ns(), e.nbytes())))
                                            for e in memory])
        size = {id(e): b for e, b in zip(memory, sizes, strict=True)}
        host = [_DeviceMemoryRecord(e, self._allocator, size[id(e)]) if id(e) in size else e
                for e in raw]
        spans = self._spins.since(self._wrapped.trace_start_ns())
        if not host or not spans:
            return host
        # correlation ids far above the host ops': linked to none of them
        first = max(e.correlation_id() for e in host) + 1_000_000
        return host + [_SpinKernel(host[0], span, first + i, self._allocator)
                       for i, span in enumerate(spans)]


class _DeviceMemoryLegacyRecord(_Wrapped):
    """A legacy profiler's allocation record of the host as the stand-in GPU's: of its block
    (`size`, signed)."""

    def __init__(self, wrapped: Any, allocator: Allocator, size: int) -> None:
        super().__init__(wrapped, allocator)
        self._size = size

    def cpu_memory_usage(self) -> int:
        return 0

    def cuda_memory_usage(self) -> int:
        return self._size


class _LegacySpinRecord(_Wrapped):
    """A legacy profiler record as it reads with use_cuda on a GPU: every range has CUDA
    times, and the device time between a range's two ends is that of the spins run inside it
    (`at_ns`: the record's time on the spins' clock)."""

    def __init__(self, wrapped: Any, allocator: Allocator, spins: Spins, at_ns: int) -> None:
        super().__init__(wrapped, allocator)
        self._spins, self.at_ns = spins, at_ns

    def has_cuda(self) -> bool:
        return True

    def cpu_elapsed_us(self, other: Any) -> float:
        return self._wrapped.cpu_elapsed_us(getattr(other, "_wrapped", other))

    def cuda_elapsed_us(self, other: _LegacySpinRecord) -> float:
        return sum(b - a for a, b in self._spins.since(self.at_ns) if a < other.at_ns) / 1e3


def _profiler_stand_ins(allocator: Allocator, spins: Spins, patch: Setter) -> None:
    """The profilers report the allocations the rehearsal makes on the host as device memory
    records in the allocator's blocks: Kineto's result (torch.profiler, torch.autograd.profiler)
    and the legacy profiler's record lists; and each spin of `_sleep` as device time: a
    kernel event in Kineto's result, the device time of the legacy profiler's ranges around
    it. The legacy profiler with use_cuda records on the host only: its CUDA events at each
    range's ends need the GPU."""
    import torch.autograd.profiler as autograd_profiler
    import torch.autograd.profiler_legacy as legacy_profiler
    from torch.autograd.profiler import ProfilerState

    stop = autograd_profiler._disable_profiler
    patch(autograd_profiler, "_disable_profiler",
          lambda: _DeviceMemoryResult(stop(), allocator, spins))
    legacy_start, legacy_stop = (legacy_profiler._enable_profiler_legacy,
                                 legacy_profiler._disable_profiler_legacy)
    started_ns = [0]  # when the legacy profiler last started, on the spins' clock

    def legacy_enable(config: Any) -> None:
        started_ns[0] = time.time_ns()
        legacy_start(config)

    def legacy_records() -> list[list[Any]]:
        threads = legacy_stop()
        start = next(r for t in threads for r in t if r.name() == "__start_profile")

        def at_ns(r: Any) -> int:
            return started_ns[0] + round(start.cpu_elapsed_us(r) * 1e3)

        memory = [r for t in threads for r in t if r.kind() == "memory_alloc"]
        sizes = allocator.blocks_for([(at_ns(r), r.cpu_memory_usage(), None) for r in memory])
        size = {id(r): b for r, b in zip(memory, sizes, strict=True)}
        return [[_DeviceMemoryLegacyRecord(r, allocator, size[id(r)]) if id(r) in size
                 else _LegacySpinRecord(r, allocator, spins, at_ns(r)) for r in thread]
                for thread in threads]

    patch(legacy_profiler, "_enable_profiler_legacy", legacy_enable)
    patch(legacy_profiler, "_disable_profiler_legacy", legacy_records)

    class LegacyProfile(legacy_profiler.profile):
        @functools.wraps(legacy_profiler.profile.__init__)  # its signature, for has_api
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.profiler_kind = ProfilerState.CPU

    patch(legacy_profiler, "profile", LegacyProfile)

    class KinetoProfile(autograd_profiler.profile):
        """Host activity only: the fallback that records CUDA events at every op's ends
        (what use_device="cuda" becomes without CUPTI) fails at each op without a GPU."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if self.profiler_kind == ProfilerState.KINETO_GPU_FALLBACK:
                self.profiler_kind = ProfilerState.KINETO

    KinetoProfile.__init__ = functools.wraps(autograd_profiler.profile.__init__)(
        KinetoProfile.__init__)

    patch(autograd_profiler, "profile", KinetoProfile)


def _rpc_stand_ins(patch: Setter) -> None:
    """TensorPipe's options keep the device maps a case sets, and `init_rpc` hands TensorPipe
    the same options without them: its agent opens the devices of a map when it starts, which
    only a GPU has. Tensors "on the device" are on the host, so no call needs a map."""
    from torch.distributed import rpc

    base, init = rpc.TensorPipeRpcBackendOptions, rpc.init_rpc

    class Options(base):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.given = {k: v for k, v in kwargs.items() if k not in ("device_maps", "devices")}

    def init_rpc(*args: Any, rpc_backend_options: Any = None, **kwargs: Any) -> None:
        if isinstance(rpc_backend_options, Options):  # the same options, never given a map
            rpc_backend_options = Options(**rpc_backend_options.given)
        init(*args, rpc_backend_options=rpc_backend_options, **kwargs)

    patch(rpc, "TensorPipeRpcBackendOptions", Options)
    patch(rpc, "init_rpc", init_rpc)


def _autocast_classes() -> tuple[type, Callable[..., bool]]:
    import torch

    real_enabled = torch.is_autocast_enabled

    class CudaAutocast(torch.amp.autocast):
        """autocast("cuda", dtype) as CPU autocast to the same dtype (float16 by default,
        as on a GPU)."""

        def __init__(self, device_type: str = "cuda", dtype: Any = None, enabled: bool = True,
                     cache_enabled: bool | None = None):
            if _is_cuda(device_type):
                device_type, dtype = "cpu", dtype or torch.float16
            super().__init__(device_type, dtype=dtype, enabled=enabled,
                             cache_enabled=cache_enabled)

    def is_autocast_enabled(*args: Any) -> bool:
        return real_enabled(*[_cpu(a) for a in args]) if args else real_enabled("cpu")

    return CudaAutocast, is_autocast_enabled


def _scaler_class() -> type:
    import torch

    class CudaScaler(torch.amp.GradScaler):
        """GradScaler("cuda") as the CPU's."""

        def __init__(self, device: str = "cuda", *args: Any, **kwargs: Any):
            super().__init__(_cpu(device), *args, **kwargs)

    return CudaScaler


# The file that stands for the GPU's device file: every process that rehearses the GPU holds
# it open, as a CUDA process holds /dev/nvidia0, so that telemetry tells this run's processes
# from another's as on a GPU (harness/running/telemetry/gpu_processes.py).
DEVICE_FILE = Path(tempfile.gettempdir()) / "trb-rehearsal-nvidia0"


class Rehearsal:
    """The stand-ins for one GPU, installed with `patch`; `close()` leaves the modes."""

    def __init__(self, gpu: Gpu, patch: Setter = setattr):
        import torch

        from harness.running.telemetry import gpu_processes

        self.gpu = gpu
        self.device = open(DEVICE_FILE, "a")  # held while the rehearsal lasts
        patch(gpu_processes, "DEVICE_FILE", re.compile(f"^{re.escape(str(DEVICE_FILE))}$"))
        self.allocator = Allocator()
        self.spins = Spins()
        self.synchronized = 0
        props = SimpleNamespace(name=gpu.name, major=gpu.capability[0],
                                minor=gpu.capability[1], total_memory=gpu.memory_bytes,
                                multi_processor_count=gpu.multiprocessors, uuid=gpu.uuid)
        cuda = torch.cuda
        a = self.allocator
        for name, value in {
            "is_available": lambda: True, "device_count": lambda: 1,
            "current_device": lambda: 0, "set_device": lambda d: None,
            "is_initialized": lambda: True, "init": lambda: None,
            "get_device_name": lambda d=None: gpu.name,
            "get_device_properties": lambda d=None: props,
            "get_device_capability": lambda d=None: gpu.capability,
            "synchronize": self._synchronize, "Event": Event, "_sleep": self._sleep,
            "memory_allocated": a.memory_allocated,
            "max_memory_allocated": a.max_memory_allocated,
            "reset_peak_memory_stats": a.reset_peak_memory_stats,
            "memory_reserved": a.memory_reserved, "memory_stats": a.memory_stats,
            "empty_cache": a.empty_cache,
            # the device's generator state (torch.random.fork_rng saves and restores it): the
            # host's, as tensors drawn "on the device" are drawn on the host
            "get_rng_state": lambda device="cuda": torch.get_rng_state(),
            "set_rng_state": lambda state, device="cuda": torch.set_rng_state(state),
        }.items():
            patch(cuda, name, value)
        # optimizers ask the accelerator's stream whether a CUDA graph is being captured
        stream = SimpleNamespace(is_capturing=lambda: False, synchronize=self._synchronize,
                                 wait_stream=lambda other: None)
        patch(cuda, "current_stream", lambda device=None: stream)
        patch(torch.accelerator, "current_stream", lambda device=None: stream)
        patch(torch.accelerator, "current_device_index", lambda: 0)
        autocast, enabled = _autocast_classes()
        for owner in (torch, torch.amp, torch.cuda.amp):
            patch(owner, "autocast", autocast)
        patch(torch, "is_autocast_enabled", enabled)
        scaler = _scaler_class()
        patch(torch.amp, "GradScaler", scaler)
        patch(torch.cuda.amp, "GradScaler", scaler)

        class Generator(torch.Generator):
            def __new__(cls, device: Any = "cpu"):
                return super().__new__(cls, device=_cpu(device))

        patch(torch, "Generator", Generator)
        _profiler_stand_ins(a, self.spins, patch)
        _rpc_stand_ins(patch)
        self.modes = _modes(a)
        for m in self.modes:
            m.__enter__()

    def _synchronize(self, device: Any = None) -> None:
        self.synchronized += 1

    def _sleep(self, cycles: int) -> None:
        start_ns = time.time_ns()
        end = time.perf_counter() + cycles / self.gpu.clock_hz
        while time.perf_counter() < end:
            pass
        self.spins.spans.append((start_ns, time.time_ns()))

    def close(self) -> None:
        for m in reversed(self.modes):
            m.__exit__(None, None, None)
        self.device.close()


def install(family: str, patch: Setter = setattr) -> Rehearsal:
    """Rehearse on the GPU `family` of GPUS ("H200")."""
    return Rehearsal(GPUS[family], patch)
