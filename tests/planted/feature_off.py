""""Feature off" plants: each turns one release feature off while leaving its API in place, the
way a broken build would, so that the tests can show every conformance check then fails
(never `n/a`, never `pass`).

Each function takes the setter it patches with: pytest's `monkeypatch.setattr` in the test's
own process (undone after the test), plain `setattr` in a worker or a planted Python (as a
`worker_setup=` hook, or through sitecustomize's `off=NAME+NAME`). The names are FEATURES.

- autocast: `torch.autocast` and its three other spellings (torch.amp, torch.cpu.amp,
  torch.cuda.amp) are context managers that do nothing;
- grad_scaler: every GradScaler is built disabled (`enabled=False`): `scale` returns the loss
  as it is, `step` always steps, `update` does nothing;
- memory_profiler: every profiler (`torch.profiler.profile`, `torch.autograd.profiler.profile`,
  the legacy one) runs with `profile_memory` off, whatever it is asked;
- record_function: `record_function` regions are not recorded (a context manager that does
  nothing);
- rpc: `rpc_sync`, `rpc_async` and `remote` run the function in the caller's process instead
  of the callee's;
- torchscript: `torch.jit.script` returns the Python function unscripted (what PYTORCH_JIT=0
  does), so `torch.jit.fork` runs eagerly, on the caller's thread, one task after another;
- eager_fork: eager `torch.jit.fork` returns a completed Future without running anything;
- host_telemetry: the host sampler reads zeros (no CPU use, no memory);
- nvml: NVML does not initialise (as on a machine without the driver's library).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

Setter = Callable[[Any, str, Any], None]


def autocast(patch: Setter = setattr) -> None:
    import torch

    class Noop(contextlib.ContextDecorator):
        def __init__(self, *args: Any, **kwargs: Any):
            pass

        def __enter__(self) -> Noop:
            return self

        def __exit__(self, *exc: Any) -> bool:
            return False

    patch(torch, "autocast", Noop)
    patch(torch.amp, "autocast", Noop)
    patch(torch.cpu.amp, "autocast", Noop)
    patch(torch.cuda.amp, "autocast", Noop)


def grad_scaler(patch: Setter = setattr) -> None:
    import torch

    for owner in (torch.amp, torch.cuda.amp):
        real = getattr(owner, "GradScaler", None)
        if real is None:
            continue

        class Disabled(real):
            @functools.wraps(real.__init__)
            def __init__(self, *args: Any, **kwargs: Any):
                kwargs["enabled"] = False
                super().__init__(*args, **kwargs)

        patch(owner, "GradScaler", Disabled)


def memory_profiler(patch: Setter = setattr) -> None:
    import torch
    import torch.autograd.profiler as autograd_profiler
    import torch.autograd.profiler_legacy as legacy_profiler

    for owner in (torch.profiler, torch.profiler.profiler, autograd_profiler, legacy_profiler):
        real = owner.profile

        class MemoryOff(real):
            @functools.wraps(real.__init__)  # the same signature: callers read its keywords
            def __init__(self, *args: Any, **kwargs: Any):
                kwargs["profile_memory"] = False
                super().__init__(*args, **kwargs)

        patch(owner, "profile", MemoryOff)


def record_function(patch: Setter = setattr) -> None:
    import torch.autograd.profiler as autograd_profiler

    class Unrecorded(contextlib.ContextDecorator):
        def __init__(self, name: str, args: Any = None):
            self.name = name

        def __enter__(self) -> Unrecorded:
            return self

        def __exit__(self, *exc: Any) -> bool:
            return False

    patch(autograd_profiler, "record_function", Unrecorded)


def rpc(patch: Setter = setattr) -> None:
    import torch
    from torch.distributed import rpc as torch_rpc

    def rpc_sync(to: Any, func: Callable, args: tuple = (), kwargs: dict | None = None,
                 timeout: float = -1.0) -> Any:
        return func(*args, **(kwargs or {}))

    def rpc_async(to: Any, func: Callable, args: tuple = (), kwargs: dict | None = None,
                  timeout: float = -1.0) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        try:
            fut.set_result(func(*args, **(kwargs or {})))
        except Exception as e:
            fut.set_exception(e)
        return fut

    class LocalRRef:
        def __init__(self, value: Any):
            self.value = value

        def to_here(self, timeout: float = -1.0) -> Any:
            return self.value

        def local_value(self) -> Any:
            return self.value

    def remote(to: Any, func: Callable, args: tuple = (), kwargs: dict | None = None,
               timeout: float = -1.0) -> LocalRRef:
        return LocalRRef(func(*args, **(kwargs or {})))

    for name, fn in (("rpc_sync", rpc_sync), ("rpc_async", rpc_async), ("remote", remote)):
        patch(torch_rpc, name, fn)


def torchscript(patch: Setter = setattr) -> None:
    import torch

    patch(torch.jit, "script", lambda obj, *args, **kwargs: obj)


def eager_fork(patch: Setter = setattr) -> None:
    import torch

    def fork(fn: Callable, *args: Any, **kwargs: Any) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(None)
        return fut

    patch(torch.jit, "fork", fork)


def nvml(patch: Setter = setattr) -> None:
    import pynvml

    def init(*args: Any, **kwargs: Any) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    patch(pynvml, "nvmlInit", init)


def host_telemetry(patch: Setter = setattr) -> None:
    from harness.running.telemetry import host

    patch(host.HostReader, "sample", lambda self: {
        "cpu_util_pct": 0.0, "cpu_util_per_core_pct": [], "other_cpu_pct": 0.0,
        "rss_bytes": 0, "load1": 0.0})


FEATURES: dict[str, Callable[[Setter], None]] = {
    "autocast": autocast, "grad_scaler": grad_scaler, "memory_profiler": memory_profiler,
    "record_function": record_function, "rpc": rpc, "torchscript": torchscript,
    "eager_fork": eager_fork, "host_telemetry": host_telemetry, "nvml": nvml}


def turn_off(names: str, patch: Setter = setattr) -> None:
    """The features `names` ("autocast+rpc") off."""
    for name in filter(None, names.split("+")):
        FEATURES[name](patch)
