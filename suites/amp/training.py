"""Models, training steps and precision modes shared by the AMP suite's cases and workloads.

A training step is the documented AMP recipe: forward and loss inside `torch.autocast`,
backward outside it, and, for float16, `GradScaler.scale(loss).backward()`,
`scaler.step(optimizer)`, `scaler.update()`. The fp32 step is the same code with autocast off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suites.amp import gpus, gradscaler

# name -> (autocast dtype or None for fp32, whether the step uses a GradScaler)
MODES: dict[str, tuple[torch.dtype | None, bool]] = {
    "fp32": (None, False),
    "bf16": (torch.bfloat16, False),
    "fp16": (torch.float16, True),  # float16 needs loss scaling: the documented recipe
}
# What each device compares against fp32. CPU autocast's documented dtype is bfloat16.
AMP_MODES = {"cpu": ("bf16",), "cuda": ("fp16", "bf16")}
MODELS = ("resnet18", "resnet50", "encoder")

# The encoder layer: BERT-base's shape (d_model 768, 12 heads, feed-forward 3072).
ENCODER = {"d_model": 768, "nhead": 12, "dim_feedforward": 3072}
NUM_CLASSES = 1000


def device_type(device: str) -> str:
    return torch.device(device).type


def autocast(device_type: str, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """`torch.autocast` to `dtype`, or nothing at all for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


