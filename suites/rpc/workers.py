"""What each launched worker of the RPC cases does (harness.running.launch runs these functions).

Rank 0 is the caller that measures or checks and returns what it found; the other ranks
serve RPCs until it leaves (a graceful shutdown waits for every worker). Checks themselves
are made in the parent (cases.py) from what rank 0 returns, so a worker never decides
whether a case passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed import rpc

from harness.running import duet, launch, timing
from harness.running.turns import Turns
from suites.rpc import caller, measure, paths, remote
from suites.rpc.caller import PEER, GroupSpec, joined, worker_name

# --- latency sweep -------------------------------------------------------------------------

# In-flight throughput is measured up to this payload (larger ones hold in_flight copies).
ASYNC_MAX_BYTES = 4 * 2**20


def in_flight_sizes(sizes: list[int]) -> list[int]:
    """The payloads of the sweep whose calls are also timed in flight."""
    return [n for n in sizes if n <= ASYNC_MAX_BYTES]


def bare_loop(device: str, nbytes: int) -> measure.Sampler:
    """The reference the suite's own sampling is held against: nothing but a for loop of
    rpc_sync calls with a clock read on each side (no builders, no closures)."""
    x = torch.rand(nbytes // 4, device=device)
    cuda = torch.device(device).type == "cuda"

    def sample(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            rpc.rpc_sync(PEER, torch.add, args=(x, 0))
            if cuda:
                torch.cuda.synchronize(device)  # gpu-only: a CUDA round trip
            out.append(time.perf_counter() - t0)
        return out

    return sample


SAMPLERS: dict[str, Callable[[str, int], measure.Sampler]] = {
    "tp_builtin": lambda d, b: measure.per_call(paths.tensorpipe_builtin(d, b)),
    "tp_python": lambda d, b: measure.per_call(paths.tensorpipe_python(d, b)),
    "bare_loop": bare_loop,
    "gloo": lambda d, b: measure.per_call(paths.gloo_pingpong(d, b)),
    "tcp": lambda d, b: measure.per_call(paths.tcp_pingpong(d, b)),
}


def round_trip(rank: int, world: int, spec: GroupSpec, path_names: list[str],
               sizes: list[int], plan: measure.Plan, in_flight: int,
               throughput_s: float, turns: Turns | None = None,
               cpus: tuple[tuple[int, ...], ...] | None = None) -> dict[str, Any]:
    """Rank 0: in each of `plan.sessions` fresh RPC sessions (see measure), per payload size,
    sample every path interleaved; and, when `throughput_s` > 0, time `in_flight` calls made
    with rpc_async against rpc_sync. Every figure pools the sessions. With `turns` (a side of
    a round in bursts) each round of blocks, and each in-flight timing, is a turn. With `cpus`
    each rank first pins itself to its own entry. Every rank returns the CPUs it ran on."""
    if cpus is not None:
        duet.pin(cpus[rank])
    turn = turns.turn if turns is not None else contextlib.nullcontext
    latency = {n: {p: [] for p in path_names} for n in sizes}
    # each session's timed blocks of the in-flight calls
    flight: dict[int, dict[str, list[list[float]]]] = {n: {"rpc_sync": [], "rpc_async": []}
                                                       for n in in_flight_sizes(sizes)}
    sockets: dict[str, int] = {}
    for k in range(plan.sessions):
        with joined(rank, world, spec, session=k):
            if rank != 0:
                continue  # serve until rank 0 leaves the group
            with caller.client(spec.device) as s:
                for nbytes in sizes:
                    samplers = {p: SAMPLERS[p](spec.device, nbytes) for p in path_names}
                    for p, got in measure.sample_interleaved(samplers, plan, seed=k,
                                                             turn=turn).items():
                        latency[nbytes][p].append(got)
                    if throughput_s > 0 and nbytes in flight:
                        with turn():
                            t = timing.measure_interleaved(
                                {"rpc_sync": paths.tensorpipe_sync_batch(spec.device, nbytes,
                                                                         in_flight),
                                 "rpc_async": paths.tensorpipe_async(spec.device, nbytes,
                                                                     in_flight)},
                                device=spec.device, min_run_time=throughput_s / plan.sessions,
                                # the sessions' blocks are pooled: together the minimum
                                min_blocks=-(-timing.MIN_BLOCKS // plan.sessions))
                        for name, timed in t.items():
                            flight[nbytes][name].append(list(timed.times))
                    s.release()
                sockets = caller.transports_seen()
    ran_on = sorted(os.sched_getaffinity(0))
    if rank != 0:
        return {"cpus": ran_on}
    return {**_round_trip_result(latency, flight, sockets, sizes, path_names, throughput_s),
            "cpus": ran_on}


def _round_trip_result(latency: dict, flight: dict, sockets: dict[str, int],
                       sizes: list[int], path_names: list[str], throughput_s: float
                       ) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}, "sockets": sockets}
    for nbytes in sizes:
        entry: dict[str, Any] = {p: measure.summarize(latency[nbytes][p]) for p in path_names}
        if throughput_s > 0 and nbytes in flight:
            entry["in_flight"] = {
                name: {**timing.Timing.from_samples([x for b in blocks for x in b], name).stats(),
                       "session_medians": [float(np.median(b)) for b in blocks]}
                for name, blocks in flight[nbytes].items()}
        out["sizes"][nbytes] = entry
    return out


# --- conformance: values --------------------------------------------------------------------

_SPECIALS = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 1e-40, 3.0e38]


def roundtrip_tensors() -> list[tuple[str, torch.Tensor]]:
    """Tensors whose every bit must survive a round trip (built on the CPU, seeded)."""
    g = torch.Generator().manual_seed(0)
    specials = torch.tensor(_SPECIALS, dtype=torch.float64)
    out = [(f"{dt} incl. nan, inf, -0.0, subnormal".replace("torch.", ""), specials.to(dt))
           for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16)]
    out += [
        ("complex64", torch.randn(17, dtype=torch.complex64, generator=g)),
        ("int8 extremes", torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8)),
        ("uint8", torch.randint(0, 256, (33,), dtype=torch.uint8, generator=g)),
        ("int16", torch.randint(-(2**15), 2**15, (9,), dtype=torch.int16, generator=g)),
        ("int32 extremes", torch.tensor([-(2**31), -1, 0, 2**31 - 1], dtype=torch.int32)),
        ("int64 extremes", torch.tensor([-(2**63), -1, 0, 2**63 - 1], dtype=torch.int64)),
        ("bool", torch.rand(19, generator=g) > 0.5),
        ("0-dim float32", torch.tensor(3.25)),
        ("0-dim int64", torch.tensor(-7)),
        ("empty (0, 3)", torch.empty(0, 3)),
        ("empty int64 (0,)", torch.empty(0, dtype=torch.int64)),
        ("transposed (7, 5)", torch.randn(5, 7, generator=g).t()),
        ("strided slice [::3]", torch.randn(40, generator=g)[::3]),
        ("expanded (4, 3), stride 0", torch.randn(3, generator=g).expand(4, 3)),
        ("10-element view of a 4 MiB storage", torch.randn(2**20, generator=g)[1000:1010]),
        ("channels_last (2, 3, 4, 5)",
         torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last)),
        ("4 MiB float32", torch.randn(2**20, generator=g)),
    ]
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def bitwise_diff(sent: torch.Tensor, got: object) -> str:
    """'' when `got` is `sent` bit for bit (dtype, shape, device, bytes); else what differs."""
    if not isinstance(got, torch.Tensor):
        return f"got {type(got).__name__}"
    for what in ("dtype", "shape", "device"):
        if getattr(sent, what) != getattr(got, what):
            return f"{what} {getattr(sent, what)} came back as {getattr(got, what)}"
    a, b = _bits(sent), _bits(got)
    if not torch.equal(a, b):
        return f"{int((a != b).sum())} of {a.numel()} bytes differ"
    return ""


def crossed(to: str) -> dict[str, Any]:
    """Where a call to `to` ran, and where its caller runs: a call that never left the caller
    would pass every check of its values trivially."""
    return {"to": to, "callee": rpc.rpc_sync(to, remote.whereabouts),
            "caller": {"pid": os.getpid(), "worker": rpc.get_worker_info().name}}


def roundtrip(rank: int, world: int, spec: GroupSpec
              ) -> tuple[dict[str, Any], list[dict[str, str]]] | None:
    """Rank 0: where calls to the peer run (`crossed`), then each tensor sent to the peer and
    back, through a Python function and a builtin op: what differs, per tensor and path
    ('' when nothing)."""
    with joined(rank, world, spec):
        if rank != 0:
            return None
        where = crossed(PEER)
        out = []
        for label, t in roundtrip_tensors():
            x = t.to(spec.device)
            for via, fn in (("python echo", remote.echo), ("builtin torch.clone", torch.clone)):
                raised = False
                try:
                    diff = bitwise_diff(x, rpc.rpc_sync(PEER, fn, args=(x,)))
                except Exception as e:  # a failed call is a failed round trip
                    diff = f"raised {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    raised = True
                out.append({"tensor": label, "via": via, "diff": diff, "raised": raised})
        return where, out


# --- conformance: failures ------------------------------------------------------------------

REMOTE_MESSAGE = "release-bench remote failure 42"


def remote_exception(rank: int, world: int, spec: GroupSpec
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """Rank 0: where calls to the peer run (`crossed`); then a remote function raises: what
    the caller got, for sync and async calls."""
    with joined(rank, world, spec):
        if rank != 0:
            return None
        where = crossed(PEER)
        out = []
        for kind, cls in remote.EXCEPTIONS.items():
            calls = {
                "rpc_sync": lambda k=kind: rpc.rpc_sync(PEER, remote.fail, (k, REMOTE_MESSAGE)),
                "rpc_async": lambda k=kind: rpc.rpc_async(PEER, remote.fail,
                                                          (k, REMOTE_MESSAGE)).wait(),
            }
            for how, call in calls.items():
                got: dict[str, Any] = {"kind": kind, "how": how, "raised": None}
                try:
                    call()
                except Exception as e:
                    got.update(raised=f"{type(e).__module__}.{type(e).__qualname__}",
                               same_type=type(e) is cls, message=str(e))
                out.append(got)
        return where, out


LINGER_S = 1.0  # how much later than worker0 worker1 reaches its shutdown


def late_leaver(rank: int, world: int, spec: GroupSpec, note: str) -> None:
    """worker1 reaches its graceful shutdown LINGER_S after worker0, the leader of torch's
    shutdown barrier (the smallest name), which then writes to `note` how long its own
    shutdown blocked: in a file, so that the wait is known even if worker1 fails to leave."""
    with joined(rank, world, spec):
        if rank != 0:
            time.sleep(LINGER_S)
            return
        t0 = time.monotonic()
    with open(note, "w") as f:
        f.write(f"{time.monotonic() - t0:.6f}\n")


def _timed_call(call: Callable[[], object]) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        call()
    except Exception as e:
        return {"elapsed": time.perf_counter() - t0, "raised": type(e).__name__,
                "message": str(e).splitlines()[0][:200]}
    return {"elapsed": time.perf_counter() - t0, "raised": None, "message": ""}


def timeouts(rank: int, world: int, spec: GroupSpec, per_call_s: float,
             sleep_s: float) -> dict[str, dict[str, Any]] | None:
    """Rank 0: calls of a function that sleeps `sleep_s`, with a per-call timeout, with the
    agent's default (spec.rpc_timeout), and a short call that must not time out."""
    with joined(rank, world, spec):
        if rank != 0:
            return None
        slow = (sleep_s,)
        return {
            "rpc_sync timeout=": _timed_call(
                lambda: rpc.rpc_sync(PEER, remote.sleep_then_return, slow, timeout=per_call_s)),
            "rpc_async timeout=": _timed_call(
                lambda: rpc.rpc_async(PEER, remote.sleep_then_return, slow,
                                      timeout=per_call_s).wait()),
            "default rpc_timeout=": _timed_call(
                lambda: rpc.rpc_sync(PEER, remote.sleep_then_return, slow)),
            "short call": _timed_call(
                lambda: rpc.rpc_sync(PEER, remote.sleep_then_return, (0.1,), timeout=2.0)),
        }


