"""Each AMP check, shown to fail when the feature is broken on purpose.

Op-list breaks patch torch inside the worker process the case launches (`worker_setup=` hooks
of `execute`, which must be module-level functions); GradScaler and parity breaks patch torch
in-process with pytest's monkeypatch.
"""

from __future__ import annotations

import re
import sys
from functools import partialmethod

import pytest
import torch
import torch.nn.functional as F

from harness.adapters.pytest_adapter import unbroken
from harness.records import Result
from harness.running.runner import execute
from suites.amp import cases

LOW_PRECISION_LISTS = {"cpu": ("torch_16", "nn_16"),
                       "cuda": ("torch_fp16", "nn_fp16", "linalg_fp16", "methods_fp16")}


def run(name: str, device: str = "cpu", params: dict | None = None) -> Result:
    case = cases.suite.case(name)
    return execute(case, device, params or case.param_sets("quick")[0], "quick")


def failed(entry: Result) -> dict[str, str]:
    return {c.name: c.detail for c in entry.checks if not c.passed}


def run_op_lists(device: str, dtype: str, setup=None) -> Result:
    """The op-list case's result entry, `setup` having run in its worker."""
    return execute(cases.suite.case("autocast_op_lists"), device, {"dtype": dtype}, "quick",
                   worker_setup=setup)


# ---- setup hooks: run inside the op-list worker before the lists --------------------------

def autocast_swaps_dtype() -> None:
    """autocast runs a bfloat16 region in float16 and a float16 region in bfloat16."""
    real = torch.autocast
    swap = {torch.bfloat16: torch.float16, torch.float16: torch.bfloat16}

    class Swapped(real):
        def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            super().__init__(device_type, dtype=swap.get(dtype, dtype), enabled=enabled,
                             cache_enabled=cache_enabled)

    torch.autocast = Swapped


def autocast_noop() -> None:
    """autocast does nothing at all."""

    class Noop:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    torch.autocast = Noop


def _fp32_then_round(real):
    """A matmul that, under autocast, computes in fp32 on unrounded inputs and rounds only
    the result: the right dtype, but not the low-precision computation autocast documents."""

    def mm(a, b, *args, **kwargs):
        device = a.device.type
        if torch.is_autocast_enabled(device):
            low = torch.get_autocast_dtype(device)
            with torch.autocast(device, enabled=False):
                return real(a.float(), b.float()).to(low)
        return real(a, b, *args, **kwargs)

    return mm


def autocast_ignores_enabled_false() -> None:
    """autocast(enabled=False) leaves autocast on: the nested region meant to run in full
    precision does not."""
    real = torch.autocast

    class Ignoring(real):
        def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            super().__init__(device_type, dtype=dtype, enabled=True, cache_enabled=cache_enabled)

    torch.autocast = Ignoring


def autocast_leaks() -> None:
    """Leaving an autocast region leaves autocast on: the code after it runs autocast too."""
    real = torch.autocast

    class Leaking(real):
        def __exit__(self, *exc):
            out = super().__exit__(*exc)
            if self._enabled:
                torch.set_autocast_enabled(self.device, True)
            return out

    torch.autocast = Leaking


def mm_computes_in_fp32() -> None:
    torch.mm = _fp32_then_round(torch.mm)


def tensor_mm_computes_in_fp32() -> None:
    torch.Tensor.mm = _fp32_then_round(torch.Tensor.mm)


def lists_missing() -> None:
    """This torch has no autocast_test_lists (importing it fails)."""
    sys.modules["torch.testing._internal.autocast_test_lists"] = None


def banned_op_allowed() -> None:
    """binary_cross_entropy runs under autocast instead of raising."""
    real = torch._C._nn.binary_cross_entropy

    def bce(input, target, *args, **kwargs):
        with torch.autocast(input.device.type, enabled=False):
            return real(input.float(), target.float(), *args, **kwargs)

    torch._C._nn.binary_cross_entropy = bce


# ---- autocast op lists ------------------------------------------------------------------

@pytest.mark.distributed
def test_dtype_checks_fail_when_autocast_uses_the_wrong_dtype():
    res = run_op_lists("cpu", "bfloat16", setup=autocast_swaps_dtype)
    bad = failed(res)
    rows = res.tables["per_op"]
    low = {r["check"] for r in rows if r["check"].split("/")[0] in LOW_PRECISION_LISTS["cpu"]}
    assert len(low) == 17
    # cat/stack get bfloat16 arguments meant for a bfloat16 region; in a float16 region
    # autocast's promote policy refuses them
    promote = {"torch_need_autocast_promote/cat", "torch_need_autocast_promote/stack"}
    assert set(bad) == low | promote, set(bad) ^ (low | promote)
    # ops returning a tuple (_native_multi_head_attention) have no dtype check, as in
    # PyTorch's test; their comparison with the bfloat16 control catches them
    assert all(re.search(r"gave float16|float16\S* vs \(?bfloat16", bad[c]) for c in low), bad
    assert all("prioritize" in bad[c] for c in promote), bad


