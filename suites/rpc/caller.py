"""Joining an RPC group, and a caller: this process as `worker0` calling a peer `worker1`.

Every worker of every case joins through `joined()`, which owns init and shutdown. The timed
statements (the workloads in cases.py) run in a `Caller`: inside a launched benchmark worker
it is opened by the case (`client()`); in a process that only wants to time them (asv,
pytest-benchmark) `current()` starts a peer through the harness launcher and joins it from
this process (`LocalPeer`), closed by `close_local()` or at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psutil
import torch
import torch.distributed as dist
from torch.distributed import rpc

from harness.running import launch, rpc_group
from harness.running.timing import synchronize
from suites.rpc import remote

CLIENT, PEER = "worker0", "worker1"


def worker_name(rank: int) -> str:
    return f"worker{rank}"


@dataclass(frozen=True)
class GroupSpec:
    """How a worker joins: the rendezvous port and the agent's options."""

    port: int = 0  # 0: the launcher's MASTER_PORT
    device: str = "cpu"
    # TensorPipe's private options (checked on torch 2.14.1): None keeps TensorPipe's choice.
    transports: tuple[str, ...] | None = None
    channels: tuple[str, ...] | None = None
    num_worker_threads: int = rpc.constants.DEFAULT_NUM_WORKER_THREADS
    rpc_timeout: float = rpc.constants.DEFAULT_RPC_TIMEOUT_SEC
    gloo: bool = False  # also join a Gloo process group (for the Gloo ping-pong path)

    def rendezvous_port(self) -> int:
        return self.port or int(os.environ["MASTER_PORT"])


def device_maps(rank: int, world: int, device: str) -> dict[str, dict[int, int]]:
    """TensorPipe's device map of worker `rank` towards each other worker: on CUDA both
    processes use GPU 0 and tensors arrive on the device they were sent from (0 -> 0); on the
    CPU there is none."""
    if torch.device(device).type != "cuda":
        return {}
    return {worker_name(other): {0: 0} for other in range(world) if other != rank}


@contextlib.contextmanager
def joined(rank: int, world: int, spec: GroupSpec,
           session: int = 0) -> Iterator[rpc_group.Membership]:
    """Be `worker{rank}` of a `world`-worker RPC group (and Gloo group) inside the block, for
    the `session`-th time (`harness.running.rpc_group.joined`, which says how leaving works)."""
    opts = rpc.TensorPipeRpcBackendOptions(
        init_method=rpc_group.rendezvous_url(spec.port),
        num_worker_threads=spec.num_worker_threads,
        rpc_timeout=spec.rpc_timeout,
        _transports=list(spec.transports) if spec.transports else None,
        _channels=list(spec.channels) if spec.channels else None,
    )
    for peer, device_map in device_maps(rank, world, spec.device).items():
        opts.set_device_map(peer, device_map)  # gpu-only: TensorPipe CUDA channels
    gloo_timeout = dist.default_pg_timeout if spec.gloo else None
    with rpc_group.joined(rank, world, worker_name(rank), opts, gloo_timeout,
                           session) as member:
        yield member


# --- client-side paths (the statements the benchmarks time) --------------------------------


class GlooPingPong:
    """Send a tensor to the peer with Gloo and receive it back (the peer echoes)."""

    def __init__(self, x: torch.Tensor, peer_rank: int = 1):
        self.x, self.y, self.peer_rank = x, torch.empty_like(x), peer_rank
        rpc.rpc_sync(worker_name(peer_rank), remote.start_gloo_echo,
                     args=(x.numel(), dist.get_rank()))
        self.open = True

    def __call__(self) -> torch.Tensor:
        dist.send(self.x, dst=self.peer_rank)
        dist.recv(self.y, src=self.peer_rank)
        return self.y

    def close(self) -> None:
        if self.open:
            self.open = False
            peer = worker_name(self.peer_rank)
            rpc.rpc_sync(peer, remote.stop_gloo_echo)
            dist.send(self.x, dst=self.peer_rank)  # wakes the loop, which sees the flag
            if not rpc.rpc_sync(peer, remote.join_gloo_echo, args=(30.0,)):
                raise RuntimeError("the peer's Gloo echo did not stop")


