"""The hybrid model's pieces, its fixed data, and the single-process reference.

Topology (as in the 1.6 release and its tutorial): rank 0 is a parameter server ("ps")
holding an `nn.EmbeddingBag`; ranks 1 and 2 are trainers, each with a dense model. A trainer
looks its bags up through a `RemoteModule` over RPC, feeds the pooled rows and its dense
features to the dense model, and steps everything with a `DistributedOptimizer`.

The reference (`reference_training`) computes the same mathematics in one process, in
float64, with no RPC and no process group:

- DDP: each trainer's dense gradients are the average of both trainers' gradients, so with
  equal initial weights and equal optimizers the two replicas stay identical; the reference
  keeps one dense replica and steps it with the mean of the two trainers' gradients. Without
  DDP each trainer has its own dense model, stepped with its own gradients.
- The shared embedding: each trainer's `DistributedOptimizer` creates its own optimizer on
  the parameter server, with its own momentum buffer, and steps the embedding with that
  trainer's gradient only (it reads that trainer's distributed-autograd context). Both
  trainers computed their gradient at the same embedding (lock-step: both forwards and
  backwards happen before either step), then trainer 1 steps, then trainer 2. The reference
  does exactly that: two SGD instances over one embedding tensor, both gradients taken at
  the step's starting weights, applied in trainer order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

PS_RANK = 0
TRAINER_RANKS = (1, 2)
WORLD_SIZE = 1 + len(TRAINER_RANKS)
MODES = ("none", "outside", "inside")  # no DDP, DDP around the hybrid model, DDP inside it


def worker_name(rank: int) -> str:
    return "ps" if rank == PS_RANK else f"trainer{rank}"


@dataclass(frozen=True)
class Shape:
    """Sizes of the model and of one trainer's batch."""

    num_embeddings: int = 64  # few rows, so that both trainers' bags share rows
    embedding_dim: int = 8
    dense_in: int = 8
    hidden: int = 16
    batch: int = 8
    max_bag: int = 4  # indices per bag: 1..max_bag


@dataclass(frozen=True)
class Optim:
    """SGD with momentum: momentum makes the per-trainer optimizer state on the parameter
    server matter (one shared optimizer would give other results)."""

    lr: float = 0.05
    momentum: float = 0.9

    def kwargs(self) -> dict[str, float]:
        return {"lr": self.lr, "momentum": self.momentum}


@dataclass
class Batch:
    """One trainer's batch: bags of embedding indices, dense features and targets."""

    indices: torch.Tensor  # int64, all bags concatenated
    offsets: torch.Tensor  # int64, where each bag starts
    dense: torch.Tensor  # (batch, dense_in)
    target: torch.Tensor  # (batch, 1)

    def mirrored(self) -> Batch:
        """The same features with opposite targets."""
        return Batch(self.indices, self.offsets, self.dense, -self.target)


class DenseNet(nn.Module):
    """The trainer's local part: features from dense inputs, joined with the pooled rows."""

    def __init__(self, shape: Shape):
        super().__init__()
        self.bottom = nn.Linear(shape.dense_in, shape.hidden)
        self.top = nn.Linear(shape.hidden + shape.embedding_dim, 1)

    def forward(self, dense: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        return self.top(torch.cat((torch.relu(self.bottom(dense)), pooled), dim=1))


class HybridModel(nn.Module):
    """Remote embedding lookup (RPC), then the dense model (possibly DDP-wrapped).

    The RemoteModule is kept out of `_modules`: `RemoteModule` raises on `named_modules()`,
    `parameters()` and friends, which `nn.Module.parameters()` and DDP call on every
    registered child, so registering it would make DDP around this model impossible.
    """

    def __init__(self, embedding: nn.Module, dense: nn.Module, device: torch.device):
        super().__init__()
        self.__dict__["embedding"] = embedding  # not registered: see the class docstring
        self.dense = dense
        self.device = device

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor,
                dense: torch.Tensor) -> torch.Tensor:
        # The lookup runs on the parameter server's CPU; only its result comes here.
        # `.forward`: a RemoteModule made by `init_from_module_rref` is not callable (it
        # skips nn.Module.__init__, so the hook tables `__call__` reads are missing).
        pooled = self.embedding.forward(indices, offsets).to(self.device)
        return self.dense(dense.to(self.device), pooled)


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out, target.to(out.device))


