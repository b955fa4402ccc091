"""Shared pytest setup for tests/ (the harness) and suites/ (the features)."""

from __future__ import annotations

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
