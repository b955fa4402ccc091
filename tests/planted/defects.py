"""Planted defects: each breaks one promise of a release feature or of the harness by a small
step (a factor of 2, a contract off by one step), the way a real defect would, so that the
test suite's power can be measured: `scripts/power.py` runs the tests of each defect's area
with it planted and records whether any test fails (caught) or none does (missed).

Each function takes the setter it patches with (plain `setattr` in a planted Python, through
sitecustomize's `defect=NAME+NAME`), as feature_off.py's do. The names are DEFECTS. The
features turned off altogether are feature_off.py's; power.py plants those too (`off=`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

Setter = Callable[[Any, str, Any], None]


# --- the release features ------------------------------------------------------------------

def scaler_backoff_quarter(patch: Setter = setattr) -> None:
    """GradScaler backs off by 0.25 where it was asked 0.5 (its getters still say 0.5)."""
    import torch

    real = torch._amp_update_scale_

    def update(scale, tracker, found_inf, growth_factor, backoff_factor, interval):
        return real(scale, tracker, found_inf, growth_factor, backoff_factor / 2, interval)

    patch(torch, "_amp_update_scale_", update)


def scaler_grows_a_step_early(patch: Setter = setattr) -> None:
    """GradScaler grows after growth_interval - 1 clean steps."""
    import torch

    real = torch._amp_update_scale_

    def update(scale, tracker, found_inf, growth_factor, backoff_factor, interval):
        return real(scale, tracker, found_inf, growth_factor, backoff_factor,
                    max(1, interval - 1))

    patch(torch, "_amp_update_scale_", update)


def autocast_mm_in_fp32(patch: Setter = setattr) -> None:
    """Under autocast, torch.mm computes in float32 and rounds its result: the dtype autocast
    documents, not the low-precision computation."""
    import torch

    real = torch.mm

    def mm(a, b, *args, **kwargs):
        device = a.device.type
        if torch.is_autocast_enabled(device):
            with torch.autocast(device, enabled=False):
                return real(a.float(), b.float()).to(torch.get_autocast_dtype(device))
        return real(a, b, *args, **kwargs)

    patch(torch, "mm", mm)


def profiler_bytes_doubled(patch: Setter = setattr) -> None:
    """The memory profiler reports twice the bytes of every event."""
    from torch.autograd.profiler_util import FunctionEvent

    init = FunctionEvent.__init__

    @functools.wraps(init)
    def doubled(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.cpu_memory_usage *= 2
        self.device_memory_usage *= 2

    patch(FunctionEvent, "__init__", doubled)


def profiler_times_doubled(patch: Setter = setattr) -> None:
    """The profiler reports twice the host and device time of every event."""
    from torch.autograd.profiler_util import FunctionEvent

    for name in ("cpu_time_total", "device_time_total"):
        prop = getattr(FunctionEvent, name)
        patch(FunctionEvent, name, property(lambda self, p=prop: 2 * p.fget(self)))


def _with_rpc_timeout(patch: Setter, timeout: Callable[[float], float]) -> None:
    """rpc_sync and rpc_async of the suites' functions run with `timeout(asked)` seconds."""
    from torch.distributed.rpc import api

    invoke = api._invoke_rpc

    def invoke_rpc(to, func, rpc_type, args=None, kwargs=None, rpc_timeout=-1.0):
        if getattr(func, "__module__", "").startswith("suites.") and rpc_timeout > 0:
            rpc_timeout = timeout(rpc_timeout)
        return invoke(to, func, rpc_type, args, kwargs, rpc_timeout)

    patch(api, "_invoke_rpc", invoke_rpc)


def rpc_timeout_doubled(patch: Setter = setattr) -> None:
    """A call's RPC timeout fires after twice the time asked."""
    _with_rpc_timeout(patch, lambda asked: 2 * asked)


def rpc_tensor_off_by_one(patch: Setter = setattr) -> None:
    """A tensor RPC carries through the Python pickler arrives with its last element one
    larger (a copy off by one element)."""
    import torch
    from torch.distributed.rpc import internal

    pickler = internal._internal_rpc_pickler
    reduce = pickler._dispatch_table[torch.Tensor]

    def off_by_one(t: torch.Tensor):
        if t.numel() and not t.is_complex() and t.dtype != torch.bool:
            t = t.clone()
            t.view(-1)[-1] += 1
        return reduce(t)

    pickler._dispatch_table[torch.Tensor] = off_by_one


def dist_optimizer_lr_doubled(patch: Setter = setattr) -> None:
    """DistributedOptimizer steps with twice the learning rate it was given."""
    from torch.distributed.optim import DistributedOptimizer

    init = DistributedOptimizer.__init__

    @functools.wraps(init)
    def doubled(self, optimizer_class, params_rref, *args, **kwargs):
        if "lr" in kwargs:
            kwargs["lr"] = 2 * kwargs["lr"]
        init(self, optimizer_class, params_rref, *args, **kwargs)

    patch(DistributedOptimizer, "__init__", doubled)


def _summed_grads(state, bucket):  # unannotated: DDP rejects string annotations here
    """A DDP communication hook that sums the replicas' gradients instead of averaging."""
    import torch.distributed as dist

    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(
        lambda fut: fut.value()[0])


