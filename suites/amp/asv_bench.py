"""asv view of the AMP suite: the training step and GEMMs the CLI times, and the train_step
and gemm_ladder cases' speedups, memory and energy."""

from harness import asv_adapter as asv
from suites.amp import training


class TrainStepTime(asv.WorkloadTime):
    """One training step (forward, loss, backward, SGD) in one precision mode."""

    workload = "amp/training_step"

    def time_train_step(self, *params):
        self.run()


class MatmulTime(asv.WorkloadTime):
    """One n x n x n matmul per precision: the GEMM ladder's statements."""

    workload = "amp/matmul"

    def time_matmul(self, *params):
        self.run()


class AmpTrainStep(asv.CaseFigures):
    """Autocast against fp32 (strict FP32 on CUDA), from the suite's train_step case."""

    case = "amp/train_step"
    labels = {"mode": training.AMP_MODES}
    unit = "x"

    def setup_cache(self):
        return self.run_case()

    def track_speedup(self, *params):
        return self.value("speedup")

    def track_memory_ratio(self, *params):
        return self.value("memory_ratio")

    def track_peak_bytes(self, *params):
        return self.value("peak_bytes")

    track_peak_bytes.unit = "B"


class AmpEnergy(asv.CaseFigures):
    """GPU energy per timed training step and mean power over the whole train_step case (fp32
    and the autocast modes interleaved), from NVML."""

    case = "amp/train_step"
    devices = ("cuda",)
    setup_cache = AmpTrainStep.setup_cache

    def track_energy_per_step(self, *params):
        return self.telemetry("energy_per_iteration_j")

    track_energy_per_step.unit = "J"

    def track_power_mean(self, *params):
        return self.telemetry("power_w_mean")

    track_power_mean.unit = "W"


class GemmTflops(asv.CaseFigures):
    """Achieved TFLOP/s of the GEMM ladder, per size and precision."""

    case = "amp/gemm_ladder"
    labels = asv.workload_axes("amp/matmul")
    unit = "TFLOP/s"

    def setup_cache(self):
        return self.run_case()

    def track_tflops(self, *params):
        return self.value("tflops")
