"""TorchScript fork/wait (1.6 beta): does it run forked work in parallel, and correctly?

Conformance: results of `torch.jit.fork`/`wait` inside a scripted function equal the serial
results; the release notes' example returns -100; in eager mode fork runs serially, as the
documentation says. That forked tasks run off the caller's thread is read from the profiler
in a fresh worker (`threads_in_worker` says why).

Benchmark: speedup of K forked tasks over the same K tasks run serially, for each number of
inter-op threads (the pool that runs forked tasks), beside the ideal min(K, cores, threads).
Intra-op threads are 1 so that the only parallelism is fork's. The inter-op pool size can be
set once per process only, so each thread count is measured in a fresh worker process.
"""

from __future__ import annotations

import os
import threading

import torch

from harness.cases import Context, FromSetting, Suite, TrackView
from harness.running import clean_exit as clean_exit_programs
from harness.running import timing
from suites.fork_wait import minimal, scripted

suite = Suite(
    "fork_wait",
    feature="TorchScript fork/wait parallelism",
    status="beta",
    summary="scripted fork/wait equals serial; speedup of K forked tasks vs ideal",
)

# The size of one task: 256x256 matmul+tanh chains take ~10-15 ms per task on one thread
# here, large enough that fork's scheduling overhead (tens of microseconds) is under 1%.
TASK_SIZE, TASK_STEPS = 256, 40
TASK_COUNTS = (1, 2, 4, 8)  # the numbers of tasks K measured: scaling's full profile
# A forked configuration whose ideal speedup is at least 2 must reach this share of it;
# a serial fork reaches about 1/ideal, so the check separates the two with a wide margin.
MIN_EFFICIENCY = 0.65
TARGET_SPEEDUP_K2 = 1.7  # the target at K=2 with 2 inter-op threads on 2 cores


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


TASK_PARAMS = {"quick": [{"tasks": 2}], "full": [{"tasks": k} for k in TASK_COUNTS]}


def _chains(program, tasks: int, size: int, steps: int):
    fn = scripted.script(program)
    xs, w = scripted.inputs(tasks, size)
    return lambda: fn(xs, w, steps)


@suite.workload(params=TASK_PARAMS, devices=("cpu",), asv_name="ForkedTime.time_forked")
def forked_tasks(device: str, tasks: int, size: int = TASK_SIZE, steps: int = TASK_STEPS):
    """K independent matmul chains, forked inside one scripted function."""
    return _chains(scripted.forked, tasks, size, steps)


@suite.workload(params=TASK_PARAMS, devices=("cpu",), asv_name="SerialTime.time_serial")
def serial_tasks(device: str, tasks: int, size: int = TASK_SIZE, steps: int = TASK_STEPS):
    """The same K matmul chains, one after another, in one scripted function."""
    return _chains(scripted.serial, tasks, size, steps)


@suite.conformance(params=clean_exit_programs.PARAMS, devices=("cpu",))
def clean_exit(ctx: Context) -> None:
    """The release notes' example and two forked matmul chains each end their process cleanly,
    in N fresh processes (torch 2.14 aborts at exit in some: "terminate called")."""
    clean_exit_programs.check_programs(ctx, {
        name: ["-m", "suites.fork_wait.minimal", name] for name in minimal.PROGRAMS})


def check_scripted(ctx: Context, fn) -> bool:
    """Check that `fn` is scripted with forks in its graph, before its results are compared:
    with TorchScript off, fork runs inline and forked results equal serial ones trivially.
    Returns whether it is."""
    forks = scripted.forks_in(fn)
    ctx.details["fork_nodes"] = forks
    return ctx.check("scripted, with prim::fork in its graph", forks > 0,
                     f"{forks} prim::fork nodes" if isinstance(fn, torch.jit.ScriptFunction)
                     else f"torch.jit.script returned a {type(fn).__name__}, not a "
                          "ScriptFunction: TorchScript is off")


def threads_in_worker(rank: int, world: int, program: str, args: tuple,
                      op: str) -> tuple[int, list[int]]:
    """In a fresh worker: script `scripted.<program>`, run it under the profiler, and return
    the caller's thread and the threads its forked tasks' `op` ran on.

    In a worker because the profiler's records of forked tasks are unsafe to free in a process
    that goes on: with torch 2.14.1 the run's own process died of SIGSEGV in the garbage
    collector seconds later, in some runs of the suite (docs/validation.md, Findings). A
    worker ends with os._exit right after, without freeing them."""
    caller, threads = scripted.threads_running(scripted.script(getattr(scripted, program)),
                                               args, op)
    return caller, sorted(threads)


def check_off_thread(ctx: Context, program: str, args: tuple, op: str) -> None:
    """Check that the forked tasks of `scripted.<program>` ran off the caller's thread (their
    `op` events, under the profiler, in a fresh worker): asynchronous, as fork inside
    TorchScript is documented to be. Run once the results are right, so that every task
    forked was waited for inside the program."""
    (res,) = ctx.launch(threads_in_worker, 1, (program, args, op), timeout_s=120,
                        label="fork_wait profiler worker")
    caller, threads = res
    ctx.check("forked tasks ran off the caller's thread", bool(set(threads) - {caller}),
              f"{op} ran on threads {threads}; the caller is thread {caller}")


@suite.conformance(devices=("cpu",), needs=("distributed",))  # its profiler worker's store
def release_notes_example(ctx: Context) -> None:
    """The release notes' example (100 forks of neg on ones, summed) returns -100."""
    example = scripted.script(scripted.release_notes_example)
    if not check_scripted(ctx, example):
        return
    out = example(torch.ones([]))
    if ctx.check("returns -100", out.item() == -100, f"returned {out.item()}"):
        check_off_thread(ctx, "release_notes_example", (torch.ones([]),), "aten::neg")


