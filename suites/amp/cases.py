"""Automatic mixed precision (1.6 stable): is it right, how fast, how lean?

Conformance:
- `autocast_op_lists`: every entry of PyTorch's own autocast expectation lists
  (`AutocastCPUTestLists` on CPU, `AutocastTestLists` on CUDA) gives the expected dtype and
  equals, bitwise, a control run on inputs cast by hand, as PyTorch's tests assert.
- `grad_scaler`: GradScaler skips inf/NaN steps, backs off, grows, refuses a second unscale_,
  round-trips its state_dict, and passes through when disabled; parameters against an fp32
  control.
- `accuracy_parity`: a small model trained under autocast ends within a stated tolerance of
  the fp32 run's loss.

Benchmarks:
- `train_step`: training-step time and peak memory, fp32 against autocast (CPU: bfloat16;
  CUDA: float16 with GradScaler, and bfloat16), for ResNet-18/50 and a transformer encoder
  layer; speedup and memory ratios from the same run.
- `gemm_ladder`: square matmuls in each precision, in TFLOP/s.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import torch

from harness.cases import (
    PROFILES,
    CheckVersion,
    Context,
    FeatureAbsent,
    FromSetting,
    Since,
    Skip,
    Suite,
    Track,
    TrackView,
    grid,
)
from harness.running import clean_exit as clean_exit_programs
from harness.running import machine
from harness.running.telemetry.nvml import NvmlReader, find_device
from harness.running.timing import Timing
from suites.amp import gpus, gradscaler, memory, oplists, training
from suites.amp.training import AMP_MODES, MODELS, CudaSettings, restored_backend_flags

suite = Suite(
    "amp",
    feature="automatic mixed precision",
    status="stable",
    summary="autocast casting rules, GradScaler, fp32 parity; step time, memory, TFLOP/s",
)

# the versions of checks that changed since the first (harness.cases.CheckVersion)
OPLISTS_CHECK = CheckVersion(
    2, "torch raising while the op lists run fails the check that they run to the end, "
    "instead of erroring the case; whatever torch raises on entering autocast is "
    "autocast not engaging")
SCALER_CHECK = CheckVersion(
    2, "checks added: unscale_'s clipping example, two optimizers deciding to skip on "
    "their own, scale() of a list or tuple, a disabled scaler's get_scale() of 1.0; torch "
    "raising while a behaviour is exercised fails that behaviour's check instead of erroring "
    "the case")
PARITY_CHECK = CheckVersion(
    2, "torch raising while a mode's engagement or training runs fails that mode's check, "
    "instead of erroring the case")
LADDER_CHECK = CheckVersion(
    2, "a GPU's part told by name, SMs, memory and power limit (H100 SXM/PCIe/NVL, H200 "
    "SXM/NVL, A100), an unknown or disagreeing part held against its measured peak "
    "only, a MIG slice against its share of the SMs")

# Accuracy parity tolerance: the autocast run's final loss may differ from the fp32 run's by
# at most this fraction of the fp32 loss. bfloat16 keeps 8 significant bits (relative
# rounding 2**-9 per op, float16 2**-12); over this run the rounding moves the trajectory by
# well under 1% (0.03-0.08% on four seeds here with torch 2.14.1, up to 3% when trained on
# until the loss nears the outputs' bfloat16 resolution). 5% passes that with room and still
# fails a run whose precision is broken: rounding the layers' outputs to float8 ends 14-19x
# above fp32.
PARITY_TOLERANCE = 0.05
# The fp32 control itself must learn, or agreeing with it says nothing.
PARITY_MIN_LEARNING = 0.8  # at least this fraction of the initial loss removed

GEMM_DTYPES = {
    "cpu": ("float32", "bfloat16", "autocast-bfloat16"),
    "cuda": ("float32", "tf32", "float16", "bfloat16", "autocast-float16"),
}
LOW_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


# ---- workloads: the statements the benchmarks, pytest-benchmark and asv time ---------------

# quick: resnet18 only; every precision mode of each device
@suite.workload(params={profile if kind == "cpu" else f"{profile}:{kind}":
                        grid(model=["resnet18"] if profile == "quick" else list(MODELS),
                             mode=["fp32", *training.AMP_MODES[kind]])
                        for kind in training.AMP_MODES for profile in ("quick", "full")},
                asv_name="TrainStepTime.time_train_step")
def training_step(device: str, model: str, mode: str, batch: int | None = None,
                  side: int | None = None, tf32: bool = False, channels_last: bool = False,
                  cudnn_benchmark: bool = True) -> training.TrainStep:
    """One training step (forward, loss, backward, SGD step) in one precision mode."""
    # a workload has no profile: it times train_step's quick sizes, as pytest and asv do
    default_batch, default_side = suite.case("train_step").settings_for(
        "quick", device)["sizes"][model]
    settings = CudaSettings(tf32=tf32, cudnn_benchmark=cudnn_benchmark,
                            channels_last=channels_last)
    return training.TrainStep(model, device, mode, batch or default_batch,
                              side or default_side, settings)


# registered as a workload after gemm_ladder, whose sizes make its grid
def matmul(device: str, n: int, dtype: str):
    """One n x n x n matmul: float32, tf32 (CUDA), float16, bfloat16, or autocast-<dtype>
    (float32 inputs under autocast, casts included)."""
    g = torch.Generator(device=device).manual_seed(0)
    # entries of size ~n**-0.25 keep the products' magnitude near 1 at every n
    a, b = (torch.randn(n, n, generator=g, device=device).div_(n**0.25) for _ in range(2))
    on_cuda = training.device_type(device) == "cuda"
    if dtype == "tf32" and not on_cuda:
        raise ValueError("tf32 is a CUDA matmul mode")
    if dtype in ("float32", "tf32"):
        tf32 = dtype == "tf32"

        def mm():
            if on_cuda:
                torch.backends.cuda.matmul.allow_tf32 = tf32
            return torch.mm(a, b)

        return mm
    if dtype.startswith("autocast-"):
        low = LOW_DTYPES[dtype.removeprefix("autocast-")]
        kind = training.device_type(device)

        def autocast_mm():
            with torch.autocast(kind, dtype=low):
                return torch.mm(a, b)

        return autocast_mm
    a16, b16 = a.to(LOW_DTYPES[dtype]), b.to(LOW_DTYPES[dtype])
    return lambda: torch.mm(a16, b16)


# ---- conformance ----------------------------------------------------------------------------

# CPU autocast took bfloat16 only before 2.2 (checked in torch 1.13.1 and 2.1.2).
CPU_FLOAT16 = Since("torch.autocast('cpu', dtype=torch.float16)", "2.2.0", device="cpu",
                    params={"dtype": "float16"},
                    before="RuntimeError: Currently, AutocastCPU only support Bfloat16 as the "
                           "autocast_cpu_dtype")


def autocast_api(device: str, dtype: str) -> str:
    return f"torch.autocast({training.device_type(device)!r}, dtype=torch.{dtype})"


def require_bfloat16(device: str, dtype: str) -> None:
    """Skip bfloat16 on a GPU without it (before Ampere): the hardware lacks it, not torch."""
    if dtype == "bfloat16" and training.device_type(device) == "cuda" and not gpu_has_bf16(device):
        raise Skip(no_bf16_note(device))


def gpu_has_bf16(device: str) -> bool:
    """Whether the GPU computes in bfloat16, by its compute capability: since torch 2.3
    torch.cuda.is_bf16_supported() also says True where bfloat16 is only emulated (a V100,
    a T4), which this suite would time and check as if it were the hardware's."""
    return gpus.has_bfloat16(torch.cuda.get_device_capability(device))


