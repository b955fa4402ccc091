"""Hardware telemetry sampled while cases run, so every figure carries the state it was
measured in.

    tel = Telemetry(interval_s=0.1)       # opens NVML once; `tel.info` is the run-level part
    with tel.sampler() as s:              # one per case: samples on a background thread
        ...
    s.summary(iterations=n)               # power, energy, clocks, throttling, validity, series

Anything that cannot be read (no GPU, no NVML library, no permission, a field a MIG slice does
not report, a GPU lost mid-run, no RAPL, no CPU steal counter) is recorded as
"unavailable: <reason>" and the run goes on. A case is invalid when the GPU slowed down for
heat or by hardware, another process used the GPU (gpu_processes.py: a rule that holds in a
container), other processes kept the host busy (on average, or for a second in a row), or the
hypervisor stole more than 10% of CPU time (sampler.py). A power cap reached under load is
the GPU's working state: recorded as context, and compared between the sides of a comparison
(`limit_change`).
"""

from __future__ import annotations

from typing import Any

from harness.running.telemetry.host import HostReader
from harness.running.telemetry.nvml import NvmlReader, decode_clocks_event_reasons
from harness.running.telemetry.sampler import Sampler, limit_change

__all__ = ["Telemetry", "Sampler", "decode_clocks_event_reasons", "limit_change"]

DEFAULT_INTERVAL_S = 0.1  # 10 Hz


class Telemetry:
    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, nvml: Any | None = None,
                 tree_of: int | None = None):
        """`tree_of`: the process whose tree is our own work (default: this one); other
        processes' CPU use is the neighbours' that makes a case contended."""
        self.interval_s = interval_s
        self.host = HostReader(tree_of)
        self.nvml = NvmlReader.open(nvml)
        self.info: dict[str, Any] = {
            "interval_s": interval_s,
            "nvml": self.nvml.static_info(),
            "host": self.host.static_info(),
        }

    def sampler(self) -> Sampler:
        return Sampler(self.host, self.nvml, self.interval_s)

    def close(self) -> None:
        self.nvml.close()