@suite.conformance(params={"quick": [{"tasks": 4}], "full": [{"tasks": 2}, {"tasks": 8}]},
                   devices=("cpu",), needs=("distributed",))
def scripted_equals_serial(ctx: Context) -> None:
    """Forked results inside a scripted function equal the serial ones, bitwise, and the
    forked tasks ran off the caller's thread."""
    k = ctx.params["tasks"]
    xs, w = scripted.inputs(k, 64)
    forked = scripted.script(scripted.forked)
    if not check_scripted(ctx, forked):
        return
    got = forked(xs, w, 5)
    want = scripted.script(scripted.serial)(xs, w, 5)
    same = [ctx.check("one result per task", len(got) == k, f"{len(got)} results for {k} tasks")]
    for i, (g, s) in enumerate(zip(got, want, strict=False)):
        same.append(ctx.check(f"task {i} equals serial", torch.equal(g, s), "" if torch.equal(
            g, s) else f"max abs diff {(g - s).abs().max().item():.3g}"))
    if all(same):
        check_off_thread(ctx, "forked", (xs, w, 5), "aten::mm")


@suite.conformance(devices=("cpu",))
def eager_fork_is_serial(ctx: Context) -> None:
    """Outside TorchScript, torch.jit.fork runs the function at once on the calling thread."""
    caller, ran_on = threading.get_ident(), []

    def work(x: torch.Tensor) -> torch.Tensor:
        ran_on.append(threading.get_ident())
        return x + 1

    fut = torch.jit.fork(work, torch.zeros(3))
    ctx.check("future complete when fork returns", fut.done())
    ctx.check("ran on the calling thread", ran_on == [caller],
              "ran on another thread" if ran_on and ran_on != [caller] else "")
    got = torch.jit.wait(fut)
    ctx.check("wait returns the result",
              isinstance(got, torch.Tensor) and torch.equal(got, torch.ones(3)), f"got {got!r}")
    ctx.note("eager-mode torch.jit.fork runs serially (documented): it is parallel only "
             "inside TorchScript")


def measure_scaling(rank: int, world: int, interop_threads: int, task_counts: list[int],
                    min_run_time: float) -> dict:
    """In a fresh worker: time serial and forked K tasks side by side for each K."""
    torch.set_num_interop_threads(interop_threads)
    torch.set_num_threads(1)
    out = {}
    for k in task_counts:
        fork_fn = forked_tasks("cpu", tasks=k)
        serial_fn = serial_tasks("cpu", tasks=k)
        t = timing.measure_interleaved({"serial": serial_fn, "fork": fork_fn},
                                       min_run_time=min_run_time, threads=1, warmup=2)
        out[k] = {name: tm.stats() for name, tm in t.items()}
    out["interop_threads"] = torch.get_num_interop_threads()
    return out


# `tasks`: the numbers of tasks K timed, serial and forked, in each worker
@suite.benchmark(params={"quick": [{"interop_threads": n} for n in (1, 2)],
                         "full": [{"interop_threads": n} for n in (1, 2, 4)]},
                 devices=("cpu",), needs=("distributed",),
                 settings={"quick": {"tasks": (1, 2, 4)}, "full": {"tasks": TASK_COUNTS}},
                 tracks=[TrackView("ForkWaitSpeedup", "Speedup of forked over serial per task "
                                   "count K, from the suite's scaling case.", unit="x",
                                   labels={"K": FromSetting("tasks")}, tracks=["speedup"])])
def scaling(ctx: Context) -> None:
    """Speedup of K forked tasks over serial, against the ideal min(K, cores, threads)."""
    threads = ctx.params["interop_threads"]
    ks = list(ctx.settings["tasks"])
    (res,) = ctx.launch(measure_scaling, 1, (threads, ks, 2 * ctx.min_run_time),
                        timeout_s=300, label="fork_wait worker")
    cores = usable_cores()
    rows = []
    for k in ks:
        serial_s, fork_s = res[k]["serial"], res[k]["fork"]
        speedup = serial_s["median"] / fork_s["median"]
        ideal = min(k, cores, threads)
        ctx.metric("serial_time", serial_s["median"], "s", kind="time", better="lower",
                   labels={"K": k}, samples=serial_s["times"])
        ctx.metric("fork_time", fork_s["median"], "s", kind="time", better="lower",
                   labels={"K": k}, samples=fork_s["times"])
        ctx.ratio("speedup", serial_s["times"], fork_s["times"], labels={"K": k},
                  headline=k > 1)
        ctx.metric("ideal", ideal, "x", kind="value", labels={"K": k})
        rows.append({"tasks": k, "interop_threads": threads, "serial_ms": serial_s["median"] * 1e3,
                     "fork_ms": fork_s["median"] * 1e3, "speedup": speedup, "ideal": ideal,
                     "efficiency": speedup / ideal})
        if ideal >= 2:
            # a floor on a timing: on a contended machine the case is invalid, not failed
            ctx.check(f"parallel at K={k}", speedup >= MIN_EFFICIENCY * ideal,
                      f"speedup {speedup:.2f}x, ideal {ideal}x, floor "
                      f"{MIN_EFFICIENCY * ideal:.2f}x", performance=True)
        if k == 2 and threads == 2 and cores >= 2:
            met = "met" if speedup >= TARGET_SPEEDUP_K2 else "NOT met"
            ctx.note(f"target >= {TARGET_SPEEDUP_K2}x at K=2, 2 inter-op threads: {met} "
                     f"({speedup:.2f}x)")
    ctx.table("scaling", rows, show=True)
    ctx.details["cores"] = cores
    ctx.details["task"] = {"size": TASK_SIZE, "steps": TASK_STEPS, "intra_op_threads": 1}
