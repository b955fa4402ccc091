"""Helpers for the suites' asv modules (`suites/<feature>/asv_bench.py`).

asv times `time_*` methods with its own clock, which does not wait for the GPU, so CUDA
benchmarks end their body with `synchronize(device)`. Figures that are not a time of one
statement (speedups, peak bytes, latency percentiles, energy) come from the suite's benchmark
case itself, run once per asv process in `setup_cache`, and are reported by `track_*`
methods with a `unit`: asv tracks them across commits like any timing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from harness import machine, records, registry, runner
from harness.cases import Params, metric_id
from harness.timing import synchronize

__all__ = ["synchronize", "run_case", "metric_value", "telemetry_value", "skip_without",
           "register_machine"]


class NotAvailable(NotImplementedError):
    """asv reports a benchmark that raises NotImplementedError in setup as skipped (n/a)."""


def skip_without(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise NotAvailable("CUDA is not available")


def run_case(suite: str, case: str, params: Params, device: str = "cpu",
             profile: str = "quick") -> dict[str, Any]:
    """Run one benchmark case exactly as `release-bench run` would (telemetry included);
    return its entry."""
    from harness.telemetry import Telemetry

    skip_without(device)
    tel = Telemetry()
    try:
        entry = runner.execute(registry.load(suite).case(case), device, params, profile, tel)
    finally:
        tel.close()
    if entry["outcome"] not in ("pass", "fail"):
        raise NotAvailable(f"{suite}/{case}: {entry['outcome']}: {entry['reason']}")
    return entry


def metric_value(entry: dict[str, Any], name: str, **labels: Any) -> float:
    """The value of the metric `name` whose labels include `labels`."""
    for m in entry["metrics"]:
        have = m.get("labels") or {}
        if m["name"] == name and all(have.get(k) == v for k, v in labels.items()):
            return m["value"]
    raise KeyError(f"{entry['suite']}/{entry['case']} recorded no metric "
                   f"{metric_id(name, labels)!r}")


def telemetry_value(entry: dict[str, Any], key: str, gpu: int = 0) -> float:
    """A figure of the case's telemetry summary for asv's track_* benchmarks: a key of the
    first GPU's summary (energy_per_iteration_j, power_w_mean, ...), else of the host's."""
    tel = entry.get("telemetry") or {}
    gpus = tel.get("gpus") or []
    value = gpus[gpu].get(key) if len(gpus) > gpu else (tel.get("host") or {}).get(key)
    if value is None:
        reasons = "; ".join(f"{k}: {v}" for k, v in (tel.get("unavailable") or {}).items())
        raise NotAvailable(f"telemetry has no {key} here ({reasons or 'not recorded'})")
    return value


def register_machine(results_dir: str | Path = "results/asv") -> str:
    """Register this machine with asv under the harness's machine name, and write the full
    fingerprint beside asv's results.

    asv's machine record has no GPU fields; its `cpu` text is what the asv pages show for a
    machine, so the GPUs and driver go there as well as into the name. Everything else (CPU
    flags, torch/CUDA/cuDNN builds, commit) is in `<results_dir>/<name>.fingerprint.json`.
    """
    from harness.telemetry import Telemetry

    fp = machine.fingerprint()
    tel = Telemetry()
    nvml = tel.info["nvml"]
    tel.close()
    cpu = f"{fp['cpu']['model']} ({fp['cpu']['logical_cores']} cores)"
    if fp["gpus"]:
        driver = nvml.get("driver_version") or "driver unknown"
        cpu += f" + {len(fp['gpus'])}x {fp['gpus'][0]['name']} (driver {driver}, " \
               f"CUDA {fp['torch']['cuda']})"
    name = fp["name"]
    asv = Path(sys.executable).with_name("asv")
    subprocess.run(
        [str(asv) if asv.exists() else "asv", "machine", "--yes", "--machine", name,
         "--os", fp["os"], "--arch", fp["cpu"]["arch"], "--cpu", cpu,
         "--num_cpu", str(fp["cpu"]["logical_cores"]),
         "--ram", f"{fp['memory_bytes'] / 2**30:.0f}GB"],
        check=True, capture_output=True, text=True)
    records.write_json_atomic(Path(results_dir) / f"{name}.fingerprint.json",
                              {"machine": fp, "telemetry": tel.info})
    return name
