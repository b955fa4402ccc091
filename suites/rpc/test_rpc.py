"""The RPC suite under pytest: its cases as tests, its workloads as benchmarks.

The workloads time calls from this process to a peer that the first of them starts through
the launcher (caller.LocalPeer); the fixture below closes it when this module is done, so
no RPC agent outlives these tests.
"""

import pytest

from harness.adapters.pytest_adapter import (
    benchmark_case_tests,
    conformance_tests,
    workload_benchmarks,
)
from suites.rpc import caller
from suites.rpc.cases import suite

test_conformance = conformance_tests(suite)
test_benchmark_case = benchmark_case_tests(suite)
test_workload = workload_benchmarks(suite)


@pytest.fixture(scope="module", autouse=True)
def _close_local_peer():
    yield
    caller.close_local()