def signed_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Linear in the output, as PyTorch's own test: opposite targets give opposite grads."""
    return (out * target.to(out.device)).sum()


LOSSES = {"mse": mse, "signed": signed_loss}


@dataclass
class Init:
    """Initial parameters, drawn once in the parent and sent to every process."""

    embedding: torch.Tensor
    dense: dict[str, torch.Tensor] = field(default_factory=dict)


def initial_parameters(shape: Shape, seed: int = 0) -> Init:
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(shape.num_embeddings, shape.embedding_dim, generator=gen) * 0.5
    with torch.random.fork_rng():
        torch.manual_seed(seed + 1)
        dense = DenseNet(shape)
    return Init(emb, {k: v.detach().clone() for k, v in dense.state_dict().items()})


def make_batches(shape: Shape, steps: int, seed: int = 1234) -> list[list[Batch]]:
    """batches[step][trainer]: fixed, seeded, different for each trainer and step."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        per_trainer = []
        for _ in TRAINER_RANKS:
            lengths = torch.randint(1, shape.max_bag + 1, (shape.batch,), generator=gen)
            indices = torch.randint(0, shape.num_embeddings, (int(lengths.sum()),), generator=gen)
            offsets = torch.cat((torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]))
            dense = torch.randn(shape.batch, shape.dense_in, generator=gen)
            target = torch.randn(shape.batch, 1, generator=gen)
            per_trainer.append(Batch(indices, offsets, dense, target))
        out.append(per_trainer)
    return out


def new_embedding(shape: Shape, weight: torch.Tensor) -> nn.EmbeddingBag:
    emb = nn.EmbeddingBag(shape.num_embeddings, shape.embedding_dim, mode="sum")
    with torch.no_grad():
        emb.weight.copy_(weight)
    return emb


def new_dense(shape: Shape, state: dict[str, torch.Tensor]) -> DenseNet:
    net = DenseNet(shape)
    net.load_state_dict(state)
    return net


def local_step_fn(shape: Shape, init: Init, batches: list[Batch], optim: Optim,
                  device: str | torch.device, loss: str = "mse") -> Callable[[], None]:
    """One training step of the hybrid's mathematics in one process, no RPC, no DDP: a local
    EmbeddingBag (on CPU, where the parameter server keeps it) and the dense model on
    `device`, one SGD over both. Each call takes the next batch, cyclically."""
    device = torch.device(device)
    model = HybridModel(new_embedding(shape, init.embedding),
                        new_dense(shape, init.dense).to(device), device)
    params = [*model.embedding.parameters(), *model.dense.parameters()]
    opt = torch.optim.SGD(params, **optim.kwargs())
    loss_fn = LOSSES[loss]
    cycle = itertools.cycle(batches)

    def step() -> None:
        b = next(cycle)
        opt.zero_grad(set_to_none=True)
        loss_fn(model(b.indices, b.offsets, b.dense), b.target).backward()
        opt.step()

    return step


@dataclass
class Reference:
    embedding: torch.Tensor
    dense: list[dict[str, torch.Tensor]]  # one per trainer
    losses: list[list[float]]  # losses[trainer_index][step]


def reference_training(shape: Shape, init: Init, batches: list[list[Batch]], mode: str,
                       optim: Optim, loss: str = "mse", shared_embedding_optimizer: bool = False,
                       dtype: torch.dtype = torch.float64) -> Reference:
    """The same training in one process, without RPC or DDP (see the module docstring).

    `shared_embedding_optimizer=True` computes what one optimizer for both trainers would
    give instead, to show that the per-trainer optimizers matter at this tolerance.
    """
    with _one_thread():
        return _reference(shape, init, batches, mode, optim, loss, shared_embedding_optimizer,
                          dtype)


@contextmanager
def _one_thread() -> Iterator[None]:
    """The references' tiny tensors: one thread is fastest, and several spin badly on a busy
    host."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _reference(shape: Shape, init: Init, batches: list[list[Batch]], mode: str, optim: Optim,
               loss: str, shared_embedding_optimizer: bool, dtype: torch.dtype) -> Reference:
    loss_fn = LOSSES[loss]
    n = len(TRAINER_RANKS)
    emb = init.embedding.to(dtype).clone().requires_grad_()
    replicas = 1 if mode != "none" else n
    nets = [new_dense(shape, init.dense).to(dtype) for _ in range(replicas)]
    net_of = [nets[0 if replicas == 1 else t] for t in range(n)]
    dense_opts = [torch.optim.SGD(net.parameters(), **optim.kwargs()) for net in nets]
    emb_opts = [torch.optim.SGD([emb], **optim.kwargs())]
    if not shared_embedding_optimizer:
        emb_opts = [torch.optim.SGD([emb], **optim.kwargs()) for _ in range(n)]
    losses: list[list[float]] = [[] for _ in range(n)]
    for step_batches in batches:
        emb_grads, dense_grads = [], []
        for t, b in enumerate(step_batches):
            pooled = F.embedding_bag(b.indices, emb, b.offsets, mode="sum")
            value = loss_fn(net_of[t](b.dense.to(dtype), pooled), b.target.to(dtype))
            params = list(net_of[t].parameters())
            grads = torch.autograd.grad(value, [emb, *params])
            emb_grads.append(grads[0])
            dense_grads.append(grads[1:])
            losses[t].append(value.item())
        if replicas == 1:  # DDP: the replica is stepped with the trainers' mean gradient
            for i, p in enumerate(nets[0].parameters()):
                p.grad = sum(g[i] for g in dense_grads) / n
            dense_opts[0].step()
        else:
            for net, opt, grads in zip(nets, dense_opts, dense_grads, strict=True):
                for p, g in zip(net.parameters(), grads, strict=True):
                    p.grad = g
                opt.step()
        # Trainer 1's optimizer, then trainer 2's, each with its own gradient (lock-step).
        for t, g in enumerate(emb_grads):
            emb.grad = g
            emb_opts[0 if shared_embedding_optimizer else t].step()
    dense_states = [{k: v.detach().clone() for k, v in net.state_dict().items()}
                    for net in net_of]
    return Reference(emb.detach().clone(), dense_states, losses)


