"""The AMP suite's bookkeeping about GPUs and its derived figures, as pure functions of a
device's name and capability and of measured values: no torch call, so that every line a
GPU run reaches here runs in CI with real device names and figures.

- datasheets: dense peak TFLOP/s per precision of the GPU families the suite knows, found
  from the device name torch reports ("NVIDIA H100 80GB HBM3");
- which reduced precisions a GPU computes in (bfloat16 from compute capability 8.0);
- the GEMM ladder's figures: TFLOP/s, speedup over float32, fraction of the run's measured
  peak and of the datasheet's;
- a training step's figures: throughput, speedup, memory ratio and saving.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Datasheet:
    """A GPU family's published dense peaks (SXM parts, without sparsity)."""

    family: str  # as it appears in the device name: "H200"
    source: str
    tflops: Mapping[str, float]  # precision ("float32", "tf32", "float16", "bfloat16") -> peak


# From NVIDIA's "H100 Tensor Core GPU" datasheet (H100 and H200 share the compute figures; the
# H200 datasheet repeats them) and NVIDIA's "A100 Tensor Core GPU" datasheet.
DATASHEETS = (
    Datasheet("H200", "NVIDIA H200 Tensor Core GPU datasheet (SXM, dense)",
              {"float32": 67, "tf32": 495, "float16": 989, "bfloat16": 989}),
    Datasheet("H100", "NVIDIA H100 Tensor Core GPU datasheet (SXM, dense)",
              {"float32": 67, "tf32": 495, "float16": 989, "bfloat16": 989}),
    Datasheet("A100", "NVIDIA A100 Tensor Core GPU datasheet (SXM, dense)",
              {"float32": 19.5, "tf32": 156, "float16": 312, "bfloat16": 312}),
)

# bfloat16 arithmetic came with Ampere (compute capability 8.0); Volta (7.0) and Turing (7.5)
# have none, and torch.cuda.is_bf16_supported() says False there.
BF16_CAPABILITY = (8, 0)


def datasheet_for(device_name: str) -> Datasheet | None:
    """The datasheet of the family a device name names, or None for a GPU without one.

    The family is matched as a whole word of the name: "NVIDIA A100-SXM4-80GB" is an A100,
    "NVIDIA A10" and "NVIDIA GH200 480GB" are not (a GH200 is no plain H200 part)."""
    words = set(re.split(r"[^A-Za-z0-9]+", device_name))
    return next((d for d in DATASHEETS if d.family in words), None)


def has_bfloat16(capability: tuple[int, int]) -> bool:
    """Whether a GPU of compute capability `capability` computes in bfloat16."""
    return tuple(capability) >= BF16_CAPABILITY


def no_bfloat16_note(device_name: str, capability: tuple[int, int]) -> str:
    return (f"{device_name} has no bfloat16 (compute capability {capability[0]}.{capability[1]};"
            f" bfloat16 from {BF16_CAPABILITY[0]}.{BF16_CAPABILITY[1]})")


# ---- the GEMM ladder ------------------------------------------------------------------------

def matmul_flops(n: int) -> int:
    """Floating-point operations of an n x n x n matmul (a multiply and an add per term)."""
    return 2 * n**3


def tflops(n: int, seconds: float) -> float:
    """TFLOP/s of an n x n x n matmul that took `seconds`."""
    return matmul_flops(n) / seconds / 1e12


@dataclass(frozen=True)
class LadderPeak:
    """The best TFLOP/s one precision reached in a run, and the size it reached it at."""

    n: int
    tflops: float


def ladder_peaks(seconds: Mapping[int, Mapping[str, float]]) -> dict[str, LadderPeak]:
    """Per precision, the size of the ladder (`seconds[n][dtype]`, medians) with the highest
    TFLOP/s: what the ladder climbs towards."""
    dtypes = next(iter(seconds.values())).keys()
    out = {}
    for d in dtypes:
        n = max(seconds, key=lambda n: tflops(n, seconds[n][d]))
        out[d] = LadderPeak(n, tflops(n, seconds[n][d]))
    return out


def ladder_rows(seconds: Mapping[int, Mapping[str, float]], datasheet: Datasheet | None
                ) -> list[dict[str, float | int | str]]:
    """The GEMM ladder's table from its medians (`seconds[n][dtype]`, float32 among them):
    per size (the largest first) and precision, ms, TFLOP/s, the speedup over float32, the
    fraction of the run's measured peak in that precision and, where the GPU has a datasheet
    figure for it, the datasheet peak and the fraction of it."""
    peaks = ladder_peaks(seconds)
    rows = []
    for n in sorted(seconds, reverse=True):  # the largest size first: the summary shows it
        for d, sec in seconds[n].items():
            row = {"n": n, "dtype": d, "ms": sec * 1e3, "tflops": tflops(n, sec),
                   "vs_float32": seconds[n]["float32"] / sec,
                   "of_measured_peak": tflops(n, sec) / peaks[d].tflops}
            if datasheet is not None and datasheet.tflops.get(d):
                row["datasheet_tflops"] = datasheet.tflops[d]
                row["of_datasheet"] = tflops(n, sec) / datasheet.tflops[d]
            rows.append(row)
    return rows


def datasheet_note(device_name: str, datasheet: Datasheet) -> str:
    return f"dense peaks for {device_name} from the {datasheet.source}: {dict(datasheet.tflops)}"


# ---- a training step ------------------------------------------------------------------------

def step_row(mode: str, batch: int, median_s: float, iqr_s: float, fp32_median_s: float,
             peak_bytes: int, transient_bytes: int, fp32_peak_bytes: int
             ) -> dict[str, float | str]:
    """One precision mode's row of train_step's table: step time, throughput, the speedup
    over fp32 (same run), peak and transient memory, the memory ratio to fp32 and the saving
    (1 - ratio)."""
    ratio = memory_ratio(peak_bytes, fp32_peak_bytes)
    return {"mode": mode, "step_ms": median_s * 1e3, "iqr_ms": iqr_s * 1e3,
            "samples_per_s": batch / median_s, "speedup": fp32_median_s / median_s,
            "peak_MiB": peak_bytes / 2**20, "transient_MiB": transient_bytes / 2**20,
            "memory_ratio": ratio, "memory_saving": 1 - ratio}


def memory_ratio(peak_bytes: int, fp32_peak_bytes: int) -> float:
    """A mode's peak bytes over fp32's: below 1 where autocast saves memory."""
    return peak_bytes / fp32_peak_bytes


def scale_fall_note(mode: str, before: float, after: float) -> str | None:
    """GradScaler's scale after warm-up and timing against before: each halving is a step
    whose optimizer work was skipped. None when it did not fall."""
    if after >= before:
        return None
    return (f"{mode}: GradScaler's scale fell from {before:g} to {after:g} over warm-up and "
            f"timing: at least {round(math.log2(before / after))} steps skipped "
            f"optimizer.step()")


def tf32_baseline(tf32: bool) -> str:
    """What a CUDA speedup is against: TF32 matmuls/convolutions, or strict FP32."""
    return "TF32" if tf32 else "strict FP32"
