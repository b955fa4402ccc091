"""DDP + RPC hybrid parallelism (1.6 beta): does it compute the right numbers, and how fast?

Three processes through the harness launcher: a parameter server holding an EmbeddingBag
behind RPC (`RemoteModule`), and two trainers whose dense model is wrapped in
DistributedDataParallel over Gloo. Forward goes through the remote embedding, backward
through distributed autograd, and a DistributedOptimizer steps the remote and local
parameters (see `model.py` for the model and `workers.py` for the processes).

Conformance:
- `matches_reference`: after 20 lock-step steps on fixed, seeded data, every parameter (the
  server's embedding, each trainer's dense model) and every loss equals a single-process
  float64 reference within 1e-5 relative, and DDP replicas are bitwise identical; for no
  DDP, DDP around the whole hybrid model, and DDP inside it (PyTorch's own three variants).
- `mirrored_pairs`: trainer 2 gets trainer 1's features with opposite targets; DDP's
  averaged dense gradients are then exactly zero, while the embedding gradients (not under
  DDP) are not, and are exact opposites.
- `dist_grads_equal_local`: `dist_autograd.get_gradients` equals local autograd gradients
  of an identical local module, dense and embedding.
- `uneven_inputs`: under DDP's `join()`, trainer 2 stops halfway and trainer 1 trains on;
  its dense parameters equal a reference in which, once trainer 2 joined, each step's
  gradient is trainer 1's plus the joined trainer's zeros, divided by 2, the initial world
  size (DDP.join's default), and the replicas agree at the end.
  PyTorch's own tests of the hybrid (ddp_under_dist_autograd_test.py) train it so too.
- `faults`: a trainer or the parameter server dying mid-training ends the case with one
  clear error naming it, survivors fail on their own, nothing hangs, every process is gone.

Benchmark:
- `step_time`: hybrid step time and where it goes (forward, backward, optimizer), an
  equivalent local step interleaved with it, a bare embedding RPC and a bare allreduce.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.cases import CheckVersion, Context, Suite, Track, TrackView
from harness.running import clean_exit as clean_exit_programs
from harness.running import launch, timing
from suites.ddp_rpc import workers
from suites.ddp_rpc.model import (
    MODES,
    PS_RANK,
    TRAINER_RANKS,
    WORLD_SIZE,
    Optim,
    Shape,
    compare,
    initial_parameters,
    local_step_fn,
    make_batches,
    reference_training,
    reference_uneven,
)

suite = Suite(
    "ddp_rpc",
    feature="DDP + RPC hybrid parallelism",
    status="beta",
    summary="RemoteModule embedding + DDP dense model + dist autograd + DistributedOptimizer "
            "equals a single-process reference; step time and where it goes",
    spans_hosts=True,
)

# the versions of checks that changed since the first (harness.cases.CheckVersion)
HYBRID_CHECK = CheckVersion(
    2, "torch raising in a process of the hybrid fails the check that it runs to the end, "
    "instead of erroring the case")

# Relative tolerance, max-norm per tensor, float32 runs against a float64 reference. Measured
# differences here are about 1e-7..2e-6 after 20 steps; a lost allreduce or a lost gradient
# is off by 1e-2 or more.
TOLERANCE = 1e-5
LAUNCH_TIMEOUT_S = 180.0
GRACE_S = 15.0  # survivors of a dead peer get this long to fail on their own
LABEL = "ddp_rpc worker"
# The benchmark's model: large enough that compute is not lost in the noise of the RPC.
BENCH_SHAPE = Shape(num_embeddings=10_000, embedding_dim=32, dense_in=32, hidden=128,
                    batch=128, max_bag=8)
# Faults: the victim dies at this step; short RPC/Gloo timeouts make survivors fail fast.
FAULT_STEP = 5
FAULT_RPC_TIMEOUT_S = 10.0
FAULT_PG_TIMEOUT_S = 20.0
FAULT_LAUNCH_TIMEOUT_S = 120.0
# Uneven inputs: a trainer left waiting in DDP's all-reduce by a peer that stopped (join
# broken) fails after this (the trainers' group; the default group keeps its 60 s, which the
# parameter server waits in while the trainers train)
UNEVEN_DDP_TIMEOUT_S = 20.0

def run_hybrid(ctx: Context, spec: workers.Spec, timeout_s: float = LAUNCH_TIMEOUT_S,
               started: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """The three processes, through the case's launcher; results by rank (`started` gets
    their pids)."""
    return ctx.launch(workers.hybrid_worker, WORLD_SIZE, (spec,), timeout_s=timeout_s,
                      grace_s=GRACE_S, label=LABEL, started=started)


def hybrid_finishes(ctx: Context, spec: workers.Spec) -> list[dict[str, Any]] | None:
    """The hybrid's results; None when torch raised in one of its processes, which fails the
    check that it runs to the end, with the error and where torch raised it."""
    with ctx.exercising("trainers and parameter server run the hybrid to the end without an "
                        "error"):
        return run_hybrid(ctx, spec)
    return None


def new_spec(task: str, mode: str, device: str, batches: list, shape: Shape,
             **kw: Any) -> workers.Spec:
    """A run of the hybrid with the suite's optimizer and seeded initial parameters."""
    return workers.Spec(task=task, mode=mode, device=device, shape=shape, optim=Optim(),
                        init=initial_parameters(shape), batches=batches,
                        threads=threads_per_process(), **kw)


