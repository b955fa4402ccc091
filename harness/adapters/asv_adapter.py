"""The suites' asv views, generated from their definitions (harness.cases) as the pytest view
is, so that what asv tracks is what the suites define and cannot drift from it. Each suite's
`suites/<name>/asv_bench.py` is one call, `globals().update(asv_adapter.views(__name__))`:
asv finds benchmarks as module-level classes of the modules under its benchmark_dir
("suites"), and files results under module, class and method ("amp.asv_bench.MatmulTime.
time_matmul"), so the classes are module attributes with names the definitions fix.

- Every workload gets a `WorkloadTime` class that times it (`time_*`). Its asv `params` are
  the workload's quick-profile parameter sets on each device, so asv times exactly the
  statements the CLI and pytest-benchmark time. asv's clock does not wait for the GPU:
  `run()` synchronises. The class and method are the workload's `asv_name`, or
  `<Name>Time.time_<name>`.
- Every `TrackView` a case declares (`tracks=`) gets a `CaseFigures` class named after it
  that reports the case's figures (speedups, peak bytes, latency percentiles) through
  `track_*` methods. The case runs once per asv run, in `setup_cache`, exactly as
  `release-bench run` would run it (telemetry included), for every quick-profile parameter
  set on every device here. Its `params` are the device, the case's parameters that vary
  between those sets, and the view's metric labels.

Both take a `device` axis of the devices here: asv's params are a product, it starts a process
for every combination, and combinations of a device this machine lacks would each cost one
(they have no results to track on this machine anyway). A combination that cannot run (a
parameter set the workload or case does not define on that device) raises `NotAvailable` in
`setup`, which asv reports as n/a: the one way a view skips. Units are the records' own
("s", "B", "x", "%").

Names and attributes asv reads (`params`, `param_names`, `unit`, `timeout`) are plain class
attributes, filled in by `__init_subclass__`. A suite's asv module holds only the generated
classes, not the bases, so that asv does not take the bases for benchmarks; process settings
a suite's workloads need under asv (thread counts) are module-level `setup`/`teardown`
functions there, which asv runs around every benchmark of the module.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from harness import records, registry
from harness.cases import (
    Case,
    LabelSpec,
    Params,
    Skip,
    Track,
    TrackView,
    Workload,
    label_values,
    metric_id,
    param_id,
)
from harness.records import Metric, Result
from harness.running import machine, runner
from harness.running.timing import synchronize

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


class WorkloadTime:
    """Base of an asv class that times one workload ("suite/name") over its quick grid: its
    subclasses (`views`) set `workload` and have one `time_*` method, `self.run()`."""

    workload: ClassVar[str] = ""
    warmup_calls: ClassVar[int] = 3  # oneDNN picks kernels, cuDNN autotunes, GradScaler settles
    timeout: ClassVar[float] = 300

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("workload"):
            w = _definition(cls.workload, "workload")
            axes = _axes({d: w.param_sets(PROFILE, d) for d in devices_here(w.devices)},
                         varying_only=False)
            cls.params = [devices_here(w.devices), *axes.values()]
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
    """Base of an asv class whose `track_*` methods report figures of one case ("suite/name"):
    its subclasses (`views`) set `case`, `labels` and a `setup_cache` that runs the case, one
    function per case (see `_setup_cache`), so that no case runs twice in one asv run."""

    case: ClassVar[str] = ""
    # metric-label axes from the suite's definitions (harness.cases.LabelSpec)
    labels: ClassVar[Mapping[str, LabelSpec]] = {}
    devices: ClassVar[tuple[str, ...]] = ()  # fewer devices than the case's, if given
    timeout: ClassVar[float] = 900

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("case"):
            c = _definition(cls.case, "case")
            devices = devices_here(cls.devices or c.devices)
            varying = _axes({d: c.param_sets(PROFILE, d) for d in devices}, varying_only=True)
            axes = {**varying,
                    **{k: _label_values(v, devices, c) for k, v in cls.labels.items()}}
            cls.params = [devices, *axes.values()]
            cls.param_names = ["device", *axes]

    def run_case(self) -> dict[tuple[str, str], Result]:
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
        if entry is None or entry.outcome not in ("pass", "fail"):
            reason = "not run" if entry is None else f"{entry.outcome}: {entry.reason}"
            raise NotAvailable(f"{self.case} on {device}: {reason}")
        self.entry = entry
        self.chosen_labels = {k: v for k, v in chosen.items() if k not in p}
        if not any(m.has_labels(self.chosen_labels) for m in entry.metrics):
            raise NotAvailable(f"{self.case} recorded nothing for {self.chosen_labels} "
                               f"on {device}")

    def metric(self, name: str) -> Metric:
        """The record's metric `name` with this combination's labels."""
        return find_metric(self.entry, name, **self.chosen_labels)

    def value(self, name: str) -> float:
        return self.metric(name).value

    def telemetry(self, key: str) -> float:
        return telemetry_value(self.entry, key)


def _label_values(spec: LabelSpec, devices: Sequence[str], case: Case) -> list[Any]:
    """A label's quick-profile values over the devices, in order of appearance."""
    return list(dict.fromkeys(v for d in devices for v in label_values(spec, PROFILE, d, case)))


def run_case(case: Case, device: str, params: Params) -> Result:
    """Run one case exactly as `release-bench run` would (telemetry included); its entry."""
    from harness.running.telemetry import Telemetry

    tel = Telemetry()
    try:
        return runner.execute(case, device, params, PROFILE, tel)
    finally:
        tel.close()


