"""asv view of the DDP+RPC suite: the local step it compares with, and the hybrid's step
time and its phases from the suite's `step_time` case (DDP inside the hybrid model)."""

import torch

from harness.asv_adapter import metric_value, run_case, skip_without, synchronize
from suites.ddp_rpc import cases


class LocalStepTime:
    """The hybrid's training step in one process (no RPC, no DDP)."""

    params = [["cpu", "cuda"], [128]]
    param_names = ["device", "batch"]

    def setup(self, device, batch):
        skip_without(device)
        torch.set_num_threads(cases.threads_per_process())  # as in the hybrid's processes
        self.step = cases.local_step(device, batch=batch)

    def time_local_step(self, device, batch):
        self.step()
        synchronize(device)


class HybridStep:
    """Seconds per hybrid step and per phase on trainer 1, and the step's overhead over the
    local step, from one run of `step_time` per device."""

    params = [["cpu", "cuda"]]
    param_names = ["device"]
    unit = "s"
    timeout = 300

    def setup_cache(self):
        out = {}
        for device in self.params[0]:
            try:
                out[device] = run_case("ddp_rpc", "step_time", {"ddp": "inside"}, device)
            except NotImplementedError:  # no CUDA here: that device is skipped in setup
                out[device] = None
        return out

    def setup(self, entries, device):
        skip_without(device)
        if entries[device] is None:
            raise NotImplementedError(f"step_time did not run on {device}")

    def track_step(self, entries, device):
        return metric_value(entries[device], "step_time")

    def track_forward(self, entries, device):
        return metric_value(entries[device], "forward_time")

    def track_backward(self, entries, device):
        return metric_value(entries[device], "backward_time")

    def track_optimizer(self, entries, device):
        return metric_value(entries[device], "optimizer_time")

    def track_rpc_embedding_forward(self, entries, device):
        return metric_value(entries[device], "rpc_embedding_forward")

    def track_allreduce_dense_grads(self, entries, device):
        return metric_value(entries[device], "allreduce_dense_grads")

    def track_overhead_vs_local(self, entries, device):
        """Hybrid step time over the equivalent local step, timed interleaved in the trainers."""
        return metric_value(entries[device], "overhead_vs_local")

    track_overhead_vs_local.unit = "x"