def threads_per_process() -> int:
    """The usable cores shared by the three processes, at least one thread each."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // WORLD_SIZE)


def _fmt(abs_diff: float, rel_diff: float) -> str:
    return f"max abs diff {abs_diff:.3g}, rel {rel_diff:.3g} (tolerance {TOLERANCE:g} rel)"


# `steps`: lock-step training steps before the comparison
@suite.conformance(params={"quick": [{"ddp": m} for m in MODES],
                           "full": [{"ddp": m} for m in MODES]},
                   needs=("distributed",),
                   settings={"quick": {"steps": 20}, "full": {"steps": 40}}, check=HYBRID_CHECK)
def matches_reference(ctx: Context) -> None:
    """Every parameter and loss after N lock-step steps equals a single-process reference."""
    mode = ctx.params["ddp"]
    steps = ctx.settings["steps"]
    shape = Shape()
    batches = make_batches(shape, steps)
    spec = new_spec("train", mode, ctx.device, batches, shape)
    if (res := hybrid_finishes(ctx, spec)) is None:
        return
    ref = reference_training(shape, spec.init, batches, mode, spec.optim)

    rows = []
    emb_abs, emb_rel = compare(res[PS_RANK]["embedding"], ref.embedding)
    rows.append({"parameter": "embedding.weight", "where": "ps", "abs_diff": emb_abs,
                 "rel_diff": emb_rel})
    ctx.check("embedding matches reference", emb_rel <= TOLERANCE, _fmt(emb_abs, emb_rel))
    worst = [(emb_abs, emb_rel)]
    for t, rank in enumerate(TRAINER_RANKS):
        diffs = {name: compare(value, ref.dense[t][name])
                 for name, value in res[rank]["dense"].items()}
        rows += [{"parameter": name, "where": f"trainer{rank}", "abs_diff": a, "rel_diff": r}
                 for name, (a, r) in diffs.items()]
        a, r = max(d[0] for d in diffs.values()), max(d[1] for d in diffs.values())
        worst.append((a, r))
        ctx.check(f"trainer {rank} dense parameters match reference", r <= TOLERANCE, _fmt(a, r))
        la, lr = compare(torch.tensor(res[rank]["losses"]), torch.tensor(ref.losses[t]))
        ctx.check(f"trainer {rank} losses match reference", lr <= TOLERANCE, _fmt(la, lr))
    if mode != "none":  # DDP keeps the replicas equal; without it they differ by design
        a, b = (res[r]["dense"] for r in TRAINER_RANKS)
        gap = max((a[k] - b[k]).abs().max().item() for k in a)
        ctx.check("trainer replicas identical", all(torch.equal(a[k], b[k]) for k in a),
                  f"largest difference between the two trainers' parameters {gap:.3g}")
    max_abs, max_rel = max(w[0] for w in worst), max(w[1] for w in worst)
    ctx.metric("max_abs_diff", max_abs, "abs", kind="error", better="lower")
    ctx.metric("max_rel_diff", max_rel, "rel", kind="error", better="lower")
    ctx.metric("steps", steps, "steps", kind="count")
    # How far off a reference with one optimizer for both trainers' embedding steps would
    # be: evidence that the comparison resolves DistributedOptimizer's per-trainer state.
    shared = reference_training(shape, spec.init, batches, mode, spec.optim,
                                shared_embedding_optimizer=True)
    shared_rel = compare(res[PS_RANK]["embedding"], shared.embedding)[1]
    ctx.details["shared_optimizer_reference_rel_diff"] = shared_rel
    ctx.table("parameters", rows)
    ctx.table("reference", [{"ddp": mode, "device": ctx.device, "steps": steps,
                             "max_abs_diff": max_abs, "max_rel_diff": max_rel,
                             "tolerance": TOLERANCE,
                             "shared_optimizer_ref_rel_diff": shared_rel}], show=True)
    ctx.note("reference: float64, one process; DDP modes keep one dense replica stepped with "
             "the trainers' mean gradient; the embedding is stepped by two SGD instances "
             "(one per trainer's DistributedOptimizer), trainer 1 then trainer 2, both "
             "gradients taken at the step's starting weights")


@suite.conformance(params={"quick": [{"ddp": "outside"}, {"ddp": "inside"}],
                           "full": [{"ddp": "outside"}, {"ddp": "inside"}]},
                   devices=("cpu",), needs=("distributed",), check=HYBRID_CHECK)
def mirrored_pairs(ctx: Context) -> None:
    """Pairs with opposite targets make DDP's dense gradients exactly zero, not the
    embedding's."""
    mode = ctx.params["ddp"]
    shape = Shape()
    batches = [[b[0], b[0].mirrored()] for b in make_batches(shape, 3)]
    spec = new_spec("grads", mode, ctx.device, batches, shape, loss="signed")
    if (res := hybrid_finishes(ctx, spec)) is None:
        return
    dense_max, zero, emb_nonzero, opposite = 0.0, True, True, True
    for step in range(len(batches)):
        per_trainer = [res[r]["steps"][step]["dist"] for r in TRAINER_RANKS]
        for grads in per_trainer:
            for name, g in grads.items():
                if name == "embedding":
                    emb_nonzero &= g is not None and bool(g.abs().max() > 0)
                    continue
                zero &= g is not None and not bool(g.count_nonzero())
                if g is not None:
                    dense_max = max(dense_max, g.abs().max().item())
        g1, g2 = (g["embedding"] for g in per_trainer)
        opposite &= g1 is not None and g2 is not None and torch.equal(g2, -g1)
    ctx.check("DDP gradients exactly zero", zero, f"largest |dense grad| {dense_max:.3g}")
    ctx.check("embedding gradients non-zero", emb_nonzero)
    ctx.check("trainers' embedding gradients exact opposites", opposite)
    ctx.metric("max_abs_ddp_grad", dense_max, "abs", kind="error", better="lower")


