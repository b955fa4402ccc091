"""asv view of the DDP+RPC suite: the local step it compares with, and the hybrid's step
time and its phases from the suite's `step_time` case (DDP inside the hybrid model)."""

import torch

from harness import asv_adapter as asv
from suites.ddp_rpc import cases


class LocalStepTime(asv.WorkloadTime):
    """The hybrid's training step in one process (no RPC, no DDP)."""

    workload = "ddp_rpc/local_step"

    def setup(self, *params):
        torch.set_num_threads(cases.threads_per_process())  # as in the hybrid's processes
        super().setup(*params)

    def time_local_step(self, *params):
        self.run()


class HybridStep(asv.CaseFigures):
    """Seconds per hybrid step and per phase on trainer 1, and the step's overhead over the
    local step, from the suite's step_time case."""

    case = "ddp_rpc/step_time"
    unit = "s"

    def setup_cache(self):
        return self.run_case()

    def track_step(self, *params):
        return self.value("step_time")

    def track_forward(self, *params):
        return self.value("forward_time")

    def track_backward(self, *params):
        return self.value("backward_time")

    def track_optimizer(self, *params):
        return self.value("optimizer_time")

    def track_rpc_embedding_forward(self, *params):
        return self.value("rpc_embedding_forward")

    def track_allreduce_dense_grads(self, *params):
        return self.value("allreduce_dense_grads")

    def track_overhead_vs_local(self, *params):
        """Hybrid step time over the equivalent local step, timed interleaved in the trainers."""
        return self.value("overhead_vs_local")

    track_overhead_vs_local.unit = "x"
