"""Joining an RPC group (and a Gloo process group) from a launched worker, and leaving it.

Both multi-process suites join through `joined`, which owns init and shutdown. The
rendezvous is the store the launcher hosts at MASTER_ADDR:MASTER_PORT (bound to one address,
`harness.running.launch.bound_store`), or the port a caller names; nothing here listens on every
interface.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import rpc

from harness.running import launch


@dataclass
class Membership:
    """What `joined` yields; `abandon()` makes leaving skip the graceful shutdown."""

    rank: int
    world: int
    leave: str = "graceful"  # "graceful" | "now" | "skip"

    def abandon(self, skip_shutdown: bool = False) -> None:
        """Leave without waiting for the other workers.

        `skip_shutdown` leaves without calling rpc.shutdown at all: for a worker whose RPC
        threads are stuck (a deadlock the case detected), where even a non-graceful shutdown
        waits for them forever. The launcher then ends the process (os._exit).
        """
        self.leave = "skip" if skip_shutdown else "now"


@dataclass(frozen=True)
class RpcCounts:
    """What torch counts per process to keep apart the groups a process joins one after
    another: its init_rpc calls (each call's keys go under the store prefix `rpc_prefix_<n>`)
    and, by the group's worker names, its all-gathers (init and graceful shutdown each make
    some; a gather's id is the names and their count). Two processes meet in a group only
    where both counts agree: a peer started fresh for a process that has been in a group
    before must take that process's counts (`counts`, then `take`), or each waits for the
    other under another key (init_rpc forever; a gather until its RPC timeout). A torch
    without these counters keeps no such apart."""

    inits: int
    gathers: dict[str, int]

    @classmethod
    def counts(cls) -> RpcCounts:
        """This process's counts."""
        return cls(getattr(rpc, "_init_counter", 0),
                   dict(getattr(rpc.api, "_all_gather_sequence_id", {})))

    def take(self) -> None:
        """Make them this (fresh) process's counts."""
        if hasattr(rpc, "_init_counter"):
            rpc._init_counter = self.inits
        if hasattr(rpc.api, "_all_gather_sequence_id"):
            rpc.api._all_gather_sequence_id.update(self.gathers)


def rendezvous_url(port: int = 0) -> str:
    """The launcher's store (or the one at `port` on the same address)."""
    host = os.environ.get("MASTER_ADDR", launch.LOOPBACK)
    return f"tcp://{host}:{port or int(os.environ['MASTER_PORT'])}"


@contextlib.contextmanager
def joined(rank: int, world: int, name: str, options: rpc.TensorPipeRpcBackendOptions,
           gloo_timeout: timedelta | None = None, session: int = 0) -> Iterator[Membership]:
    """Be RPC worker `name` (rank `rank` of `world`) inside the block; with `gloo_timeout`,
    also a member of a Gloo process group over the same rendezvous.

    The same workers may join again after leaving, `session` counting how many times they
    have (every worker must count alike). torch keeps each init_rpc's keys apart in the
    store itself; a Gloo group after the first gets its own key prefix, since the keys of
    the one destroyed before it are still in the store.

    Leaving normally is a graceful shutdown, which waits until every worker has left, so a
    worker that only serves can simply leave at once and keep serving until the others are
    done. Leaving by an exception shuts down at once (graceful=False): a graceful shutdown
    would wait for peers that may be dead.

    A graceful shutdown ends with TensorPipe's barrier through the rendezvous store (the
    agent's join adds, sets and then reads counters there), so the store must outlive every
    worker. When rank 0 hosted it, rank 0 left right after its own reads and took the store
    with it while a slower rank 1 was still reading: "DistNetworkError: Connection reset by
    peer" under load. The launcher (or the process that started a local peer) hosts it
    instead, and leaves last.
    """
    if gloo_timeout is not None and session == 0:
        dist.init_process_group("gloo", init_method=options.init_method, rank=rank,
                                world_size=world, timeout=gloo_timeout)
    elif gloo_timeout is not None:
        store, _, _ = next(dist.rendezvous(options.init_method, rank, world,
                                           timeout=gloo_timeout))
        dist.init_process_group("gloo", store=dist.PrefixStore(f"gloo_session_{session}", store),
                                rank=rank, world_size=world, timeout=gloo_timeout)
    member = Membership(rank, world)
    try:
        rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=options)
        try:
            yield member
        except BaseException:
            rpc.shutdown(graceful=False)
            raise
        if member.leave == "graceful":
            rpc.shutdown()
        elif member.leave == "now":
            rpc.shutdown(graceful=False)
    finally:
        if gloo_timeout is not None and dist.is_initialized():
            dist.destroy_process_group()
