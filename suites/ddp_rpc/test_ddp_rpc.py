"""The DDP+RPC suite under pytest: its cases as tests, its workload as a benchmark."""

from harness.adapters.pytest_adapter import (
    benchmark_case_tests,
    conformance_tests,
    workload_benchmarks,
)
from suites.ddp_rpc.cases import suite

test_conformance = conformance_tests(suite)
test_benchmark_case = benchmark_case_tests(suite)
test_workload = workload_benchmarks(suite)


def test_the_asv_modules_local_step_runs_with_the_threads_of_one_hybrid_process(monkeypatch):
    import torch

    from suites.ddp_rpc import asv_bench, cases

    asked = []
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    asv_bench.setup()
    assert asked == [cases.threads_per_process()]
