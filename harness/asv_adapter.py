"""The suites' asv views (`suites/<feature>/asv_bench.py`) are built on two base classes here,
so that what asv tracks is what the suites define and cannot drift from it:

- `WorkloadTime` times one workload. Its asv `params` are the workload's quick-profile
  parameter sets on each device, so asv times exactly the statements the CLI and
  pytest-benchmark time. asv's clock does not wait for the GPU: `run()` synchronises.
- `CaseFigures` reports figures of one benchmark case (speedups, peak bytes, latency
  percentiles) through `track_*` methods. The case runs once per asv run, in `setup_cache`,
  exactly as `release-bench run` would run it (telemetry included), for every quick-profile
  parameter set on every device here. Its `params` are the device, the case's parameters that
  vary between those sets, and the metric labels the class declares (`labels`).

Both take a `device` axis of the devices here: asv's params are a product, it starts a process
for every combination, and combinations of a device this machine lacks would each cost one
(they have no results to track on this machine anyway). A combination that cannot run (a
parameter set the workload or case does not define on that device) raises `NotAvailable` in
`setup`, which asv reports as n/a: the one way a view skips. Units are the records' own
("s", "B", "x", "%").

Names and attributes asv reads (`params`, `param_names`, `unit`, `timeout`) are plain class
attributes, filled in by `__init_subclass__`. Suites import this module, not its classes, so
that asv does not take the bases for benchmarks.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from harness import machine, records, registry, runner
from harness.cases import Case, Params, Skip, Workload, metric_id, param_id
from harness.timing import synchronize

# asv tracks the quick grid: the one `make asv` gets through in minutes on a small machine
PROFILE = "quick"


class NotAvailable(NotImplementedError):
    """asv reports a benchmark that raises NotImplementedError in setup as skipped (n/a)."""


def available(device: str) -> bool:
    return device != "cuda" or torch.cuda.is_available()


def skip_without(device: str) -> None:
    if not available(device):
        raise NotAvailable(f"{device} is not available here")


def _definition(ident: str, kind: str) -> Case | Workload:
    """The case or workload named "suite/name"."""
    suite_name, name = ident.split("/")
    suite = registry.load(suite_name)
    found = suite.cases if kind == "case" else suite.workloads
    for d in found:
        if d.name == name:
            return d
    raise KeyError(f"{suite_name} has no {kind} {name!r}")


def setting(ident: str, name: str, device: str = "cpu") -> Any:
    """Setting `name` of the case "suite/name" in the profile asv tracks (e.g. the payload
    sizes a view's labels range over)."""
    return _definition(ident, "case").settings_for(PROFILE, device)[name]


def devices_here(devices: Sequence[str]) -> list[str]:
    """The devices of `devices` this machine has; all of them when it has none, since asv
    needs a combination to report the class as n/a rather than fail."""
    return [d for d in devices if available(d)] or list(devices)


def _axes(sets_by_device: dict[str, list[Params]], varying_only: bool) -> dict[str, list]:
    """One axis per parameter: its values over every device's sets, in order of appearance;
    with `varying_only`, only the parameters that take more than one value."""
    axes: dict[str, list] = {}
    for sets in sets_by_device.values():
        for p in sets:
            for k, v in p.items():
                values = axes.setdefault(k, [])
                if v not in values:
                    values.append(v)
    return {k: v for k, v in axes.items() if len(v) > 1 or not varying_only}


def workload_axes(workload: str) -> dict[str, list]:
    """Each parameter of a workload ("suite/name") with every value its quick sets take on
    any device: label axes for a case that measures the same grid (the GEMM ladder)."""
    w = _definition(workload, "workload")
    return _axes({d: w.param_sets(PROFILE, d) for d in devices_here(w.devices)},
                 varying_only=False)


class WorkloadTime:
    """Base of an asv class that times one workload ("suite/name") over its quick grid.
    Subclasses set `workload` and define one-line `time_*` methods that call `self.run()`."""

    workload: ClassVar[str] = ""
    devices: ClassVar[tuple[str, ...]] = ()  # fewer devices than the workload's, if given
    warmup_calls: ClassVar[int] = 3  # oneDNN picks kernels, cuDNN autotunes, GradScaler settles
    timeout: ClassVar[float] = 300

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("workload"):
            w = _definition(cls.workload, "workload")
            axes = workload_axes(cls.workload)
            cls.params = [devices_here(cls.devices or w.devices), *axes.values()]
            cls.param_names = ["device", *axes]

    def setup(self, device: str, *values: Any) -> None:
        skip_without(device)
        w = _definition(self.workload, "workload")
        params = dict(zip(self.param_names[1:], values, strict=True))
        if params not in w.param_sets(PROFILE, device):
            raise NotAvailable(f"{self.workload} has no {param_id(params)} on {device}")
        self.device = device
        # an environment may lack an optional package (`env create --without-torchvision`):
        # the import fails, or the suite's own guard says so with a Skip
        try:
            self.statement = w.build(device, **params)
        except (ImportError, Skip) as e:
            raise NotAvailable(f"{self.workload}: {e}") from e
        for _ in range(self.warmup_calls):
            self.run()

    def run(self) -> None:
        self.statement()
        synchronize(self.device)


class CaseFigures:
    """Base of an asv class whose `track_*` methods report figures of one case ("suite/name").

    asv keys its cache by the source line of `setup_cache`, so each subclass defines it as
    `def setup_cache(self): return self.run_case()`, and classes reading the same case share
    that function (`setup_cache = OtherClass.setup_cache`): no case runs twice in one asv run.
    """

    case: ClassVar[str] = ""
    # metric-label axes from the suite's definitions: values, or values by device
    labels: ClassVar[dict[str, Sequence[Any] | Mapping[str, Sequence[Any]]]] = {}
    devices: ClassVar[tuple[str, ...]] = ()  # fewer devices than the case's, if given
    timeout: ClassVar[float] = 900

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("case"):
            c = _definition(cls.case, "case")
            devices = devices_here(cls.devices or c.devices)
            varying = _axes({d: c.param_sets(PROFILE, d) for d in devices}, varying_only=True)
            axes = {**varying, **{k: _label_values(v, devices) for k, v in cls.labels.items()}}
            cls.params = [devices, *axes.values()]
            cls.param_names = ["device", *axes]

    def run_case(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every quick parameter set of the case on every device here: entries by (device,
        parameter id)."""
        c = _definition(self.case, "case")
        return {(d, param_id(p)): run_case(c, d, p)
                for d in c.devices if available(d) for p in c.param_sets(PROFILE, d)}

    def setup(self, entries: dict, device: str, *values: Any) -> None:
        skip_without(device)
        chosen = dict(zip(self.param_names[1:], values, strict=True))
        c = _definition(self.case, "case")
        for p in c.param_sets(PROFILE, device):
            if all(chosen.get(k, v) == v for k, v in p.items()):
                break
        else:
            raise NotAvailable(f"{self.case} has no parameter set for {chosen} on {device}")
        entry = entries.get((device, param_id(p)))
        if entry is None or entry["outcome"] not in ("pass", "fail"):
            reason = "not run" if entry is None else f"{entry['outcome']}: {entry['reason']}"
            raise NotAvailable(f"{self.case} on {device}: {reason}")
        self.entry = entry
        self.chosen_labels = {k: v for k, v in chosen.items() if k not in p}
        if not any(_has_labels(m, self.chosen_labels) for m in entry["metrics"]):
            raise NotAvailable(f"{self.case} recorded nothing for {self.chosen_labels} "
                               f"on {device}")

    def metric(self, name: str) -> dict[str, Any]:
        """The record's metric `name` with this combination's labels."""
        return find_metric(self.entry, name, **self.chosen_labels)

    def value(self, name: str) -> float:
        return self.metric(name)["value"]

    def telemetry(self, key: str) -> float:
        return telemetry_value(self.entry, key)


def _label_values(values: Sequence[Any] | Mapping[str, Sequence[Any]],
                  devices: Sequence[str]) -> list[Any]:
    if not isinstance(values, Mapping):
        return list(values)
    return list(dict.fromkeys(v for d in devices for v in values.get(d, ())))


def run_case(case: Case, device: str, params: Params) -> dict[str, Any]:
    """Run one case exactly as `release-bench run` would (telemetry included); its entry."""
    from harness.telemetry import Telemetry

    tel = Telemetry()
    try:
        return runner.execute(case, device, params, PROFILE, tel)
    finally:
        tel.close()


def _has_labels(m: dict[str, Any], labels: dict[str, Any]) -> bool:
    have = m.get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


def find_metric(entry: dict[str, Any], name: str, **labels: Any) -> dict[str, Any]:
    """The metric `name` whose labels include `labels`."""
    for m in entry["metrics"]:
        if m["name"] == name and _has_labels(m, labels):
            return m
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
