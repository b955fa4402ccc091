"""One way to time things, for every suite: torch.utils.benchmark underneath.

`torch.utils.benchmark.Timer` warms up (its block-size estimate runs the statement first)
and computes median and IQR itself; this module only chooses its settings and its clock and
returns the figures in a small record. Nothing here computes statistics by hand.

The clock is chosen here, not left to the Timer, so that every torch release is measured with
the same instrument: from torch 2.14 the Timer's default clock asks
`torch.accelerator.is_available()` at every reading, which costs microseconds on a CUDA build
without a GPU, so its block-size estimate puts 100 times more calls in a block and a measurement
gets 100 times fewer blocks. CPU statements get the plain clock; CUDA ones a clock that
synchronises the device (`sync_clock`).

Ratios (speedups, overheads) should come from `measure_interleaved`, which alternates the
contenders block by block so that a noisy neighbour slows all of them alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch.utils import benchmark as tbench

__all__ = ["Timing", "measure", "measure_interleaved", "synchronize", "sync_clock"]

# Timed blocks per statement at the least: with fewer, no 95% interval of the median exists
# and no two-sample test can be significant once corrected for a run's few hundred metrics.
MIN_BLOCKS = 12


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one statement, as torch.utils.benchmark measured it."""

    median: float
    iqr: float
    runs: int  # timed blocks
    calls: int  # calls of the statement in all timed blocks together
    times: tuple[float, ...]  # seconds per call, one per block

    @classmethod
    def from_measurement(cls, m: tbench.Measurement, calls: int | None = None) -> Timing:
        return cls(
            median=m.median,
            iqr=m.iqr,
            runs=len(m.times),
            calls=calls if calls is not None else m.number_per_run * len(m.raw_times),
            times=tuple(m.times),
        )

    @classmethod
    def from_samples(cls, samples: list[float], label: str = "") -> Timing:
        """Statistics of per-call seconds timed elsewhere, one call each (collective work in
        several processes, which cannot adapt its repeat count), by torch.utils.benchmark."""
        m = tbench.Measurement(number_per_run=1, raw_times=list(samples),
                               task_spec=tbench.TaskSpec(stmt=label or "samples", setup="pass"))
        return cls.from_measurement(m)

    def stats(self) -> dict[str, float | int]:
        """The statistics a record keeps beside the value (all in seconds)."""
        return {
            "median": self.median,
            "iqr": self.iqr,
            "runs": self.runs,
            "calls": self.calls,
            "min": min(self.times),
            "max": max(self.times),
            "times": list(self.times),  # the samples, for a record's statistics
        }


def synchronize(device: str | torch.device) -> None:
    """Wait for queued work on `device` (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)  # gpu-only: kernel times


def sync_clock() -> float:
    """A clock for timers that do not synchronise CUDA themselves (pytest-benchmark, asv).

    It waits for the GPU only when CUDA has been initialised, so on CPU it costs one call.
    """
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def _timer(fn: Callable[[], object], threads: int | None, label: str,
           device: str | torch.device) -> tbench.Timer:
    # Timer runs the statement under `num_threads` intra-op threads (its default is 1):
    # keep whatever the process is set to unless the caller asks otherwise.
    return tbench.Timer(
        stmt="fn()",
        globals={"fn": fn},
        num_threads=threads if threads is not None else torch.get_num_threads(),
        label=label,
        timer=time.perf_counter if torch.device(device).type == "cpu" else sync_clock,
    )


def measure(
    fn: Callable[[], object],
    *,
    device: str = "cpu",
    min_run_time: float = 0.2,
    max_run_time: float = 10.0,
    threshold: float = 0.1,
    threads: int | None = None,
    warmup: int = 1,
    label: str = "",
    min_blocks: int = MIN_BLOCKS,
) -> Timing:
    """Time `fn()` on `device`.

    `adaptive_autorange` repeats blocks until IQR/median < `threshold` (and at least four
    blocks and `min_run_time` seconds have run) or `max_run_time` is spent. `warmup` extra
    calls run first so that lazy initialisation (cuDNN autotuning, JIT profiling runs,
    allocator growth) is not timed.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    timer = _timer(fn, threads, label, device)
    start = time.perf_counter()
    ms = [timer.adaptive_autorange(threshold=threshold, min_run_time=min_run_time,
                                   max_run_time=max_run_time)]
    # enough blocks for a confidence interval of the median and a two-sample test
    while (sum(len(m.times) for m in ms) < min_blocks
           and time.perf_counter() - start < max_run_time):
        ms.append(timer.blocked_autorange(min_run_time=min_run_time / 4))
    (merged,) = tbench.Measurement.merge(ms)
    return Timing.from_measurement(
        merged, calls=sum(m.number_per_run * len(m.raw_times) for m in ms))


def _block(timer: tbench.Timer, fn: Callable[[], object], device: str, seconds: float,
           earlier: list[tbench.Measurement]) -> tbench.Measurement:
    """One round's timing of a statement. A statement slower than the round is timed one call
    at a time, as torch.utils.benchmark times a block (synchronised, perf_counter):
    blocked_autorange would spend a call estimating the block size, and Timer.timeit two on
    warm-up, for every sample."""
    if earlier and earlier[-1].number_per_run == 1 and earlier[-1].median > seconds / 2:
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        return tbench.Measurement(number_per_run=1, raw_times=[time.perf_counter() - t0],
                                  task_spec=earlier[-1].task_spec)
    return timer.blocked_autorange(min_run_time=seconds)


def measure_interleaved(
    fns: Mapping[str, Callable[[], object]],
    *,
    device: str = "cpu",
    rounds: int = 3,
    min_run_time: float = 0.2,
    threads: int | None = None,
    warmup: int = 1,
    around: Mapping[str, Callable[[], AbstractContextManager]] | None = None,
    min_blocks: int = MIN_BLOCKS,
    max_run_time: float | None = None,
) -> dict[str, Timing]:
    """Time several statements side by side: A, B, A, B, ... for `rounds` rounds.

    Each round is one `blocked_autorange` of `min_run_time / rounds` seconds per statement;
    the rounds of one statement are merged (`Measurement.merge`) into one set of blocks, so the
    median and IQR come from torch.utils.benchmark as usual. `around[name]`, when given, is a
    context-manager factory entered around each of that statement's rounds (for instance a
    telemetry sampler, to time the same statement with and without it).
    """
    timers = {name: _timer(fn, threads, name, device) for name, fn in fns.items()}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    synchronize(device)
    collected: dict[str, list[tbench.Measurement]] = {name: [] for name in fns}
    around = around or {}
    budget = max_run_time if max_run_time is not None else 20 * min_run_time * len(fns)
    per_round = min_run_time / rounds
    start, done = time.perf_counter(), 0
    # at least `rounds` rounds; more (same length each) until every statement has
    # `min_blocks` timed blocks, for an interval and a test, or the budget is spent
    while done < rounds or (
            min(sum(len(m.times) for m in ms) for ms in collected.values()) < min_blocks
            and time.perf_counter() - start < budget):
        done += 1
        for name, timer in timers.items():
            with around.get(name, nullcontext)():
                collected[name].append(_block(timer, fns[name], device, per_round,
                                              collected[name]))
    out = {}
    for name, ms in collected.items():
        (merged,) = tbench.Measurement.merge(ms)
        out[name] = Timing.from_measurement(
            merged, calls=sum(m.number_per_run * len(m.raw_times) for m in ms))
    return out
