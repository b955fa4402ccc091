"""Each profiler check, shown to fail when the profiler's report is broken on purpose.

The breaks corrupt what torch's profiler hands back, at the two places every API's figures
pass through: the `FunctionEvent`s that `events()`, `key_averages()` and the printed tables
are built from, and the raw event lists the profilers collect when they stop (Kineto's
result for torch.profiler and torch.autograd.profiler, the record lists of the legacy one).
For every conformance case, each of its checks passes unbroken and fails under at least one
break; the union of the breaks' failures is the case's whole set of checks.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partialmethod
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.autograd.profiler as autograd_profiler
import torch.autograd.profiler_legacy as legacy_profiler
from torch.autograd.profiler_util import FunctionEvent

from harness.adapters.pytest_adapter import unbroken
from harness.records import Result
from harness.running.runner import execute
from suites.profiler import cases

MEMORY_EVENT = "[memory]"


# --- breaks ---------------------------------------------------------------------------------


def after_init(monkeypatch, cls: type, change: Callable[[Any], None]) -> None:
    """Every `cls` made from now on is changed by `change` once torch has built it."""
    init = cls.__init__

    def changed(self, *args, **kwargs):
        init(self, *args, **kwargs)
        change(self)

    monkeypatch.setattr(cls, "__init__", changed)


def skew_memory(monkeypatch, factor: float = 1.0, offset: int = 0) -> None:
    """Every event reports factor * its bytes + offset (CPU and device memory alike)."""

    def skew(e) -> None:
        e.cpu_memory_usage = round(e.cpu_memory_usage * factor) + offset
        e.device_memory_usage = round(e.device_memory_usage * factor) + offset

    after_init(monkeypatch, FunctionEvent, skew)


def node_id_zero(monkeypatch) -> None:
    """Every event of a local run says node 0, as if it ran on the first node of a
    distributed run, instead of -1 (not applicable)."""
    after_init(monkeypatch, FunctionEvent, lambda e: setattr(e, "node_id", 0))


def swap_devices(monkeypatch) -> None:
    """Every event reports its host bytes as device bytes and its device bytes as host bytes:
    memory attributed to the wrong device."""

    def swap(e) -> None:
        e.cpu_memory_usage, e.device_memory_usage = e.device_memory_usage, e.cpu_memory_usage

    after_init(monkeypatch, FunctionEvent, swap)


class _WithoutFrees:
    """A Kineto profiler result whose event list has lost every free (negative) record."""

    def __init__(self, result: Any) -> None:
        self._result = result

    def events(self) -> list:
        return [e for e in self._result.events()
                if not (e.name() == MEMORY_EVENT and e.nbytes() < 0)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)


def drop_frees(monkeypatch) -> None:
    """The profilers lose every free: Kineto's results and the legacy record lists."""
    kineto_stop = autograd_profiler._disable_profiler
    monkeypatch.setattr(autograd_profiler, "_disable_profiler",
                        lambda: _WithoutFrees(kineto_stop()))
    legacy_stop = legacy_profiler._disable_profiler_legacy

    def legacy_without_frees():
        return [[r for r in thread
                 if not (r.kind() == "memory_alloc"
                         and (r.cpu_memory_usage() < 0 or r.cuda_memory_usage() < 0))]
                for thread in legacy_stop()]

    monkeypatch.setattr(legacy_profiler, "_disable_profiler_legacy", legacy_without_frees)


def stretch_times(monkeypatch, factor: float = 1.10) -> None:
    """Every event reports `factor` times its host and device duration."""
    for name in ("cpu_time_total", "device_time_total"):
        prop = getattr(FunctionEvent, name)
        monkeypatch.setattr(FunctionEvent, name,
                            property(lambda self, p=prop: p.fget(self) * factor))


def regions_end_when_dropped(monkeypatch) -> None:
    """record_function's exit ends nothing: a region ends only when its handle is dropped
    (the C++ RecordFunction's destructor), late for a decorator's instance, which keeps its
    handle until the next call replaces it."""
    monkeypatch.setattr(autograd_profiler.record_function, "__exit__", lambda self, *exc: None)


def self_time_lost(monkeypatch) -> None:
    """Every host event reports no time of its own (Self CPU 0)."""
    monkeypatch.setattr(FunctionEvent, "self_cpu_time_total", property(lambda self: 0))


def averages_miscounted(monkeypatch) -> None:
    """key_averages' rows start their Self CPU total at -1 us instead of 0."""
    from torch.autograd.profiler_util import FunctionEventAvg

    after_init(monkeypatch, FunctionEventAvg, lambda row: setattr(row, "self_cpu_time_total", -1))


def abort_at_exit(mp: pytest.MonkeyPatch) -> None:
    """Every fresh process the case starts aborts at exit, as fork/wait's do in some runs (the
    planted sitecustomize of tests/planted)."""
    mp.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2] / "tests" / "planted"))
    mp.setenv("RELEASE_BENCH_PLANT", "exit_abort=1")