def reference_uneven(shape: Shape, init: Init, batches: list[list[Batch]], short_steps: int,
                     optim: Optim, loss: str = "mse", divide_by_initial_world_size: bool = True,
                     dtype: torch.dtype = torch.float64) -> Reference:
    """Uneven inputs under DDP's join(), in one process: trainer 1 takes every step's batch,
    trainer 2 only the first `short_steps`, then joins. The embedding is not stepped (each
    trainer steps only its dense model, so no order of the two trainers' steps matters).

    A joined rank shadows each all-reduce (DDP.join's docstring) with zeros (DDP's
    `_match_all_reduce_for_bwd_pass`): after trainer 2 joined, a step's gradient is trainer
    1's plus zeros, divided by 2, the world size DDP was launched with
    (`divide_by_initial_world_size=True`, the default), or by 1, the ranks still training
    (False). One dense replica, as under DDP."""
    with _one_thread():
        loss_fn = LOSSES[loss]
        n = len(TRAINER_RANKS)
        emb = init.embedding.to(dtype)
        net = new_dense(shape, init.dense).to(dtype)
        opt = torch.optim.SGD(net.parameters(), **optim.kwargs())
        losses: list[list[float]] = [[] for _ in range(n)]
        for step, step_batches in enumerate(batches):
            active = step_batches if step < short_steps else step_batches[:-1]
            grads = []
            for t, b in enumerate(active):
                pooled = F.embedding_bag(b.indices, emb, b.offsets, mode="sum")
                value = loss_fn(net(b.dense.to(dtype), pooled), b.target.to(dtype))
                grads.append(torch.autograd.grad(value, list(net.parameters())))
                losses[t].append(value.item())
            divisor = n if divide_by_initial_world_size else len(active)
            for i, p in enumerate(net.parameters()):
                p.grad = sum(g[i] for g in grads) / divisor
            opt.step()
        state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        return Reference(emb.clone(), [state] * n, losses)


def compare(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    """(largest absolute difference, that divided by the largest |want|) of one tensor.

    The relative figure is norm-wise (max-norm), not element-wise: elements near zero would
    make an element-wise ratio meaningless.
    """
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    abs_diff = (got - want).abs().max().item()
    scale = want.abs().max().item()
    return abs_diff, abs_diff / scale if scale > 0 else abs_diff
