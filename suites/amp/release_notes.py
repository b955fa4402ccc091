"""AMP as the 1.6 release notes and their usage examples wrote it (`torch.cuda.amp`), the CPU
spelling of the releases between (`torch.cpu.amp`), and today's (`torch.autocast`,
`torch.amp.GradScaler`). See harness.releases.api_record."""

from __future__ import annotations

import torch
from torch import nn

from harness.releases.api_record import example


def _step(autocast, scaler, device: str) -> torch.Tensor:
    """One training step of a linear model under `autocast`, scaled by `scaler`; the output
    of the layer."""
    torch.manual_seed(0)
    model = nn.Linear(16, 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16, device=device), torch.randn(8, 4, device=device)
    with autocast:
        out = model(x)
        loss = nn.functional.mse_loss(out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return out


@example("amp", "1.6")
def cuda_amp_autocast_and_gradscaler():
    """torch.cuda.amp.autocast() with torch.cuda.amp.GradScaler(), as 1.6 code wrote it"""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    scaler = torch.cuda.amp.GradScaler()  # on a CPU machine it disables itself
    out = _step(torch.cuda.amp.autocast(), scaler, device)
    if device == "cuda":
        assert out.dtype == torch.float16, f"the linear layer gave {out.dtype}"


@example("amp", "1.6")
def cpu_amp_autocast_bfloat16():
    """torch.cpu.amp.autocast(dtype=torch.bfloat16): the CPU spelling of the releases before
    torch.autocast"""
    with torch.cpu.amp.autocast(dtype=torch.bfloat16):
        out = nn.Linear(16, 4)(torch.randn(8, 16))
    assert out.dtype == torch.bfloat16, f"the linear layer gave {out.dtype}"


@example("amp", "today")
def autocast_and_amp_gradscaler():
    """torch.autocast(device, dtype) with torch.amp.GradScaler(device): today's spelling"""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    out = _step(torch.autocast(device, dtype=dtype), torch.amp.GradScaler(device), device)
    assert out.dtype == dtype, f"the linear layer gave {out.dtype}"
