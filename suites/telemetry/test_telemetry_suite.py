"""The telemetry self-checks under pytest, and each check failing when telemetry is broken."""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest

from harness.adapters.pytest_adapter import conformance_tests
from harness.records import Result
from harness.running.runner import execute
from harness.running.telemetry.sampler import Sampler
from suites.telemetry import cases

test_conformance = conformance_tests(cases.suite)


def run(name: str, device: str = "cpu") -> Result:
    return execute(cases.suite.case(name), device, {}, "quick")


def test_host_checks_fail_when_memory_and_cpu_readings_are_broken(monkeypatch):
    assert run("host_readings").outcome == "pass"
    monkeypatch.setattr(psutil.Process, "memory_info", lambda self: SimpleNamespace(rss=0))
    monkeypatch.setattr(psutil, "cpu_percent", lambda *a, **k: [0.0] * psutil.cpu_count())
    monkeypatch.setattr(Sampler, "_loop", lambda self: None)  # the thread never samples
    entry = run("host_readings")
    failed = {c.name for c in entry.checks if not c.passed}
    assert failed == {"resident memory includes a live 64 MiB tensor", "CPU use seen while busy",
                      "sampled at the asked rate"}


@pytest.mark.gpu
def test_nvml_checks_fail_when_the_energy_counter_is_broken(monkeypatch):
    import pynvml

    assert run("nvml_readings", "cuda").outcome == "pass"

    def broken(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", broken)
    entry = run("nvml_readings", "cuda")
    failed = {c.name for c in entry.checks if not c.passed}
    assert failed == {"energy counter advanced"}

