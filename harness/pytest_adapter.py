"""pytest view of a suite: conformance cases as tests, workloads through pytest-benchmark.

In a suite's test module:

    from harness.pytest_adapter import conformance_tests, workload_benchmarks
    from suites.<name>.cases import suite

    test_conformance = conformance_tests(suite)
    test_workload = workload_benchmarks(suite)

Conformance tests run the same `runner.execute` as the CLI, so a test passes exactly when
the case would pass in a run. Workload benchmarks time the callables the suite's builders
return, with warm-up on and a clock that synchronises CUDA (pytest-benchmark does neither by
default), so `pytest --benchmark-json FILE` records the same statements the CLI measures.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch

from harness import runner, timing
from harness.cases import Case, Params, Suite, Workload, param_id
from harness.telemetry import Telemetry

PROFILE = "quick"


@cache
def session_telemetry() -> Telemetry:
    """One telemetry per pytest process: its run-level info goes into machine_info."""
    return Telemetry()


def _marks(device: str, needs: tuple[str, ...]) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.gpu] if device == "cuda" else []
    marks += [getattr(pytest.mark, n) for n in needs if n in ("distributed", "slow")]
    return marks


def _cases(suite: Suite, kind: str) -> list:
    out = []
    for case in suite.cases:
        if case.kind != kind:
            continue
        for device in case.devices:
            marks = _marks(device, case.needs)
            if case.known_issue:  # an upstream defect the case catches in some runs
                marks.append(pytest.mark.xfail(strict=False, reason=case.known_issue))
            for p in case.param_sets(PROFILE, device):
                out.append(pytest.param(case, device, p, marks=marks,
                                        id=f"{case.name}-{device}-{param_id(p)}"))
    return out


def _assert_passes(case: Case, device: str, params: Params) -> dict:
    entry = runner.execute(case, device, params, PROFILE)
    if entry["outcome"] == "skip":
        pytest.skip(entry["reason"])
    detail = entry["details"].get("traceback", "")
    assert entry["outcome"] == "pass", f"{entry['outcome']}: {entry['reason']}\n{detail}"
    return entry


def conformance_tests(suite: Suite):
    """One test per conformance case, device and quick-profile parameter set."""

    @pytest.mark.parametrize(("case", "device", "params"), _cases(suite, "conformance"))
    def test_conformance(case: Case, device: str, params: Params) -> None:
        _assert_passes(case, device, params)

    return test_conformance


def benchmark_case_tests(suite: Suite):
    """One test per benchmark case: it runs, records metrics, and its own checks pass."""

    @pytest.mark.parametrize(("case", "device", "params"), _cases(suite, "benchmark"))
    def test_benchmark_case(case: Case, device: str, params: Params) -> None:
        entry = _assert_passes(case, device, params)
        assert entry["metrics"], "a benchmark case must record metrics"

    return test_benchmark_case


def _workloads(suite: Suite) -> list:
    out = []
    for w in suite.workloads:
        for device in w.devices:
            for p in w.param_sets(PROFILE, device):
                marks = [*_marks(device, w.needs),
                         pytest.mark.benchmark(group=f"{suite.name}/{w.name}", warmup=True,
                                               warmup_iterations=2, timer=timing.sync_clock,
                                               min_rounds=3)]
                out.append(pytest.param(w, device, p, marks=marks,
                                        id=f"{w.name}-{device}-{param_id(p)}"))
    return out


def workload_benchmarks(suite: Suite):
    """One pytest-benchmark test per workload, device and quick-profile parameter set."""

    @pytest.mark.parametrize(("workload", "device", "params"), _workloads(suite))
    def test_workload(benchmark, workload: Workload, device: str, params: Params) -> None:
        if device == "cuda" and not torch.cuda.is_available():
            pytest.skip("CUDA is not available on this machine")
        fn = workload.build(device, **params)
        benchmark.extra_info.update(suite=workload.suite, workload=workload.name,
                                    device=device, params=params)
        try:
            with session_telemetry().sampler() as sampler:
                benchmark(fn)
        finally:
            if callable(getattr(fn, "close", None)):  # a workload holding peers or processes
                fn.close()
        benchmark.extra_info["telemetry"] = sampler.summary()

    return test_workload
