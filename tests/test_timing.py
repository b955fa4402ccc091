"""Timing goes through torch.utils.benchmark and reports median, IQR and counts."""

from __future__ import annotations

import time

import pytest
import torch

from harness.running import timing


def test_measure_reports_statistics_of_a_known_duration():
    t = timing.measure(lambda: time.sleep(0.002), min_run_time=0.05)
    assert t.median >= 0.002  # a sleep cannot be shorter than asked
    assert t.runs >= 4 and t.calls >= t.runs and len(t.times) == t.runs
    assert 0 <= t.iqr < t.median
    assert set(t.stats()) == {"median", "iqr", "runs", "calls", "min", "max", "times"}


def test_measure_keeps_the_process_thread_count():
    seen = []
    torch.set_num_threads(2)
    timing.measure(lambda: seen.append(torch.get_num_threads()), min_run_time=0.01)
    assert set(seen) == {2}
    timing.measure(lambda: seen.append(torch.get_num_threads()), min_run_time=0.01, threads=1)
    assert seen[-1] == 1


def test_interleaved_orders_contenders_and_counts_every_round():
    calls = {"short": 0, "long": 0}

    def short():
        calls["short"] += 1
        time.sleep(0.001)

    def long():
        calls["long"] += 1
        time.sleep(0.004)

    ts = timing.measure_interleaved({"short": short, "long": long}, min_run_time=0.09, rounds=3)
    assert ts["long"].median > ts["short"].median >= 0.001
    assert ts["short"].runs >= 3 and ts["long"].runs >= 3
    assert ts["short"].calls <= calls["short"]


def test_cpu_timing_reads_a_plain_clock(monkeypatch):
    # torch 2.14's default Timer clock asks for an accelerator at every reading, which made
    # blocks 100 times longer on a CUDA build without a GPU: CPU timing must not ask
    asked = []
    real = torch.accelerator.is_available
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: asked.append(1) or real())
    t = timing.measure(lambda: None, min_run_time=0.01)
    ts = timing.measure_interleaved({"a": lambda: None, "b": lambda: None}, min_run_time=0.01)
    assert t.runs >= timing.MIN_BLOCKS and ts["a"].runs >= 3
    assert asked == []


def test_sync_clock_waits_for_the_gpu_once_cuda_is_initialised(monkeypatch):
    # pytest-benchmark and asv time with this clock: without the wait, a CUDA workload would
    # be timed by its launches only; before CUDA starts, it must not touch (or start) CUDA
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: waited.append(1))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    timing.sync_clock()
    assert waited == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    timing.sync_clock()
    assert waited == [1]


@pytest.mark.gpu
def test_cuda_timing_waits_for_the_kernel():
    # torch.cuda._sleep spins the GPU for a number of cycles; an unsynchronised timer would
    # report only the launch (microseconds).
    cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 0.005)  # ~5 ms
    t = timing.measure(lambda: torch.cuda._sleep(cycles), device="cuda", min_run_time=0.1)
    assert t.median > 0.002