def first_layer_dtype(model: nn.Module, x: torch.Tensor, amp_dtype: torch.dtype | None
                      ) -> torch.dtype:
    """The dtype of the output of the first linear or convolution layer the model runs, in a
    forward pass (without gradients) under `autocast(amp_dtype)`: the proof that autocast engaged,
    which a comparison with fp32 needs first (with autocast off, "AMP" is fp32 and agrees with
    fp32 trivially). The model's own output does not prove it: it may end in an op autocast
    runs in float32 (a layer norm)."""
    # every such layer is hooked: some are never called as modules (an attention's output
    # projection, whose weight the attention uses directly)
    seen: list[torch.dtype] = []
    hooks = [m.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
             for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        with torch.no_grad(), autocast(x.device.type, amp_dtype):
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    if not seen:
        raise ValueError(f"{type(model).__name__} ran no linear or convolution layer")
    return seen[0]


def build_model(name: str) -> nn.Module:
    """torchvision ResNets with random weights (nothing is downloaded), or one encoder layer."""
    if name == "encoder":
        return nn.TransformerEncoderLayer(**ENCODER, batch_first=True)
    import torchvision  # imported here: only the ResNet workloads need it

    return getattr(torchvision.models, name)(weights=None, num_classes=NUM_CLASSES)


@dataclass(frozen=True)
class CudaSettings:
    """The CUDA settings that change what a benchmark measures; recorded with every figure.

    `tf32=False` is strict FP32 for both matmuls and cuDNN convolutions: the baseline of every
    speedup when it is False. PyTorch's own defaults are mixed (matmul TF32 off since 1.12,
    cuDNN TF32 on).
    """

    tf32: bool = False
    cudnn_benchmark: bool = True
    channels_last: bool = False

    def apply(self) -> None:
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32
        torch.backends.cudnn.benchmark = self.cudnn_benchmark

    def record(self) -> dict[str, Any]:
        return {"tf32": self.tf32, "cudnn_benchmark": self.cudnn_benchmark,
                "channels_last": self.channels_last,
                "baseline": gpus.tf32_baseline(self.tf32)}


@contextlib.contextmanager
def restored_backend_flags() -> Iterator[None]:
    """Put the global TF32 and cuDNN flags back as they were, whatever a case set."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark)
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.benchmark) = saved


class TrainStep:
    """One training step of `model` in one precision mode; calling it runs the step."""

    def __init__(self, model_name: str, device: str, mode: str, batch: int, side: int,
                 settings: CudaSettings = CudaSettings(), seed: int = 0, lr: float = 1e-3):
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.mode = mode
        self.amp_dtype, use_scaler = MODES[mode]
        self.settings = settings
        fmt = torch.channels_last if settings.channels_last else torch.contiguous_format
        model = build_model(model_name).to(self.device)
        g = torch.Generator().manual_seed(seed)
        if model_name == "encoder":
            shape = (batch, side, ENCODER["d_model"])
            self.x = torch.randn(shape, generator=g).to(self.device)
            self.target = torch.randn(shape, generator=g).to(self.device)
            self.loss_fn = F.mse_loss
        else:
            model = model.to(memory_format=fmt)
            x = torch.randn(batch, 3, side, side, generator=g)
            self.x = x.to(self.device).contiguous(memory_format=fmt)
            self.target = torch.randint(0, NUM_CLASSES, (batch,), generator=g).to(self.device)
            self.loss_fn = F.cross_entropy
        self.model = model.train()
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        self.scaler = gradscaler.scaler(self.device.type) if use_scaler else None

    def __call__(self) -> None:
        if self.device.type == "cuda":
            self.settings.apply()  # cheap flag writes: the statement carries its settings
        self.optimizer.zero_grad(set_to_none=True)
        with autocast(self.device.type, self.amp_dtype):
            loss = self.loss_fn(self.model(self.x), self.target)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def engaged(self) -> torch.dtype:
        """The dtype its first layer computes in under this mode's autocast
        (`first_layer_dtype`): the mode's dtype when autocast engaged, float32 for fp32."""
        return first_layer_dtype(self.model, self.x, self.amp_dtype)

    def resident_tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor that lives across steps: parameters, buffers, optimizer state, data,
        the scaler's scale and growth tracker."""
        yield from self.model.parameters()
        yield from self.model.buffers()
        for state in self.optimizer.state.values():
            yield from (v for v in state.values() if isinstance(v, torch.Tensor))
        yield self.x
        yield self.target
        if self.scaler is not None:
            yield from (t for t in (self.scaler._scale, self.scaler._growth_tracker)
                        if t is not None)


# ---- accuracy parity: a small regression model, fp32 against autocast -----------------------

PARITY = {"samples": 1024, "features": 32, "hidden": 256, "steps": 200, "lr": 1e-3}


def parity_data(device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of a fixed random teacher network (a learnable, smooth target)."""
    g = torch.Generator().manual_seed(seed)
    n, d = PARITY["samples"], PARITY["features"]
    x = torch.randn(n, d, generator=g)
    w1 = torch.randn(d, 64, generator=g) / d**0.5
    w2 = torch.randn(64, 1, generator=g) / 8
    return x.to(device), (torch.tanh(x @ w1) @ w2).to(device)


def parity_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    d, h = PARITY["features"], PARITY["hidden"]
    return nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, 1))


def parity_computes_in(device: str, mode: str, seed: int = 0) -> torch.dtype:
    """The dtype the parity model's first layer computes in under `mode`'s autocast, from the
    same start and data as `train_parity` (`first_layer_dtype`)."""
    x, _ = parity_data(device, seed)
    return first_layer_dtype(parity_model(seed).to(device), x, MODES[mode][0])


def train_parity(device: str, mode: str, seed: int = 0) -> dict[str, float]:
    """Full-batch Adam for PARITY['steps'] steps from a fixed start, in one precision mode.

    Full batches leave no sampling noise, so the fp32 and AMP runs differ only by precision.
    The final loss is evaluated in fp32 (autocast off), so it measures the trained weights,
    not the rounding of the evaluation itself.
    """
    x, y = parity_data(device, seed)
    model = parity_model(seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=PARITY["lr"])
    amp_dtype, use_scaler = MODES[mode]
    scaler = gradscaler.scaler(device_type(device)) if use_scaler else None
    first = None
    for _ in range(PARITY["steps"]):
        opt.zero_grad(set_to_none=True)
        with autocast(device_type(device), amp_dtype):
            loss = F.mse_loss(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        if first is None:
            first = loss.item()
    with torch.no_grad():
        final = F.mse_loss(model(x), y).item()
    return {"initial_loss": first, "final_loss": final}
