"""What each process of the hybrid runs; started by `harness.running.launch.launch` (module-level
functions, since spawn pickles them by name).

Every process joins two rendezvous: a Gloo process group over all three ranks (env://, the
launcher's MASTER_PORT; the trainers' DDP group is `new_group` of ranks 1 and 2, and the
default group gives the start and end barriers), and TensorPipe RPC (tcp:// on a second port
the parent chose). Errors are never caught here: a worker that fails raises, and the
launcher turns that into the case's error. RPC and Gloo timeouts are short so that
survivors of a dead peer fail on their own instead of waiting for the launcher.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import autograd as dist_autograd
from torch.distributed import rpc
from torch.distributed.nn import RemoteModule
from torch.distributed.optim import DistributedOptimizer
from torch.nn.parallel import DistributedDataParallel

from harness.running import rpc_group
from harness.running.timing import synchronize
from harness.running.turns import Turns
from suites.ddp_rpc.model import (
    LOSSES,
    PS_RANK,
    TRAINER_RANKS,
    Batch,
    HybridModel,
    Init,
    Optim,
    Shape,
    local_step_fn,
    new_dense,
    new_embedding,
    worker_name,
)

# The parameter server's embedding, kept alive for the trainers' RRefs to point at.
_PS: dict[str, Any] = {}


@dataclass
class Spec:
    """Everything one hybrid run needs; pickled to every process."""

    task: str  # "train" | "grads" | "measure" | "uneven"
    mode: str  # "none" | "outside" | "inside"
    device: str  # the trainers' device; the parameter server is always on CPU
    shape: Shape
    optim: Optim
    init: Init
    batches: list[list[Batch]]  # batches[step][trainer index]
    threads: int = 1  # intra-op threads per process (as torchrun's OMP_NUM_THREADS=1)
    loss: str = "mse"
    rpc_timeout_s: float = 30.0
    pg_timeout_s: float = 60.0
    trainers_timeout_s: float | None = None  # the trainers' DDP group's (default pg_timeout_s)
    local_check: bool = False  # task "grads": also local-autograd gradients to compare
    kill: tuple[int, int] | None = None  # (rank, step): that rank SIGKILLs itself there
    death_file: str | None = None  # the killed rank writes the time of its death here
    steps_per_round: int = 20  # task "measure": timed steps per round
    rounds: int = 3
    # task "measure" as a side of a round in bursts (harness.running.turns): trainer 1 takes a
    # turn around each round of steps and around the bare transfers, the other trainer held
    # at barriers inside it
    turns: Turns | None = None
    warmup: int = 3
    short_steps: int = 0  # task "uneven": the last trainer's steps (the others take them all)


def hybrid_worker(rank: int, world: int, spec: Spec) -> dict[str, Any]:
    """One process of the hybrid: the parameter server (rank 0) or a trainer."""
    # Three processes share the cores: more threads each would only oversubscribe them.
    torch.set_num_threads(spec.threads)
    timeout = timedelta(seconds=spec.pg_timeout_s)
    # the process group and RPC share the launcher's store (on MASTER_ADDR only); leaving the
    # block normally is a graceful RPC shutdown, which waits for every peer's outstanding RPCs
    options = rpc.TensorPipeRpcBackendOptions(init_method=rpc_group.rendezvous_url(),
                                              rpc_timeout=spec.rpc_timeout_s)
    with rpc_group.joined(rank, world, worker_name(rank), options, gloo_timeout=timeout):
        trainers = dist.new_group(  # every rank calls it
            list(TRAINER_RANKS), timeout=timedelta(seconds=spec.trainers_timeout_s or
                                                   spec.pg_timeout_s))
        if rank == PS_RANK:
            _start_parameter_server(spec)
            dist.barrier()  # the embedding exists before any trainer asks for it
            dist.barrier()  # the trainers are done
            result: dict[str, Any] = {"embedding": _PS["embedding"].weight.detach().clone()}
        else:
            dist.barrier()
            result = TASKS[spec.task](rank, spec, trainers)
            dist.barrier()
    return result


def _start_parameter_server(spec: Spec) -> None:
    emb = new_embedding(spec.shape, spec.init.embedding)
    if spec.kill is not None and spec.kill[0] == PS_RANK:
        # Die while serving the lookups of the given step (two trainers, one lookup each).
        # RemoteModule calls `module.forward` directly (hooks do not run), so wrap that.
        die_at = len(TRAINER_RANKS) * spec.kill[1] + 1
        calls = [0]
        serve = emb.forward

        def forward_or_die(*args: Any, **kwargs: Any) -> torch.Tensor:
            calls[0] += 1
            if calls[0] == die_at:
                die(spec)
            return serve(*args, **kwargs)

        emb.forward = forward_or_die
    _PS["embedding"] = emb


# Run on the parameter server by RPC.
def embedding_rref() -> rpc.RRef:
    return rpc.RRef(_PS["embedding"])


def embedding_weight() -> torch.Tensor:
    return _PS["embedding"].weight.detach().clone()


def embedding_grad(context_id: int) -> torch.Tensor | None:
    """The embedding's gradient in one trainer's distributed-autograd context."""
    return dist_autograd.get_gradients(context_id).get(_PS["embedding"].weight)


def trainer_device(device: str, rank: int, gpus: int | None = None) -> torch.device:
    """The device of trainer `rank` when the trainers run on `device`: on CUDA they take the
    `gpus` GPUs in turn (default: all this machine has), the first trainer GPU 0."""
    if device == "cuda":
        gpus = torch.cuda.device_count() if gpus is None else gpus
        if gpus < 1:
            raise ValueError(f"trainers on cuda need a GPU; {gpus} visible")
        return torch.device("cuda", (rank - TRAINER_RANKS[0]) % gpus)  # gpu-only: trainers' GPUs
    return torch.device("cpu")


@dataclass
class Trainer:
    model: torch.nn.Module  # what the forward pass calls
    dense: torch.nn.Module  # the plain dense model (its parameters)
    remote: RemoteModule
    optimizer: DistributedOptimizer
    device: torch.device


def build_trainer(rank: int, spec: Spec, group: dist.ProcessGroup) -> Trainer:
    device = trainer_device(spec.device, rank)
    remote = RemoteModule.init_from_module_rref(f"{worker_name(PS_RANK)}/cpu",
                                                rpc.rpc_sync(worker_name(PS_RANK), embedding_rref))
    dense = new_dense(spec.shape, spec.init.dense).to(device)
    # device_ids=None: DDP leaves the inputs where they are (the bag indices must stay on
    # CPU, they go to the parameter server); HybridModel moves what the dense part needs.
    inner = DistributedDataParallel(dense, process_group=group) if spec.mode == "inside" else dense
    model: torch.nn.Module = HybridModel(remote, inner, device)
    if spec.mode == "outside":
        model = DistributedDataParallel(model, process_group=group)
    params = remote.remote_parameters() + [rpc.RRef(p) for p in dense.parameters()]
    optimizer = DistributedOptimizer(torch.optim.SGD, params, **spec.optim.kwargs())
    return Trainer(model, dense, remote, optimizer, device)


def die(spec: Spec) -> None:
    """SIGKILL this process (no handler, no cleanup), noting when, for the case's timing."""
    if spec.death_file:
        Path(spec.death_file).write_text(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)


