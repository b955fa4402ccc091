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


def test_the_tcp_echo_answers_whole_messages_only_and_ends_at_eof():
    """The raw-TCP baseline's callee, on loopback: a message sent in pieces comes back once
    whole (as an RPC server answers), and the echo ends when its client closes."""
    import socket
    import threading

    from suites.rpc import remote

    threads = set(threading.enumerate())
    addr, port = remote.start_tcp_echo(8)
    (echo,) = set(threading.enumerate()) - threads
    with socket.create_connection((addr, port), timeout=10) as client:
        client.sendall(b"1234")
        client.settimeout(0.2)
        with pytest.raises(TimeoutError):
            client.recv(8)  # half a message: nothing yet
        client.settimeout(10)
        client.sendall(b"5678")
        got = b""
        while len(got) < 8:
            got += client.recv(8 - len(got))
        assert got == b"12345678"
    echo.join(10)
    assert not echo.is_alive()


def test_a_payload_is_whole_float32_elements():
    assert caller.Caller("cpu").payload(8).shape == (2,)
    for nbytes in (0, 6):
        with pytest.raises(ValueError, match=f"positive multiple of 4 bytes, not {nbytes}"):
            caller.Caller("cpu").payload(nbytes)