@pytest.mark.distributed
def test_every_check_fails_when_autocast_is_a_noop():
    res = run_op_lists("cpu", "bfloat16", setup=autocast_noop)
    assert res.checks and not any(c.passed for c in res.checks)
    assert all("autocast not enabled inside the region" in c.detail for c in res.checks)


@pytest.mark.distributed
def test_control_check_fails_when_enabled_false_does_not_disable_autocast():
    res = run_op_lists("cpu", "bfloat16", setup=autocast_ignores_enabled_false)
    assert res.checks and not any(c.passed for c in res.checks)
    assert all("autocast not disabled for the control" in c.detail for c in res.checks)


@pytest.mark.distributed
def test_every_check_fails_when_autocast_stays_on_after_its_region():
    res = run_op_lists("cpu", "bfloat16", setup=autocast_leaks)
    assert res.checks and not any(c.passed for c in res.checks)
    assert all("autocast still enabled after the region" in c.detail for c in res.checks)
    # from the second entry on, the leak is there before the region too
    assert sum("autocast already enabled before the region" in c.detail
               for c in res.checks) == len(res.checks) - 1


@pytest.mark.distributed
def test_control_check_fails_when_mm_rounds_an_fp32_result():
    bad = failed(run_op_lists("cpu", "bfloat16", setup=mm_computes_in_fp32))
    assert set(bad) == {"torch_16/mm"}, bad
    assert "differs from the control run" in bad["torch_16/mm"]
    assert "gave" not in bad["torch_16/mm"]  # the dtype is right; the numbers are not


@pytest.mark.distributed
def test_variant_check_fails_when_tensor_method_disagrees():
    bad = failed(run_op_lists("cpu", "bfloat16", setup=tensor_mm_computes_in_fp32))
    assert set(bad) == {"torch_16/mm"}, bad
    assert "torch.mm and Tensor.mm disagree" in bad["torch_16/mm"]
    assert "control" not in bad["torch_16/mm"]  # torch.mm itself still equals the control


class _RaisingAutocast(torch.autocast):
    """An autocast whose entry torch refuses: torch raises, in its own code (an error the
    harness or a test raised would be a bug of theirs, not autocast refusing)."""

    def __enter__(self):
        torch.autocast(device_type="no-such-device")


