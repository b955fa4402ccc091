"""GPU telemetry through NVML (nvidia-ml-py), where every call may fail and none may crash.

`NvmlReader.open()` returns a reader, or a reader that only says why NVML is unavailable (no
library, no driver, no permission). Each field of each device is read through one guard: the
first failure of a field is recorded as "unavailable: <reason>" and the field is not asked
again; a GPU that is lost mid-run stops being sampled. The NVML module is passed in, so the
tests drive this code with a fake pynvml.

A device is what torch computes on: a whole GPU, or, on a GPU in MIG mode, a MIG slice of it
(NVML's MIG device handles, `nvmlDeviceGetMigDeviceHandleByIndex`). A slice has its own
UUID (`MIG-...`), name, memory and processes; power, energy, clocks, temperature and the
clocks-event reasons are the whole GPU's (NVML reports them for the GPU only), so on a slice
they include the other slices' work.

Power on Ampere and newer (except A100) is a one-second average; the instant field is read
where the driver has it. The total-energy counter (Volta and newer) updates about every
100 ms, so energy deltas over cases shorter than a second are coarse.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class ReasonKind(enum.Enum):
    """What a clocks-event reason says about a figure measured while it was set
    (docs/method.md, "A GPU's clocks")."""

    IDLE = "idle"  # nothing ran: the GPU waited for work
    SETTING = "setting"  # clocks held by a configuration (application, display, sync boost)
    LIMIT = "limit"  # a limit the board keeps under load: its power cap; recorded, compared
    SLOWDOWN = "slowdown"  # a thermal or hardware slowdown: the figure is not trusted


@dataclass(frozen=True)
class ClocksEventReason:
    bit: int
    name: str
    kind: ReasonKind


# The nvmlClocksEventReason* bits of nvml.h, as NVIDIA's NVML API reference documents them
# ("NvmlClocksEventReasons": https://docs.nvidia.com/deploy/nvml-api/api/
# group__nvmlClocksEventReasons.html); board_limit and reliability are its newest two.
CLOCKS_EVENT_REASONS = (
    ClocksEventReason(0x1, "gpu_idle", ReasonKind.IDLE),
    ClocksEventReason(0x2, "applications_clocks_setting", ReasonKind.SETTING),
    ClocksEventReason(0x4, "sw_power_cap", ReasonKind.LIMIT),
    ClocksEventReason(0x8, "hw_slowdown", ReasonKind.SLOWDOWN),
    ClocksEventReason(0x10, "sync_boost", ReasonKind.SETTING),
    ClocksEventReason(0x20, "sw_thermal_slowdown", ReasonKind.SLOWDOWN),
    ClocksEventReason(0x40, "hw_thermal_slowdown", ReasonKind.SLOWDOWN),
    ClocksEventReason(0x80, "hw_power_brake_slowdown", ReasonKind.SLOWDOWN),
    ClocksEventReason(0x100, "display_clock_setting", ReasonKind.SETTING),
    ClocksEventReason(0x200, "board_limit", ReasonKind.LIMIT),
    ClocksEventReason(0x400, "reliability", ReasonKind.LIMIT),
)
KIND_OF = {r.name: r.kind for r in CLOCKS_EVENT_REASONS}


def decode_clocks_event_reasons(mask: int) -> list[str]:
    """Names of the set bits of a clocks-event (throttle) reasons mask."""
    names = [r.name for r in CLOCKS_EVENT_REASONS if mask & r.bit]
    known = sum(r.bit for r in CLOCKS_EVENT_REASONS)
    if mask & ~known:
        names.append(f"unknown_0x{mask & ~known:x}")
    return names


def reasons_of_kind(names: list[str], kind: ReasonKind) -> list[str]:
    """The reasons among `names` of `kind`. A bit this table does not know is taken for a
    limit: recorded and compared between sides, but no reason to distrust a figure alone."""
    return [n for n in names if KIND_OF.get(n, ReasonKind.LIMIT) is kind]


def bare_uuid(uuid: str) -> str:
    """A device UUID without NVML's "GPU-" or "MIG-" prefix, as torch reports it."""
    return uuid.strip().lower().removeprefix("gpu-").removeprefix("mig-")


