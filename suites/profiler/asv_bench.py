"""asv view of the profiler suite: the model step it times, its overheads and accuracy."""

import torch

from harness.asv_adapter import metric_value, run_case, skip_without, synchronize
from suites.profiler import cases

MODES = list(cases.PROFILER_MODES)
DEVICES = ["cpu", "cuda"]
STEP = cases.STEP_PARAMS["quick"][0]  # batch 2, 112x112


class ProfilerStepTime:
    """A resnet18 training step (batch 2, 112x112) with the profiler in each mode."""

    params = [DEVICES, MODES]
    param_names = ["device", "mode"]
    timeout = 300

    def setup(self, device, mode):
        skip_without(device)
        self.step = cases.model_step(device, mode, **STEP)
        self.step()  # warm-up: the first profiler session initialises Kineto

    def time_step(self, device, mode):
        self.step()
        synchronize(device)


class ProfilerOverhead:
    """Step time with the profiler over step time without, from the suite's overhead case."""

    params = [DEVICES, [m for m in MODES if m != "off"]]
    param_names = ["device", "mode"]
    unit = "x"
    timeout = 600

    def setup_cache(self):
        return {d: run_case("profiler", "overhead", STEP, device=d)
                for d in DEVICES if d == "cpu" or torch.cuda.is_available()}

    def setup(self, entries, device, mode):
        skip_without(device)

    def track_overhead(self, entries, device, mode):
        return metric_value(entries[device], "overhead", mode=mode)


class ProfilerMemoryError:
    """Largest byte error over the known allocations, per profiler API (0 when exact)."""

    params = ["profiler", "autograd", "legacy"]
    param_names = ["api"]
    unit = "B"
    timeout = 300

    def setup_cache(self):
        return run_case("profiler", "known_allocations", {})

    def track_max_abs_error(self, entry, api):
        return metric_value(entry, "max_abs_error", api=api)


class ProfilerTimeError:
    """Relative error of a 20 ms region's reported duration, per profiler API."""

    params = ["profiler", "autograd", "legacy"]
    param_names = ["api"]
    unit = "%"
    timeout = 300

    def setup_cache(self):
        return run_case("profiler", "timing_accuracy", {})

    def track_time_error(self, entry, api):
        return metric_value(entry, "time_error", api=api, region="20 ms")