class TcpPingPong:
    """Send the payload's bytes over a plain TCP socket to the peer and read them back."""

    def __init__(self, payload: bytes, peer: str = PEER):
        self.payload, self.nbytes = payload, len(payload)
        self.buf = memoryview(bytearray(self.nbytes))
        addr, port = rpc.rpc_sync(peer, remote.start_tcp_echo, args=(self.nbytes,))
        self.sock = socket.create_connection((addr, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __call__(self) -> memoryview:
        self.sock.sendall(self.payload)
        got = 0
        while got < self.nbytes:
            n = self.sock.recv_into(self.buf[got:])
            if n == 0:
                raise ConnectionError("the TCP echo closed the connection")
            got += n
        return self.buf

    def close(self) -> None:
        self.sock.close()


@dataclass
class Caller:
    """This process as worker0 of a group whose worker1 serves; owns the open paths."""

    device: str
    closers: list[Callable[[], None]] = field(default_factory=list)
    gloo: GlooPingPong | None = None

    def payload(self, nbytes: int) -> torch.Tensor:
        """A float32 tensor of `nbytes` bytes of random (non-zero) data on the device."""
        if nbytes % 4 or nbytes < 4:
            raise ValueError(f"payload must be a positive multiple of 4 bytes, not {nbytes}")
        return torch.rand(nbytes // 4, device=self.device)

    def synced(self, fn: Callable[[], object]) -> Callable[[], object]:
        """`fn`, followed by a wait for the device when it is a GPU."""
        if torch.device(self.device).type != "cuda":
            return fn
        device = self.device

        def call() -> object:
            out = fn()
            synchronize(device)
            return out

        return call

    def gloo_pingpong(self, x: torch.Tensor) -> GlooPingPong:
        # The peer runs one Gloo echo at a time: a new path replaces the previous one.
        if self.gloo is not None:
            self.gloo.close()
        self.gloo = GlooPingPong(x)
        self.closers.append(self.gloo.close)
        return self.gloo

    def tcp_pingpong(self, payload: bytes) -> TcpPingPong:
        path = TcpPingPong(payload)
        self.closers.append(path.close)
        return path

    def release(self) -> None:
        """Close every path opened so far (the peer's echo services end with them)."""
        while self.closers:
            self.closers.pop()()
        self.gloo = None


_current: Caller | None = None


@contextlib.contextmanager
def client(device: str) -> Iterator[Caller]:
    """Make this process (already worker0 of a joined group) the current caller."""
    global _current
    if _current is not None:
        raise RuntimeError("a caller is already open in this process")
    _current = Caller(device)
    try:
        yield _current
        _current.release()
    finally:
        _current = None


def current(device: str) -> Caller:
    """The open caller for `device`; in a process with no RPC yet, a `LocalPeer` one."""
    global _local
    if _current is not None and _current.device == device:
        return _current
    if _local is not None:  # a local caller for another device: device maps differ
        close_local()
    if _current is not None or rpc.api._is_current_rpc_agent_set():
        raise RuntimeError(f"this process is in an RPC group without a {device} caller")
    _local = LocalPeer(device)
    return _local.caller


# --- a peer for this process -----------------------------------------------------------------


_leaving = threading.Event()
LEAVE_GRACE_S = 0.5


def _leave_now() -> None:
    """The local peer's parent, through RPC: the peer leaves the group (see serve_peer)."""
    _leaving.set()


def _exit_when_orphaned(parent_pid: int, poll_s: float = 1.0) -> None:
    """A local peer's watch on its parent: once the parent has died without saying so (this
    process's parent is another one), nothing else would end this process, so end it (exit
    status 3)."""
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    os._exit(3)


def serve_peer(_rank: int, _world: int, spec: GroupSpec, parent_pid: int,
               parent_counts: rpc_group.RpcCounts) -> None:
    """Launched worker: be worker1 of this process's group and serve until the parent says
    to leave (`_leave_now`). `parent_counts`: the parent's RPC counts before this group,
    taken as this process's own (`rpc_group.RpcCounts`: else a peer started after an earlier
    one, another device's say, never meets its parent).

    Both leave at once, not gracefully: a graceful shutdown ends in a barrier whose keys
    torch numbers per process in C++ (`READY_ID_<n>`), which a fresh peer cannot match to a
    parent that has been in a group before; both would wait for each other's key."""

    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    parent_counts.take()
    with joined(1, 2, spec) as member:
        member.abandon()
        _leaving.wait()
        # `_leave_now`'s answer is still on its way out: leaving now would drop it, and the
        # parent would read the closed pipe as an error
        time.sleep(LEAVE_GRACE_S)


class LocalPeer:
    """A peer process started through the launcher; this process joins as worker0."""

    def __init__(self, device: str, timeout_s: float = 3600.0):
        # This process hosts the rendezvous store on loopback and, like the peer, joins it
        # as a client (the variables are restored on close).
        self.store, port = launch.bound_store(launch.LOOPBACK)
        self.spec = GroupSpec(port=port, device=device, gloo=True)
        env = launch.agent_store_env(launch.LOOPBACK, port)
        self.saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        self.stack = contextlib.ExitStack()
        self.stack.callback(self._restore_env)  # last, however the stack is closed
        self.error: BaseException | None = None
        # read before this process joins: the counts both processes file this group under
        self.rpc_counts = rpc_group.RpcCounts.counts()
        self.thread = threading.Thread(target=self._serve, args=(timeout_s,), daemon=True,
                                       name="rpc-local-peer")
        self.thread.start()
        try:
            self.member = self.stack.enter_context(joined(0, 2, self.spec))
            self.stack.callback(self._leave)  # after the caller's paths close, before leaving
            self.caller = self.stack.enter_context(client(device))
        except BaseException:
            self.stack.close()
            raise

    def _serve(self, timeout_s: float) -> None:
        try:
            launch.launch(serve_peer, 1, (self.spec, os.getpid(), self.rpc_counts),
                          timeout_s=timeout_s,
                          label="rpc peer", store_port=self.spec.port)
        except BaseException as e:  # kept for close(), which reports it
            self.error = e

    def _leave(self) -> None:
        """Tell the peer to leave, then leave too, both at once (see serve_peer)."""
        self.member.abandon()
        with contextlib.suppress(RuntimeError):  # the peer left already: what was asked
            rpc.rpc_sync(worker_name(1), _leave_now, timeout=30)

    def _restore_env(self) -> None:
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def close(self) -> None:
        self.stack.close()
        self.thread.join(60)
        # The store goes only once the peer has gone: a store closed under a peer still
        # leaving its group resets the peer's connection to it.
        if not self.thread.is_alive():
            self.store = None
        if self.error is not None:
            raise self.error


_local: LocalPeer | None = None


def close_local() -> None:
    """Leave the local peer's group, if one is open, and wait for the peer to end."""
    global _local
    peer, _local = _local, None
    if peer is not None:
        peer.close()


atexit.register(close_local)


def transports_seen() -> dict[str, int]:
    """How many TCP and Unix-domain sockets this process holds: evidence of the transport
    (uv talks over TCP only; shm also opens Unix-domain sockets)."""
    me = psutil.Process()
    return {kind: len(me.net_connections(kind)) for kind in ("tcp", "unix")}