def find_device(info: dict[str, Any], torch_uuid: str) -> dict[str, Any] | None:
    """The device of a reader's `static_info()` that is the CUDA device of `torch_uuid`
    (`torch.cuda.get_device_properties(i).uuid`, a GPU's or a MIG slice's), or None."""
    want = bare_uuid(str(torch_uuid))
    return next((g for g in info.get("gpus", ()) if g.get("uuid") and
                 bare_uuid(g["uuid"]) == want), None)


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


@dataclass(frozen=True)
class Device:
    """A device torch can compute on, as NVML sees it: a whole GPU, or a MIG slice of one."""

    label: str  # "gpu0"; "gpu0-mig1" for MIG device 1 of GPU 0
    index: int  # the GPU's NVML index
    handle: Any
    parent: Any = None  # a MIG slice's GPU
    mig: int | None = None

    @property
    def board(self) -> Any:
        """The handle of the whole GPU: what power, clocks and temperature are read from."""
        return self.handle if self.parent is None else self.parent


def _mig_slices(nvml: Any, index: int, handle: Any) -> list[Device]:
    """The MIG devices of a GPU in MIG mode (none where MIG is off or not supported)."""
    try:
        if nvml.nvmlDeviceGetMigMode(handle)[0] != 1:
            return []
        count = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except Exception:  # no MIG on this GPU, or bindings without it
        return []
    out = []
    for m in range(count):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, m)  # gpu-only: MIG mode
        except Exception:  # NotFound: no slice at this place
            continue
        out.append(Device(f"gpu{index}-mig{m}", index, mig, handle, m))
    return out


