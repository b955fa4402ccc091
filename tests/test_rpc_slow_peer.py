"""A slow RPC peer survives leaving the group: the rendezvous store outlives rank 0.

TensorPipe's graceful shutdown ends with a barrier through the rendezvous store. When rank 0
hosted that store, it left as soon as its own part of the barrier was done, and a peer slowed
by a busy machine, still reading the store, got "DistNetworkError: Connection reset by peer"
(release-bench run --suite rpc --case round_trip under a busy loop). The launcher hosts the
store now; this pins the property the suite relies on, without needing a busy machine: the
peer uses the store only after rank 0 has left and exited.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import psutil
import pytest
import torch.distributed as dist

from harness.running import launch
from suites.rpc.caller import GroupSpec, joined


def leave_then_use_the_store(rank: int, world: int) -> dict | None:
    """Both ranks join an RPC and Gloo group and leave it gracefully; rank 0 exits at once,
    and rank 1, playing the slow peer, reads the store only after rank 0 is gone."""
    with joined(rank, world, GroupSpec(gloo=True)):
        # a client of the group's store, whoever hosts it (it is up once the group is)
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              is_master=False, timeout=timedelta(seconds=30))
        if rank == 0:
            store.set("rank0 pid", str(os.getpid()))
    if rank == 0:
        return None
    pid, deadline = int(store.get("rank0 pid")), time.monotonic() + 60
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"rank0_gone": not psutil.pid_exists(pid), "added": store.add("late", 1)}


@pytest.mark.distributed
def test_a_peer_still_using_the_store_after_rank0_left_is_not_reset():
    _, late = launch.launch(leave_then_use_the_store, 2, timeout_s=120, label="rpc worker")
    assert late == {"rank0_gone": True, "added": 1}
