"""The AMP suite's bookkeeping about GPUs and its derived figures, as pure functions of a
device's name and capability and of measured values: no torch call, so that every line a
GPU run reaches here runs in CI with real device names and figures.

- datasheets: dense peak TFLOP/s per precision of the GPU parts the suite knows (H100 SXM,
  PCIe and NVL; H200 SXM and NVL; A100), each part told by the device name torch reports
  and confirmed by what was measured of the device (SM count, memory, power limit);
- which reduced precisions a GPU computes in (bfloat16 from compute capability 8.0);
- the GEMM ladder's figures: TFLOP/s, speedup over float32, fraction of the run's measured
  peak and of the datasheet's;
- a training step's figures: throughput, speedup, memory ratio and saving.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass


class Form(enum.Enum):
    """A part's form factor, as NVIDIA's datasheets tell the parts of one GPU apart."""

    SXM = "SXM"
    PCIE = "PCIe"
    NVL = "NVL"


@dataclass(frozen=True)
class Part:
    """One GPU part: how to tell it (its family in the device name, its form factor, its SM
    count, memory and highest power limit) and its published dense peaks."""

    family: str  # as it appears in the device name: "H100"
    form: Form
    multiprocessors: int
    memory_gib: tuple[float, float]  # where torch's total_memory of the part lies, in GiB
    max_power_w: float  # the board's highest power limit
    tflops: Mapping[str, float]  # precision ("float32", "tf32", "float16", "bfloat16") -> peak
    source: str

    @property
    def name(self) -> str:
        return f"{self.family} {self.form.value}"


def _dense(fp32: float, tf32_sparse: float, half_sparse: float) -> dict[str, float]:
    """Dense peaks from a datasheet's figures: FP32 as printed; TF32, FP16 and BF16 Tensor
    Core figures are printed with 2:4 sparsity, and dense is half of them."""
    return {"float32": fp32, "tf32": tf32_sparse / 2, "float16": half_sparse / 2,
            "bfloat16": half_sparse / 2}


H100_SHEET = ("NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100): "
              "H100 SXM FP32 67, TF32 989*, BF16/FP16 1,979*; H100 NVL FP32 60, TF32 835*, "
              "BF16/FP16 1,671*; its earlier edition H100 PCIe FP32 51, TF32 756*, BF16/FP16 "
              "1,513* TFLOPS (* with sparsity: dense is half)")
H200_SHEET = ("NVIDIA H200 Tensor Core GPU (nvidia.com/en-us/data-center/h200): H200 SXM "
              "FP32 67, TF32 989*, BF16/FP16 1,979*; H200 NVL FP32 60, TF32 835*, BF16/FP16 "
              "1,671* TFLOPS (* with sparsity: dense is half)")
A100_SHEET = ("NVIDIA A100 Tensor Core GPU datasheet: SXM and PCIe alike FP32 19.5, TF32 312*, "
              "BF16/FP16 624* TFLOPS (* with sparsity: dense is half)")
PARTS = (
    Part("H100", Form.SXM, 132, (75, 82), 700, _dense(67, 989, 1979), H100_SHEET),
    Part("H100", Form.PCIE, 114, (75, 82), 350, _dense(51, 756, 1513), H100_SHEET),
    Part("H100", Form.NVL, 132, (85, 96), 400, _dense(60, 835, 1671), H100_SHEET),
    Part("H200", Form.SXM, 132, (130, 145), 700, _dense(67, 989, 1979), H200_SHEET),
    Part("H200", Form.NVL, 132, (130, 145), 600, _dense(60, 835, 1671), H200_SHEET),
    Part("A100", Form.SXM, 108, (38, 82), 400, _dense(19.5, 312, 624), A100_SHEET),
    Part("A100", Form.PCIE, 108, (38, 82), 300, _dense(19.5, 312, 624), A100_SHEET),
)
FAMILIES = tuple(dict.fromkeys(p.family for p in PARTS))
POWER_SLACK = 1.01  # a reported power limit may read a watt or so above the published one


@dataclass(frozen=True)
class DeviceFacts:
    """What a run measures of its device: torch's name, SM count and memory, NVML's power
    limit (of the whole GPU), and whether it is a MIG slice."""

    name: str
    multiprocessors: int | None = None
    memory_bytes: int | None = None
    power_limit_w: float | None = None
    mig: bool = False

    def describe(self) -> str:
        parts = [f"{self.multiprocessors} SMs" if self.multiprocessors else None,
                 f"{self.memory_bytes / 2**30:.1f} GiB" if self.memory_bytes else None,
                 f"power limit {self.power_limit_w:.0f} W" if self.power_limit_w else None]
        return ", ".join(p for p in parts if p) or "no measured properties"


@dataclass(frozen=True)
class Identified:
    """The part a device was told to be (None: unknown), the share of its SMs the device has
    (a MIG slice's; 1 for a whole GPU) and how it was told, or why no part was."""

    part: Part | None
    share: float
    why: str

    @property
    def peaks(self) -> dict[str, float]:
        """The dense peaks the device's figures are held against: the part's, scaled by the
        share of its SMs; none for an unknown part."""
        return {d: v * self.share for d, v in self.part.tflops.items()} if self.part else {}

    def note(self) -> str:
        if self.part is None:
            return f"figures are against this run's measured peak only: {self.why}"
        peaks = {d: round(v, 1) for d, v in self.peaks.items()}
        return f"dense peaks of the {self.part.name} ({self.part.source}), {self.why}: {peaks}"


def _form_named(words: set[str]) -> Form:
    """The form factor a device name says: NVIDIA names the PCIe and NVL parts so
    ("NVIDIA H100 PCIe", "NVIDIA H200 NVL", "NVIDIA A100-PCIE-40GB"), the SXM parts without
    a suffix or with SXM ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")."""
    upper = {w.upper() for w in words}
    if "PCIE" in upper:
        return Form.PCIE
    if "NVL" in upper:
        return Form.NVL
    return Form.SXM


def _disagreements(part: Part, facts: DeviceFacts) -> list[str]:
    """The measured properties of `facts` that are not `part`'s (a MIG slice's SMs and
    memory are its own, not the part's)."""
    out = []
    if not facts.mig and facts.multiprocessors and facts.multiprocessors != part.multiprocessors:
        out.append(f"{facts.multiprocessors} SMs, not {part.multiprocessors}")
    low, high = part.memory_gib
    if not facts.mig and facts.memory_bytes and not low <= facts.memory_bytes / 2**30 <= high:
        out.append(f"{facts.memory_bytes / 2**30:.1f} GiB, not {low:g}-{high:g}")
    if facts.power_limit_w and facts.power_limit_w > part.max_power_w * POWER_SLACK:
        out.append(f"power limit {facts.power_limit_w:.0f} W, above its {part.max_power_w:.0f} W")
    return out


def identify(facts: DeviceFacts) -> Identified:
    """The part a device is, told by its name (the family as a whole word of it, and the
    form factor it says) and confirmed by what was measured of it: SM count, memory, power
    limit. Where they disagree, or the family has no datasheet here, the part is unknown and
    the figures are held against the run's own peak only. A MIG slice is its GPU's part,
    with the share of the part's SMs the slice has."""
    words = set(re.split(r"[^A-Za-z0-9]+", facts.name))
    family = next((f for f in FAMILIES if f in words), None)
    if family is None:
        return Identified(None, 1.0, f"{facts.name or 'this device'}: no datasheet here "
                                     f"(known: {', '.join(FAMILIES)})")
    form = _form_named(words)
    part = next((p for p in PARTS if p.family == family and p.form == form), None)
    if part is None:
        return Identified(None, 1.0, f"{facts.name}: no {family} {form.value} datasheet here")
    if off := _disagreements(part, facts):
        return Identified(None, 1.0, f"{facts.name} is named as the {part.name} but measures "
                                     f"{'; '.join(off)}: not a part this table knows")
    told = f"told by its name and {facts.describe()}"
    if not facts.mig:
        return Identified(part, 1.0, told)
    if not facts.multiprocessors:
        return Identified(None, 1.0, f"{facts.name}: a MIG slice of unknown SM count")
    share = facts.multiprocessors / part.multiprocessors
    return Identified(part, share, f"{told}; a MIG slice with {facts.multiprocessors} of its "
                                   f"{part.multiprocessors} SMs, its peaks scaled by that share")


# bfloat16 arithmetic came with Ampere (compute capability 8.0); Volta (7.0) and Turing (7.5)
# have none, and torch.cuda.is_bf16_supported() says False there.
BF16_CAPABILITY = (8, 0)


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


def ladder_rows(seconds: Mapping[int, Mapping[str, float]], datasheet: Mapping[str, float]
                ) -> list[dict[str, float | int | str]]:
    """The GEMM ladder's table from its medians (`seconds[n][dtype]`, float32 among them):
    per size (the largest first) and precision, ms, TFLOP/s, the speedup over float32, the
    fraction of the run's measured peak in that precision and, where the device has a
    datasheet peak for it (`datasheet`: precision -> TFLOP/s, `Identified.peaks`), that
    peak and the fraction of it."""
    peaks = ladder_peaks(seconds)
    rows = []
    for n in sorted(seconds, reverse=True):  # the largest size first: the summary shows it
        for d, sec in seconds[n].items():
            row = {"n": n, "dtype": d, "ms": sec * 1e3, "tflops": tflops(n, sec),
                   "vs_float32": seconds[n]["float32"] / sec,
                   "of_measured_peak": tflops(n, sec) / peaks[d].tflops}
            if datasheet.get(d):
                row["datasheet_tflops"] = datasheet[d]
                row["of_datasheet"] = tflops(n, sec) / datasheet[d]
            rows.append(row)
    return rows


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
