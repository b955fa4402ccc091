"""asv view of the AMP suite: the statements the CLI times, and its ratios and peak bytes."""

import torch

from harness.asv_adapter import (
    metric_value,
    run_case,
    skip_without,
    synchronize,
    telemetry_value,
)
from suites.amp import cases

MODELS = ["resnet18", "resnet50", "encoder"]


class TrainStepTime:
    """One training step on CPU (quick-profile sizes), fp32 or bfloat16 autocast."""

    params = [MODELS, ["fp32", "bf16"]]
    param_names = ["model", "mode"]
    timeout = 300

    def setup(self, model, mode):
        self.step = cases.training_step("cpu", model, mode)
        self.step()  # oneDNN picks its kernels on the first call

    def time_train_step(self, model, mode):
        self.step()


class TrainStepTimeCUDA:
    """One training step on CUDA: fp32 (strict), float16 with GradScaler, bfloat16."""

    params = [MODELS, ["fp32", "fp16", "bf16"]]
    param_names = ["model", "mode"]
    timeout = 300

    def setup(self, model, mode):
        skip_without("cuda")
        self.step = cases.training_step("cuda", model, mode)
        for _ in range(3):  # cuDNN autotuning, GradScaler settling its scale
            self.step()
        synchronize("cuda")

    def time_train_step(self, model, mode):
        self.step()
        synchronize("cuda")


class MatmulTime:
    params = [[256, 512, 1024], ["float32", "bfloat16", "autocast-bfloat16"]]
    param_names = ["n", "dtype"]

    def setup(self, n, dtype):
        self.mm = cases.matmul("cpu", n, dtype)

    def time_matmul(self, n, dtype):
        self.mm()


class MatmulTimeCUDA:
    params = [[1024, 4096, 8192], ["float32", "tf32", "float16", "bfloat16", "autocast-float16"]]
    param_names = ["n", "dtype"]

    def setup(self, n, dtype):
        skip_without("cuda")
        self.mm = cases.matmul("cuda", n, dtype)
        self.mm()
        synchronize("cuda")

    def time_matmul(self, n, dtype):
        self.mm()
        synchronize("cuda")


class AmpTrainStep:
    """bfloat16 autocast against fp32 on CPU, from the suite's train_step case."""

    params = [MODELS]
    param_names = ["model"]
    timeout = 900

    def setup_cache(self):
        return {m: run_case("amp", "train_step", {"model": m}) for m in MODELS}

    def track_speedup(self, entries, model):
        return metric_value(entries[model], "speedup", mode="bf16")

    track_speedup.unit = "x"

    def track_memory_ratio(self, entries, model):
        return metric_value(entries[model], "memory_ratio", mode="bf16")

    track_memory_ratio.unit = "x"

    def track_peak_bytes(self, entries, model):
        return metric_value(entries[model], "peak_bytes", mode="bf16")

    track_peak_bytes.unit = "bytes"


class AmpTrainStepCUDA:
    """float16 (GradScaler) and bfloat16 autocast against strict FP32 on CUDA."""

    params = [MODELS, ["fp16", "bf16"]]
    param_names = ["model", "mode"]
    timeout = 900

    def setup_cache(self):
        if not torch.cuda.is_available():
            # an empty cache, not None: asv passes a None cache to no method, so `setup`
            # would miss an argument and fail instead of reporting n/a
            return {}
        return {m: run_case("amp", "train_step", {"model": m}, device="cuda") for m in MODELS}

    def setup(self, entries, model, mode):
        skip_without("cuda")

    def track_speedup(self, entries, model, mode):
        return metric_value(entries[model], "speedup", mode=mode)

    track_speedup.unit = "x"

    def track_memory_ratio(self, entries, model, mode):
        return metric_value(entries[model], "memory_ratio", mode=mode)

    track_memory_ratio.unit = "x"

    def track_peak_bytes(self, entries, model, mode):
        return metric_value(entries[model], "peak_bytes", mode=mode)

    track_peak_bytes.unit = "bytes"

    def track_energy_per_step(self, entries, model, mode):
        """GPU energy per timed training step over the whole case (fp32 and both autocast
        modes, interleaved), from NVML's energy counter."""
        return telemetry_value(entries[model], "energy_per_iteration_j")

    track_energy_per_step.unit = "J"

    def track_power_mean(self, entries, model, mode):
        return telemetry_value(entries[model], "power_w_mean")

    track_power_mean.unit = "W"


class GemmTflops:
    """Achieved TFLOP/s of the CPU GEMM ladder (quick-profile sizes)."""

    params = [[256, 512, 1024], ["float32", "bfloat16", "autocast-bfloat16"]]
    param_names = ["n", "dtype"]
    unit = "TFLOP/s"
    timeout = 300

    def setup_cache(self):
        return run_case("amp", "gemm_ladder", {})

    def track_tflops(self, entry, n, dtype):
        return metric_value(entry, "tflops", dtype=dtype, n=n)