@suite.conformance(params={"quick": [{"ddp": "inside"}],
                           "full": [{"ddp": "none"}, {"ddp": "inside"}]},
                   devices=("cpu",), needs=("distributed",), check=HYBRID_CHECK)
def dist_grads_equal_local(ctx: Context) -> None:
    """dist_autograd.get_gradients equals local autograd gradients of an identical module."""
    mode = ctx.params["ddp"]
    shape = Shape()
    batches = make_batches(shape, 3)
    spec = new_spec("grads", mode, ctx.device, batches, shape, local_check=True)
    if (res := hybrid_finishes(ctx, spec)) is None:
        return
    worst = 0.0
    for rank in TRAINER_RANKS:
        for part in ("dense", "embedding"):
            diffs, missing = [], 0
            for step in res[rank]["steps"]:
                for name, want in step["local"].items():
                    if (name == "embedding") != (part == "embedding"):
                        continue
                    got = step["dist"][name]
                    if got is None:
                        missing += 1
                        continue
                    diffs.append(compare(got, want)[1])
            rel = max(diffs, default=float("inf"))
            worst = max(worst, rel)
            ctx.check(f"trainer {rank} {part} gradients equal local autograd",
                      not missing and rel <= TOLERANCE,
                      f"{missing} gradients missing" if missing else
                      f"max rel diff {rel:.3g} (tolerance {TOLERANCE:g})")
    ctx.metric("max_rel_grad_diff", worst, "rel", kind="error", better="lower")