BREAKS: dict[str, Callable] = {
    "memory scaled x1.5": lambda mp: skew_memory(mp, factor=1.5),
    "memory +4 B per event": lambda mp: skew_memory(mp, offset=4),
    "bytes on the wrong device": swap_devices,
    "local events on node 0": node_id_zero,
    "frees dropped": drop_frees,
    "times stretched x1.10": stretch_times,
    "regions end when dropped": regions_end_when_dropped,
    "self time lost": self_time_lost,
    "averages miscounted": averages_miscounted,
    "aborts at exit": abort_at_exit,
}
# The breaks each case is shown against (together they fail every one of its checks).
CASE_BREAKS = {
    "known_allocations": ("memory scaled x1.5", "frees dropped", "bytes on the wrong device",
                          "local events on node 0"),
    "resnet18_ops": ("memory scaled x1.5", "memory +4 B per event"),
    "peak_memory": ("frees dropped",),
    "timing_accuracy": ("times stretched x1.10", "regions end when dropped", "self time lost",
                        "averages miscounted"),
    "clean_exit": ("aborts at exit",),
}


# --- tests ----------------------------------------------------------------------------------


# clean_exit with 2 trials a program, as its feature-off entry below: every process aborts
# under its break, and 2 trials show it as 20 would
PARAMS = {"clean_exit": {"trials": 2}}


def run(name: str, device: str) -> Result:
    case = cases.suite.case(name)
    return execute(case, device, PARAMS.get(name, case.param_sets("quick")[0]), "quick")


def failed(entry: Result) -> set[str]:
    return {c.name for c in entry.checks if not c.passed}


def _params():
    out = []
    for name in CASE_BREAKS:
        for device in cases.suite.case(name).devices:
            marks = [pytest.mark.gpu] if device == "cuda" else []
            out.append(pytest.param(name, device, marks=marks, id=f"{name}-{device}"))
    return out


def test_every_case_is_broken_somewhere() -> None:
    conformance = {c.name for c in cases.suite.cases if c.kind == "conformance"}
    assert conformance == set(CASE_BREAKS)


@pytest.mark.parametrize(("name", "device"), _params())
def test_each_check_fails_under_a_break(monkeypatch, name: str, device: str) -> None:
    case = cases.suite.case(name)
    checks = {c.name for c in unbroken(case, device, PARAMS.get(name)).checks}
    caught: set[str] = set()
    for brk in CASE_BREAKS[name]:
        with monkeypatch.context() as mp:
            BREAKS[brk](mp)
            entry = run(name, device)
        assert entry.outcome == "fail", f"{brk}: {entry.outcome}: {entry.reason}"
        caught |= failed(entry)
    assert caught == checks, f"never failed: {sorted(checks - caught)}"


# the behaviour each case exercises per profiler API, whose check fails when torch raises
EXERCISED = {"known_allocations": "profiles the known allocations",
             "resnet18_ops": "profiles resnet18's forward",
             "peak_memory": "records the memory of each program",
             "timing_accuracy": "times the known regions"}


@pytest.mark.parametrize("name", list(EXERCISED))
def test_torch_raising_under_one_api_fails_that_apis_check_and_the_case_goes_on(
        monkeypatch, name: str) -> None:
    """torch.profiler.profile with a schedule that is not callable: torch raises (a
    TypeError in torch/profiler/profiler.py) for that API only; the other APIs still run."""
    monkeypatch.setattr(torch.profiler.profile, "__init__",
                        partialmethod(torch.profiler.profile.__init__, schedule="not callable"))
    entry = run(name, "cpu")
    assert entry.outcome == "fail", entry.reason
    bad = {c.name: c.detail for c in entry.checks if not c.passed}
    assert list(bad) == [f"profiler: {EXERCISED[name]}"], bad
    assert "(at profiler/profiler.py:" in bad[f"profiler: {EXERCISED[name]}"]
    assert any(c.name.startswith("autograd: ") and c.passed for c in entry.checks)


def test_dropped_frees_fail_exactly_the_free_checks(monkeypatch) -> None:
    unbroken(cases.suite.case("known_allocations"), "cpu")
    drop_frees(monkeypatch)
    entry = run("known_allocations", "cpu")
    assert failed(entry) == {c.name for c in entry.checks if "frees" in c.name}
    assert len(failed(entry)) == 3  # one per API


# What turns each case's feature off (tests/planted/feature_off.py), with the parameters it is
# run with: the memory profiler off for the byte checks, regions unrecorded for the timing.
# Each must then fail: never pass on empty reports, never n/a.
FEATURE_OFF = {
    ("known_allocations", "default"): ("memory_profiler", {}),
    ("resnet18_ops", "default"): ("memory_profiler", {}),
    ("peak_memory", "default"): ("memory_profiler", {}),
    ("timing_accuracy", "default"): ("record_function", {}),
    ("clean_exit", "trials=2"): ("memory_profiler", {"trials": 2}),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize(("name", "params_id"), list(FEATURE_OFF),
                         ids=[f"{n}-{p}" for n, p in FEATURE_OFF])
def test_each_case_fails_with_its_feature_off(feature_off, name, params_id, device):
    feature_off.assert_fails(cases.suite, FEATURE_OFF, name, params_id, device)
