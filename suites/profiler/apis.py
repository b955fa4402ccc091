"""The profiler APIs under test, opened the same way, and the few ways the suite reads them.

- `profiler`: `torch.profiler.profile`, today's API (Kineto underneath);
- `autograd`: `torch.autograd.profiler.profile`, the API the 1.6 release notes use (now
  also Kineto underneath);
- `legacy`: `torch.autograd.profiler_legacy.profile`, the pre-Kineto implementation that
  1.6 shipped, still present (deprecated) in torch 2.x.

Every figure the suite reports comes through this module: per-region figures from the
profiler's `FunctionEvent`s (what `events()`, `key_averages()` and the printed tables are
built from), and, for peak reconstruction, the raw time-stamped `[memory]` records of the
Kineto result (what `_parse_kineto_results` itself reads; the legacy API keeps none).
"""

from __future__ import annotations

import itertools
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
import torch.autograd.profiler as autograd_profiler
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent
from torch.profiler import ProfilerActivity

from harness.cases import FeatureAbsent, has_api

API_NAMES = ("profiler", "autograd", "legacy")
KINETO_APIS = ("profiler", "autograd")  # the ones that keep time-stamped memory records
MEMORY_EVENT = "[memory]"


def open_profiler(api: str, device: str, *, memory: bool = True,
                  shapes: bool = False) -> AbstractContextManager:
    """A profiler of kind `api`, recording `device` activity too when it is CUDA."""
    cuda = device == "cuda"
    if api == "profiler":
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        return torch.profiler.profile(activities=activities, profile_memory=memory,
                                      record_shapes=shapes)
    if api == "autograd":
        if has_api("torch.autograd.profiler.profile(use_device)"):  # torch 2.1 and later
            return autograd_profiler.profile(use_device="cuda" if cuda else None,
                                             profile_memory=memory, record_shapes=shapes)
        return autograd_profiler.profile(use_cuda=cuda, profile_memory=memory,
                                         record_shapes=shapes)  # the 1.6 spelling
    if api == "legacy":
        # imported here: it is deprecated and may leave torch before the other two
        import torch.autograd.profiler_legacy as legacy_profiler

        return legacy_profiler.profile(use_cuda=cuda, profile_memory=memory,
                                       record_shapes=shapes)
    raise ValueError(f"unknown profiler API {api!r}; expected one of {API_NAMES}")


def available(names: tuple[str, ...] = API_NAMES) -> tuple[tuple[str, ...], dict[str, str]]:
    """The APIs of `names` this torch has, and why each missing one is missing."""
    have, missing = [], {}
    for api in names:
        try:
            open_profiler(api, "cpu")
            have.append(api)
        except (ImportError, AttributeError) as e:
            missing[api] = f"{type(e).__name__}: {e}"
        except Exception:  # there, but raising: the case's checks say what broke
            have.append(api)
    return tuple(have), missing


def events(prof: Any) -> EventList:
    """The profiler's function events (each op and record_function region)."""
    if isinstance(prof, torch.profiler.profile):
        return prof.events()
    return prof.function_events


def host_events(prof: Any) -> list[FunctionEvent]:
    """Events that ran on the host (ops, regions); device kernels excluded."""
    return [e for e in events(prof) if e.device_type == DeviceType.CPU]


def regions(prof: Any, names: set[str] | list[str]) -> dict[str, FunctionEvent]:
    """The host-side `record_function` events with the given names, by name. A region the
    profiler did not record is the profiler's failure (FeatureAbsent): the checks that read
    the regions would otherwise read nothing."""
    wanted = set(names)
    found = {e.name: e for e in host_events(prof) if e.name in wanted}
    missing = wanted - found.keys()
    if missing:
        raise FeatureAbsent(api_of(prof), f"recorded {len(found)} of the {len(wanted)} "
                            f"regions run; none of {sorted(missing)[:3]}")
    return found


def api_of(prof: Any) -> str:
    """The profiler's API as users spell it: torch.profiler.profile, ..."""
    if isinstance(prof, torch.profiler.profile):
        return "torch.profiler.profile"
    if isinstance(prof, autograd_profiler.profile):
        return "torch.autograd.profiler.profile"
    return "torch.autograd.profiler_legacy.profile"


def event_bytes(event: Any, device: str) -> int:
    """The memory an event (or key_averages row) reports for `device`, inclusive of its
    children and net of what it freed inside."""
    return int(event.device_memory_usage if device == "cuda" else event.cpu_memory_usage)


def self_bytes(event: Any, device: str) -> int:
    return int(event.self_device_memory_usage if device == "cuda"
               else event.self_cpu_memory_usage)


def op_table(prof: Any) -> dict[str, Any]:
    """key_averages() by op name: calls, inclusive and self memory of each op."""
    return {row.key: row for row in prof.key_averages()}


@dataclass(frozen=True)
class MemRecord:
    ns: int
    nbytes: int


def memory_records(prof: Any, device: str) -> list[MemRecord]:
    """Time-stamped allocation (+) and free (-) records for `device`, oldest first."""
    if isinstance(prof, torch.profiler.profile):
        result = prof.profiler.kineto_results
    elif isinstance(prof, autograd_profiler.profile):
        result = prof.kineto_results
    else:
        raise TypeError(f"{type(prof).__module__}.{type(prof).__name__} keeps no "
                        "time-stamped memory records")
    want = DeviceType.CUDA if device == "cuda" else DeviceType.CPU
    recs = [MemRecord(_start_ns(e), e.nbytes()) for e in result.events()
            if e.name() == MEMORY_EVENT and e.device_type() == want]
    return sorted(recs, key=lambda r: r.ns)  # stable: ties keep the recorded order


def storage(t: torch.Tensor) -> Any:
    """The storage behind a tensor: untyped_storage() since torch 2.0, storage() before
    (both give nbytes() and data_ptr())."""
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def _start_ns(event: Any) -> int:
    # start_ns() since torch 2.1; microseconds before, which order the records as well
    return event.start_ns() if hasattr(event, "start_ns") else event.start_us() * 1000


def peak_live(records: list[MemRecord]) -> tuple[int, int]:
    """(peak, final) live bytes over the records, relative to the start of profiling."""
    live = list(itertools.accumulate(r.nbytes for r in records))
    return max([0, *live]), (live[-1] if live else 0)