def no_bf16_note(device: str) -> str:
    return gpus.no_bfloat16_note(torch.cuda.get_device_name(device),
                                 torch.cuda.get_device_capability(device))


@suite.conformance(params=[{"dtype": "bfloat16"}, {"dtype": "float16"}], since=[CPU_FLOAT16],
                   check=OPLISTS_CHECK)
def autocast_op_lists(ctx: Context) -> None:
    """Each op in PyTorch's autocast lists gives the expected dtype and equals its control.

    The lists run in a worker process: importing them changes torch's global state (see
    oplists).
    """
    dtype = ctx.params["dtype"]
    require_bfloat16(ctx.device, dtype)
    if did := oplists.autocast_refuses(ctx.device, getattr(torch, dtype)):
        raise FeatureAbsent(autocast_api(ctx.device, dtype), f"autocast did not engage: {did}",
                            raised=did.startswith(oplists.RAISES))
    res = None
    with ctx.exercising("the lists run to the end in their worker"):
        (res,) = ctx.launch(oplists.run_lists, 1, (ctx.device, dtype), timeout_s=600,
                            label="autocast lists worker")
    if res is None:
        return
    if "unavailable" in res:
        raise Skip(res["unavailable"])
    seen: Counter[str] = Counter()
    per_list: dict[str, Counter[str]] = {}
    for row in res["rows"]:
        label = f"{row['list']}/{row['op']}"
        seen[label] += 1
        if seen[label] > 1:  # the same op listed again with other arguments
            label += f"#{seen[label]}"
        row["check"] = label
        per_list.setdefault(row["list"], Counter())[row["outcome"]] += 1
        if row["outcome"] != "skip":
            detail = row["detail"] or f"gave {row['got']}, equal to the control"
            ctx.check(label, row["outcome"] == "pass", detail, raised=row.get("raised", False))
    rows = [{"list": name, "entries": sum(c.values()), "checked": c["pass"] + c["fail"],
             "passed": c["pass"], "failed": c["fail"], "not_run": c["skip"]}
            for name, c in per_list.items()]
    rows.append({"list": "all", **{k: sum(r[k] for r in rows) for k in
                                   ("entries", "checked", "passed", "failed", "not_run")}})
    ctx.table("per_list", rows, show=True)
    ctx.table("per_op", [{k: r[k] for k in ("check", "expected", "got", "outcome", "detail")}
                         for r in res["rows"]])
    total = rows[-1]
    ctx.metric("ops_checked", total["checked"], "ops", kind="count")
    ctx.metric("ops_passed", total["passed"], "ops", kind="count", better="higher")
    ctx.details.update(lists=res["class"], autocast_dtype=dtype)
    for r in res["rows"]:
        if r["outcome"] == "skip":
            ctx.note(f"not run: {r['check']}: {r['detail']}")