def _maybe_die(spec: Spec, rank: int, step: int) -> None:
    if spec.kill is not None and spec.kill == (rank, step):
        die(spec)


def optimizer_step(tr: Trainer, context_id: int, rank: int, group: dist.ProcessGroup) -> None:
    """Step in lock-step: after both trainers' backwards, trainer 1 steps, then trainer 2
    (the order the reference applies the embedding's two optimizers in)."""
    for r in TRAINER_RANKS:
        dist.barrier(group=group)
        if r == rank:
            tr.optimizer.step(context_id)
    dist.barrier(group=group)


def train_step(tr: Trainer, b: Batch, rank: int, step: int, spec: Spec,
               group: dist.ProcessGroup) -> float:
    with dist_autograd.context() as context_id:
        loss = LOSSES[spec.loss](tr.model(b.indices, b.offsets, b.dense), b.target)
        _maybe_die(spec, rank, step)
        dist_autograd.backward(context_id, [loss])
        optimizer_step(tr, context_id, rank, group)
    return loss.item()


def _trainer_index(rank: int) -> int:
    return TRAINER_RANKS.index(rank)


def _dense_state(tr: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in tr.dense.state_dict().items()}


def train_task(rank: int, spec: Spec, group: dist.ProcessGroup) -> dict[str, Any]:
    """Train on this trainer's share of the fixed batches; return parameters and losses."""
    tr = build_trainer(rank, spec, group)
    t = _trainer_index(rank)
    losses = [train_step(tr, step_batches[t], rank, step, spec, group)
              for step, step_batches in enumerate(spec.batches)]
    return {"dense": _dense_state(tr), "losses": losses}