class PeerLost(RuntimeError):
    """What the caller raises when its peer dies under it (the message says how)."""


def killed_peer(rank: int, world: int, spec: GroupSpec, kill_after_s: float) -> None:
    """Rank 1 kills itself (SIGKILL) `kill_after_s` after joining; rank 0 keeps calling it
    and raises PeerLost with the error its RPC gave and how long after the kill it came."""
    with joined(rank, world, spec):
        start = time.monotonic()
        if rank == 1:
            time.sleep(kill_after_s)
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.ones(4)
        calls = 0
        try:
            while True:
                rpc.rpc_sync(PEER, remote.echo, args=(x,))
                calls += 1
        except Exception as e:
            after = time.monotonic() - start - kill_after_s
            first = str(e).splitlines()[0][:300]
            raise PeerLost(f"rpc_sync failed {after:.2f} s after the peer was killed (after "
                           f"{calls} calls): {type(e).__name__}: {first}") from e


# --- conformance: async user functions ------------------------------------------------------

ASYNC_WRONG_RETURN = "must return a torch.futures.Future"  # torch/csrc/distributed/rpc, 2.14.1


def _outcome(call: Callable[[], object]) -> dict[str, Any]:
    try:
        value = call()
    except Exception as e:
        return {"value": None, "error": f"{type(e).__name__}: {str(e)[:400]}", "raised": True}
    if isinstance(value, torch._C.Future):  # an async function called as a plain one
        return {"value": None, "error": "returned a torch.futures.Future, not its value"}
    return {"value": value, "error": None}


