"""asv view of the fork/wait suite: the workloads the CLI times, and the scaling case's
speedups."""

import time

import torch

from harness import asv_adapter as asv

# Long enough for the inter-op threads to finish winding down the last forked tasks: with it, 0 of
# 30 fresh processes of two forked chains aborted at exit here, against 5 of 30 without.
SETTLE_S = 0.2


class _OneThreadTime(asv.WorkloadTime):
    def setup(self, *params):
        torch.set_num_threads(1)  # fork is the only parallelism, as in the suite
        super().setup(*params)

    def teardown(self, *params):
        # The process ends right after this. Ended while the inter-op threads still wind down
        # the last forked tasks, it aborts ("terminate called", SIGABRT: pytorch/pytorch#38228)
        # and asv drops the timing with it. Let them finish first; the fork_wait clean_exit
        # case, not this view, owns the abort.
        time.sleep(SETTLE_S)


class ForkedTime(_OneThreadTime):
    """K matmul chains forked inside one scripted function."""

    workload = "fork_wait/forked_tasks"

    def time_forked(self, *params):
        self.run()


class SerialTime(_OneThreadTime):
    """The same K chains one after another."""

    workload = "fork_wait/serial_tasks"

    def time_serial(self, *params):
        self.run()


class ForkWaitSpeedup(asv.CaseFigures):
    """Speedup of forked over serial per task count K, from the suite's scaling case."""

    case = "fork_wait/scaling"
    labels = {"K": list(asv.setting("fork_wait/scaling", "tasks"))}
    unit = "x"

    def setup_cache(self):
        return self.run_case()

    def track_speedup(self, *params):
        return self.value("speedup")