def ddp_grads_summed(patch: Setter = setattr) -> None:
    """DDP sums the trainers' gradients where it averages them (twice the gradient with two
    trainers)."""
    from torch.nn.parallel import DistributedDataParallel

    init = DistributedDataParallel.__init__

    @functools.wraps(init)
    def summing(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register_comm_hook(None, _summed_grads)

    patch(DistributedDataParallel, "__init__", summing)


def fork_one_interop_thread(patch: Setter = setattr) -> None:
    """torch.set_num_interop_threads(n) sets one thread, whatever n: forked tasks then run one
    after another."""
    import torch

    real = torch.set_num_interop_threads
    patch(torch, "set_num_interop_threads", lambda n: real(1))


def minimal_exits_with_status(patch: Setter = setattr) -> None:
    """A feature's minimal program (what a clean_exit case runs) ends with status 3 after its
    work (its exit handlers having run)."""
    import atexit
    import os
    import sys

    def leave() -> None:
        if sys.argv[0].endswith("minimal.py"):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(3)

    atexit.register(leave)


def telemetry_cpu_halved(patch: Setter = setattr) -> None:
    """The host sampler reads half the CPU use of the run's processes and of the others."""
    from harness.running.telemetry import host

    real = host.HostReader.sample

    def sample(self):
        out = real(self)
        for key in ("cpu_util_pct", "other_cpu_pct"):
            if isinstance(out.get(key), int | float):
                out[key] = out[key] / 2
        return out

    patch(host.HostReader, "sample", sample)


# --- the harness ---------------------------------------------------------------------------

def tolerance_doubled(patch: Setter = setattr) -> None:
    """compare and ab tolerate twice the change of each kind of figure."""
    from harness.comparing import compare

    for table in (compare.DEFAULT_THRESHOLDS, compare.AB_THRESHOLDS):
        for kind in list(table):
            table[kind] = 2 * table[kind]


def fdr_unadjusted(patch: Setter = setattr) -> None:
    """The p-values of a comparison's figures are not corrected for their number."""
    from harness import stats

    patch(stats, "adjust", lambda pvalues: [float(p) for p in pvalues])


def campaign_not_rotated(patch: Setter = setattr) -> None:
    """A campaign runs its sides in the same order in every round (A first)."""
    from harness.comparing import campaign

    patch(campaign, "rotation", lambda n_sides, rounds: [list(range(n_sides))] * rounds)


def turns_a_always_first(patch: Setter = setattr) -> None:
    """In bursts, side A takes the first turn of every pair."""
    from harness.running import turns

    patch(turns, "first_in_pair", lambda side, n: side == 0)


def clean_exit_ignores_leftovers(patch: Setter = setattr) -> None:
    """A process that leaves a child running counts as a clean exit."""
    from harness.running import clean_exit

    patch(clean_exit.End, "clean", property(
        lambda self: self.status == 0 and not self.timed_out and not self.terminate_called))


def clean_exit_interval_90(patch: Setter = setattr) -> None:
    """The abnormal-exit rate's interval is a 90% interval, said as 95%."""
    from scipy.stats import binomtest

    from harness.running import clean_exit

    def rate_interval(k: int, n: int) -> tuple[float, float]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.90, method="exact")
        return float(ci.low), float(ci.high)

    patch(clean_exit, "rate_interval", rate_interval)


def expectations_rate_unbounded(patch: Setter = setattr) -> None:
    """An expected failure's rate has no upper bound: a defect that got worse stays
    expected."""
    from harness.comparing import expectations

    real = expectations.Expectation.rate_range

    def rate_range(self, labels):
        got = real(self, labels)
        return None if got is None else (got[0], float("inf"))

    patch(expectations.Expectation, "rate_range", rate_range)


def nightly_ignores_the_gate(patch: Setter = setattr) -> None:
    """A night is green although its gate shows a regression."""
    from harness.releases import nightly

    real = nightly.judge
    patch(nightly, "judge", lambda unexpected, gate_part, failures: real(unexpected, None,
                                                                         failures))


def machine_guard_off(patch: Setter = setattr) -> None:
    """Runs, calibrations and histories of different hardware are judged together."""
    from harness.running import machine

    patch(machine, "differences", lambda a, b: [])


DEFECTS: dict[str, Callable[[Setter], None]] = {f.__name__: f for f in (
    scaler_backoff_quarter, scaler_grows_a_step_early, autocast_mm_in_fp32,
    profiler_bytes_doubled, profiler_times_doubled, rpc_timeout_doubled, rpc_tensor_off_by_one,
    dist_optimizer_lr_doubled, ddp_grads_summed, fork_one_interop_thread,
    minimal_exits_with_status, telemetry_cpu_halved, tolerance_doubled, fdr_unadjusted,
    campaign_not_rotated, turns_a_always_first, clean_exit_ignores_leftovers,
    clean_exit_interval_90, expectations_rate_unbounded, nightly_ignores_the_gate,
    machine_guard_off)}


def plant(names: str, patch: Setter = setattr) -> None:
    """The defects `names` ("tolerance_doubled+fdr_unadjusted") planted."""
    for name in filter(None, names.split("+")):
        DEFECTS[name](patch)
