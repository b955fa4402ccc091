"""Shared pytest setup for tests/ (the harness) and suites/ (the features)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from harness.running import machine


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; none on this machine (run tox -e gpu on a GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_benchmark_update_machine_info(config, machine_info):
    # pytest-benchmark's own machine_info knows nothing of GPUs or the torch build.
    from harness.adapters.pytest_adapter import process_telemetry

    machine_info["release_bench"] = machine.fingerprint()
    machine_info["release_bench_telemetry"] = process_telemetry().info


PLANTED = Path(__file__).resolve().parent / "tests" / "planted"


class FeatureOff:
    """Release features turned off for one test, their API left in place
    (tests/planted/feature_off.py): in this process, undone after the test, and in every
    process the test starts (workers, minimal programs: the planted sitecustomize, through
    the environment)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.monkeypatch = monkeypatch
        sys.path.insert(0, str(PLANTED))
        try:
            import feature_off as plants
        finally:
            sys.path.remove(str(PLANTED))
        self.plants = plants

    def __call__(self, names: str) -> None:
        """Turn off the features `names` ("autocast+rpc")."""
        self.plants.turn_off(names, self.monkeypatch.setattr)
        self.monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            filter(None, [str(PLANTED), os.environ.get("PYTHONPATH")])))
        self.monkeypatch.setenv("RELEASE_BENCH_PLANT", f"off={names}")

    def assert_fails(self, suite, table: dict, name: str, params_id: str,
                     device: str = "cpu"):
        """Run the case of a suite's FEATURE_OFF `table` entry with its plant (features to
        turn off, or a `worker_setup=` hook for its workers): it must fail, not pass, not be
        n/a. Returns its result entry."""
        from harness.running.runner import execute

        plant, params = table[name, params_id]
        if isinstance(plant, str):
            self(plant)
        entry = execute(suite.case(name), device, params, "quick",
                        worker_setup=None if isinstance(plant, str) else plant)
        assert entry.outcome == "fail", f"{plant} off: {entry.outcome}: {entry.reason}"
        return entry


@pytest.fixture
def feature_off(monkeypatch) -> FeatureOff:
    """See FeatureOff."""
    return FeatureOff(monkeypatch)