class _WarningAutocast(torch.autocast):
    """What CPU autocast did before it took float16: warn, and stay off."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        import warnings

        warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                      "autocast.", UserWarning, stacklevel=2)
        super().__init__(device_type, dtype=dtype, enabled=False, cache_enabled=cache_enabled)


@pytest.mark.parametrize(("refusing", "said"), [
    (_RaisingAutocast, "raises RuntimeError: Invalid device string: 'no-such-device'"),
    (_WarningAutocast, "warns 'In CPU autocast, but the target dtype is not supported. "
                       "Disabling autocast.' and stays disabled")], ids=["raises", "warns"])
def test_an_autocast_that_refuses_its_dtype_fails_the_op_lists(monkeypatch, refusing, said):
    """In a release that has the feature, autocast refusing a dtype is the failure, whatever
    way it refuses (never `n/a`, never the lists run against an autocast that is off)."""
    monkeypatch.setattr(torch, "autocast", refusing)
    entry = run("autocast_op_lists", params={"dtype": "float16"})
    assert entry.outcome == "fail"
    assert f"autocast did not engage: {said}, in torch " in entry.reason, entry.reason


@pytest.mark.distributed
def test_missing_lists_skip_with_the_reason():
    unbroken(cases.suite.case("autocast_op_lists"), "cpu", {"dtype": "bfloat16"})
    broken = run_op_lists("cpu", "bfloat16", setup=lists_missing)
    assert broken.outcome == "skip"
    assert "autocast_test_lists does not import" in broken.reason


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_dtype_checks_fail_when_autocast_uses_the_wrong_dtype(dtype):
    res = run_op_lists("cuda", dtype, setup=autocast_swaps_dtype)
    bad = failed(res)
    low = {r["check"] for r in res.tables["per_op"]
           if r["check"].split("/")[0] in LOW_PRECISION_LISTS["cuda"] and r["outcome"] != "skip"}
    assert low and low <= set(bad), low - set(bad)


@pytest.mark.gpu
@pytest.mark.distributed
def test_cuda_banned_check_fails_when_a_banned_op_runs():
    bad = failed(run_op_lists("cuda", "float16", setup=banned_op_allowed))
    assert set(bad) == {"banned/binary_cross_entropy"}, bad


# ---- GradScaler --------------------------------------------------------------------------

GradScaler = torch.amp.GradScaler


def _update_with(**override):
    """The scale update, with a growth or backoff factor forced to another value."""
    real = torch._amp_update_scale_

    def update(scale, tracker, found_inf, growth_factor, backoff_factor, interval):
        args = {"growth_factor": growth_factor, "backoff_factor": backoff_factor, **override}
        return real(scale, tracker, found_inf, args["growth_factor"], args["backoff_factor"],
                    interval)

    return update


def _update_without_restart(scale, tracker, found_inf, growth_factor, backoff_factor,
                            interval):
    """Backs off on inf/NaN but keeps counting clean steps across the skip."""
    if found_inf.item():
        scale.mul_(backoff_factor)
    else:
        tracker.add_(1)
        if tracker.item() == interval:
            scale.mul_(growth_factor)
            tracker.zero_()
    return scale


def _unscale_slightly_off():
    """Unscaling by a reciprocal 0.1% off: gradients no longer the true ones."""
    real = torch._amp_foreach_non_finite_check_and_unscale_

    def unscale(grads, found_inf, inv_scale):
        return real(grads, found_inf, inv_scale * (1 + 2**-10))

    return unscale


def _forgetful_unscale():
    """unscale_ that forgets it already ran this iteration."""
    from torch.amp.grad_scaler import OptState

    real = GradScaler.unscale_

    def unscale_(self, optimizer):
        self._per_optimizer_states[id(optimizer)]["stage"] = OptState.READY
        return real(self, optimizer)

    return unscale_


def _lossy_load():
    """load_state_dict that drops the growth count."""
    real = GradScaler.load_state_dict
    return lambda self, sd: real(self, {**sd, "_growth_tracker": 0})


def _always_enabled():
    """enabled=False is ignored: the scaler scales anyway."""
    real = GradScaler.__init__

    def init(self, *args, enabled=True, **kwargs):
        real(self, *args, enabled=True, **kwargs)

    return init


def _disabled_scale_zero():
    """A disabled scaler's get_scale() says 0.0, not the 1.0 its docstring promises."""
    real = GradScaler.get_scale
    return lambda self: real(self) if self.is_enabled() else 0.0


def _disabled_step_does_nothing():
    """A disabled scaler's step() forgets to call optimizer.step()."""
    real = GradScaler.step
    return lambda self, opt, *a, **k: real(self, opt, *a, **k) if self.is_enabled() else None


def _step_refused_after_unscale():
    """unscale_ leaves its optimizer marked as stepped: the step() its own example calls next
    raises inside torch ("step() has already been called")."""
    from torch.amp.grad_scaler import OptState

    real = GradScaler.unscale_

    def unscale_(self, optimizer):
        real(self, optimizer)
        self._per_optimizer_states[id(optimizer)]["stage"] = OptState.STEPPED

    return unscale_


def _update_sees_one_optimizer(keep: int):
    """update() reads the inf checks of one optimizer only (the first, or the last)."""
    real = GradScaler.update

    def update(self, new_scale=None):
        states = list(getattr(self, "_per_optimizer_states", {}).items())
        if states:
            self._per_optimizer_states = type(self._per_optimizer_states)(
                self._per_optimizer_states.default_factory, [states[keep]])
        return real(self, new_scale)

    return update


def _iterables_unscaled():
    """scale() passes a list or tuple of tensors through unscaled."""
    real = GradScaler.scale
    return lambda self, outputs: (real(self, outputs) if isinstance(outputs, torch.Tensor)
                                  else outputs)


SKIP_CHECKS = {"inf gradient skips optimizer.step()", "nan gradient skips optimizer.step()"}
TWO_OPTIMIZERS = "an inf in optimizer {} of 2 skips its step only and backs the scale off"
TWO_OPTIMIZER_CHECKS = {TWO_OPTIMIZERS.format(1), TWO_OPTIMIZERS.format(2)}
BACKOFF_CHECKS = {"inf gradient multiplies the scale by backoff_factor",
                  "nan gradient multiplies the scale by backoff_factor"}