def grads_task(rank: int, spec: Spec, group: dist.ProcessGroup) -> dict[str, Any]:
    """Per step: gradients from `dist_autograd.get_gradients` (dense, and the embedding's
    from the parameter server), then a lock-step optimizer step. With `spec.local_check`,
    also local-autograd gradients of an identical local module first: a local EmbeddingBag
    holding the server's current weights, in front of the same dense module (DDP-wrapped
    in mode "inside", so its allreduce pairs up across trainers as in the distributed pass).
    """
    if spec.local_check and spec.mode == "outside":
        raise ValueError("the local comparison needs the dense module outside any wrapper")
    tr = build_trainer(rank, spec, group)
    t = _trainer_index(rank)
    dense_params = dict(tr.dense.named_parameters())
    steps = []
    for step_batches in spec.batches:
        b = step_batches[t]
        record: dict[str, Any] = {}
        if spec.local_check:
            local_emb = new_embedding(spec.shape, rpc.rpc_sync(worker_name(PS_RANK),
                                                               embedding_weight))
            tr.dense.zero_grad(set_to_none=True)
            local_model = HybridModel(local_emb, tr.model.dense, tr.device)
            LOSSES[spec.loss](local_model(b.indices, b.offsets, b.dense), b.target).backward()
            record["local"] = {"embedding": local_emb.weight.grad.clone(),
                               **{k: _cpu(p.grad) for k, p in dense_params.items()}}
        with dist_autograd.context() as context_id:
            loss = LOSSES[spec.loss](tr.model(b.indices, b.offsets, b.dense), b.target)
            dist_autograd.backward(context_id, [loss])
            got = dist_autograd.get_gradients(context_id)
            remote_grad = rpc.rpc_sync(worker_name(PS_RANK), embedding_grad, args=(context_id,))
            record["dist"] = {"embedding": remote_grad,
                              **{k: _cpu(got.get(p)) for k, p in dense_params.items()}}
            optimizer_step(tr, context_id, rank, group)
        record["loss"] = loss.item()
        steps.append(record)
    return {"steps": steps}


def uneven_task(rank: int, spec: Spec, group: dist.ProcessGroup) -> dict[str, Any]:
    """Uneven inputs under DDP's join(): the last trainer stops after `spec.short_steps`
    steps, the others go on, and their DDP all-reduces still complete (DDP.join's docstring).
    Each trainer steps only its dense model, right after its backward: no lock-step barrier,
    which a joined trainer could not meet, and so no embedding step whose order between the
    trainers would vary from run to run."""
    tr = build_trainer(rank, spec, group)  # its optimizer (embedding included) stays unused
    ddp = tr.model if spec.mode == "outside" else tr.model.dense
    if not isinstance(ddp, DistributedDataParallel):
        raise ValueError(f"uneven inputs need a DDP model (mode {spec.mode!r})")
    optimizer = DistributedOptimizer(torch.optim.SGD, [rpc.RRef(p) for p in tr.dense.parameters()],
                                     **spec.optim.kwargs())
    t = _trainer_index(rank)
    steps = len(spec.batches) if rank != TRAINER_RANKS[-1] else spec.short_steps
    losses = []
    with ddp.join():
        for step_batches in spec.batches[:steps]:
            b = step_batches[t]
            with dist_autograd.context() as context_id:
                loss = LOSSES[spec.loss](tr.model(b.indices, b.offsets, b.dense), b.target)
                dist_autograd.backward(context_id, [loss])
                optimizer.step(context_id)
            losses.append(loss.item())
    return {"dense": _dense_state(tr), "losses": losses}


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().cpu().clone()


