"""A fake of the pynvml module (nvidia-ml-py): the calls the telemetry makes, with errors on
demand, as Zeus and CodeCarbon test their NVML code without a GPU.

A GPU in MIG mode (`FakeGpu(mig=[FakeMig(...), None, ...])`, a None for an empty place) has
MIG device handles as NVML gives them: a slice answers its name, UUID, memory and processes;
power, energy, clocks, temperature, utilisation, the clocks-event reasons and the power limit
are not supported on a slice's handle (NVML reports them for the whole GPU only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _error(name: str, text: str) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {})
    cls.__str__ = lambda self: text
    return cls


NVMLError_LibraryNotFound = _error("NVMLError_LibraryNotFound", "NVML Shared Library Not Found")
NVMLError_NoPermission = _error("NVMLError_NoPermission", "Insufficient Permissions")
NVMLError_NotSupported = _error("NVMLError_NotSupported", "Not Supported")
NVMLError_GpuIsLost = _error("NVMLError_GpuIsLost", "GPU is lost")
NVMLError_NotFound = _error("NVMLError_NotFound", "Not Found")

NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0


@dataclass
class FakeMig:
    """A MIG slice of a FakeGpu."""

    name: str = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    uuid: str = "MIG-66666666-7777-8888-9999-000000000000"
    mem_used: int = 2**30
    mem_total: int = 10 * 2**30
    pids: list[int] = field(default_factory=list)


# what NVML does not report on a MIG device handle: the whole GPU's readings
NOT_ON_A_SLICE = {"fields", "power", "energy", "clocks", "temperature", "utilization",
                  "clocks_event_reasons", "power_limit", "mig"}


@dataclass(frozen=True)
class MigHandle:
    gpu: int
    index: int


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    power_mw: int = 300_000
    energy_mj: int = 1_000_000
    energy_step_mj: int = 30_000  # added at every energy reading
    sm_clock: int = 1980
    mem_clock: int = 3201
    temperature: int = 45
    util: int = 97
    mem_used: int = 10 * 2**30
    clocks_event_mask: int = 0
    pids: list[int] = field(default_factory=list)
    used_bytes: int = 2**30  # each listed process's memory
    mig_mode: int = 0
    mig: list[FakeMig | None] = field(default_factory=list)  # with mig_mode=1: the places
    power_limit_mw: int = 700_000
    mem_total: int = 141 * 2**30
    # call name -> exception instance raised by that call on this GPU
    fail: dict[str, Exception] = field(default_factory=dict)
    lost_after: int | None = None  # raise GpuIsLost after this many samples of power


class FakeNvml:
    """Stands in for the module: `NvmlReader.open(FakeNvml([...]))`."""

    def __init__(self, gpus: list[FakeGpu], init_error: Exception | None = None,
                 instant_power: bool = True):
        self.gpus = gpus
        self.init_error = init_error
        self.instant_power = instant_power
        self.calls = 0
        for k, v in globals().items():
            if k.startswith(("NVML_", "NVMLError")):
                setattr(self, k, v)

    def _gpu(self, h: int | MigHandle, call: str) -> FakeGpu:
        if isinstance(h, MigHandle):
            if call in NOT_ON_A_SLICE:
                raise NVMLError_NotSupported()
            h = h.gpu
        g = self.gpus[h]
        if call in g.fail:
            raise g.fail[call]
        return g

    def _mig(self, h: int | MigHandle) -> FakeMig | None:
        return self.gpus[h.gpu].mig[h.index] if isinstance(h, MigHandle) else None

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlSystemGetNVMLVersion(self):
        return "12.570.86.15"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        g = self._gpu(h, "name")
        return (self._mig(h) or g).name

    def nvmlDeviceGetUUID(self, h):
        g = self._gpu(h, "uuid")
        return (self._mig(h) or g).uuid

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0".encode())

    def nvmlDeviceGetMigMode(self, h):
        g = self._gpu(h, "mig")
        return [g.mig_mode, g.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return len(self._gpu(h, "mig").mig)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, index):
        g = self._gpu(h, "mig")
        if g.mig_mode != 1 or index >= len(g.mig) or g.mig[index] is None:
            raise NVMLError_NotFound()
        return MigHandle(h, index)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h):
        return h.gpu

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._gpu(h, "power_limit").power_limit_mw

    def nvmlDeviceGetFieldValues(self, h, ids):
        g = self._gpu(h, "fields")
        self._maybe_lose(g)
        ret = 0 if self.instant_power else 3  # 3: NVML_ERROR_NOT_SUPPORTED per field
        return [SimpleNamespace(nvmlReturn=ret, value=SimpleNamespace(uiVal=g.power_mw))
                for _ in ids]

    def _maybe_lose(self, g: FakeGpu):
        if g.lost_after is not None:
            if g.lost_after <= 0:
                raise NVMLError_GpuIsLost()
            g.lost_after -= 1

    def nvmlDeviceGetPowerUsage(self, h):
        g = self._gpu(h, "power")
        self._maybe_lose(g)
        return g.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        g = self._gpu(h, "energy")
        g.energy_mj += g.energy_step_mj
        return g.energy_mj

    def nvmlDeviceGetClockInfo(self, h, kind):
        g = self._gpu(h, "clocks")
        return g.sm_clock if kind == NVML_CLOCK_SM else g.mem_clock

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._gpu(h, "temperature").temperature

    def nvmlDeviceGetUtilizationRates(self, h):
        g = self._gpu(h, "utilization")
        return SimpleNamespace(gpu=g.util, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        g = self._gpu(h, "memory")
        m = self._mig(h)
        return (SimpleNamespace(used=m.mem_used, total=m.mem_total) if m else
                SimpleNamespace(used=g.mem_used, total=g.mem_total))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._gpu(h, "clocks_event_reasons").clocks_event_mask

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        g = self._gpu(h, "processes")
        return [SimpleNamespace(pid=p, usedGpuMemory=g.used_bytes)
                for p in (self._mig(h) or g).pids]
