"""Listeners stay on loopback: no socket of a run listens on every interface.

A rendezvous store or an RPC endpoint (which runs pickled calls) open to the network during a
benchmark lets anyone on that network in. torch's TCPStore, left to itself, listens on `*`
whatever address the init_method names; the launcher hosts it on loopback instead.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from sockets import listeners as _listeners

from harness.running import launch

pytestmark = pytest.mark.distributed


def _off_loopback(listeners) -> list:
    return sorted(x for x in listeners if not ipaddress.ip_address(x[0]).is_loopback)


def test_bound_store_listens_on_loopback_only():
    store, port = launch.bound_store()
    mine = _listeners(psutil.Process())
    assert ("127.0.0.1", port) in {(ip, p) for ip, p, _ in mine}
    assert _off_loopback(mine) == []
    store.set("k", "v")
    assert store.get("k") == b"v"
    del store


def test_a_store_binds_the_port_of_one_that_closed_first_but_not_of_a_listening_one():
    """Two runs in a row to one --rdzv-endpoint: the first store closes its connections
    first, which leaves them in TIME_WAIT on its port; the second must still bind there (CI
    saw the netns check's second run fail so). A store still listening keeps the port."""
    store, port = launch.bound_store()
    client = socket.create_connection((launch.LOOPBACK, port), timeout=30)
    del store  # the server closes first: the client reads the end of the stream
    assert client.recv(1) == b""
    client.close()
    deadline = time.monotonic() + 10
    while not any(c.laddr.port == port and c.status == psutil.CONN_TIME_WAIT
                  for c in psutil.net_connections("tcp")):
        assert time.monotonic() < deadline, "the case under test: TIME_WAIT on the store's port"
        time.sleep(0.01)
    again, same = launch.bound_store(port=port)
    assert same == port
    with pytest.raises(OSError):
        launch.bound_store(port=port)
    del again


@pytest.mark.slow
def test_rpc_and_ddp_rpc_suites_listen_on_loopback_only(tmp_path: Path):
    """Sample every listener of a real run of both multi-process suites, twice a second or
    more, and require each to be on loopback. Two cases open every kind of listener the suites
    have: rpc's round_trip (the launcher's store, TensorPipe, Gloo and the TCP floor, at the
    smallest payload) and ddp_rpc's matches_reference (the hybrid's store, RPC and Gloo over
    three processes, DDP inside the model); the other cases start the same stores, agents and
    groups through the same code."""
    cmd = [sys.executable, "-m", "harness.cli", "run", "--suite", "rpc", "--suite", "ddp_rpc",
           "--only", "round_trip", "--only", "matches_reference", "--param", "sizes=[4]",
           "--param", "min_samples=10", "--param", "ddp=inside", "--no-telemetry",
           "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parent.parent,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONWARNINGS": "ignore"})
    root = psutil.Process(proc.pid)
    seen: set = set()
    samples = 0
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        seen |= _listeners(root)
        samples += 1
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        pytest.fail("the run did not finish within 600 s")
    stderr = proc.stderr.read()
    assert proc.returncode == 0, stderr[-2000:]
    # the run did listen (stores, TensorPipe, Gloo, the TCP floor), all of it on loopback
    assert len({port for _, port, _ in seen}) >= 10, (samples, seen)
    assert _off_loopback(seen) == [], f"listeners off loopback: {_off_loopback(seen)}"