def measure_task(rank: int, spec: Spec, group: dist.ProcessGroup) -> dict[str, Any]:
    """Seconds per phase of each hybrid step, of an equivalent local step, of a bare
    embedding RPC and of a bare allreduce of the dense gradients' size.

    Both trainers run the same fixed number of every operation, in the same order, so their
    collectives pair up (adaptive repeat counts could differ between processes and hang).
    Hybrid and local blocks alternate, `rounds` times, so that noise hits both alike.
    """
    tr = build_trainer(rank, spec, group)
    dev = tr.device
    batches = [sb[_trainer_index(rank)] for sb in spec.batches]
    local = local_step_fn(spec.shape, spec.init, batches, spec.optim, dev, spec.loss)
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [],
                                      "step": [], "local_step": []}
    for i in range(spec.warmup):
        _timed_hybrid_step(tr, spec, batches[i % len(batches)])
        _timed(local, dev)
    # both trainers meet at a barrier before and after each block, so that in a turn neither
    # runs outside it
    turn = (spec.turns.turn if spec.turns is not None and rank == TRAINER_RANKS[0]
            else contextlib.nullcontext)
    n = 0
    for _ in range(spec.rounds):
        with turn():
            dist.barrier(group=group)
            for _ in range(spec.steps_per_round):
                for name, v in _timed_hybrid_step(tr, spec, batches[n % len(batches)]).items():
                    phases[name].append(v)
                n += 1
            for _ in range(spec.steps_per_round):
                phases["local_step"].append(_timed(local, dev))
            dist.barrier(group=group)

    repeats = spec.rounds * spec.steps_per_round
    b = batches[0]
    flat = torch.zeros(sum(p.numel() for p in tr.dense.parameters()), device=dev)
    with turn():
        dist.barrier(group=group)
        rpc_forward = [_timed(lambda: tr.remote.forward(b.indices, b.offsets), None)
                       for _ in range(repeats)]
        dist.barrier(group=group)
        allreduce = [_timed(lambda: dist.all_reduce(flat, group=group), dev)
                     for _ in range(repeats)]
        dist.barrier(group=group)
    return {"phases": phases, "rpc_forward": rpc_forward, "allreduce": allreduce,
            "dense_grad_bytes": flat.numel() * flat.element_size()}


def _timed(fn: Callable[[], object], device: torch.device | None) -> float:
    """Seconds `fn` takes, the device's queued work included (no wait without a device)."""
    t0 = time.perf_counter()
    fn()
    if device is not None:
        synchronize(device)
    return time.perf_counter() - t0


def _timed_hybrid_step(tr: Trainer, spec: Spec, b: Batch) -> dict[str, float]:
    """One hybrid step in a distributed autograd context; seconds per phase."""
    dev = tr.device
    t0 = time.perf_counter()
    with dist_autograd.context() as context_id:
        loss = LOSSES[spec.loss](tr.model(b.indices, b.offsets, b.dense), b.target)
        synchronize(dev)
        t1 = time.perf_counter()
        dist_autograd.backward(context_id, [loss])
        synchronize(dev)
        t2 = time.perf_counter()
        tr.optimizer.step(context_id)
        synchronize(dev)
        t3 = time.perf_counter()
    return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "step": t3 - t0}


TASKS = {"train": train_task, "grads": grads_task, "measure": measure_task,
         "uneven": uneven_task}