SCALER_BREAKS = {
    "defaults": ({(GradScaler, "__init__"): partialmethod(GradScaler.__init__,
                                                          init_scale=2.0**8)},
                 {"defaults as documented"}),
    "never_skips": ({(GradScaler, "_maybe_opt_step"):
                     lambda self, opt, state, *a, **k: opt.step(*a, **k)},
                    # the poisoned step corrupts the parameters, so every later step overflows
                    SKIP_CHECKS | TWO_OPTIMIZER_CHECKS
                    | {"clean steps around the inf step equal the fp32 control",
                       "clean steps around the nan step equal the fp32 control",
                       "growth count restarts after a skipped step"}),
    "never_backs_off": ({(torch, "_amp_update_scale_"): _update_with(backoff_factor=1.0)},
                        BACKOFF_CHECKS | TWO_OPTIMIZER_CHECKS
                        | {"growth count restarts after a skipped step"}),
    "never_grows": ({(torch, "_amp_update_scale_"): _update_with(growth_factor=1.0)},
                    {"scale grows after growth_interval clean steps",
                     "growth count restarts after a skipped step"}),
    "count_not_restarted": ({(torch, "_amp_update_scale_"): _update_without_restart},
                            {"growth count restarts after a skipped step"}),
    "inexact_unscale": ({(torch, "_amp_foreach_non_finite_check_and_unscale_"):
                         _unscale_slightly_off()},
                        # every step after an unscale_ differs from its control
                        TWO_OPTIMIZER_CHECKS
                        | {"unscale_ gives the fp32 control's gradients",
                           "unscale_, clip, step() and update() equal the fp32 control",
                           "clean steps around the inf step equal the fp32 control",
                           "clean steps around the nan step equal the fp32 control"}),
    "unscale_twice_allowed": ({(GradScaler, "unscale_"): _forgetful_unscale()},
                              {"unscale_ twice before update() raises"}),
    "state_dict_loses_count": ({(GradScaler, "load_state_dict"): _lossy_load()},
                               {"state_dict round-trips"}),
    "disabled_still_scales": ({(GradScaler, "__init__"): _always_enabled()},
                              {"enabled=False: scale() returns its input",
                               "enabled=False: get_scale() is 1.0"}),
    "disabled_scale_zero": ({(GradScaler, "get_scale"): _disabled_scale_zero()},
                            {"enabled=False: get_scale() is 1.0"}),
    "disabled_never_steps": ({(GradScaler, "step"): _disabled_step_does_nothing()},
                             {"enabled=False: steps equal the fp32 control"}),
    "step_refused_after_unscale": ({(GradScaler, "unscale_"): _step_refused_after_unscale()},
                                   {"unscale_, clip, step() and update() equal the fp32 control",
                                    "unscale_ twice before update() raises"}),
    "update_ignores_later_optimizers": ({(GradScaler, "update"): _update_sees_one_optimizer(0)},
                                        {TWO_OPTIMIZERS.format(2)}),
    "update_ignores_first_optimizer": ({(GradScaler, "update"): _update_sees_one_optimizer(-1)},
                                       {TWO_OPTIMIZERS.format(1)}),
    "iterables_unscaled": ({(GradScaler, "scale"): _iterables_unscaled()},
                           {"scale() of a list or a tuple scales each tensor"}),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", list(SCALER_BREAKS))
def test_grad_scaler_check_fails_when_broken(monkeypatch, name, device):
    patches, expected = SCALER_BREAKS[name]
    unbroken(cases.suite.case("grad_scaler"), device)
    for (owner, attr), value in patches.items():
        monkeypatch.setattr(owner, attr, value)
    entry = run("grad_scaler", device)
    assert entry.outcome == "fail", entry.reason
    assert set(failed(entry)) == expected, failed(entry)


def test_torch_raising_while_a_behaviour_is_exercised_fails_its_check(monkeypatch):
    """GradScaler's own guard refusing every scaler (growth_factor 1.0): the case fails with
    the behaviour that broke and where torch raised, rather than erroring."""
    monkeypatch.setattr(GradScaler, "__init__", partialmethod(GradScaler.__init__,
                                                              growth_factor=1.0))
    entry = run("grad_scaler")
    assert entry.outcome == "fail", entry.reason
    detail = failed(entry)["scale() multiplies the loss by the scale"]
    assert detail.startswith("torch raised AssertionError: The growth factor must be > 1.0."), \
        detail
    assert re.search(r"\(at amp/grad_scaler\.py:\d+\)$", detail), detail


def lists_cannot_be_built() -> None:
    """torch.randn refuses its arguments, so that building PyTorch's lists raises in torch's
    own code (torch/testing/_internal/autocast_test_lists.py) in the worker."""
    torch.randn = "no randn".__str__


def test_autocast_raising_is_autocast_not_engaging(monkeypatch):
    """Whatever torch raises when autocast is entered, the op lists fail as autocast not
    engaging, and the parity case fails each mode's engagement check, rather than erroring."""
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", "cpu".__str__)
    lists = run_op_lists("cpu", "bfloat16")
    assert lists.outcome == "fail", lists.reason
    assert "autocast did not engage: raises AssertionError: Tried to use AMP" in lists.reason
    parity = run("accuracy_parity")
    assert parity.outcome == "fail", parity.reason
    assert set(failed(parity)) == {f"{m}: autocast engaged" for m in cases.AMP_MODES["cpu"]}


def test_the_lists_check_fails_when_torch_raises_in_their_worker():
    entry = run_op_lists("cpu", "bfloat16", setup=lists_cannot_be_built)
    assert entry.outcome == "fail", entry.reason
    assert list(failed(entry)) == ["the lists run to the end in their worker"]
    detail = failed(entry)["the lists run to the end in their worker"]
    assert "(at testing/_internal/autocast_test_lists.py:" in detail, detail


# ---- accuracy parity ----------------------------------------------------------------------

def _float8_linear(real):
    """Under autocast, layers' outputs rounded to float8: a precision autocast does not use."""

    def linear(x, w, b=None):
        out = real(x, w, b)
        if torch.is_autocast_enabled(x.device.type):
            out = out.to(torch.float8_e4m3fn).to(out.dtype)
        return out

    return linear


# the parity break's training steps on the CPU (see the test below)
PARITY_BREAK_STEPS = 50


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_parity_check_fails_when_autocast_precision_is_too_low(monkeypatch, device):
    unbroken(cases.suite.case("accuracy_parity"), device)
    from suites.amp import training

    if device == "cpu":
        # a quarter of the case's 200 steps: at 50 on the CPU the fp32 control has removed 96%
        # of its loss (80% needed), bf16 ends 0.04% from it and float8 15x off (5% allowed);
        # on CUDA fp16 needs all 200 to leave 5% (tests/test_cuda_rehearsal.py)
        monkeypatch.setitem(training.PARITY, "steps", PARITY_BREAK_STEPS)
    monkeypatch.setattr(F, "linear", _float8_linear(F.linear))
    bad = failed(run("accuracy_parity", device))
    amp = cases.AMP_MODES[device]
    assert set(bad) == {f"{m} ends within 5% of the fp32 loss" for m in amp}, bad


def test_parity_control_check_fails_when_nothing_learns(monkeypatch):
    unbroken(cases.suite.case("accuracy_parity"), "cpu")
    from suites.amp import training

    # a control that never steps learns nothing in 20 steps as in 200
    monkeypatch.setitem(training.PARITY, "steps", 20)
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, closure=None: None)
    bad = failed(run("accuracy_parity"))
    assert set(bad) == {"fp32 control learns"}, bad


