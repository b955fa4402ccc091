"""pytest view of a suite: conformance cases as tests, workloads through pytest-benchmark.

In a suite's test module:

    from harness.adapters.pytest_adapter import conformance_tests, workload_benchmarks
    from suites.<name>.cases import suite

    test_conformance = conformance_tests(suite)
    test_workload = workload_benchmarks(suite)

Conformance tests run the same `runner.execute` as the CLI, so a test passes exactly when
the case would pass in a run, and is an expected failure (xfail) exactly when the run would
call it expected-fail under `expectations.toml` (`comparing.expectations`). Workload benchmarks
time the callables the suite's builders return, with warm-up on and a clock that
synchronises CUDA (pytest-benchmark does neither by default), so `pytest --benchmark-json
FILE` records the same statements the CLI measures.

A case is run once per process and parameters (`unbroken`): a suite's break tests, which show
each check fails with the feature broken, first ask for the same verdict on the case unbroken,
and share it with the conformance test. The views are marked `view`: the test suite's default
run leaves them out (they are the whole quick profile, which `release-bench run` runs); select
them with `pytest suites/S -m view`.
"""

from __future__ import annotations

import contextlib
import platform
from functools import cache

import pytest
import torch

from harness.cases import Case, Params, Suite, Workload, param_id
from harness.comparing import expectations
from harness.records import Result
from harness.running import runner, timing
from harness.running.telemetry import Telemetry

PROFILE = "quick"


@cache
def process_telemetry() -> Telemetry:
    """One telemetry per pytest process: its run-level info goes into machine_info."""
    return Telemetry()


def _marks(device: str, needs: tuple[str, ...]) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.gpu] if device == "cuda" else []
    marks += [getattr(pytest.mark, n) for n in needs if n in ("distributed", "slow")]
    return marks


class ExpectedFailure(Exception):
    """A case failed as an entry of the expectations file says (the test is an xfail)."""


@cache
def _expectations() -> tuple[expectations.Expectation, ...]:
    return tuple(expectations.load())


def _here() -> dict:
    """What the expectations' conditions read of this process's machine."""
    return {"torch": {"version": torch.__version__}, "python": platform.python_version(),
            "os": platform.platform()}


def _expected_marks(case: Case, device: str) -> list[pytest.MarkDecorator]:
    """An xfail where an entry of the expectations file applies to the case here: strict
    where the entry expects a failure always (a pass is then a failed test: the defect is
    fixed, the entry must go), and only for `ExpectedFailure`, so that a failure the entry
    does not excuse fails the test."""
    applicable = [x for x in _expectations() if x.matches_case(case.suite, case.name)
                  and x.applies(_here(), device)]
    if not applicable:
        return []
    always_fails = "pass" not in {o for x in applicable for o in x.outcomes}
    return [pytest.mark.xfail(strict=always_fails, raises=ExpectedFailure,
                              reason=f"{applicable[0].issue}: {applicable[0].summary}")]


def _cases(suite: Suite, kind: str) -> list:
    out = []
    for case in suite.cases:
        if case.kind != kind:
            continue
        for device in case.devices:
            marks = _marks(device, case.needs) + _expected_marks(case, device)
            for p in case.param_sets(PROFILE, device):
                out.append(pytest.param(case, device, p, marks=marks,
                                        id=f"{case.name}-{device}-{param_id(p)}"))
    return out


def _only_timings_failed(entry: Result) -> bool:
    """Whether every check the case failed was a timing (a speedup floor, a latency bound)."""
    failed = [c for c in entry.checks if c.failed]
    return entry.outcome == "fail" and bool(failed) and all(c.performance for c in failed)