# `steps`: trainer 1's steps; trainer 2 takes `short_steps` of them, then joins
@suite.conformance(params={"quick": [{"ddp": "inside"}],
                           "full": [{"ddp": "outside"}, {"ddp": "inside"}]},
                   devices=("cpu",), needs=("distributed",),
                   settings={"quick": {"steps": 6, "short_steps": 3},
                             "full": {"steps": 12, "short_steps": 4}})
def uneven_inputs(ctx: Context) -> None:
    """Under DDP's join(), a trainer that runs out of inputs first leaves the other's
    training equal to the documented reference, and the replicas equal at the end."""
    mode = ctx.params["ddp"]
    steps, short = ctx.settings["steps"], ctx.settings["short_steps"]
    if not 0 < short < steps:
        raise ValueError(f"short_steps {short} must lie between 0 and steps {steps}")
    shape = Shape()
    batches = make_batches(shape, steps)
    spec = new_spec("uneven", mode, ctx.device, batches, shape, short_steps=short,
                    trainers_timeout_s=UNEVEN_DDP_TIMEOUT_S)
    if (res := hybrid_finishes(ctx, spec)) is None:
        return
    ref = reference_uneven(shape, spec.init, batches, short, spec.optim)
    first, last = TRAINER_RANKS[0], TRAINER_RANKS[-1]
    diffs = {k: compare(v, ref.dense[0][k]) for k, v in res[first]["dense"].items()}
    a, r = max(d[0] for d in diffs.values()), max(d[1] for d in diffs.values())
    ctx.check(f"trainer {first} dense parameters match the joined reference", r <= TOLERANCE,
              _fmt(a, r))
    for t, rank in enumerate(TRAINER_RANKS):
        got, want = res[rank]["losses"], ref.losses[t]
        la, lr = (compare(torch.tensor(got), torch.tensor(want)) if len(got) == len(want)
                  else (float("inf"), float("inf")))
        ctx.check(f"trainer {rank} losses match the joined reference", lr <= TOLERANCE,
                  f"{len(got)} steps, reference {len(want)}; " + _fmt(la, lr))
    # join's last step: the trainer that joined first takes the last one's parameters
    x, y = res[first]["dense"], res[last]["dense"]
    gap = max((x[k] - y[k]).abs().max().item() for k in x)
    ctx.check("trainer replicas identical after join", all(torch.equal(x[k], y[k]) for k in x),
              f"largest difference between the two trainers' parameters {gap:.3g}")
    ctx.metric("max_rel_diff", r, "rel", kind="error", better="lower")
    # the reference dividing by the ranks still training instead: how far it lies from this
    # run shows that the comparison tells the two divisions apart
    other = reference_uneven(shape, spec.init, batches, short, spec.optim,
                             divide_by_initial_world_size=False)
    other_rel = max(compare(v, other.dense[0][k])[1] for k, v in res[first]["dense"].items())
    ctx.details["divide_by_ranks_training_ref_rel_diff"] = other_rel
    ctx.table("uneven", [{"ddp": mode, "steps": steps, "short_steps": short,
                          "max_abs_diff": a, "max_rel_diff": r, "tolerance": TOLERANCE,
                          "divide_by_ranks_training_ref_rel_diff": other_rel}], show=True)


@suite.workload(params={"quick": [{"batch": BENCH_SHAPE.batch}],
                        "full": [{"batch": b} for b in (32, 128, 512)]})
def local_step(device: str, batch: int = BENCH_SHAPE.batch) -> Callable[[], None]:
    """The hybrid's training step in one process (no RPC, no DDP): the floor `step_time`
    compares the distributed step with."""
    shape = replace(BENCH_SHAPE, batch=batch)
    return local_step_fn(shape, initial_parameters(shape), [b[0] for b in make_batches(shape, 8)],
                         Optim(), device)


@suite.conformance(params={"quick": [{"victim": "trainer"}, {"victim": "ps"}],
                           "full": [{"victim": "trainer"}, {"victim": "ps"}]},
                   devices=("cpu",), needs=("distributed", "one_host"))