def async_functions(rank: int, world: int, spec: GroupSpec) -> dict[str, Any] | None:
    """Rank 0 of 3: the release notes' example (three ways of calling it), a chain, a nested
    async function, a fan-out and a wrong return type, each run on worker1."""
    with joined(rank, world, spec):
        if rank != 0:
            return None
        from suites.rpc import remote_async as ra  # after setup: see remote_async

        one = torch.ones(2)
        w1, w2 = worker_name(1), worker_name(2)
        example = (w2, one, 1, 1)
        return {
            "crossed": crossed(w1),
            "example rpc_sync": _outcome(lambda: rpc.rpc_sync(w1, ra.async_add_chained,
                                                              args=example)),
            "example rpc_async": _outcome(lambda: rpc.rpc_async(w1, ra.async_add_chained,
                                                                args=example).wait()),
            "example rpc.remote": _outcome(lambda: rpc.remote(w1, ra.async_add_chained,
                                                              args=example).to_here()),
            "chain": _outcome(lambda: rpc.rpc_sync(w1, ra.add_chain, args=(w2, one, 5))),
            "nested": _outcome(lambda: rpc.rpc_sync(
                w1, ra.add_nested, args=(w2, worker_name(0), one, 1, 1))),
            "fan-out": _outcome(lambda: rpc.rpc_sync(
                w1, ra.add_fanout, args=([worker_name(0), w2], one, 2))),
            "wrong return": _outcome(lambda: rpc.rpc_sync(w1, ra.returns_tensor, args=(one,))),
        }


