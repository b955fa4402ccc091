"""GPU telemetry through NVML (nvidia-ml-py), where every call may fail and none may crash.

`NvmlReader.open()` returns a reader, or a reader that only says why NVML is unavailable (no
library, no driver, no permission). Each field of each GPU is read through one guard: the
first failure of a field is recorded as "unavailable: <reason>" and the field is not asked
again; a GPU that is lost mid-run stops being sampled. The NVML module is passed in, so the
tests drive this code with a fake pynvml.

Power on Ampere and newer (except A100) is a one-second average; the instant field is read
where the driver has it. The total-energy counter (Volta and newer) updates about every
100 ms, so energy deltas over cases shorter than a second are coarse.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

# nvmlClocksEventReason* bits (nvml.h), with whether each makes a timing untrustworthy.
CLOCKS_EVENT_REASONS: dict[int, tuple[str, bool]] = {
    0x1: ("gpu_idle", False),
    0x2: ("applications_clocks_setting", False),
    0x4: ("sw_power_cap", True),
    0x8: ("hw_slowdown", True),
    0x10: ("sync_boost", False),
    0x20: ("sw_thermal_slowdown", True),
    0x40: ("hw_thermal_slowdown", True),
    0x80: ("hw_power_brake_slowdown", True),
    0x100: ("display_clock_setting", False),
}


def decode_clocks_event_reasons(mask: int) -> list[str]:
    """Names of the set bits of a clocks-event (throttle) reasons mask."""
    names = [name for bit, (name, _) in CLOCKS_EVENT_REASONS.items() if mask & bit]
    known = sum(CLOCKS_EVENT_REASONS)
    if mask & ~known:
        names.append(f"unknown_0x{mask & ~known:x}")
    return names


def throttling_reasons(names: list[str]) -> list[str]:
    """The reasons among `names` that mean the clocks were held down by power or heat."""
    bad = {name for name, invalidates in CLOCKS_EVENT_REASONS.values() if invalidates}
    return [n for n in names if n in bad]


def _reason(e: Exception) -> str:
    return f"unavailable: {e}" if str(e) else f"unavailable: {type(e).__name__}"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def visible_selectors(env: dict[str, str] | None = None) -> list[str] | None:
    """The GPUs CUDA_VISIBLE_DEVICES selects, as NVML indices or UUID (prefixes), or None
    for all. As in CUDA, the list stops at the first entry that is not a device."""
    value = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    out = []
    for token in (t.strip() for t in value.split(",")):
        if token.isdigit() or token.startswith(("GPU-", "MIG-")):
            out.append(token)
        else:
            break
    return out


class NvmlReader:
    def __init__(self, nvml: Any, handles: list[tuple[int, Any]], error: str | None = None):
        self.nvml = nvml
        self.handles = handles  # (NVML index, handle) of each visible GPU
        self.error = error  # why NVML is unavailable altogether
        self.unavailable: dict[str, str] = {}  # "gpu0.power_instant_w" -> reason
        self.lost: set[int] = set()

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, nvml: Any | None = None, env: dict[str, str] | None = None) -> NvmlReader:
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
        except Exception as e:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded...
            return cls(nvml, [], _reason(e))
        try:
            return cls(nvml, cls._visible_handles(nvml, visible_selectors(env)))
        except Exception as e:
            return cls(nvml, [], _reason(e))

    @staticmethod
    def _visible_handles(nvml: Any, selectors: list[str] | None) -> list[tuple[int, Any]]:
        count = nvml.nvmlDeviceGetCount()
        every = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        if selectors is None:
            return every
        uuids = {i: _text(nvml.nvmlDeviceGetUUID(h)) for i, h in every}
        out = []
        for sel in selectors:
            if sel.isdigit():
                idx = int(sel)
                if idx >= count:
                    break
                out.append(every[idx])
            else:  # a UUID or an unambiguous prefix of one
                match = [i for i, u in uuids.items() if u.startswith(sel)]
                if len(match) != 1:
                    break
                out.append(every[match[0]])
        return out

    def close(self) -> None:
        if self.error is None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass

    # -- reading --------------------------------------------------------------------------
    def _read(self, key: str, fn: Callable[[], Any]) -> Any:
        """fn(), or None with the reason recorded once under `key`."""
        if key in self.unavailable:
            return None
        try:
            return fn()
        except Exception as e:
            if type(e).__name__ == "NVMLError_GpuIsLost" and key.startswith("gpu"):
                self.lost.add(int(key[3:].split(".")[0]))
            self.unavailable[key] = _reason(e)
            return None

    def static_info(self) -> dict[str, Any]:
        """Once per run: driver and NVML versions, and each visible GPU's identity."""
        if self.error:
            return {"available": False, "reason": self.error}
        n = self.nvml
        info: dict[str, Any] = {
            "available": True,
            "driver_version": self._read("driver_version",
                                         lambda: _text(n.nvmlSystemGetDriverVersion())),
            "nvml_version": self._read("nvml_version",
                                       lambda: _text(n.nvmlSystemGetNVMLVersion())),
            "gpus": [],
        }
        for idx, h in self.handles:
            k = f"gpu{idx}"
            info["gpus"].append({
                "index": idx,
                "name": self._read(f"{k}.name", lambda h=h: _text(n.nvmlDeviceGetName(h))),
                "uuid": self._read(f"{k}.uuid", lambda h=h: _text(n.nvmlDeviceGetUUID(h))),
                "pci_bus_id": self._read(
                    f"{k}.pci_bus_id", lambda h=h: _text(n.nvmlDeviceGetPciInfo(h).busId)),
                "mig_mode": self._read(f"{k}.mig_mode",
                                       lambda h=h: n.nvmlDeviceGetMigMode(h)[0]),
                "power_limit_w": self._read(
                    f"{k}.power_limit_w", lambda h=h: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3),
            })
        info["unavailable"] = dict(self.unavailable)
        return info

    def _power(self, k: str, h: Any) -> tuple[float | None, float | None]:
        """(instant W, average W): the field values where present, else the power usage."""
        n = self.nvml

        def fields():
            vals = n.nvmlDeviceGetFieldValues(
                h, [n.NVML_FI_DEV_POWER_INSTANT, n.NVML_FI_DEV_POWER_AVERAGE])
            return [v.value.uiVal / 1e3 if v.nvmlReturn == 0 else None for v in vals]

        inst, avg = self._read(f"{k}.power_fields", fields) or (None, None)
        if inst is None and avg is None:
            avg = self._read(f"{k}.power_usage", lambda: n.nvmlDeviceGetPowerUsage(h) / 1e3)
        return inst, avg

    def sample(self, with_processes: bool = False) -> dict[int, dict[str, Any]]:
        """One reading of every visible, not-lost GPU: {index: {field: value}}."""
        n = self.nvml
        out: dict[int, dict[str, Any]] = {}
        for idx, h in self.handles:
            if idx in self.lost:
                continue
            k = f"gpu{idx}"
            inst, avg = self._power(k, h)
            util = self._read(f"{k}.utilization", lambda h=h: n.nvmlDeviceGetUtilizationRates(h))
            mem = self._read(f"{k}.memory", lambda h=h: n.nvmlDeviceGetMemoryInfo(h))
            reasons = self._read(f"{k}.clocks_event_reasons",
                                 lambda h=h: self._clocks_event_reasons(h))
            row = {
                "power_instant_w": inst,
                "power_w": avg if avg is not None else inst,
                "energy_j": self._read(f"{k}.energy",
                                       lambda h=h: n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3),
                "sm_clock_mhz": self._read(
                    f"{k}.sm_clock", lambda h=h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                "mem_clock_mhz": self._read(
                    f"{k}.mem_clock", lambda h=h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                "temperature_c": self._read(
                    f"{k}.temperature",
                    lambda h=h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                "utilization_pct": None if util is None else util.gpu,
                "memory_used_bytes": None if mem is None else mem.used,
                "clocks_event_reasons": reasons,
            }
            if with_processes:
                row["pids"] = self._read(f"{k}.processes", lambda h=h: [
                    p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h)])
            if idx in self.lost:  # lost during this very reading
                continue
            out[idx] = row
        return out

    def _clocks_event_reasons(self, h: Any) -> list[str]:
        n = self.nvml
        getter = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if getter is None:  # older bindings: the deprecated name of the same call
            getter = n.nvmlDeviceGetCurrentClocksThrottleReasons
        return decode_clocks_event_reasons(int(getter(h)))
