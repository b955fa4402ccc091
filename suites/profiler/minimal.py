"""The profiler suite's minimal program, for its `clean_exit` case: one training step under
the 1.6 memory profiler (`torch.autograd.profiler.profile(profile_memory=True)`), and its
table.

    python -m suites.profiler.minimal cpu|cuda
"""

from __future__ import annotations

import sys

import torch
from torch import nn


def main(device: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    x = torch.randn(32, 64, device=device)
    with torch.autograd.profiler.profile(profile_memory=True) as prof:
        model(x).sum().backward()
    assert "aten::addmm" in prof.key_averages().table(sort_by="self_cpu_memory_usage")
    # the program must exercise the memory profiler: with it off, a clean exit says nothing
    addmm = next(row for row in prof.key_averages() if row.key == "aten::addmm")
    # on a GPU the output is device memory: none of it is the host's
    recorded = addmm.device_memory_usage if device == "cuda" else addmm.cpu_memory_usage
    assert recorded > 0, "the memory profiler recorded no bytes"


if __name__ == "__main__":
    main(sys.argv[1])