# ---- every case with its feature off ---------------------------------------------------

# What turns each case's feature off (tests/planted/feature_off.py), with the parameters it is
# run with. Each must then fail: never pass against a control that is itself, never n/a.
FEATURE_OFF = {
    ("autocast_op_lists", "dtype=bfloat16"): ("autocast", {"dtype": "bfloat16"}),
    ("autocast_op_lists", "dtype=float16"): ("autocast", {"dtype": "float16"}),
    ("grad_scaler", "default"): ("grad_scaler", {}),
    ("accuracy_parity", "default"): ("autocast", {}),
    ("clean_exit", "trials=2"): ("autocast", {"trials": 2}),
    # the smallest encoder step (what autocast off fails is the proof that it engaged, which
    # comes before any timing)
    ("train_step", "model=encoder-batch=2-side=16"): ("autocast", {"model": "encoder",
                                                                    "batch": 2, "side": 16}),
    ("gemm_ladder", "default"): ("autocast", {}),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize(("name", "params_id"), list(FEATURE_OFF),
                         ids=[f"{n}-{p}" for n, p in FEATURE_OFF])
def test_each_case_fails_with_its_feature_off(feature_off, name, params_id, device):
    entry = feature_off.assert_fails(cases.suite, FEATURE_OFF, name, params_id, device)
    if FEATURE_OFF[name, params_id][0] == "autocast" and name != "clean_exit":
        assert "autocast did not engage" in entry.reason, entry.reason