class NvmlReader:
    def __init__(self, nvml: Any, devices: list[Device], error: str | None = None):
        self.nvml = nvml
        self.devices = devices  # the visible devices, in CUDA's order
        self.error = error  # why NVML is unavailable altogether
        self.unavailable: dict[str, str] = {}  # "gpu0.power_instant_w" -> reason
        self.lost: set[str] = set()  # labels of devices lost mid-run

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, nvml: Any | None = None, env: dict[str, str] | None = None) -> NvmlReader:
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()  # gpu-only: NVML on the device
        except Exception as e:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded...
            return cls(nvml, [], _reason(e))
        try:
            return cls(nvml, cls._visible(nvml, visible_selectors(env)))
        except Exception as e:
            return cls(nvml, [], _reason(e))

    @staticmethod
    def _visible(nvml: Any, selectors: list[str] | None) -> list[Device]:
        every: list[Device] = []
        gpu_uuids: dict[str, list[Device]] = {}  # a GPU's UUID -> its devices (its slices)
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            devices = _mig_slices(nvml, i, h) or [Device(f"gpu{i}", i, h)]
            every += devices
            if selectors is not None:
                gpu_uuids[_text(nvml.nvmlDeviceGetUUID(h))] = devices
        if selectors is None:
            return every
        # a selector names a device by its place, its own UUID (a slice's MIG-...), or its
        # GPU's UUID
        by_uuid = {**gpu_uuids, **{_text(nvml.nvmlDeviceGetUUID(d.handle)): [d]
                                   for d in every if d.mig is not None}}
        out: list[Device] = []
        for sel in selectors:
            if sel.isdigit():
                if int(sel) >= len(every):
                    break
                out.append(every[int(sel)])
            else:  # a UUID or an unambiguous prefix of one
                match = [u for u in by_uuid if u.startswith(sel)]
                if len(match) != 1:
                    break
                out += by_uuid[match[0]]
        return out

    def close(self) -> None:
        if self.error is None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass

    # -- reading --------------------------------------------------------------------------
    def _read(self, key: str, fn: Callable[[], Any]) -> Any:
        """fn(), or None with the reason recorded once under `key` ("<label>.<field>")."""
        if key in self.unavailable:
            return None
        try:
            return fn()
        except Exception as e:
            label = key.split(".")[0]
            if type(e).__name__ == "NVMLError_GpuIsLost" and label.startswith("gpu"):
                self.lost.add(label)
            self.unavailable[key] = _reason(e)
            return None

    def static_info(self) -> dict[str, Any]:
        """Once per run: driver and NVML versions, and each visible device's identity."""
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
        for d in self.devices:
            k, h, b = d.label, d.handle, d.board
            gpu = {
                "index": d.index,
                "label": k,
                "name": self._read(f"{k}.name", lambda h=h: _text(n.nvmlDeviceGetName(h))),
                "uuid": self._read(f"{k}.uuid", lambda h=h: _text(n.nvmlDeviceGetUUID(h))),
                "pci_bus_id": self._read(
                    f"{k}.pci_bus_id", lambda b=b: _text(n.nvmlDeviceGetPciInfo(b).busId)),
                "mig_mode": self._read(f"{k}.mig_mode",
                                       lambda b=b: n.nvmlDeviceGetMigMode(b)[0]),
                "power_limit_w": self._read(
                    f"{k}.power_limit_w", lambda b=b: n.nvmlDeviceGetEnforcedPowerLimit(b) / 1e3),
                "memory_total_bytes": self._read(
                    f"{k}.memory_total", lambda h=h: n.nvmlDeviceGetMemoryInfo(h).total),
            }
            if d.mig is not None:
                gpu.update(mig=d.mig, gpu_name=self._read(
                    f"{k}.gpu_name", lambda b=b: _text(n.nvmlDeviceGetName(b))),
                    gpu_uuid=self._read(f"{k}.gpu_uuid",
                                        lambda b=b: _text(n.nvmlDeviceGetUUID(b))))
            info["gpus"].append(gpu)
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

    def sample(self, with_processes: bool = False) -> dict[str, dict[str, Any]]:
        """One reading of every visible, not-lost device: {label: {field: value}}. With
        `with_processes`, each row's "processes" lists (pid, used bytes) of the compute
        processes NVML sees on the device."""
        n = self.nvml
        out: dict[str, dict[str, Any]] = {}
        for d in self.devices:
            k, h, b = d.label, d.handle, d.board
            if k in self.lost:
                continue
            inst, avg = self._power(k, b)
            util = self._read(f"{k}.utilization", lambda h=h: n.nvmlDeviceGetUtilizationRates(h))
            mem = self._read(f"{k}.memory", lambda h=h: n.nvmlDeviceGetMemoryInfo(h))
            reasons = self._read(f"{k}.clocks_event_reasons",
                                 lambda b=b: self._clocks_event_reasons(b))
            row = {
                "power_instant_w": inst,
                "power_w": avg if avg is not None else inst,
                "energy_j": self._read(f"{k}.energy",
                                       lambda b=b: n.nvmlDeviceGetTotalEnergyConsumption(b) / 1e3),
                "sm_clock_mhz": self._read(
                    f"{k}.sm_clock", lambda b=b: n.nvmlDeviceGetClockInfo(b, n.NVML_CLOCK_SM)),
                "mem_clock_mhz": self._read(
                    f"{k}.mem_clock", lambda b=b: n.nvmlDeviceGetClockInfo(b, n.NVML_CLOCK_MEM)),
                "temperature_c": self._read(
                    f"{k}.temperature",
                    lambda b=b: n.nvmlDeviceGetTemperature(b, n.NVML_TEMPERATURE_GPU)),
                "utilization_pct": None if util is None else util.gpu,
                "memory_used_bytes": None if mem is None else mem.used,
                "clocks_event_reasons": reasons,
            }
            if with_processes:
                row["processes"] = self._read(f"{k}.processes",
                                              lambda h=h: self._processes(h))
            if k in self.lost:  # lost during this very reading
                continue
            out[k] = row
        return out

    def _processes(self, h: Any) -> list[tuple[int, int | None]]:
        """(pid, used bytes) of each compute process NVML lists on the device."""
        listed = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)  # gpu-only: a driver's pids
        return [(p.pid, p.usedGpuMemory) for p in listed]

    def _clocks_event_reasons(self, h: Any) -> list[str]:
        n = self.nvml
        getter = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if getter is None:  # older bindings: the deprecated name of the same call
            getter = n.nvmlDeviceGetCurrentClocksThrottleReasons
        return decode_clocks_event_reasons(int(getter(h)))  # gpu-only: a GPU's clock limits
