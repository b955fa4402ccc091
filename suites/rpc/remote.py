"""What the suite runs on a peer over RPC: echoes, failures, sleeps, the Gloo and TCP echo
services, and the parameter server of the batched-update example.

RPC pickles a Python function by reference (module and name), so everything a peer runs
lives at module level here and every worker imports the same definitions. Functions
decorated with `@rpc.functions.async_execution` are in `remote_async.py` instead: see there.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import rpc

from harness.running import launch


def echo(x: torch.Tensor) -> torch.Tensor:
    """Returns its argument untouched: a round trip that is transport and nothing else."""
    return x


def whereabouts() -> dict[str, Any]:
    """The process and RPC worker a call ran in: the proof that it crossed to its callee."""
    return {"pid": os.getpid(), "worker": rpc.get_worker_info().name}


def sleep_then_return(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def agent_info() -> dict[str, str]:
    """This worker's RPC agent counters (thread pool size among them; a private API)."""
    return rpc.api._get_current_rpc_agent().get_debug_info()


class RemoteFailure(Exception):
    """An exception type of the suite's own, to see that non-builtin types survive too."""


EXCEPTIONS: dict[str, type[Exception]] = {
    "ValueError": ValueError, "TypeError": TypeError, "KeyError": KeyError,
    "RemoteFailure": RemoteFailure,
}


def fail(kind: str, message: str) -> None:
    raise EXCEPTIONS[kind](message)


# --- Gloo send/recv echo -----------------------------------------------------------------
# One echo loop per process: recv a tensor from the client, send it back, until stopped.
# The stop flag is read between messages; the client sends one last message to wake the loop.


@dataclass
class _GlooEcho:
    thread: threading.Thread
    stop: threading.Event = field(default_factory=threading.Event)


_gloo: _GlooEcho | None = None


def start_gloo_echo(numel: int, client: int) -> None:
    global _gloo
    if _gloo is not None and _gloo.thread.is_alive():
        raise RuntimeError("a Gloo echo is already running")
    stop = threading.Event()

    def loop() -> None:
        buf = torch.empty(numel)
        while True:
            dist.recv(buf, src=client)
            if stop.is_set():
                return
            dist.send(buf, dst=client)

    thread = threading.Thread(target=loop, name="gloo-echo", daemon=True)
    _gloo = _GlooEcho(thread, stop)
    thread.start()


def stop_gloo_echo() -> None:
    """Ask the echo loop to end after the next message it receives (which it does not echo)."""
    if _gloo is not None:
        _gloo.stop.set()


def join_gloo_echo(timeout_s: float) -> bool:
    """True when the echo loop has ended."""
    if _gloo is None:
        return True
    _gloo.thread.join(timeout_s)
    return not _gloo.thread.is_alive()


# --- raw TCP echo --------------------------------------------------------------------------


def start_tcp_echo(nbytes: int) -> tuple[str, int]:
    """Listen for one client on this worker's address (loopback, or its host's interface in a
    run across hosts); echo each whole `nbytes` message back until EOF.

    The whole message is read before any of it is sent back, as an RPC server does, so that
    large payloads are not pipelined through the echo. Returns the address and port.
    """
    server = socket.create_server((launch.bind_address(), 0))
    server.settimeout(60)

    def serve() -> None:
        with server:
            conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = memoryview(bytearray(nbytes))
        with conn:
            while True:
                got = 0
                while got < nbytes:
                    n = conn.recv_into(buf[got:])
                    if n == 0:
                        return
                    got += n
                conn.sendall(buf)

    threading.Thread(target=serve, name="tcp-echo", daemon=True).start()
    return server.getsockname()[:2]


# --- the batched-update parameter server ----------------------------------------------------
# As in PyTorch's async-execution tutorial: each request brings a gradient; when `requests`
# gradients have arrived the server takes one SGD step and every request of the batch gets
# the updated weights. The async variant returns the batch's Future at once; the blocking
# variant waits for it on the RPC thread that serves the request.


class BatchedParameterServer:
    def __init__(self, requests: int, numel: int, lr: float = 0.1):
        self.requests = requests
        self.lr = lr
        self.weight = torch.ones(numel)
        self.grad_sum = torch.zeros(numel)
        self.arrived = 0
        self.lock = threading.Lock()
        self.future: torch.futures.Future[torch.Tensor] = torch.futures.Future()

    def submit(self, grad: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        """Add one gradient; return the Future of its batch's updated weights."""
        with self.lock:
            self.grad_sum += grad
            self.arrived += 1
            fut = self.future
            full = self.arrived == self.requests
            if full:
                self.weight -= self.lr * self.grad_sum / self.requests
                result = self.weight.clone()
                self.grad_sum.zero_()
                self.arrived = 0
                self.future = torch.futures.Future()
        if full:
            # Outside the lock: completing the Future runs the RPC responses' callbacks.
            fut.set_result(result)
        return fut


servers: dict[str, BatchedParameterServer] = {}


def configure_batch(name: str, requests: int, numel: int) -> None:
    servers[name] = BatchedParameterServer(requests, numel)


def blocking_update(name: str, grad: torch.Tensor) -> torch.Tensor:
    """The same update without async_execution: the RPC thread waits for the batch."""
    return servers[name].submit(grad).wait()
