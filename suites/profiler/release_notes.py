"""The memory profiler as the 1.6 release notes wrote it (`torch.autograd.profiler.profile(
profile_memory=True, record_shapes=True)`, a table sorted by self CPU memory), the 1.6 device
switch (`use_cuda=`), and today's `torch.profiler.profile`. A small convolution stands in for
the notes' resnet18: the spelling is under test here, the figures in the suite's cases. See
harness.releases.api_record."""

from __future__ import annotations

import torch
from torch import nn

from harness.releases.api_record import example


def _model_and_input():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 30 * 30, 10)), torch.randn(5, 3, 32, 32)


def _table_has_memory(table: str) -> None:
    assert "CPU Mem" in table and "aten::" in table, f"no memory columns: {table[:200]}"


@example("profiler", "1.6")
def autograd_profiler_profile_memory():
    """torch.autograd.profiler.profile(profile_memory=True, record_shapes=True), the table
    sorted by self_cpu_memory_usage"""
    import torch.autograd.profiler as profiler

    model, inputs = _model_and_input()
    with profiler.profile(profile_memory=True, record_shapes=True) as prof:
        model(inputs)
    _table_has_memory(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10))


@example("profiler", "1.6")
def autograd_profiler_use_cuda_switch():
    """profile(use_cuda=torch.cuda.is_available()): the 1.6 device switch (False on a CPU
    machine)"""
    import torch.autograd.profiler as profiler

    model, inputs = _model_and_input()
    with profiler.profile(use_cuda=torch.cuda.is_available(), profile_memory=True) as prof:
        model(inputs)
    _table_has_memory(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10))


@example("profiler", "today")
def torch_profiler_profile_memory():
    """torch.profiler.profile(activities=[...], profile_memory=True, record_shapes=True):
    today's spelling"""
    from torch.profiler import ProfilerActivity, profile

    model, inputs = _model_and_input()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if torch.cuda.is_available() else [])
    with profile(activities=activities, profile_memory=True, record_shapes=True) as prof:
        model(inputs)
    _table_has_memory(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10))
