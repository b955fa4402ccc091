"""asv view of the profiler suite: the model step it times, its overheads and accuracy."""

from harness import asv_adapter as asv
from suites.profiler import apis, cases


class ProfilerStepTime(asv.WorkloadTime):
    """A resnet18 training step with the profiler in each mode."""

    workload = "profiler/model_step"

    def time_step(self, *params):
        self.run()


class ProfilerOverhead(asv.CaseFigures):
    """Step time with the profiler over step time without, from the suite's overhead case."""

    case = "profiler/overhead"
    labels = {"mode": [m for m in cases.PROFILER_MODES if m != "off"]}
    unit = "x"

    def setup_cache(self):
        return self.run_case()

    def track_overhead(self, *params):
        return self.value("overhead")


class ProfilerMemoryError(asv.CaseFigures):
    """Largest byte error over the known allocations, per profiler API (0 when exact)."""

    case = "profiler/known_allocations"
    labels = {"api": list(apis.API_NAMES)}
    unit = "B"

    def setup_cache(self):
        return self.run_case()

    def track_max_abs_error(self, *params):
        return self.value("max_abs_error")


class ProfilerTimeError(asv.CaseFigures):
    """Relative error of a known region's reported duration, per profiler API."""

    case = "profiler/timing_accuracy"
    labels = {"api": list(apis.API_NAMES),
              "region": [cases.region_label(d)
                         for d in asv.setting("profiler/timing_accuracy", "durations_s")]}
    unit = "%"

    def setup_cache(self):
        return self.run_case()

    def track_time_error(self, *params):
        return self.value("time_error")
