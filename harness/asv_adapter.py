"""Helpers for the suites' asv modules (`suites/<feature>/asv_bench.py`).

asv times `time_*` methods with its own clock, which does not wait for the GPU, so CUDA
benchmarks end their body with `synchronize(device)`. Figures that are not a time of one
statement (speedups, peak bytes, latency percentiles, energy) come from the suite's benchmark
case itself, run once per asv process in `setup_cache`, and are reported by `track_*`
methods with a `unit`: asv tracks them across commits like any timing.
"""

from __future__ import annotations

from typing import Any

import torch

from harness import registry, runner
from harness.cases import Params
from harness.timing import synchronize

__all__ = ["synchronize", "run_case", "metric_value", "skip_without"]


class NotAvailable(NotImplementedError):
    """asv reports a benchmark that raises NotImplementedError in setup as skipped (n/a)."""


def skip_without(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise NotAvailable("CUDA is not available")


def run_case(suite: str, case: str, params: Params, device: str = "cpu",
             profile: str = "quick") -> dict[str, Any]:
    """Run one benchmark case exactly as `release-bench run` would; return its entry."""
    skip_without(device)
    entry = runner.execute(registry.load(suite).case(case), device, params, profile)
    if entry["outcome"] not in ("pass", "fail"):
        raise NotAvailable(f"{suite}/{case}: {entry['outcome']}: {entry['reason']}")
    return entry


def metric_value(entry: dict[str, Any], name: str) -> float:
    for m in entry["metrics"]:
        if m["name"] == name:
            return m["value"]
    raise KeyError(f"{entry['suite']}/{entry['case']} recorded no metric {name!r}")