def faults(ctx: Context) -> None:
    """A trainer or the parameter server dying mid-training ends the case with a clear error,
    no hang, every process reaped."""
    victim = PS_RANK if ctx.params["victim"] == "ps" else TRAINER_RANKS[0]
    shape = Shape()
    batches = make_batches(shape, 2 * FAULT_STEP)
    with tempfile.TemporaryDirectory(prefix="ddp-rpc-fault-") as tmp:
        death = Path(tmp, "death")
        spec = new_spec("train", "inside", ctx.device, batches, shape,
                        kill=(victim, FAULT_STEP), death_file=str(death),
                        rpc_timeout_s=FAULT_RPC_TIMEOUT_S, pg_timeout_s=FAULT_PG_TIMEOUT_S)
        t0 = time.perf_counter()
        error: launch.LaunchError | None = None
        pids: dict[int, int] = {}
        try:
            run_hybrid(ctx, spec, timeout_s=FAULT_LAUNCH_TIMEOUT_S, started=pids)
        except launch.LaunchError as e:
            error = e
        elapsed = time.perf_counter() - t0
        ended = time.time()
        after_death = ended - float(death.read_text()) if death.exists() else None
        # the victim writes this file just before it kills itself: without it, the run
        # failed before the fault, and the checks of its handling fail on that crash
        crashed_first = error is not None and after_death is None
    alive = launch.still_running(pids.values())
    left = sorted(r for r, pid in pids.items() if pid in alive)
    ctx.details["pids"] = pids
    message = str(error) if error else "finished without an error"
    # The launcher's one line names the first failure it collected; a peer that raised at
    # once can be collected beside the victim, so look for the death among all failures.
    died = [f for f in (error.failures if error else []) if f.rank == victim]
    ctx.check("error reports the dead rank killed",
              bool(died) and died[0].message.startswith("was killed by signal SIGKILL"),
              message[:300], raised=crashed_first)
    outcomes = {f.rank: f.kind for f in error.failures} if error else {}
    survivors = {r: outcomes.get(r, "finished") for r in range(WORLD_SIZE) if r != victim}
    ctx.check("survivors failed on their own", all(k == "exception" for k in survivors.values()),
              ", ".join(f"rank {r}: {k}" for r, k in survivors.items()), raised=crashed_first)
    ctx.check("no hang", elapsed < FAULT_LAUNCH_TIMEOUT_S,
              f"ended after {elapsed:.1f} s (launcher timeout {FAULT_LAUNCH_TIMEOUT_S:g} s)")
    ctx.check("every process reaped", len(pids) == WORLD_SIZE and not left,
              f"{len(pids)} pids recorded, still alive: ranks {left}")
    # From the victim's death to launch() returning: survivors noticing, failing, being reaped.
    ctx.metric("error_after_death", after_death, "s", kind="latency", better="lower")
    ctx.table("fault", [{"victim": f"rank {victim} ({ctx.params['victim']})", "step": FAULT_STEP,
                         "error": message[:120], "error_after_death_s": after_death,
                         **{f"rank{r}": k for r, k in survivors.items()}}], show=True)
    if error:
        ctx.details["workers"] = [
            {"rank": f.rank, "kind": f.kind, "message": f.message[:300]} for f in error.failures]


# The measurement: `launches` fresh sets of the three processes, one after another, each
# timing `rounds` blocks of `steps_per_round` hybrid steps (and as many local steps,
# alternating); a figure pools the launches and keeps each one's median as a session. The
# step's level is drawn per launch: three quick runs of one commit here gave 3.9, 4.3 and
# 8.6 ms, and an A/A's rounds 4.6-9.0 ms, while the steps of one launch agree to about 20%.
# (RPC sessions re-joined inside one set of processes, as rpc/round_trip does, cannot carry
# the RRefs the hybrid needs: torch's RRef context stays bound to the first RPC agent.)
@suite.benchmark(params={"quick": [{"ddp": "inside"}], "full": [{"ddp": m} for m in MODES]},
                 needs=("distributed",), duet=True, bursts=True,
                 tracks=[TrackView(
                     "HybridStep", "Seconds per hybrid step and per phase on trainer 1, and the "
                     "step's overhead over the local step, from the suite's step_time case.",
                     unit="s",
                     tracks=[Track("step", "step_time"), Track("forward", "forward_time"),
                             Track("backward", "backward_time"),
                             Track("optimizer", "optimizer_time"), "rpc_embedding_forward",
                             "allreduce_dense_grads",
                             Track("overhead_vs_local", unit="x",
                                   doc="Hybrid step time over the equivalent local step, "
                                       "timed interleaved in the trainers.")])],
                 settings={"quick": {"launches": 6, "rounds": 2, "steps_per_round": 10},
                           "full": {"launches": 10, "rounds": 3, "steps_per_round": 25}})
