"""RPC as the 1.6 release notes wrote it: `init_rpc(..., backend=BackendType.TENSORPIPE)` then
`rpc_sync`, and the `@rpc.functions.async_execution` chained example; beside them today's
`init_rpc` (TensorPipe without naming it). Each is a world of one worker calling itself on
loopback. See harness.releases.api_record."""

from __future__ import annotations

import os

import torch
import torch.distributed.rpc as rpc

from harness.releases.api_record import example
from harness.running.launch import LOOPBACK, free_port


def _options() -> rpc.TensorPipeRpcBackendOptions:
    os.environ.setdefault("TP_SOCKET_IFNAME", "lo")  # keep TensorPipe on loopback
    return rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://{LOOPBACK}:{free_port()}",
                                           rpc_timeout=60)


def async_add_chained(to, x, y, z):
    # decorated below, where the module has loaded (the decorator may be gone)
    return rpc.rpc_async(to, torch.add, args=(x, y)).then(lambda fut: fut.wait() + z)


@example("rpc", "1.6")
def init_rpc_tensorpipe_backend():
    """init_rpc(..., backend=BackendType.TENSORPIPE), then rpc_sync"""
    rpc.init_rpc("worker0", rank=0, world_size=1, backend=rpc.BackendType.TENSORPIPE,
                 rpc_backend_options=_options())
    try:
        got = rpc.rpc_sync("worker0", torch.add, args=(torch.ones(2), 1))
    finally:
        rpc.shutdown()
    assert torch.equal(got, torch.full((2,), 2.0)), f"gave {got}"


@example("rpc", "1.6")
def async_execution_chained():
    """@rpc.functions.async_execution: the release notes' async_add_chained"""
    chained = rpc.functions.async_execution(async_add_chained)
    globals()["async_add_chained_async"] = chained  # picklable by name, as the notes define it
    chained.__qualname__ = chained.__name__ = "async_add_chained_async"
    rpc.init_rpc("worker0", rank=0, world_size=1, rpc_backend_options=_options())
    try:
        got = rpc.rpc_sync("worker0", chained, args=("worker0", torch.ones(2), 1, 1))
    finally:
        rpc.shutdown()
    assert torch.equal(got, torch.full((2,), 3.0)), f"gave {got}"


@example("rpc", "today")
def init_rpc_default_backend():
    """init_rpc(...) without a backend (TensorPipe, the only one left), then rpc_sync"""
    rpc.init_rpc("worker0", rank=0, world_size=1, rpc_backend_options=_options())
    try:
        got = rpc.rpc_sync("worker0", torch.add, args=(torch.ones(2), 1))
    finally:
        rpc.shutdown()
    assert torch.equal(got, torch.full((2,), 2.0)), f"gave {got}"
