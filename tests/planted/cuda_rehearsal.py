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
- the caching allocator's statistics (`memory_allocated`, `max_memory_allocated`,
  `reset_peak_memory_stats`, `memory_stats`, `memory_reserved`, `empty_cache`): a torch
  dispatch mode that counts every storage an op makes, in the allocator's blocks (a request
  rounded up to 512 B), until the last tensor on it dies;
- the profilers' device memory: the allocations made on the host reach every profiler API
  (torch.profiler, torch.autograd.profiler, the legacy one) as CUDA memory records in the
  allocator's blocks;
- the spin kernel of `_sleep` in the Kineto profilers (torch.profiler, torch.autograd.profiler):
  each spin reaches them as a CUDA kernel event over the spin's time on Kineto's clock; no
  other kernel, and no CUDA events at the legacy profiler's region ends;
- autocast and GradScaler with device "cuda": CPU autocast to the same dtype (float16 as on a
  GPU; CPU autocast takes float16 from torch 2.2) and a CPU GradScaler;
- the device's generator state (`get_rng_state`, `set_rng_state`, as torch.random.fork_rng
  uses them): the host's;
- TensorPipe's device maps: the options keep what a case sets, and `init_rpc` starts
  TensorPipe without them (its agent opens a map's devices when it starts).

NVML stands in through tests/fake_pynvml.py (the test's fixture installs it). `install()` is
what the tests' fixture and the planted sitecustomize (`cuda=H200`, for worker processes)
call. What cannot be rehearsed: kernels (their speed), the profiler's CUDA activity beyond the
spin kernel (the kernels of ops, the legacy profiler's device times), real allocator segments
(the stand-in's blocks are the 512 B rounding only).
"""

from __future__ import annotations

import functools
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

Setter = Callable[[Any, str, Any], None]


@dataclass(frozen=True)
class Gpu:
    """A GPU as torch and NVML report it."""

    name: str
    capability: tuple[int, int]
    memory_bytes: int
    multiprocessors: int
    clock_hz: float  # SM clock: what torch.cuda._sleep's cycles run at
    uuid: str = "11111111-2222-3333-4444-555555555555"


# Every GPU family the suites know, one without a datasheet entry, one without bfloat16.
GPUS = {
    "H200": Gpu("NVIDIA H200", (9, 0), 150_754_820_096, 132, 1.98e9),
    "H100": Gpu("NVIDIA H100 80GB HBM3", (9, 0), 85_045_379_072, 132, 1.98e9),
    "A100": Gpu("NVIDIA A100-SXM4-80GB", (8, 0), 85_097_971_712, 108, 1.41e9),
    "L4": Gpu("NVIDIA L4", (8, 9), 23_580_639_232, 58, 2.04e9),  # no datasheet entry
    "V100": Gpu("Tesla V100-SXM2-16GB", (7, 0), 16_935_419_904, 80, 1.53e9),  # no bfloat16
}

MIN_BLOCK = 512  # the caching allocator rounds every request up to a multiple of 512 B


def block(nbytes: int) -> int:
    return 0 if nbytes <= 0 else max(MIN_BLOCK, MIN_BLOCK * math.ceil(nbytes / MIN_BLOCK))


def _is_cuda(d: Any) -> bool:
    import torch

    if isinstance(d, torch.device):
        return d.type == "cuda"
    return isinstance(d, str) and d.partition(":")[0] == "cuda"


def _cpu(d: Any) -> Any:
    """A CUDA device (a device index is one: torch.tensor(..., device=0)) as the CPU."""
    return "cpu" if _is_cuda(d) or (isinstance(d, int) and not isinstance(d, bool)) else d


class Allocator:
    """The caching allocator's statistics, counted from the storages ops make (dispatch
    mode). `reported` scales what it reports (1.0: the true blocks), so that a test can make
    it report wrong bytes."""

    def __init__(self) -> None:
        self.live: dict[int, list[int]] = {}  # storage address -> [block bytes, tensors on it]
        self.allocated = self.peak = self.reserved = 0
        self.reported = 1.0
        self.mode: Any = None

    def track(self, t: Any) -> None:
        s = t.untyped_storage()
        key = s.data_ptr()
        if key == 0:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [block(s.nbytes()), 0]
            self.allocated += entry[0]
            self.peak = max(self.peak, self.allocated)
            self.reserved = max(self.reserved, self.allocated)
        entry[1] += 1
        weakref.finalize(t, self._release, key, entry)

    def _release(self, key: int, entry: list[int]) -> None:
        entry[1] -= 1
        if entry[1] == 0 and self.live.get(key) is entry:
            del self.live[key]
            self.allocated -= entry[0]

    def memory_allocated(self, device: Any = None) -> int:
        return int(self.allocated * self.reported)

    def max_memory_allocated(self, device: Any = None) -> int:
        return int(self.peak * self.reported)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.peak = self.allocated

    def memory_reserved(self, device: Any = None) -> int:
        return int(self.reserved * self.reported)

    def empty_cache(self) -> None:
        self.reserved = self.allocated

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

    def _blocks(self, nbytes: int) -> int:
        """An allocation (+) or free (-) of the host's `nbytes` as the stand-in GPU's."""
        return int(math.copysign(block(abs(nbytes)), nbytes) * self._allocator.reported)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


class _DeviceMemoryRecord(_Wrapped):
    """A Kineto memory record of the CPU allocator as the caching allocator would make it: on
    the CUDA device, in its blocks (`reported` scales it, as the Allocator's)."""

    def device_type(self) -> Any:
        from torch.autograd import DeviceType

        return DeviceType.CUDA

    def nbytes(self) -> int:
        return self._blocks(self._wrapped.nbytes())


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

    def events(self) -> list:
        from torch.autograd import DeviceType

        host = [_DeviceMemoryRecord(e, self._allocator)
                if e.name() == "[memory]" and e.device_type() == DeviceType.CPU else e
                for e in self._wrapped.events()]
        spans = self._spins.since(self._wrapped.trace_start_ns())
        if not host or not spans:
            return host
        # correlation ids far above the host ops': linked to none of them
        first = max(e.correlation_id() for e in host) + 1_000_000
        return host + [_SpinKernel(host[0], span, first + i, self._allocator)
                       for i, span in enumerate(spans)]


class _DeviceMemoryLegacyRecord(_Wrapped):
    """A legacy profiler's allocation record of the host as the stand-in GPU's, in blocks."""

    def cpu_memory_usage(self) -> int:
        return 0

    def cuda_memory_usage(self) -> int:
        return self._blocks(self._wrapped.cpu_memory_usage())


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

        return [[_DeviceMemoryLegacyRecord(r, allocator) if r.kind() == "memory_alloc"
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


class Rehearsal:
    """The stand-ins for one GPU, installed with `patch`; `close()` leaves the modes."""

    def __init__(self, gpu: Gpu, patch: Setter = setattr):
        import torch

        self.gpu = gpu
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


def install(family: str, patch: Setter = setattr) -> Rehearsal:
    """Rehearse on the GPU `family` of GPUS ("H200")."""
    return Rehearsal(GPUS[family], patch)
