"""The AMP suite's minimal program, for its `clean_exit` case: the release notes' pattern, one
training step under autocast with a GradScaler (fp16 on CUDA, bf16 on CPU).

    python -m suites.amp.minimal cpu|cuda
"""

from __future__ import annotations

import sys

import torch
from torch import nn


def main(device: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(device)
    x, y = torch.randn(32, 64, device=device), torch.randn(32, 1, device=device)
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    with torch.autocast(device, dtype=dtype):
        hidden = model[0](x)
        # the program must exercise AMP: with autocast off, its clean exit says nothing
        assert hidden.dtype == dtype, f"autocast did not engage: the layer gave {hidden.dtype}"
        loss = nn.functional.mse_loss(model[1:](hidden).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert torch.isfinite(loss), loss


if __name__ == "__main__":
    main(sys.argv[1])