@suite.conformance(since=[gradscaler.CPU_SCALER], check=SCALER_CHECK)
def grad_scaler(ctx: Context) -> None:
    """GradScaler skips inf/NaN steps, backs off, grows and round-trips, as documented.

    Also: a second unscale_ raises, unscale_'s clipping example steps as fp32 does, two
    optimizers each decide to skip, scale() takes a list or tuple, and enabled=False passes
    through; parameters are compared with an fp32 control that has no scaler. torch raising
    while a behaviour is exercised fails that behaviour's check (`Context.exercising`)."""
    engaged = False
    with ctx.exercising("scale() multiplies the loss by the scale"):
        engaged = gradscaler.check_scales(ctx, ctx.device)
    if not engaged:
        return
    for behaviour, check in gradscaler.CHECKS:
        with ctx.exercising(behaviour):
            check(ctx, ctx.device)


@suite.conformance(check=PARITY_CHECK)
def accuracy_parity(ctx: Context) -> None:
    """A small model trained under autocast ends within PARITY_TOLERANCE of the fp32 loss.

    First each mode shows that autocast engaged (its first layer computed in the mode's
    dtype): with autocast off the comparison would pass fp32 against fp32."""
    kind = training.device_type(ctx.device)
    modes = precision_modes(ctx)
    computed_in = {}
    for m in modes:
        with ctx.exercising(f"{m}: autocast engaged"):
            computed_in[m] = training.parity_computes_in(ctx.device, m)
    # an "AMP" run that never left fp32 would agree with fp32 trivially: not compared
    modes = ("fp32", *[m for m in modes[1:]
                       if m in computed_in and check_engaged(ctx, m, computed_in[m])])
    if len(modes) == 1:
        return
    threads = torch.get_num_threads()
    # One intra-op thread: this model is too small to gain from more, and on a busy host
    # spinning worker threads slow it many-fold; its speed is not what this case measures.
    torch.set_num_threads(1)
    try:
        with restored_backend_flags():
            if kind == "cuda":
                CudaSettings(tf32=False).apply()  # the control is strict FP32
            runs = {}
            for m in modes:
                with ctx.exercising(f"{m}: the parity model trains"):
                    runs[m] = training.train_parity(ctx.device, m)
    finally:
        torch.set_num_threads(threads)
    if "fp32" not in runs:
        return
    ref = runs["fp32"]
    learned = 1 - ref["final_loss"] / ref["initial_loss"]
    ctx.check("fp32 control learns", learned >= PARITY_MIN_LEARNING,
              f"loss {ref['initial_loss']:.4g} -> {ref['final_loss']:.4g} "
              f"({learned:.1%} removed, need {PARITY_MIN_LEARNING:.0%})")
    rows = []
    for m in [m for m in modes if m in runs]:
        final = runs[m]["final_loss"]
        rel = abs(final - ref["final_loss"]) / ref["final_loss"]
        ctx.metric("final_loss", final, "MSE", kind="error", better="lower",
                   labels={"mode": m})
        rows.append({"mode": m, "computed_in": str(computed_in[m]).removeprefix("torch."),
                     "initial_loss": runs[m]["initial_loss"], "final_loss": final,
                     "difference_vs_fp32": rel})
        if m != "fp32":
            ctx.metric("loss_difference", 100 * rel, "%", kind="error", better="lower",
                       labels={"mode": m})
            ctx.check(f"{m} ends within {PARITY_TOLERANCE:.0%} of the fp32 loss",
                      rel <= PARITY_TOLERANCE,
                      f"fp32 {ref['final_loss']:.5g}, {m} {final:.5g}: {rel:.3%} apart")
    ctx.table("parity", rows, show=True)
    ctx.details["setup"] = {**training.PARITY, "optimizer": "Adam, full batch",
                            "tolerance": PARITY_TOLERANCE}