def find_metric(entry: Result, name: str, **labels: Any) -> Metric:
    """The metric `name` whose labels include `labels`."""
    for m in entry.metrics:
        if m.name == name and m.has_labels(labels):
            return m
    raise KeyError(f"{entry.case_id} recorded no metric {metric_id(name, labels)!r}")


def telemetry_value(entry: Result, key: str, gpu: int = 0) -> float:
    """A figure of the case's telemetry summary for asv's track_* benchmarks: a key of the
    first GPU's summary (energy_per_iteration_j, power_w_mean, ...), else of the host's."""
    tel = entry.telemetry or {}
    gpus = tel.get("gpus") or []
    value = gpus[gpu].get(key) if len(gpus) > gpu else (tel.get("host") or {}).get(key)
    if value is None:
        reasons = "; ".join(f"{k}: {v}" for k, v in (tel.get("unavailable") or {}).items())
        raise NotAvailable(f"telemetry has no {key} here ({reasons or 'not recorded'})")
    return value


def views(module: str) -> dict[str, type]:
    """The asv classes of the suite whose asv module is `module` ("suites/<name>/asv_bench.py"
    passes its `__name__`), by class name: a time view of every workload, and a figure view of
    every TrackView its cases declare."""
    suite = registry.load(module.split(".")[-2])
    made = [_time_view(w, module) for w in suite.workloads]
    for case in suite.cases:
        if case.tracks:
            cache = _setup_cache(case, case.tracks[0].name)
            made += [_figure_view(case, v, cache, module) for v in case.tracks]
    out: dict[str, type] = {}
    for cls in made:
        if cls.__name__ in out:
            raise ValueError(f"suite {suite.name} has two asv views called {cls.__name__}")
        out[cls.__name__] = cls
    return out


def time_view_name(w: Workload) -> tuple[str, str]:
    """The class and the method asv files a workload's timings under."""
    if not w.asv_name:
        return "".join(part.title() for part in w.name.split("_")) + "Time", f"time_{w.name}"
    cls, _, method = w.asv_name.partition(".")
    if not cls or not method.startswith("time_"):  # asv would not find it
        raise ValueError(f"{w.suite}/{w.name}: asv_name {w.asv_name!r} is not "
                         f"'Class.time_method'")
    return cls, method


def _time_view(w: Workload, module: str) -> type:
    name, method = time_view_name(w)

    def time(self: WorkloadTime, *params: Any) -> None:
        self.run()

    return _view_class(name, WorkloadTime, module, w.doc, workload=f"{w.suite}/{w.name}",
                       **{method: _as_written(time, name, method, "self.run()")})


def _figure_view(case: Case, view: TrackView, cache: Any, module: str) -> type:
    attrs: dict[str, Any] = {"case": case.id, "labels": dict(view.labels),
                             "devices": tuple(view.devices), "setup_cache": cache}
    if view.unit:
        attrs["unit"] = view.unit
    for t in view.tracks:
        attrs[f"track_{t.name}"] = _track(t, view.name)
    return _view_class(view.name, CaseFigures, module, view.doc, **attrs)


def _track(t: Track, view: str) -> Any:
    read, key = ("telemetry" if t.telemetry else "value"), t.metric

    if t.telemetry:
        def track(self: CaseFigures, *params: Any) -> float:
            return self.telemetry(key)
    else:
        def track(self: CaseFigures, *params: Any) -> float:
            return self.value(key)

    if t.unit:
        track.unit = t.unit
    return _as_written(track, view, f"track_{t.name}", f'return self.{read}("{key}")', t.doc)


def _setup_cache(case: Case, view: str) -> Any:
    """The setup_cache of every view of `case`: it runs the case.

    asv runs a setup_cache once per asv run and hands its result to every benchmark whose
    setup_cache has the same key, the module and first line of its source. Functions made
    here all have this one's line, so the key is made the case's own: `__module__` and
    `__wrapped__` (which inspect follows to the source) are the case function's. One key per
    case: each case runs once, whichever of its views asv runs.
    """

    def setup_cache(self: CaseFigures) -> dict:
        return self.run_case()

    setup_cache.__module__ = case.func.__module__
    setup_cache.__wrapped__ = case.func
    return _as_written(setup_cache, view, "setup_cache", "return self.run_case()", args="self")


def _as_written(fn: Any, cls: str, name: str, body: str, doc: str = "",
                args: str = "self, *params") -> Any:
    """`fn` named as method `name` of class `cls`, with the source a hand-written method of
    the view would have. asv shows a benchmark's source (`pretty_source`, else inspect's) on
    its pages and versions the benchmark's results by it: the generator's source would be
    the same for every view, and a view's history restarts whenever its version changes."""
    fn.__name__, fn.__qualname__ = name, f"{cls}.{name}"
    fn.__doc__ = doc or None
    lines = [f"def {name}({args}):"]
    if doc:
        lines.append(f'    """{doc}"""')
    fn.pretty_source = "\n".join([*lines, f"    {body}"])
    return fn


def _view_class(name: str, base: type, module: str, doc: str, **attrs: Any) -> type:
    """A class of `module` as asv discovers it: a plain class, its attributes set before
    the base's __init_subclass__ reads them."""
    return type(name, (base,), {"__module__": module, "__qualname__": name, "__doc__": doc,
                                **attrs})


def register_machine(results_dir: str | Path = "results/asv") -> str:
    """Register this machine with asv under the harness's machine name, and write the full
    fingerprint beside asv's results.

    asv's machine record has no GPU fields; its `cpu` text is what the asv pages show for a
    machine, so the GPUs and driver go there as well as into the name. Everything else (CPU
    flags, torch/CUDA/cuDNN builds, commit) is in `<results_dir>/<name>.fingerprint.json`.
    """
    from harness.running.telemetry import Telemetry

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