def batch_grads(requests: int, numel: int) -> list[torch.Tensor]:
    return [torch.full((numel,), float(i + 1)) for i in range(requests)]


def batch_expected(requests: int, numel: int) -> torch.Tensor:
    """The weights after one step of BatchedParameterServer on batch_grads, computed the same
    way the server does."""
    ps = remote.BatchedParameterServer(requests, numel)
    for g in batch_grads(requests, numel):
        ps.submit(g)
    return ps.weight


def batch_no_deadlock(rank: int, world: int, spec: GroupSpec, server_threads: int,
                      requests: int, numel: int, timeout_s: float) -> dict[str, Any] | None:
    """Rank 0 sends `requests` concurrent updates to worker1, which has `server_threads` RPC
    threads; each must come back (within `timeout_s`) with the batch's weights.

    A deadlocked server cannot take an RPC asking it to stop, so the workers agree on the
    outcome through a store; a stuck worker1 then leaves without shutting down.
    """
    # a client of the store the launcher hosts on loopback
    store = dist.TCPStore(os.environ.get("MASTER_ADDR", launch.LOOPBACK),
                          spec.rendezvous_port(), world, is_master=False)
    verdicts = dist.PrefixStore("rpc-suite-verdict", store)
    mine = dataclasses.replace(spec, num_worker_threads=server_threads) if rank == 1 else spec
    with joined(rank, world, mine) as member:
        if rank == 1:
            if verdicts.get("verdict") != b"served":
                member.abandon(skip_shutdown=True)
            return None
        from suites.rpc import remote_async  # after setup: see remote_async

        where = crossed(PEER)
        threads = rpc.rpc_sync(PEER, remote.agent_info).get("agent.thread_pool_size")
        rpc.rpc_sync(PEER, remote.configure_batch, args=("conformance", requests, numel))
        t0 = time.perf_counter()
        futs = [rpc.rpc_async(PEER, remote_async.async_update, args=("conformance", g),
                              timeout=timeout_s) for g in batch_grads(requests, numel)]
        outcomes = [_outcome(f.wait) for f in futs]
        elapsed = time.perf_counter() - t0
        served = all(o["error"] is None for o in outcomes)
        verdicts.set("verdict", "served" if served else "stuck")
        if not served:
            member.abandon()
        return {"outcomes": outcomes, "elapsed": elapsed, "server_threads": threads,
                "expected": batch_expected(requests, numel), "crossed": where}


# --- benchmark: batched update --------------------------------------------------------------


def batched_update(rank: int, world: int, spec: GroupSpec, requests: int,
                   threads_by_rank: dict[int, int], min_run_time: float,
                   turns: Turns | None = None) -> dict | None:
    """Rank 0 of 3: the batched update with and without async_execution on worker1 (enough
    threads for either), and with async_execution on worker2 (few threads), interleaved. With
    `turns` (a side of a round in bursts) each block of each variant is a turn."""
    mine = dataclasses.replace(spec, num_worker_threads=threads_by_rank.get(
        rank, spec.num_worker_threads))
    with joined(rank, world, mine):
        if rank != 0:
            return None
        with caller.client(spec.device):
            fns = {
                "async_execution": paths.batched_update(spec.device, "async", requests,
                                                        worker_name(1)),
                "blocking": paths.batched_update(spec.device, "blocking", requests,
                                                 worker_name(1)),
                "async_execution_few_threads": paths.batched_update(spec.device, "async",
                                                                    requests, worker_name(2)),
            }
            around = {name: turns.turn for name in fns} if turns is not None else None
            t = timing.measure_interleaved(fns, device=spec.device, min_run_time=min_run_time,
                                           around=around)
            return {k: v.stats() for k, v in t.items()}