def _assert_passes(case: Case, device: str, params: Params) -> Result:
    """Run the case as a run does, with the host's telemetry; it must pass, or fail as the
    expectations file says.

    A timing floor is the one check a busy machine can fail: measured contended, the case is
    `invalid` and the test is skipped with the telemetry's reason; missed on a machine that
    telemetry found quiet (a burst of CPU steal too short to show, say), the case is measured
    once more, and fails only if it misses again. A correctness check is never measured twice.
    """
    entry = runner.execute(case, device, params, PROFILE, telemetry=process_telemetry())
    if _only_timings_failed(entry):
        entry = runner.execute(case, device, params, PROFILE, telemetry=process_telemetry())
    if entry.outcome in ("skip", "n/a"):
        pytest.skip(entry.reason)
    if entry.outcome == "invalid":
        pytest.skip(f"measured contended, so not judged: {entry.reason}")
    if entry.outcome == "inconclusive":
        pytest.skip(f"inconclusive, so not judged: {entry.reason}")
    judged = expectations.judge_result(entry, _here(), _expectations())
    if judged.status == "expected-fail":
        raise ExpectedFailure(f"{judged.issue}: {entry.reason}")
    detail = entry.details.get("traceback", "")
    assert not judged.unexpected, f"{judged.status}: {judged.why}; {entry.reason}\n{detail}"
    assert entry.outcome == "pass", f"{entry.outcome}: {entry.reason}\n{detail}"
    return entry


_verdicts: dict[tuple[str, str, str, str], Result | BaseException] = {}


def unbroken(case: Case, device: str, params: Params | None = None) -> Result:
    """`_assert_passes`'s verdict on the case (its first quick parameter set by default),
    measured once in this process and given again to every later asker: the entry, or the
    same skip, expected failure or assertion error. Ask before breaking anything: the first
    answer is kept."""
    params = case.param_sets(PROFILE, device)[0] if params is None else params
    key = (case.suite, case.name, device, param_id(params))
    if key not in _verdicts:
        try:
            _verdicts[key] = _assert_passes(case, device, params)
        except (AssertionError, ExpectedFailure, pytest.skip.Exception) as e:
            _verdicts[key] = e
    got = _verdicts[key]
    if isinstance(got, BaseException):
        raise got
    return got


def conformance_tests(suite: Suite):
    """One test per conformance case, device and quick-profile parameter set."""

    @pytest.mark.view
    @pytest.mark.parametrize(("case", "device", "params"), _cases(suite, "conformance"))
    def test_conformance(case: Case, device: str, params: Params) -> None:
        unbroken(case, device, params)

    return test_conformance


def benchmark_case_tests(suite: Suite):
    """One test per benchmark case: it runs, records metrics, and its own checks pass."""

    @pytest.mark.view
    @pytest.mark.parametrize(("case", "device", "params"), _cases(suite, "benchmark"))
    def test_benchmark_case(case: Case, device: str, params: Params) -> None:
        entry = unbroken(case, device, params)
        assert entry.metrics, "a benchmark case must record metrics"

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

    @pytest.mark.view
    @pytest.mark.parametrize(("workload", "device", "params"), _workloads(suite))
    def test_workload(benchmark, workload: Workload, device: str, params: Params) -> None:
        with _benchmarked(benchmark, workload, device, params) as fn:
            benchmark(fn)

    return test_workload


@contextlib.contextmanager
def _benchmarked(benchmark, workload: Workload, device: str, params: Params):
    """The workload's callable, with the host's telemetry sampled while pytest-benchmark times
    it; closed, and the telemetry summary kept in the benchmark's extra_info, after.

    The work after the timing lives here, past the yield, not in the test's own body:
    pytest-benchmark pauses Python's tracing while it times, and the frames that were running
    then are never traced again (coverage.py would call their last lines unexecuted)."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA is not available on this machine")
    fn = workload.build(device, **params)
    benchmark.extra_info.update(suite=workload.suite, workload=workload.name,
                                device=device, params=params)
    try:
        with process_telemetry().sampler() as sampler:
            yield fn
    finally:
        if callable(getattr(fn, "close", None)):  # a workload holding peers or processes
            fn.close()
    benchmark.extra_info["telemetry"] = sampler.summary()
