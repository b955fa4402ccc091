"""TensorPipe RPC backend and RPC async user functions (1.6 beta): are they right, how fast?

Conformance: tensors of many dtypes and layouts round-trip bit for bit; a remote exception
reaches the caller with its type and message; timeouts fire on time; a graceful shutdown
waits for a worker that reaches it later; a worker killed mid-run gives a clear error and
every process is reaped; `@rpc.functions.async_execution` runs the
release notes' example, chains, nests and fans out, rejects a non-Future return with the
documented error, and serves a batched update with fewer RPC threads than requests.

Benchmarks: round-trip latency (p50/p90/p99) over a payload sweep for TensorPipe (builtin
op, Python function, shm and uv transports forced), Gloo send/recv and a raw TCP socket
floor measured in the same run, each as a ratio to the floor; rpc_async throughput with
calls in flight; the suite's own sampling against a bare rpc_sync loop; and the batched
update's throughput with and without async_execution.

Modern torch has only the TensorPipe agent (the Gloo ProcessGroup agent went in 1.10/1.11),
so "Gloo" here is a Gloo send/recv ping-pong of the same tensor: what the old agent did
underneath, a lower bound for that transport, not a like-for-like RPC.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.cases import CheckVersion, Context, FromSetting, Params, Suite, TrackView
from harness.running import clean_exit as clean_exit_programs
from harness.running import duet, launch
from suites.rpc import measure, paths, workers
from suites.rpc.caller import GroupSpec

suite = Suite(
    "rpc",
    feature="TensorPipe RPC backend; RPC async user functions",
    status="beta",
    summary="values, errors, timeouts, async_execution; round trip vs Gloo and a TCP floor",
    spans_hosts=True,
)

# the versions of checks that changed since the first (harness.cases.CheckVersion)
WORKERS_CHECK = CheckVersion(
    2, "torch raising in an RPC worker fails the check that the workers run to the end, "
    "instead of erroring the case")

KiB, MiB = 2**10, 2**20
HEADLINE_SIZES = (4, 64 * KiB, 4 * MiB)  # the closing table's columns; round_trip's quick sizes
# round_trip's full sweep, and the payloads of the workloads' full grid
SWEEP_SIZES = (4, 64, KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB)
BANDWIDTH_FROM = MiB  # bandwidth is reported for payloads of at least this size
IN_FLIGHT = 8
BARE_LOOP_TOLERANCE = 0.10  # the suite's TensorPipe p50 within 10% of a bare rpc_sync loop
MAIN_PATHS = ["tp_builtin", "tp_python", "bare_loop", "gloo", "tcp"]
FLOORS = ("tcp",)  # each path's over_floor is its time over this one's
PATH_LABELS = {
    "tp_builtin": "TensorPipe rpc_sync, builtin torch.add",
    "tp_python": "TensorPipe rpc_sync, Python echo",
    "bare_loop": "bare rpc_sync loop (torch.add)",
    "gloo": "Gloo send/recv ping-pong (transport lower bound)",
    "tcp": "raw TCP socket ping-pong (floor)",
    "tp_shm": "TensorPipe shm forced, Python echo",
    "tp_uv": "TensorPipe uv forced, Python echo",
}
# Forcing a transport (private options, checked on torch 2.14.1): on the CPU the channel is
# forced to "basic" too, so that payload bytes cross the forced transport rather than the
# cma channel (process_vm_readv), which TensorPipe prefers between processes of one machine.
FORCED = ("shm", "uv")

DEVICES = ("cpu", "cuda")
SIZE_PARAMS = {"quick": [{"nbytes": 4}], "full": [{"nbytes": n} for n in SWEEP_SIZES]}


def size_label(nbytes: int) -> str:
    for unit, factor in (("MiB", MiB), ("KiB", KiB)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


def _launch(ctx: Context, fn: Callable, nprocs: int, args: tuple, timeout_s: float = 120.0,
            **kw: Any) -> list[Any]:
    return ctx.launch(fn, nprocs, args, timeout_s=timeout_s, label="rpc worker", **kw)


def _workers_finish(ctx: Context, fn: Callable, nprocs: int, args: tuple) -> list[Any] | None:
    """The workers' results; None when torch raised in one of them, which fails the check
    that they run to the end, with the error and where torch raised it."""
    with ctx.exercising(f"the {nprocs} RPC workers start, call and shut down without an error"):
        return _launch(ctx, fn, nprocs, args)
    return None


# --- workloads: the statements the benchmarks time (paths.py) --------------------------------

for _build, _params, _devices, _asv_name in [
    (paths.tensorpipe_builtin, SIZE_PARAMS, DEVICES, "TensorPipeBuiltin.time_builtin"),
    (paths.tensorpipe_python, SIZE_PARAMS, DEVICES, "TensorPipePython.time_python"),
    (paths.tensorpipe_async, {"quick": [{"nbytes": 4, "in_flight": IN_FLIGHT}],
                              "full": [{"nbytes": n, "in_flight": IN_FLIGHT}
                                       for n in HEADLINE_SIZES]}, DEVICES,
     "TensorPipeInFlight.time_rpc_async"),
    (paths.gloo_pingpong, SIZE_PARAMS, DEVICES, "GlooRoundTrip.time_send_recv"),
    (paths.tcp_pingpong, SIZE_PARAMS, DEVICES, "TcpFloor.time_pingpong"),
    (paths.batched_update, {"quick": [{"mode": m, "requests": 8} for m in ("async", "blocking")],
                            "full": [{"mode": m, "requests": r} for m in ("async", "blocking")
                                     for r in (4, 8, 16)]}, ("cpu",), "BatchedUpdate.time_batch"),
]:
    suite.workload(params=_params, devices=_devices, needs=("distributed",),
                   asv_name=_asv_name)(_build)


# --- conformance ------------------------------------------------------------------------------


def check_crossed(ctx: Context, where: dict[str, Any]) -> bool:
    """Check that a call to the callee ran in the callee's process (`workers.crossed`): with
    RPC made a local call, every check of the values would pass without any RPC. Returns
    whether it did; the case checks nothing else when it did not."""
    callee, caller = where["callee"], where["caller"]
    ok = callee["worker"] == where["to"] and callee["pid"] != caller["pid"]
    return ctx.check(f"calls ran on {where['to']}, in another process", ok,
                     f"ran on {callee['worker']} (pid {callee['pid']}); the caller is "
                     f"{caller['worker']} (pid {caller['pid']})"
                     + ("" if ok else ": the call never left the caller"))


@suite.conformance(devices=DEVICES, needs=("distributed",), check=WORKERS_CHECK)
def roundtrip(ctx: Context) -> None:
    """Tensors of 11 dtypes and odd layouts round-trip bit for bit, through a Python function
    and a builtin op."""
    spec = GroupSpec(device=ctx.device)
    if (ran := _workers_finish(ctx, workers.roundtrip, 2, (spec,))) is None:
        return
    ((where, res), _) = ran
    if not check_crossed(ctx, where):
        return
    for r in res:
        ctx.check(f"{r['tensor']} via {r['via']}", not r["diff"], r["diff"],
                  raised=r["raised"])


# The exception types whose class survives the trip (PyTorch's own tests raise ValueError);
# any other type arrives as a RuntimeError whose message starts with the type's name.
KEEP_TYPE = ("ValueError", "TypeError")


@suite.conformance(devices=("cpu",), needs=("distributed",), check=WORKERS_CHECK)
def remote_exception(ctx: Context) -> None:
    """A remote function's exception reaches the caller with its message, and with its type
    for ValueError and TypeError (other types: the type's name, in a RuntimeError)."""
    if (ran := _workers_finish(ctx, workers.remote_exception, 2, (GroupSpec(),))) is None:
        return
    ((where, res), _) = ran
    if not check_crossed(ctx, where):
        return
    rows = []
    for r in res:
        where = f"{r['kind']} via {r['how']}"
        raised, message = r["raised"], r.get("message", "")
        first = message.splitlines()[0][:200] if message else "the call returned normally"
        if r["kind"] in KEEP_TYPE:
            ctx.check(f"{where}: same type", bool(raised) and r["same_type"],
                      f"raised {raised}" if raised else first)
            ctx.check(f"{where}: message", workers.REMOTE_MESSAGE in message, first)
        else:
            ctx.check(f"{where}: type name and message in the error",
                      message.startswith(f"{r['kind']}:") and workers.REMOTE_MESSAGE in message,
                      f"raised {raised}: {first}" if raised else first)
        rows.append({"raised": r["kind"], "via": r["how"], "caller_got": raised,
                     "same_type": r.get("same_type"),
                     "message_kept": workers.REMOTE_MESSAGE in message})
    ctx.table("remote_exception", rows, show=True)
    lost = sorted({r["raised"] for r in rows if r["same_type"] is False})
    if lost:
        ctx.note(f"remote {', '.join(lost)} reach the caller as RuntimeError (type name and "
                 "message kept in its text): torch's rpc internals rebuild the type, but the "
                 "C++ future re-raises only some types as themselves")


TIMEOUT_PER_CALL_S, TIMEOUT_DEFAULT_S, SLOW_CALL_S = 0.5, 1.0, 2.0
# A timeout must fire no earlier than this before its time and no later than this after it;
# TensorPipe's timeout thread wakes at the deadline, so the slack is for scheduling noise.
TIMEOUT_EARLY_S, TIMEOUT_SLACK_S = 0.05, 0.5


@suite.conformance(devices=("cpu",), needs=("distributed",), check=WORKERS_CHECK)
def rpc_timeout(ctx: Context) -> None:
    """A slow remote call raises once its timeout (per call, or the agent's rpc_timeout)
    has passed, within the stated slack; a call shorter than its timeout completes."""
    spec = GroupSpec(rpc_timeout=TIMEOUT_DEFAULT_S)
    if (ran := _workers_finish(ctx, workers.timeouts, 2,
                               (spec, TIMEOUT_PER_CALL_S, SLOW_CALL_S))) is None:
        return
    (res, _) = ran
    for name, limit in (("rpc_sync timeout=", TIMEOUT_PER_CALL_S),
                        ("rpc_async timeout=", TIMEOUT_PER_CALL_S),
                        ("default rpc_timeout=", TIMEOUT_DEFAULT_S)):
        r = res[name]
        on_time = limit - TIMEOUT_EARLY_S <= r["elapsed"] <= limit + TIMEOUT_SLACK_S
        ctx.check(f"{name}{limit:g} s: raises within {TIMEOUT_SLACK_S:g} s of the timeout",
                  r["raised"] == "RuntimeError" and on_time,
                  f"after {r['elapsed']:.3f} s: " + (f"{r['raised']}: {r['message']}"
                                                     if r["raised"] else "no error"))
    short = res["short call"]
    ctx.check("a 0.1 s call with timeout=2 s completes", short["raised"] is None,
              f"after {short['elapsed']:.3f} s: {short['raised']}: {short['message']}"
              if short["raised"] else f"after {short['elapsed']:.3f} s")
    ctx.details["timeouts"] = res


@suite.conformance(devices=("cpu",), needs=("distributed", "one_host"))
def graceful_shutdown(ctx: Context) -> None:
    """`rpc.shutdown()`, graceful by default, blocks "until all local and remote RPC processes
    reach this method" (its docstring): worker0 leaves at once, worker1 reaches its shutdown
    workers.LINGER_S later, and worker0's shutdown must not return before. A worker that
    only serves leaves at once in every other case, so only this one holds the leader of the
    barrier to waiting for the others."""
    with tempfile.TemporaryDirectory(prefix="rb-shutdown-") as tmp:
        note = Path(tmp) / "waited"
        _workers_finish(ctx, workers.late_leaver, 2, (GroupSpec(), str(note)))
        waited = float(note.read_text()) if note.exists() else None
    if waited is None:
        return
    ctx.details["leader_shutdown_wait_s"] = waited
    # the init barrier lets both leave init_rpc within milliseconds; half the linger leaves
    # room for a busy machine's scheduling without passing a leader that did not wait
    ctx.check(f"worker0's shutdown waits for worker1, which reaches it {workers.LINGER_S:g} s "
              "later", waited >= workers.LINGER_S / 2,
              f"returned after {waited:.2f} s")


KILL_AFTER_S = 0.5


@suite.conformance(devices=("cpu",), needs=("distributed", "one_host"))
def worker_killed(ctx: Context) -> None:
    """A worker killed mid-run (SIGKILL): its caller gets an error at once instead of
    hanging, the launcher reports it in one line, and every process is reaped."""
    error: launch.LaunchError | None = None
    started: dict[int, int] = {}
    try:
        _launch(ctx, workers.killed_peer, 2, (GroupSpec(), KILL_AFTER_S),
                timeout_s=60.0, grace_s=5.0, started=started)
    except launch.LaunchError as e:
        error = e
    pids = sorted(started.values())
    failures = {f.rank: f for f in error.failures} if error else {}
    caller = failures.get(0)
    # the peer kills itself once in the group: if it ended otherwise, the run failed before
    # the fault, and the check of its handling fails on that crash
    peer = failures.get(1)
    crashed_first = error is not None and not (
        peer is not None and peer.message.startswith("was killed by signal SIGKILL"))
    ctx.check("the caller's RPC raises when its peer dies (no hang)",
              caller is not None and caller.kind == "exception"
              and "PeerLost" in caller.message,
              caller.message if caller else "the launch ended without an error",
              raised=crashed_first)
    after = re.search(r"failed ([0-9.]+) s after", caller.message) if caller else None
    if after:
        ctx.metric("error_after_kill", float(after.group(1)), "s", kind="latency",
                   better="lower")
    alive = launch.still_running(pids)
    ctx.check("every worker process is reaped", len(pids) == 2 and not alive,
              f"{len(pids)} workers started; still running: {alive}")
    if error is not None:
        ctx.note(f"launcher reported: {error}")
        # how each process ended: what the case provoked, not its failures (`failures` lists
        # those, which the expectations match)
        ctx.details["launch_errors"] = [
            {k: v for k, v in f.items() if k != "log_tail"} for f in error.failures_json()]
    ctx.details["pids"] = pids


@suite.conformance(devices=("cpu",), needs=("distributed",), check=WORKERS_CHECK)
def async_execution(ctx: Context) -> None:
    """@rpc.functions.async_execution: the release notes' example returns tensor([3., 3.]);
    chained, nested and fan-out forms work; a non-Future return raises the documented error."""
    if (ran := _workers_finish(ctx, workers.async_functions, 3, (GroupSpec(),))) is None:
        return
    (res, _, _) = ran
    if not check_crossed(ctx, res["crossed"]):
        return
    one = torch.ones(2)
    expected = {
        "example rpc_sync": torch.tensor([3.0, 3.0]),
        "example rpc_async": torch.tensor([3.0, 3.0]),
        "example rpc.remote": torch.tensor([3.0, 3.0]),
        "chain": one + 5,  # torch.add(x, 0), then five callbacks each adding 1
        "nested": one + 3,  # worker0 adds 1, worker2's callback 1, worker1's callback 1
        "fan-out": 2 * (one + 2),  # torch.add(x, 2) on two workers, summed
    }
    names = {
        "example rpc_sync": "release notes example: rpc_sync returns tensor([3., 3.])",
        "example rpc_async": "release notes example via rpc_async",
        "example rpc.remote": "release notes example via rpc.remote(...).to_here()",
        "chain": "chained: five then() callbacks",
        "nested": "nested: an async function awaiting another",
        "fan-out": "fan-out: collect_all over two workers",
    }
    for key, want in expected.items():
        got = res[key]
        ok = isinstance(got["value"], torch.Tensor) and torch.equal(got["value"], want)
        ctx.check(names[key], ok, got["error"] or f"returned {got['value']}, expected {want}",
                  raised=got.get("raised", False))
    wrong = res["wrong return"]
    ctx.check(f"a non-Future return raises RuntimeError '...{workers.ASYNC_WRONG_RETURN}...'",
              bool(wrong["error"]) and wrong["error"].startswith("RuntimeError")
              and workers.ASYNC_WRONG_RETURN in wrong["error"],
              wrong["error"] or f"returned {wrong['value']}", raised=wrong.get("raised", False))


BATCH_REQUESTS, BATCH_THREADS, BATCH_TIMEOUT_S = 8, 2, 5.0


@suite.conformance(devices=("cpu",), needs=("distributed",), check=WORKERS_CHECK)
def async_batch_no_deadlock(ctx: Context) -> None:
    """The tutorial's batched update with async_execution serves 8 concurrent requests on a
    server with 2 RPC threads, without deadlock, and each gets the batch's new weights."""
    args = (GroupSpec(), BATCH_THREADS, BATCH_REQUESTS, paths.BATCH_NUMEL, BATCH_TIMEOUT_S)
    if (ran := _workers_finish(ctx, workers.batch_no_deadlock, 2, args)) is None:
        return
    (res, _) = ran
    if not check_crossed(ctx, res["crossed"]):
        return
    errors = [o["error"] for o in res["outcomes"] if o["error"]]
    ctx.check(f"{BATCH_REQUESTS} concurrent requests served by {res['server_threads']} RPC "
              "threads", not errors,
              f"{len(errors)} of {BATCH_REQUESTS} failed: {errors[0]}" if errors
              else f"all served in {res['elapsed'] * 1e3:.1f} ms")
    good = [o["value"] is not None and torch.equal(o["value"], res["expected"])
            for o in res["outcomes"]]
    ctx.check("every request gets the batch's updated weights", all(good),
              f"{good.count(False)} of {len(good)} wrong or missing")
    ctx.metric("batch_latency", res["elapsed"], "s", kind="latency", better="lower")
    ctx.details["server_threads"] = res["server_threads"]


# --- benchmarks -------------------------------------------------------------------------------


def _forced_spec(device: str, transport: str) -> GroupSpec:
    cpu = torch.device(device).type == "cpu"
    return GroupSpec(device=device, gloo=False, transports=(transport,),
                     channels=("basic",) if cpu else None)


# `launch_timeout_s` bounds each of the case's launches (the main one and one per forced
# transport); `plan` is how each launch samples every path (measure.Plan).
@suite.benchmark(devices=DEVICES, needs=("distributed",),
                 options=("sizes", "min_samples", "paths"),
                 bursts=True, settings={
                     "quick": {"sizes": HEADLINE_SIZES, "launch_timeout_s": 240.0,
                               "plan": measure.Plan(seconds=0.08, min_samples=30,
                                                    max_samples=800, rounds=8, sessions=6,
                                                    warmup_s=0.03)},
                     "full": {"sizes": SWEEP_SIZES, "launch_timeout_s": 900.0,
                              "plan": measure.Plan(seconds=0.5, min_samples=20,
                                                   max_samples=10000, rounds=16, sessions=8,
                                                   warmup_s=0.2)}},
                 tracks=[TrackView("RoundTripLatency", "p50 and p99 round trip per path and "
                                   "payload, from the suite's round_trip case.", unit="s",
                                   labels={"path": list(PATH_LABELS),
                                           "bytes": FromSetting("sizes")},
                                   tracks=["p50", "p99"]),
                         TrackView("RoundTripOverFloor", "Each path's p50 over the TCP floor "
                                   "measured beside it.", unit="x", tracks=["over_floor"],
                                   labels={"path": [p for p in PATH_LABELS if p not in FLOORS],
                                           "bytes": FromSetting("sizes")}),
                         TrackView("RoundTripRatios", "The suite's TensorPipe p50 over a bare "
                                   "rpc_sync loop, uv over shm, and rpc_async's speedup over "
                                   "rpc_sync, per payload.", unit="x",
                                   labels={"bytes": FromSetting("sizes")},
                                   tracks=["suite_over_bare_loop", "uv_over_shm",
                                           "async_speedup"])])
def round_trip(ctx: Context) -> None:
    """Round-trip p50/p90/p99 over a payload sweep: TensorPipe (builtin, Python, shm, uv),
    Gloo send/recv and the TCP floor, each over the floor; rpc_async in flight; bare loop.

    `--param sizes=[...]` and `--param min_samples=N` replace the profile's payload sizes and
    samples per path (a slow shaped link needs fewer); `--param paths=gloo,tp_uv` measures only
    those of PATH_LABELS' paths, besides the TCP floor (scripts/netns-check.sh needs three):
    the bare-loop comparison needs tp_builtin and bare_loop, rpc_async in flight tp_builtin."""
    sizes = [int(n) for n in ctx.params.get("sizes", ctx.settings["sizes"])]
    plan = ctx.settings["plan"]
    if "min_samples" in ctx.params:
        plan = dataclasses.replace(plan, min_samples=int(ctx.params["min_samples"]))
    timeout = ctx.settings["launch_timeout_s"] * (2 if "sizes" in ctx.params else 1)
    chosen = _chosen_paths(ctx.params)
    main_paths = [p for p in MAIN_PATHS if p in chosen or p in FLOORS]
    # shm cannot cross hosts: across hosts only uv is forced
    forced_transports = tuple(t for t in (("uv",) if ctx.across_hosts else FORCED)
                              if f"tp_{t}" in chosen)
    cpus = _own_cpus(ctx)
    main, forced = _launch_round_trips(ctx, sizes, plan, main_paths, forced_transports,
                                       timeout, cpus)
    # (path key, launch result, key in that result, key of that launch's floor)
    series = [(p, main, p, "tcp") for p in main_paths]
    for t in forced_transports:
        series += [(f"tp_{t}", forced[t], "tp_python", "tcp"), (f"tcp@{t}", forced[t], "tcp",
                                                                  "tcp")]
    rows, p50 = [], {}
    for nbytes in sizes:
        for key, res, inner, floor_key in series:
            p50[key, nbytes] = res["sizes"][nbytes][inner]["p50"]
            rows.append(_path_figures(ctx, key, nbytes, res["sizes"][nbytes], inner, floor_key))
    if {"tp_builtin", "bare_loop"} <= set(main_paths):
        _bare_loop(ctx, main, sizes)
    if "tp_builtin" in main_paths:  # (timed in flight beside it)
        _in_flight(ctx, main, sizes)
    for nbytes in sizes if {"shm", "uv"} <= set(forced_transports) else []:
        uv = p50["tp_uv", nbytes] / p50["tcp@uv", nbytes]
        shm = p50["tp_shm", nbytes] / p50["tcp@shm", nbytes]
        # a ratio of ratios from two launches: one figure, no samples of its own
        ctx.metric("uv_over_shm", uv / shm, "x", kind="ratio", labels={"bytes": nbytes})
    if ctx.across_hosts and "tp_shm" in chosen:
        ctx.note("TensorPipe's shm transport skipped: shared memory cannot cross hosts")
    if left_out := [p for p in PATH_LABELS if p not in chosen and p not in FLOORS]:
        ctx.note(f"paths left out (--param paths): {', '.join(left_out)}")
    ctx.table("round_trip", rows, show=True)
    ctx.table("p50_us_and_over_floor", _closing_rows(p50, sizes), show=True)
    _round_trip_notes(ctx, rows, plan.sessions)
    if cpus is not None:
        ctx.note(f"in bursts the caller ran on CPU {duet.cpu_list_text(main['cpus'])} and the "
                 f"callee on CPU {duet.cpu_list_text(main['callee_cpus'])}: unpinned, where the "
                 f"scheduler puts the two draws each RPC session's level")
    ctx.details.update(plan=dataclasses.asdict(plan), sizes=sizes, in_flight=IN_FLIGHT,
                       cpus={"caller": main["cpus"], "callee": main["callee_cpus"],
                             "pinned": cpus is not None},
                       sockets={"default": main["sockets"],
                                **{t: forced[t]["sockets"] for t in forced_transports}})
    for m in ctx.metrics:  # the figures the summary shows first
        m.headline = m.labels.get("bytes") == 4 and (
            m.name == "suite_over_bare_loop"
            or (m.name == "p50" and m.labels["path"] in ("tp_builtin", "gloo", "tcp")))


def _chosen_paths(params: Params) -> tuple[str, ...]:
    """The paths `--param paths=...` names, a JSON list or comma-separated (every path of
    PATH_LABELS when absent)."""
    if "paths" not in params:
        return tuple(PATH_LABELS)
    given = params["paths"]
    if not isinstance(given, str | list):
        raise ValueError(f"paths: give path names, comma-separated or a list, not {given!r}")
    chosen = tuple(str(p).strip() for p in (given.split(",") if isinstance(given, str)
                                            else given))
    if unknown := [p for p in chosen if p not in PATH_LABELS]:
        raise ValueError(f"paths: {', '.join(unknown)} not among {', '.join(PATH_LABELS)}")
    return chosen


def _own_cpus(ctx: Context) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """In bursts, the caller's CPUs and the callee's: two halves of this process's CPUs (one
    each on a 2-vCPU VM). Unpinned, the two ends of a session share a CPU or not as the
    scheduler draws it when the session starts, and the TensorPipe level follows (on the
    Xeon VM, 4 B round trips of 109-171 us in some sessions, 201-371 us in the others; pinned
    apart, 105-112 us in all): bursts pair the two builds' turns, not that draw. Sequential
    rounds stay unpinned, as a user's processes run. None across hosts or on one core."""
    if ctx.turns is None or ctx.across_hosts:
        return None
    try:
        return duet.halves()
    except duet.DuetError:
        return None


def _launch_round_trips(ctx: Context, sizes: list[int], plan: measure.Plan,
                        main_paths: list[str], forced_transports: tuple[str, ...],
                        timeout: float, cpus: tuple[tuple[int, ...], ...] | None
                        ) -> tuple[dict, dict[str, dict]]:
    """The main launch (the main paths, their TCP floor among them, and rpc_async in flight
    where tp_builtin is measured), then one launch per forced transport (its Python echo and
    its own floor); each rank pinned to its entry of `cpus` where given. The main launch's
    result gains the callee's CPUs."""
    main_spec = GroupSpec(device=ctx.device, gloo="gloo" in main_paths)
    in_flight_s = ctx.min_run_time if "tp_builtin" in main_paths else 0.0
    (main, callee) = _launch(ctx, workers.round_trip, 2,
                             (main_spec, main_paths, sizes, plan, IN_FLIGHT, in_flight_s,
                              ctx.turns, cpus), timeout)
    main["callee_cpus"] = callee["cpus"]
    # One process cannot offer one peer shm and another uv (a mixed group fails with
    # "unsupported transport"), so each forced transport gets its own launch with its own
    # floor, and the two are compared through their ratios to those floors.
    forced = {}
    for t in forced_transports:
        (forced[t], _) = _launch(ctx, workers.round_trip, 2, (_forced_spec(ctx.device, t),
                                                               ["tp_python", "tcp"], sizes,
                                                               plan, IN_FLIGHT, 0.0,
                                                               ctx.turns, cpus), timeout)
    return main, forced


def _path_figures(ctx: Context, key: str, nbytes: int, by_path: dict, inner: str,
                  floor_key: str) -> dict:
    """Record one path's percentiles, ratio to its floor and bandwidth at one payload size;
    return its row of the round_trip table."""
    st = by_path[inner]
    is_floor = inner == floor_key
    ids = {"path": key, "bytes": nbytes}
    for q in ("p50", "p90", "p99"):
        ctx.metric(q, st[q], "s", kind="latency", better="lower", labels=ids,
                   samples=st["samples"], q=int(q[1:]) / 100, sessions=st[f"session_{q}"])
    if not is_floor:
        ctx.ratio("over_floor", st["samples"], by_path[floor_key]["samples"],
                  better="lower", labels=ids,
                  sessions=_ratios(st["session_p50"], by_path[floor_key]["session_p50"]))
    bandwidth = 2 * nbytes / st["p50"]  # bytes crossing per second, both ways
    if nbytes >= BANDWIDTH_FROM:
        ctx.metric("bandwidth", bandwidth, "B/s", kind="throughput", better="higher",
                   labels=ids, samples=[2 * nbytes / x for x in st["samples"]],
                   sessions=[2 * nbytes / x for x in st["session_p50"]])
    return {"size": size_label(nbytes), "path": key, "p50_us": st["p50"] * 1e6,
            "p90_us": st["p90"] * 1e6, "p99_us": st["p99"] * 1e6,
            "x_floor": None if is_floor else st["p50"] / by_path[floor_key]["p50"],
            "MiB_s": bandwidth / MiB if nbytes >= BANDWIDTH_FROM else None,
            "sessions_min_us": min(st["session_p50"]) * 1e6,
            "sessions_max_us": max(st["session_p50"]) * 1e6,
            "spread_pct": st["session_spread"] * 100}


def _ratios(num: list[float], den: list[float]) -> list[float]:
    """Session by session: each session measured both figures side by side."""
    return [x / y for x, y in zip(num, den, strict=True)]


def _round_trip_notes(ctx: Context, rows: list[dict], sessions: int) -> None:
    spreads = [r["spread_pct"] for r in rows]
    ctx.note(f"stability: each figure pools {sessions} fresh RPC sessions (a path's level is "
             f"drawn anew at each set-up); their p50s differ by a median "
             f"{sorted(spreads)[len(spreads) // 2]:.1f}% (largest {max(spreads):.1f}%)")
    ctx.note("tp_builtin includes one torch.add on the peer (memory-bound at large payloads); "
             "tp_python and the forced-transport paths return the argument untouched")
    ctx.note("'gloo' is a Gloo send/recv ping-pong of the same tensor, the transport the old "
             "ProcessGroup agent used: a lower bound, not a like-for-like RPC")
    ctx.note(f"transports forced with the private _transports=[t] (and _channels=['basic'] on "
             f"CPU) of TensorPipeRpcBackendOptions, checked on torch {torch.__version__}")
    if torch.device(ctx.device).type == "cuda":
        ctx.note("on CUDA the TensorPipe paths send device tensors; the Gloo and TCP paths "
                 "move the same bytes in host memory")


def _bare_loop(ctx: Context, main: dict, sizes: list[int]) -> None:
    rows = []
    for nbytes in sizes:
        label = size_label(nbytes)
        suite_st, bare_st = (main["sizes"][nbytes][k] for k in ("tp_builtin", "bare_loop"))
        ratio = suite_st["p50"] / bare_st["p50"]
        ctx.ratio("suite_over_bare_loop", suite_st["samples"], bare_st["samples"], better=None,
                  labels={"bytes": nbytes},
                  sessions=_ratios(suite_st["session_p50"], bare_st["session_p50"]))
        rows.append({"size": label, "suite_p50_us": suite_st["p50"] * 1e6,
                     "bare_loop_p50_us": bare_st["p50"] * 1e6, "ratio": ratio,
                     "within_10pct": abs(ratio - 1) <= BARE_LOOP_TOLERANCE})
    met = all(r["within_10pct"] for r in rows)
    ctx.note(f"target: suite TensorPipe p50 within {BARE_LOOP_TOLERANCE:.0%} of a bare "
             f"rpc_sync loop at every size: {'met' if met else 'NOT met'} (ratios "
             + ", ".join(f"{r['size']} {r['ratio']:.3f}" for r in rows) + ")")
    ctx.table("bare_loop", rows, show=True)


def _in_flight(ctx: Context, main: dict, sizes: list[int]) -> None:
    rows = []
    for nbytes in sizes:
        got = main["sizes"][nbytes].get("in_flight")
        if not got:
            continue
        label = size_label(nbytes)
        rate = {k: IN_FLIGHT / v["median"] for k, v in got.items()}
        for k, r in rate.items():
            ctx.metric("calls_per_s", r, "calls/s", kind="throughput", better="higher",
                       labels={"call": k, "in_flight": IN_FLIGHT, "bytes": nbytes},
                       samples=[IN_FLIGHT / x for x in got[k]["times"]],
                       sessions=[IN_FLIGHT / x for x in got[k]["session_medians"]])
        speedup = rate["rpc_async"] / rate["rpc_sync"]
        ctx.ratio("async_speedup", got["rpc_sync"]["times"], got["rpc_async"]["times"],
                  labels={"bytes": nbytes}, sessions=_ratios(got["rpc_sync"]["session_medians"],
                                                             got["rpc_async"]["session_medians"]))
        rows.append({"size": label, "rpc_sync_calls_s": rate["rpc_sync"],
                     "rpc_async_calls_s": rate["rpc_async"], "in_flight": IN_FLIGHT,
                     "speedup": speedup})
    ctx.table("in_flight", rows, show=True)


def _closing_rows(p50: dict, sizes: list[int]) -> list[dict[str, Any]]:
    """p50 in us at the headline sizes for each path, and its ratio to its run's floor."""
    floors = {"tp_shm": "tcp@shm", "tp_uv": "tcp@uv"}
    shown = [n for n in HEADLINE_SIZES if n in sizes]
    rows = []
    for key in [*MAIN_PATHS, "tp_shm", "tp_uv"]:
        if (key, shown[0] if shown else None) not in p50:
            continue  # a path not measured in this run (shm across hosts)
        row: dict[str, Any] = {"path": PATH_LABELS[key]}
        for n in shown:
            row[f"{size_label(n)}_us"] = p50[key, n] * 1e6
        for n in shown:
            floor = p50[floors.get(key, "tcp"), n]
            row[f"x_floor@{size_label(n)}"] = p50[key, n] / floor
        rows.append(row)
    return rows


@suite.benchmark(params={"quick": [{"requests": 8}],
                         "full": [{"requests": r} for r in (4, 8, 16)]},
                 devices=("cpu",), needs=("distributed",), duet=True, bursts=True,
                 tracks=[TrackView("BatchedUpdateSpeedup", "Batched-update throughput with "
                                   "async_execution over the blocking handler.", unit="x",
                                   tracks=["async_over_blocking"])])
def batched_update(ctx: Context) -> None:
    """Batched-update throughput with async_execution against the same workload without it
    (a handler that waits on its RPC thread), interleaved; and async with 2 threads."""
    n = ctx.params["requests"]
    # worker1 has enough threads for the blocking handler (one per pending request);
    # worker2 has fewer threads than requests, which only async_execution can serve.
    threads = {1: n + 2, 2: BATCH_THREADS}
    (res, _, _) = _launch(ctx, workers.batched_update, 3, (GroupSpec(), n, threads,
                                                           ctx.min_run_time, ctx.turns))
    rate = {}
    for name, st in res.items():
        rate[name] = n / st["median"]
        ctx.metric("updates_per_s", rate[name], "updates/s", kind="throughput",
                   better="higher", labels={"variant": name},
                   samples=[n / x for x in st["times"]])
    ctx.ratio("async_over_blocking", res["blocking"]["times"], res["async_execution"]["times"])
    ctx.table("batched_update", [
        {"variant": name, "server_threads": threads[2 if "few" in name else 1],
         "requests": n, "batch_ms": res[name]["median"] * 1e3, "updates_s": r}
        for name, r in rate.items()], show=True)


@suite.conformance(params=clean_exit_programs.PARAMS, devices=("cpu",),
                   needs=("distributed", "one_host"))
def clean_exit(ctx: Context) -> None:
    """init_rpc, one rpc_sync and a graceful shutdown end both processes cleanly, in N fresh
    pairs of processes."""
    clean_exit_programs.check_programs(ctx, {"rpc_sync": ["-m", "suites.rpc.minimal"]},
                                       world=2, timeout_s=120.0)
