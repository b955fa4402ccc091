"""Deliberate breakages of the DDP+RPC hybrid, run inside the launcher's workers as
`worker_setup=` hooks by suites/ddp_rpc/test_breaks.py (module-level functions, since spawn
pickles them by name: test_breaks.py puts this folder on the path, which spawned workers
inherit). Kept apart from the tests so that workers import only torch, not pytest and the
harness runner, and out of the installed package.
"""

from __future__ import annotations

import os
import time

import torch


def _local_grads_only(state, bucket):  # unannotated: DDP rejects string annotations here
    """A DDP communication hook that skips the allreduce: each trainer keeps its own grads."""
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def ddp_allreduce_disabled() -> None:
    """Every DDP model built in this worker stops synchronising gradients."""
    from torch.nn.parallel import DistributedDataParallel

    init = DistributedDataParallel.__init__

    def init_without_sync(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register_comm_hook(None, _local_grads_only)

    DistributedDataParallel.__init__ = init_without_sync


def remote_output_detached() -> None:
    """RemoteModule results come back cut off from distributed autograd: the embedding on
    the parameter server never receives a gradient."""
    from torch.distributed.nn import RemoteModule

    make = RemoteModule.init_from_module_rref

    def make_detached(*args, **kwargs):
        module = make(*args, **kwargs)
        forward = module.forward
        module.forward = lambda *a, **k: forward(*a, **k).detach()
        return module

    RemoteModule.init_from_module_rref = staticmethod(make_detached)


def dist_backward_seed_doubled() -> None:
    """Distributed backward starts from twice the loss gradient (a wrong root gradient)."""
    from torch.distributed import autograd

    backward = autograd.backward
    autograd.backward = lambda ctx, roots, retain_graph=False: backward(
        ctx, [2 * r for r in roots], retain_graph)


def kill_ignored() -> None:
    """The fault injection's SIGKILL does nothing: nobody dies."""
    os.kill = lambda pid, sig: None


def victim_hangs() -> None:
    """The victim hangs where it should have died."""
    os.kill = lambda pid, sig: time.sleep(3600)


def survivors_swallow_errors() -> None:
    """Trainers catch the error a dead peer causes and wait forever instead of failing."""
    from suites.ddp_rpc import workers

    step = workers.train_step

    def swallowing(*args, **kwargs):
        try:
            return step(*args, **kwargs)
        except Exception:
            time.sleep(3600)

    workers.train_step = swallowing


def join_disabled() -> None:
    """DDP's join() does nothing: a trainer that runs out of inputs leaves the other waiting
    in its all-reduce."""
    import contextlib

    from torch.nn.parallel import DistributedDataParallel

    DistributedDataParallel.join = lambda self, *args, **kwargs: contextlib.nullcontext()


def join_divides_by_ranks_still_training() -> None:
    """DDP's join() divides the gradients by the ranks still training, not by the initial
    world size its docstring gives as the default: a factor of 2 after one trainer joined."""
    from torch.nn.parallel import DistributedDataParallel

    join = DistributedDataParallel.join
    DistributedDataParallel.join = lambda self, *args, **kwargs: join(
        self, *args, **{**kwargs, "divide_by_initial_world_size": False})


def join_final_sync_skipped() -> None:
    """join()'s last step, the broadcast of the last joiner's parameters to the ranks that
    joined before it, is skipped (in every process, so no collective is left unmatched)."""
    from torch.nn.parallel.distributed import _DDPJoinHook

    _DDPJoinHook.post_hook = lambda self, is_last_joiner: None
