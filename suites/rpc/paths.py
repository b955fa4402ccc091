"""Builders of the statements the RPC benchmarks time, one per path (registered as the
suite's workloads in cases.py).

Each returns a callable doing one round trip (or one batch) from this process, worker0, to
its peer worker1, inside the current caller (caller.current): the benchmark cases call
them in their launched workers, asv and pytest-benchmark in a process joined to a local peer.
On a GPU the TensorPipe paths send device tensors (device map cuda:0 -> cuda:0) and wait for
the device after each call; the Gloo and TCP paths always move host memory.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.distributed import rpc

from suites.rpc import caller, remote

# The batched-update example's weights and gradients: 16 Ki float32 = 64 KiB per message.
BATCH_NUMEL = 16 * 1024


def tensorpipe_builtin(device: str, nbytes: int) -> Callable[[], object]:
    """TensorPipe rpc_sync of a builtin op, torch.add(x, 0), on the peer."""
    s = caller.current(device)
    x = s.payload(nbytes)
    return s.synced(lambda: rpc.rpc_sync(caller.PEER, torch.add, args=(x, 0)))


def tensorpipe_python(device: str, nbytes: int) -> Callable[[], object]:
    """TensorPipe rpc_sync of a Python function that returns its argument."""
    s = caller.current(device)
    x = s.payload(nbytes)
    return s.synced(lambda: rpc.rpc_sync(caller.PEER, remote.echo, args=(x,)))


def tensorpipe_async(device: str, nbytes: int, in_flight: int) -> Callable[[], object]:
    """`in_flight` TensorPipe rpc_async calls of torch.add issued at once, then all awaited."""
    s = caller.current(device)
    x = s.payload(nbytes)

    def batch() -> object:
        futs = [rpc.rpc_async(caller.PEER, torch.add, args=(x, 0)) for _ in range(in_flight)]
        return torch.futures.wait_all(futs)

    return s.synced(batch)


def tensorpipe_sync_batch(device: str, nbytes: int, in_flight: int) -> Callable[[], object]:
    """The same `in_flight` calls as tensorpipe_async, made one after another with rpc_sync."""
    s = caller.current(device)
    x = s.payload(nbytes)

    def batch() -> object:
        return [rpc.rpc_sync(caller.PEER, torch.add, args=(x, 0)) for _ in range(in_flight)]

    return s.synced(batch)


def gloo_pingpong(device: str, nbytes: int) -> Callable[[], object]:
    """Gloo send of the tensor to the peer and recv of its echo (host memory)."""
    s = caller.current(device)
    return s.gloo_pingpong(s.payload(nbytes).cpu())


def tcp_pingpong(device: str, nbytes: int) -> Callable[[], object]:
    """The floor: the tensor's bytes over a loopback TCP socket and back (host memory)."""
    s = caller.current(device)
    return s.tcp_pingpong(s.payload(nbytes).cpu().numpy().tobytes())


def batched_update(device: str, mode: str, requests: int, to: str = caller.PEER,
                   numel: int = BATCH_NUMEL) -> Callable[[], object]:
    """One batch of the batched-update example: `requests` concurrent gradient pushes.

    `mode` "async" serves them with @async_execution, "blocking" with a handler that waits
    on its RPC thread for the batch to fill.
    """
    s = caller.current(device)
    if mode == "async":
        from suites.rpc import remote_async  # after the launcher's setup: see remote_async

        fn = remote_async.async_update
    elif mode == "blocking":
        fn = remote.blocking_update
    else:
        raise ValueError(f"mode must be 'async' or 'blocking', not {mode!r}")
    name = f"{mode}-{requests}-{numel}"
    rpc.rpc_sync(to, remote.configure_batch, args=(name, requests, numel))
    grads = [torch.rand(numel) for _ in range(requests)]

    def batch() -> object:
        return torch.futures.wait_all([rpc.rpc_async(to, fn, args=(name, g)) for g in grads])

    return s.synced(batch)