def step_time(ctx: Context) -> None:
    """Hybrid step time and its phases, beside an equivalent local step, a bare RPC and a
    bare allreduce."""
    mode = ctx.params["ddp"]
    batches = make_batches(BENCH_SHAPE, 8)
    plan = ctx.settings
    spec = new_spec("measure", mode, ctx.device, batches, BENCH_SHAPE, rounds=plan["rounds"],
                    steps_per_round=plan["steps_per_round"], turns=ctx.turns)
    launches = [run_hybrid(ctx, spec) for _ in range(plan["launches"])]
    per_trainer, per_launch = {}, {}
    for rank in TRAINER_RANKS:
        samples = [{**res[rank]["phases"], "rpc_embedding_forward": res[rank]["rpc_forward"],
                    "allreduce_dense_grads": res[rank]["allreduce"]} for res in launches]
        per_trainer[rank] = {name: timing.Timing.from_samples(
            [x for s in samples for x in s[name]], name) for name in samples[0]}
        per_launch[rank] = {name: [float(np.median(s[name])) for s in samples]
                            for name in samples[0]}
    main = per_trainer[TRAINER_RANKS[0]]  # trainer 1 (DDP group rank 0) is reported
    sessions = per_launch[TRAINER_RANKS[0]]
    step = main["step"].median
    for name, unit_kind in (("step", "time"), ("forward", "time"), ("backward", "time"),
                            ("optimizer", "time"), ("local_step", "time"),
                            ("rpc_embedding_forward", "latency"),
                            ("allreduce_dense_grads", "latency")):
        t = main[name]
        ctx.metric(f"{name}_time" if unit_kind == "time" else name, t.median, "s",
                   kind=unit_kind, better="lower", samples=t, sessions=sessions[name])
    ctx.ratio("overhead_vs_local", main["step"], main["local_step"], better="lower",
              sessions=[s / x for s, x in zip(sessions["step"], sessions["local_step"],
                                              strict=True)])
    rows = []
    for name in ("forward", "backward", "optimizer", "step", "local_step",
                 "rpc_embedding_forward", "allreduce_dense_grads"):
        row: dict[str, Any] = {"phase": name}
        for rank, ts in per_trainer.items():
            row[f"trainer{rank}_ms"] = ts[name].median * 1e3
            row[f"trainer{rank}_iqr_ms"] = ts[name].iqr * 1e3
        row["share_of_step"] = main[name].median / step if name in (
            "forward", "backward", "optimizer", "rpc_embedding_forward",
            "allreduce_dense_grads") else None
        rows.append(row)
    ctx.table("step_breakdown", rows, show=True)
    ctx.details.update(shape=asdict(BENCH_SHAPE),
                       dense_grad_bytes=launches[0][1]["dense_grad_bytes"],
                       launches=len(launches), steps_per_round=spec.steps_per_round,
                       rounds=spec.rounds, threads_per_process=spec.threads)
    ctx.note("forward includes the embedding RPC; backward includes the DDP allreduce and the "
             "RPC carrying the embedding gradient; optimizer includes the RPC to the parameter "
             "server's optimizer. rpc_embedding_forward and allreduce_dense_grads are the bare "
             f"transfers, timed alone after the steps. Each figure pools {len(launches)} fresh "
             "launches of the three processes (the step's level is drawn per launch)")


@suite.conformance(params=clean_exit_programs.PARAMS, devices=("cpu",),
                   needs=("distributed", "one_host"))
def clean_exit(ctx: Context) -> None:
    """A hybrid step, RPC shutdown and destroy_process_group end all three processes cleanly,
    in N fresh sets of processes."""
    clean_exit_programs.check_programs(ctx, {"hybrid_step": ["-m", "suites.ddp_rpc.minimal"]},
                                       world=WORLD_SIZE, timeout_s=LAUNCH_TIMEOUT_S)
