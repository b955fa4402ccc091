"""The fork/wait suite under pytest: its cases as tests, its workloads as benchmarks."""

from harness.adapters.pytest_adapter import (
    benchmark_case_tests,
    conformance_tests,
    workload_benchmarks,
)
from suites.fork_wait.cases import suite

test_conformance = conformance_tests(suite)
test_benchmark_case = benchmark_case_tests(suite)
test_workload = workload_benchmarks(suite)


def test_the_asv_module_runs_on_one_thread_and_lets_the_forked_tasks_settle(monkeypatch):
    """asv's setup: fork is the only parallelism, as in the suite; its teardown waits for the
    inter-op threads to wind down before asv's process ends (else it may abort: #38228)."""
    import time

    import torch

    from suites.fork_wait import asv_bench

    asked = []
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    asv_bench.setup()
    assert asked == [1]
    t0 = time.monotonic()
    asv_bench.teardown()
    assert time.monotonic() - t0 >= asv_bench.SETTLE_S
