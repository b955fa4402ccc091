"""GradScaler's documented behaviour, checked against an fp32 control without a scaler.

The model is fp32 and runs without autocast, so that scaling is the only difference between a
scaled run and its control: multiplying a loss by a power of two and the gradients by its
reciprocal is exact in floating point, so the parameters of clean scaled steps must equal the
control's bitwise, and a skipped step must leave them bitwise unchanged.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from harness.cases import Context, FeatureAbsent, Since, has_api

DOCUMENTED_DEFAULTS = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5,
                       "growth_interval": 2000}


class Rig:
    """A small fp32 model, its optimizer, and fixed batches: clean, inf and NaN."""

    def __init__(self, device: str, seed: int = 0):
        torch.manual_seed(seed)
        self.device = device
        self.model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self._count_steps()
        g = torch.Generator().manual_seed(seed + 1)
        self.batches = {f"clean{i}": (torch.randn(16, 8, generator=g).to(device),
                                      torch.randn(16, 1, generator=g).to(device))
                        for i in range(8)}
        for bad, value in (("inf", float("inf")), ("nan", float("nan"))):
            x, y = (t.clone() for t in self.batches["clean0"])
            x[3, 5] = value  # one poisoned input makes the loss, then the gradients, non-finite
            self.batches[bad] = (x, y)

    def clone(self) -> Rig:
        twin = copy.copy(self)
        twin.model = copy.deepcopy(self.model)
        twin.optimizer = torch.optim.SGD(twin.model.parameters(), lr=0.1, momentum=0.9)
        twin.optimizer.load_state_dict(self.optimizer.state_dict())
        twin._count_steps()
        return twin

    def _count_steps(self) -> None:
        """GradScaler calls optimizer.step() or skips it: count the calls."""
        self.steps_taken = 0
        inner = self.optimizer.step

        def counted_step(*args, **kwargs):
            self.steps_taken += 1
            return inner(*args, **kwargs)

        self.optimizer.step = counted_step

    def loss(self, batch: str) -> torch.Tensor:
        x, y = self.batches[batch]
        return F.mse_loss(self.model(x), y)

    def scaled_step(self, scaler, batch: str) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        scaler.scale(self.loss(batch)).backward()
        scaler.step(self.optimizer)
        scaler.update()

    def plain_step(self, batch: str) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.loss(batch).backward()
        self.optimizer.step()

    def params(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.model.parameters()]


def params_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> str:
    d = max((x - y).abs().nan_to_num(nan=float("inf")).max().item() for x, y in zip(a, b,
                                                                                    strict=True))
    return f"max abs parameter difference {d:.3g}"


# A GradScaler for the CPU came with the device-generic `torch.amp.GradScaler`; before it
# the only one was CUDA's, which disables itself without CUDA (checked in torch 2.1.2, 2.2.2).
CPU_SCALER = Since("torch.amp.GradScaler", "2.3.0", device="cpu",
                   before="AttributeError: module 'torch.amp' has no attribute 'GradScaler'; "
                          "torch.cuda.amp.GradScaler warns \"CUDA is not available. "
                          "Disabling.\"")


def scaler(device: str, **kw) -> torch.cuda.amp.GradScaler:
    """Today's device-generic GradScaler (torch 2.3 and later); before it, on CUDA, the 1.6
    spelling `torch.cuda.amp.GradScaler`. Cases that use it on the CPU declare CPU_SCALER."""
    kind = torch.device(device).type
    if has_api("torch.amp.GradScaler"):
        return torch.amp.GradScaler(kind, **kw)
    if kind == "cuda":
        return torch.cuda.amp.GradScaler(**kw)
    raise FeatureAbsent("torch.amp.GradScaler", "torch.amp has no GradScaler")


def check_scales(ctx: Context, device: str) -> bool:
    """A GradScaler built with its defaults is enabled and multiplies the loss by its scale:
    the proof that loss scaling engaged, which the other checks need (a scaler that does not
    scale has no scale to back off or grow). Returns whether it did."""
    rig = Rig(device)
    s = scaler(device)
    loss = rig.loss("clean0")
    scaled = s.scale(loss)
    want = loss.detach() * s.get_scale()
    ok = s.is_enabled() and s.get_scale() > 1 and torch.equal(scaled.detach(), want)
    return ctx.check("scale() multiplies the loss by the scale", ok,
                     f"enabled {s.is_enabled()}, scale {s.get_scale():g}; loss "
                     f"{loss.item():.6g}, scaled {scaled.item():.6g}"
                     + ("" if ok else ": loss scaling did not engage, nothing else is checked"))


def check_defaults(ctx: Context, device: str) -> None:
    s = scaler(device)
    got = {"init_scale": s.get_scale(), "growth_factor": s.get_growth_factor(),
           "backoff_factor": s.get_backoff_factor(), "growth_interval": s.get_growth_interval()}
    ctx.check("defaults as documented", got == DOCUMENTED_DEFAULTS, f"got {got}")


def check_skip_and_backoff(ctx: Context, device: str, bad: str, **kw) -> None:
    """A step with inf/NaN gradients changes nothing but the scale, which backs off; the
    clean steps around it equal an fp32 control that never saw the bad batch."""
    rig = Rig(device)
    control = rig.clone()
    s = scaler(device, **kw)
    rig.scaled_step(s, "clean0")
    before, scale_before, taken = rig.params(), s.get_scale(), rig.steps_taken
    rig.scaled_step(s, bad)
    after, scale_after = rig.params(), s.get_scale()
    skipped = params_equal(before, after) and rig.steps_taken == taken
    ctx.check(f"{bad} gradient skips optimizer.step()", skipped,
              f"optimizer.step() called {rig.steps_taken - taken} time(s); "
              f"{max_diff(before, after)}")
    want = scale_before * s.get_backoff_factor()
    ctx.check(f"{bad} gradient multiplies the scale by backoff_factor", scale_after == want,
              f"scale {scale_before:g} -> {scale_after:g}, expected {want:g}")
    rig.scaled_step(s, "clean1")
    control.plain_step("clean0")
    control.plain_step("clean1")
    ctx.check(f"clean steps around the {bad} step equal the fp32 control",
              params_equal(rig.params(), control.params()),
              max_diff(rig.params(), control.params()))


def check_growth(ctx: Context, device: str) -> None:
    """The scale grows by growth_factor after growth_interval clean steps in a row, and a
    skipped step starts the count again."""
    interval, init = 3, 1024.0
    rig = Rig(device)
    s = scaler(device, init_scale=init, growth_interval=interval)
    seen = []
    for batch in ("clean0", "clean1", "clean2"):
        rig.scaled_step(s, batch)
        seen.append(s.get_scale())
    grown = [init, init, init * s.get_growth_factor()]
    ctx.check("scale grows after growth_interval clean steps", seen == grown,
              f"scales after each step {seen}, expected {grown}")
    base = seen[-1]
    rig.scaled_step(s, "clean3")  # one clean step counted...
    rig.scaled_step(s, "inf")  # ...then a skipped one: back off, and start counting again
    seen = [s.get_scale()]
    for batch in ("clean4", "clean5", "clean6"):
        rig.scaled_step(s, batch)
        seen.append(s.get_scale())
    backed = base * s.get_backoff_factor()
    want = [backed, backed, backed, backed * s.get_growth_factor()]
    ctx.check("growth count restarts after a skipped step", seen == want,
              f"scales after the skip and 3 clean steps {seen}, expected {want}")


def unscaled_backward(device: str) -> tuple[Rig, Rig, torch.amp.GradScaler]:
    """A rig after a scaled backward and unscale_, its scaler, and an fp32 control after the
    same backward unscaled."""
    rig = Rig(device)
    control = rig.clone()
    s = scaler(device)
    rig.optimizer.zero_grad(set_to_none=True)
    s.scale(rig.loss("clean0")).backward()
    s.unscale_(rig.optimizer)
    control.optimizer.zero_grad(set_to_none=True)
    control.loss("clean0").backward()
    return rig, control, s


def check_unscale(ctx: Context, device: str) -> None:
    rig, control, s = unscaled_backward(device)
    grads = [p.grad.clone() for p in rig.model.parameters()]
    want = [p.grad.clone() for p in control.model.parameters()]
    ctx.check("unscale_ gives the fp32 control's gradients", params_equal(grads, want),
              max_diff(grads, want))
    ctx.check_raises("unscale_ twice before update() raises",
                     lambda: s.unscale_(rig.optimizer), RuntimeError,
                     match="unscale_() has already been called")


def check_state_dict(ctx: Context, device: str) -> None:
    """state_dict survives torch.save/torch.load, and the loaded scaler continues exactly as
    the original does (same scale, same growth count)."""
    rig = Rig(device)
    s = scaler(device, init_scale=256.0, growth_interval=3)
    for batch in ("clean0", "inf", "clean1"):  # a non-default scale and growth count
        rig.scaled_step(s, batch)
    buf = io.BytesIO()
    torch.save(s.state_dict(), buf)
    buf.seek(0)
    loaded = scaler(device)
    loaded.load_state_dict(torch.load(buf, weights_only=True))
    saved, loaded_state = s.state_dict(), loaded.state_dict()
    same_state = loaded_state == saved
    twin = rig.clone()
    a, b = [], []
    for batch in ("clean2", "clean3", "clean4"):
        rig.scaled_step(s, batch)
        twin.scaled_step(loaded, batch)
        a.append(s.get_scale())
        b.append(loaded.get_scale())
    ctx.check("state_dict round-trips", same_state and a == b,
              f"state {saved}, loaded {loaded_state}; next scales {a} vs {b}")


def check_disabled(ctx: Context, device: str) -> None:
    """enabled=False: scale() returns its input, get_scale() is 1.0 (as its docstring says),
    step() is optimizer.step(), update() nothing."""
    rig = Rig(device)
    control = rig.clone()
    s = scaler(device, enabled=False)
    loss = rig.loss("clean0")
    ctx.check("enabled=False: scale() returns its input", s.scale(loss) is loss,
              f"get_scale() {s.get_scale()}, state_dict {s.state_dict()}")
    ctx.check("enabled=False: get_scale() is 1.0", s.get_scale() == 1.0,
              f"get_scale() {s.get_scale()!r}")
    for batch in ("clean0", "clean1", "clean2"):
        rig.scaled_step(s, batch)
        control.plain_step(batch)
    ctx.check("enabled=False: steps equal the fp32 control",
              params_equal(rig.params(), control.params()) and rig.steps_taken == 3,
              f"optimizer.step() called {rig.steps_taken} of 3 times; "
              f"{max_diff(rig.params(), control.params())}")


def check_unscale_then_step(ctx: Context, device: str) -> None:
    """unscale_'s own example: unscale_, clip the unscaled gradients, step() and update().
    The step equals an fp32 control clipped the same way (unscale_ gives its gradients
    bitwise), and the optimizer steps once."""
    max_norm = 0.05  # below the gradients' norm, so that clipping changes them
    rig, control, s = unscaled_backward(device)
    torch.nn.utils.clip_grad_norm_(rig.model.parameters(), max_norm)
    s.step(rig.optimizer)
    s.update()
    norm = torch.nn.utils.clip_grad_norm_(control.model.parameters(), max_norm)
    control.optimizer.step()
    ctx.check("unscale_, clip, step() and update() equal the fp32 control",
              params_equal(rig.params(), control.params()) and rig.steps_taken == 1,
              f"gradient norm {norm.item():.3g} clipped to {max_norm}; optimizer.step() called "
              f"{rig.steps_taken} time(s); {max_diff(rig.params(), control.params())}")


def check_two_optimizers(ctx: Context, device: str) -> None:
    """Two models, each with its optimizer and loss, and one scaler, as the AMP examples'
    "multiple models, losses and optimizers": each optimizer decides alone whether to skip,
    and update() backs the scale off when any step was skipped. The inf goes into either
    optimizer's gradients in turn."""
    for poisoned in (0, 1):
        rigs = [Rig(device, seed=0), Rig(device, seed=1)]
        clean = 1 - poisoned
        control = rigs[clean].clone()
        untouched = rigs[poisoned].params()
        s = scaler(device)
        for r in rigs:
            r.optimizer.zero_grad(set_to_none=True)
        for i, r in enumerate(rigs):
            s.scale(r.loss("inf" if i == poisoned else "clean0")).backward()
        for r in rigs:
            s.step(r.optimizer)
        scale = s.get_scale()
        s.update()
        control.plain_step("clean0")
        skipped = params_equal(rigs[poisoned].params(), untouched) and \
            rigs[poisoned].steps_taken == 0
        stepped = params_equal(rigs[clean].params(), control.params())
        want = scale * s.get_backoff_factor()
        ctx.check(f"an inf in optimizer {poisoned + 1} of 2 skips its step only and backs the "
                  "scale off", skipped and stepped and s.get_scale() == want,
                  f"optimizer {poisoned + 1} stepped {rigs[poisoned].steps_taken} time(s), "
                  f"optimizer {clean + 1} {max_diff(rigs[clean].params(), control.params())} "
                  f"from its control; scale {scale:g} -> {s.get_scale():g}, expected {want:g}")


