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

    before = set(threading.enumerate())
    addr, port = remote.start_tcp_echo(8)
    (echo,) = [t for t in threading.enumerate() if t.name == "tcp-echo" and t not in before]
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


def gloo_echo_worker(rank: int, world: int) -> list:
    """Rank 1 serves the Gloo floor's echo (as rank 0 asks it to through RPC in the suite;
    here called directly); rank 0 sends two messages and reads each back, then the echo is
    stopped as GlooPingPong.close stops it: the flag set, one last message to wake it."""
    import torch
    import torch.distributed as dist

    from suites.rpc import remote

    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        if rank == 1:
            remote.start_gloo_echo(4, client=0)
            try:
                remote.start_gloo_echo(4, client=0)
            except RuntimeError as e:
                refused = str(e)
        dist.barrier()  # the echo is up
        got = []
        if rank == 0:
            for value in (1.0, 2.0):
                y = torch.empty(4)
                dist.send(torch.full((4,), value), dst=1)
                dist.recv(y, src=1)
                got.append(y.tolist())
        dist.barrier()  # the messages went both ways
        if rank == 1:
            remote.stop_gloo_echo()
        dist.barrier()  # the flag is set
        if rank == 0:
            dist.send(torch.zeros(4), dst=1)  # wakes the loop, which sees the flag
            return got
        return [refused, remote.join_gloo_echo(30.0)]
    finally:
        dist.destroy_process_group()


@pytest.mark.distributed
def test_the_gloo_echo_answers_each_message_and_stops_when_asked():
    """The Gloo floor's callee in two processes on loopback."""
    from harness.running.launch import launch

    echoed, (refused, stopped) = launch(gloo_echo_worker, 2, timeout_s=120)
    assert echoed == [[1.0] * 4, [2.0] * 4]
    assert refused == "a Gloo echo is already running" and stopped is True


def test_bursts_pin_each_end_to_its_own_half_or_run_unpinned_on_one_core(monkeypatch):
    """In bursts the caller and the callee each get half of this process's CPUs; a process
    allowed one core has no halves, and the ends run unpinned, as sequential rounds do."""
    from harness.cases import Context
    from harness.running import duet
    from suites.rpc import cases as rpc_cases

    ctx = Context("cpu", "quick", {}, turns=object())
    assert rpc_cases._own_cpus(Context("cpu", "quick", {})) is None  # not in bursts
    monkeypatch.setattr(duet, "halves", lambda: ((0,), (1,)))
    assert rpc_cases._own_cpus(ctx) == ((0,), (1,))

    def one_core():
        raise duet.DuetError("a duet needs two cores")

    monkeypatch.setattr(duet, "halves", one_core)
    assert rpc_cases._own_cpus(ctx) is None


@pytest.mark.distributed
def test_a_new_gloo_path_replaces_the_last_and_this_process_holds_one_caller():
    """Through this process's local peer: the peer runs one Gloo echo at a time, so a second
    path closes the first; a second caller in the process is refused in one line."""
    import torch

    s = caller.current("cpu")
    first = s.gloo_pingpong(torch.ones(4))
    second = s.gloo_pingpong(torch.full((4,), 2.0))
    assert not first.open and second.open
    assert second().tolist() == [2.0] * 4
    with pytest.raises(RuntimeError, match="a caller is already open in this process"):
        with caller.client("cpu"):
            pass
    s.release()
    assert not second.open


@pytest.mark.distributed
def test_a_local_peer_started_after_another_in_one_process_joins_and_leaves(tmp_path):
    """Two local peers, one after the other, in one process (as a GPU machine's pytest runs
    the CPU workloads, then the CUDA ones): each joins, echoes, and leaves in seconds. torch
    counts groups per process, so a fresh peer of a parent that has been in a group used to
    wait for it forever."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "two_peers.py"
    script.write_text(
        "import torch\n"
        "from suites.rpc import caller\n"
        "if __name__ == '__main__':\n"
        "    for value in (1.0, 2.0):\n"
        "        echoed = caller.current('cpu').gloo_pingpong(torch.full((4,), value))()\n"
        "        print(echoed.tolist(), flush=True)\n"
        "        caller.close_local()\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=root, timeout=120, env=os.environ | {"PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == [str([1.0] * 4), str([2.0] * 4)]