def precision_modes(ctx: Context) -> tuple[str, ...]:
    """fp32 and the device's AMP modes, without bf16 on a GPU that has no bfloat16 (noted)."""
    kind = training.device_type(ctx.device)
    modes = ("fp32", *AMP_MODES[kind])
    if kind == "cuda" and not gpu_has_bf16(ctx.device):
        ctx.note(f"bf16 left out: {no_bf16_note(ctx.device)}")
        return tuple(m for m in modes if m != "bf16")
    return modes


def check_engaged(ctx: Context, mode: str, computed_in: torch.dtype | str) -> bool:
    """Check that autocast engaged in `mode` (its first layer computed in the mode's dtype),
    before anything is compared with fp32; returns whether it did."""
    want = str(training.MODES[mode][0]).removeprefix("torch.")
    got = str(computed_in).removeprefix("torch.")
    return ctx.check(f"{mode}: autocast engaged", got == want,
                     f"the first layer computed in {got}"
                     + ("" if got == want else f", not {want}: autocast did not engage, so "
                        "nothing is compared with fp32"))


# ---- benchmarks -----------------------------------------------------------------------------

def _cpu_flags_note(what: str, ratio: float) -> str:
    flags = machine.fingerprint()["cpu"]["flags"]
    shown = ", ".join(f"{f}={'yes' if flags.get(f) else 'no'}"
                      for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f"))
    amx = torch.cpu._is_amx_tile_supported() if hasattr(torch.cpu, "_is_amx_tile_supported") \
        else "unknown"
    return (f"{what}: bfloat16 runs {ratio:.2f}x the speed of fp32 on this CPU "
            f"({machine.fingerprint()['cpu']['model']}; {shown}; AMX usable by torch: {amx}). "
            f"oneDNN runs bfloat16 matmul/convolution on AMX tiles where present, on "
            f"avx512_bf16 otherwise, and falls back to slower paths without either.")


def _cpu_bf16_units() -> str:
    """The CPU features that run bfloat16 arithmetic natively, as present here."""
    flags = machine.fingerprint()["cpu"]["flags"]
    return ",".join(f for f in ("amx_bf16", "amx_tile", "avx512_bf16") if flags.get(f)) or "none"


def _cpu_details() -> dict[str, Any]:
    return {"cpu_flags": machine.fingerprint()["cpu"]["flags"],
            "cpu_capability": machine.cpu_capability(),
            "intra_op_threads": torch.get_num_threads()}


# `sizes`: each model's default (batch, image side) for the ResNets, (batch, sequence length)
# for the encoder layer. CPU quick sizes keep the quick profile within its time budget on two
# cores; CUDA sizes are large enough that kernels, not launches, set the time.
@suite.benchmark(params={"quick": [{"model": m} for m in MODELS],
                         # on CUDA the quick run also gives resnet50 against a TF32 baseline
                         "quick:cuda": [{"model": "resnet18"}, {"model": "resnet50"},
                                        {"model": "resnet50", "tf32": True},
                                        {"model": "encoder"}],
                         "full": grid(model=list(MODELS), channels_last=[False, True],
                                      tf32=[False, True])},
                 needs=("torchvision",), duet=True,
                 options=("batch", "side", "tf32", "channels_last", "cudnn_benchmark"),
                 tracks=[TrackView("AmpTrainStep", "Autocast against fp32 (strict FP32 on "
                                   "CUDA), from the suite's train_step case.", unit="x",
                                   labels={"mode": AMP_MODES},
                                   tracks=["speedup", "memory_ratio",
                                           Track("peak_bytes", unit="B")]),
                         TrackView("AmpEnergy", "GPU energy per timed training step and mean "
                                   "power over the whole train_step case (fp32 and the "
                                   "autocast modes interleaved), from NVML.", devices=("cuda",),
                                   tracks=[Track("energy_per_step", "energy_per_iteration_j",
                                                 "J", telemetry=True),
                                           Track("power_mean", "power_w_mean", "W",
                                                 telemetry=True)])],
                 settings={
                     "quick": {"sizes": {"resnet18": (8, 112), "resnet50": (4, 112),
                                         "encoder": (8, 128)}},
                     "full": {"sizes": {"resnet18": (16, 224), "resnet50": (8, 224),
                                        "encoder": (16, 256)}},
                     "quick:cuda": {"sizes": {"resnet18": (128, 224), "resnet50": (64, 224),
                                              "encoder": (64, 512)}},
                     "full:cuda": {"sizes": {"resnet18": (256, 224), "resnet50": (256, 224),
                                             "encoder": (128, 512)}}})
def train_step(ctx: Context) -> None:
    """Training-step time and peak memory, fp32 against autocast, side by side."""
    p, kind = ctx.params, training.device_type(ctx.device)
    model = p["model"]
    if model != "encoder" and importlib.util.find_spec("torchvision") is None:
        raise Skip("torchvision is not installed")
    settings = CudaSettings(tf32=p.get("tf32", False),
                            cudnn_benchmark=p.get("cudnn_benchmark", True),
                            channels_last=p.get("channels_last", False))
    if kind == "cpu" and settings.tf32:
        raise Skip("TF32 is a CUDA setting; the CPU runs of this grid are the tf32=False ones")
    default_batch, default_side = ctx.settings["sizes"][model]
    batch, side = p.get("batch", default_batch), p.get("side", default_side)
    modes = precision_modes(ctx)
    with restored_backend_flags():
        steps = {m: training.TrainStep(model, ctx.device, m, batch, side, settings)
                 for m in modes}
        # a speedup of an "AMP" step that never left fp32 would be a figure about nothing
        if not all([check_engaged(ctx, m, steps[m].engaged()) for m in modes[1:]]):
            return
        scale_before = {m: s.scaler.get_scale() for m, s in steps.items() if s.scaler}
        # warm-up steps: cuDNN picks its kernels and GradScaler settles its scale over three
        # on CUDA; on the CPU (no scaler) oneDNN's kernels are made in the first, and
        # torch.utils.benchmark's block-size estimate calls each step once more untimed
        warmup = 3 if kind == "cuda" else 1
        t = ctx.measure_side_by_side(steps, name="time", label="mode", rounds=5, warmup=warmup)
        mem = {m: memory.step_memory(steps[m], ctx.device) for m in modes}
    # the ratios are what the summary line shows
    for m in modes[1:]:
        ctx.ratio("speedup", t["fp32"], t[m], labels={"mode": m}, headline=True)
        # one figure per run (peak bytes are deterministic to within allocator noise)
        ctx.metric("memory_ratio", gpus.memory_ratio(mem[m].peak, mem["fp32"].peak), "x",
                   kind="ratio",
                   better="lower", headline=True, labels={"mode": m})
    rows = [_mode_figures(ctx, m, batch, t[m], t["fp32"], mem[m], mem["fp32"]) for m in modes]
    ctx.table("train_step", rows, show=True)
    ctx.details.update(model=model, batch=batch, side=side, optimizer="SGD momentum 0.9",
                       memory={m: mem[m].to_json() for m in modes},
                       memory_method="CUDA: max_memory_allocated after reset_peak_memory_stats"
                       if kind == "cuda" else "CPU: profiler allocation events in time order"
                       " (suites/amp/memory.py)")
    if kind == "cuda":
        _cuda_step_notes(ctx, settings, batch, steps, scale_before)
    else:
        ctx.details.update(_cpu_details(), channels_last=settings.channels_last)
        ctx.note(_cpu_flags_note(f"{model} training step", rows[1]["speedup"]))


def _mode_figures(ctx: Context, mode: str, batch: int, t: Timing, t_fp32: Timing,
                  mem: memory.StepMemory, mem_fp32: memory.StepMemory) -> dict[str, Any]:
    """Record one precision mode's throughput and memory; return its train_step row."""
    labels = {"mode": mode}
    ctx.metric("throughput", batch / t.median, "samples/s", kind="throughput",
               better="higher", labels=labels, samples=[batch / x for x in t.times])
    ctx.metric("peak_bytes", mem.peak, "B", kind="bytes", better="lower", labels=labels)
    ctx.metric("transient_bytes", mem.transient, "B", kind="bytes", better="lower",
               labels=labels)
    row = gpus.step_row(mode, batch, t.median, t.iqr, t_fp32.median, mem.peak, mem.transient,
                        mem_fp32.peak)
    if training.device_type(ctx.device) == "cpu":
        row["cpu_bf16_units"] = _cpu_bf16_units()
    return row


def _cuda_step_notes(ctx: Context, settings: CudaSettings, batch: int,
                     steps: dict[str, training.TrainStep], scale_before: dict[str, float]
                     ) -> None:
    """The CUDA baseline's settings, and how far GradScaler's scale fell (skipped steps)."""
    ctx.details["cuda_settings"] = settings.record()
    ctx.note(f"speedups are against {settings.record()['baseline']} "
             f"(tf32={settings.tf32}, channels_last={settings.channels_last}, "
             f"cudnn.benchmark={settings.cudnn_benchmark}, batch {batch})")
    for m, before in scale_before.items():
        after = steps[m].scaler.get_scale()
        ctx.details[f"grad_scale[{m}]"] = {"before": before, "after": after}
        if note := gpus.scale_fall_note(m, before, after):
            ctx.note(note)


# `sizes`: the matrix sides n of the ladder
@suite.benchmark(params=[{}], duet=True, settings={"quick": {"sizes": (256, 512, 1024)},
                                        "full": {"sizes": (256, 512, 1024, 2048, 4096)},
                                        "quick:cuda": {"sizes": (1024, 2048, 4096, 8192)},
                                        "full:cuda": {"sizes": (512, 1024, 2048, 4096, 8192,
                                                               16384)}},
                 tracks=[TrackView(
                     "GemmTflops", "Achieved TFLOP/s of the GEMM ladder, per size and precision.",
                     unit="TFLOP/s", tracks=["tflops"],
                     # the matmul workload's grid
                     labels={"n": FromSetting("sizes"), "dtype": GEMM_DTYPES})], check=LADDER_CHECK)
def gemm_ladder(ctx: Context) -> None:
    """Square matmuls in each precision, side by side per size, in TFLOP/s."""
    kind = training.device_type(ctx.device)
    dtypes = GEMM_DTYPES[kind]
    gpu = torch.cuda.get_device_name(ctx.device) if kind == "cuda" else ""
    if kind == "cuda" and not gpu_has_bf16(ctx.device):
        ctx.note(f"bfloat16 left out: {no_bf16_note(ctx.device)}")
        dtypes = tuple(d for d in dtypes if not d.endswith("bfloat16"))
    told = gpus.identify(device_facts(ctx.device)) if kind == "cuda" else None
    sizes = ctx.settings["sizes"]
    measured = {}
    if not check_autocast_matmuls(ctx, dtypes):
        return
    with restored_backend_flags():
        for n in sizes:
            fns = {d: matmul(ctx.device, n, d) for d in dtypes}
            measured[n] = ctx.measure_side_by_side(fns, name="time", label="dtype",
                                                   labels={"n": n}, rounds=3, warmup=2)
    medians = {n: {d: t.median for d, t in ts.items()} for n, ts in measured.items()}
    rows = gpus.ladder_rows(medians, told.peaks if told else {})
    for row in rows:
        n, d = row["n"], row["dtype"]
        ctx.metric("tflops", row["tflops"], "TFLOP/s", kind="throughput", better="higher",
                   headline=n == max(sizes), labels={"dtype": d, "n": n},
                   samples=[gpus.tflops(n, x) for x in measured[n][d].times])
        if d != "float32":
            ctx.ratio("speedup", measured[n]["float32"], measured[n][d],
                      labels={"dtype": d, "n": n})
    for d, peak in gpus.ladder_peaks(medians).items():
        # the peak is the figure of one size: its samples are that size's, so that compare
        # and ab can judge it like the others rather than call it unverified
        ctx.metric("measured_peak_tflops", peak.tflops, "TFLOP/s", kind="throughput",
                   better="higher", labels={"dtype": d},
                   samples=[gpus.tflops(peak.n, x) for x in measured[peak.n][d].times])
    ctx.table("gemm", rows, show=True)
    if kind == "cpu":
        ctx.details.update(_cpu_details())
        top = max(r["n"] for r in rows)
        ratio = next(r["vs_float32"] for r in rows if r["n"] == top and r["dtype"] == "bfloat16")
        ctx.note(_cpu_flags_note(f"matmul {top}^3", ratio))
    else:
        ctx.details.update(gpu=gpu, baseline="float32 is strict FP32 (allow_tf32=False)",
                           part=told.part.name if told.part else None)
        ctx.note(told.note())


def device_facts(device: str) -> gpus.DeviceFacts:
    """What torch and NVML measure of a CUDA device, that tells its part: the name, SM count
    and memory (torch), and the power limit and whether it is a MIG slice (NVML)."""
    props = torch.cuda.get_device_properties(device)  # gpu-only: a real part's measures
    reader = NvmlReader.open()
    try:
        found = find_device(reader.static_info(), str(props.uuid)) or {}
    finally:
        reader.close()
    return gpus.DeviceFacts(props.name, props.multi_processor_count, props.total_memory,
                            found.get("power_limit_w"),
                            mig=found.get("mig") is not None or " MIG " in f" {props.name} ")


def check_autocast_matmuls(ctx: Context, dtypes: tuple[str, ...]) -> bool:
    """Check that each autocast-<dtype> matmul of the ladder computes in <dtype> before any is
    timed (with autocast off, its TFLOP/s would be float32's); returns whether all do."""
    engaged = []
    for d in (d for d in dtypes if d.startswith("autocast-")):
        got = str(matmul(ctx.device, 64, d)().dtype).removeprefix("torch.")
        want = d.removeprefix("autocast-")
        engaged.append(ctx.check(f"{d}: autocast engaged", got == want,
                                 f"a matmul under autocast gave {got}"
                                 + ("" if got == want else f", not {want}: autocast did not "
                                    "engage, so nothing is timed")))
    return all(engaged)


# the GEMM ladder's statements, on the ladder's grid: "quick" and "full" on the CPU,
# "quick:cuda" and "full:cuda" on CUDA
suite.workload(params={
    profile if kind == "cpu" else f"{profile}:{kind}":
    grid(n=list(suite.case("gemm_ladder").settings_for(profile, kind)["sizes"]),
         dtype=list(GEMM_DTYPES[kind]))
    for kind in GEMM_DTYPES for profile in PROFILES})(matmul)


@suite.conformance(params=clean_exit_programs.PARAMS, since=[gradscaler.CPU_SCALER])
def clean_exit(ctx: Context) -> None:
    """An autocast training step with a GradScaler ends its process cleanly, in N fresh
    processes (each first shows that autocast engaged, or exits with an error)."""
    clean_exit_programs.check_programs(
        ctx, {"autocast_gradscaler_step": ["-m", "suites.amp.minimal", ctx.device]})