def check_scale_iterable(ctx: Context, device: str) -> None:
    """scale() takes an iterable of tensors too (its docstring: "outputs (Tensor or
    iterable of Tensors)"), as with several losses: a list comes back a list and a tuple a
    tuple, each tensor multiplied by the scale."""
    rig = Rig(device)
    s = scaler(device)
    losses = [rig.loss("clean0"), rig.loss("clean1")]
    as_list, as_tuple = s.scale(losses), s.scale(tuple(losses))
    k = s.get_scale()
    ok = isinstance(as_list, list) and isinstance(as_tuple, tuple) and all(
        torch.equal(got.detach(), loss.detach() * k)
        for out in (as_list, as_tuple) for got, loss in zip(out, losses, strict=True))
    ctx.check("scale() of a list or a tuple scales each tensor", ok,
              f"got {type(as_list).__name__} and {type(as_tuple).__name__} for a list and a "
              f"tuple; scale {k:g}")


# Each documented behaviour the case exercises, by the name of its check: a torch exception
# while exercising one fails that check (Context.exercising), and the case goes on.
CHECKS: tuple[tuple[str, Callable[[Context, str], None]], ...] = (
    ("defaults as documented", check_defaults),
    ("inf gradient skips optimizer.step()",
     lambda ctx, device: check_skip_and_backoff(ctx, device, "inf")),
    # NaN with a non-default backoff, so that the scale must follow the argument
    ("nan gradient skips optimizer.step()",
     lambda ctx, device: check_skip_and_backoff(ctx, device, "nan", init_scale=4096.0,
                                                backoff_factor=0.25)),
    ("scale grows after growth_interval clean steps", check_growth),
    ("unscale_ gives the fp32 control's gradients", check_unscale),
    ("unscale_, clip, step() and update() equal the fp32 control", check_unscale_then_step),
    ("an inf in one optimizer of 2 skips its step only and backs the scale off",
     check_two_optimizers),
    ("scale() of a list or a tuple scales each tensor", check_scale_iterable),
    ("state_dict round-trips", check_state_dict),
    ("enabled=False: steps equal the fp32 control", check_disabled),
)
