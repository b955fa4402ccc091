"""asv view of the fork/wait suite: the workloads the CLI times, and its speedups."""

import time

import torch

from harness.asv_adapter import metric_value, run_case
from suites.fork_wait import cases

# Long enough for the inter-op threads to finish winding down the last forked tasks: with it, 0 of
# 30 fresh processes of two forked chains aborted at exit here, against 5 of 30 without.
SETTLE_S = 0.2


class ForkWaitTime:
    params = [1, 2, 4]
    param_names = ["tasks"]

    def setup(self, tasks):
        torch.set_num_threads(1)  # fork is the only parallelism, as in the suite
        self.forked = cases.forked_tasks("cpu", tasks=tasks)
        self.serial = cases.serial_tasks("cpu", tasks=tasks)

    def teardown(self, tasks):
        # The process ends right after this. Ended while the inter-op threads still wind down
        # the last forked tasks, it aborts ("terminate called", SIGABRT: pytorch/pytorch#38228)
        # and asv drops the timing with it. Let them finish first; the fork_wait clean_exit
        # case, not this view, owns the abort.
        time.sleep(SETTLE_S)

    def time_forked(self, tasks):
        self.forked()

    def time_serial(self, tasks):
        self.serial()


class ForkWaitSpeedup:
    """Speedup of forked over serial, from the suite's scaling case (2 inter-op threads)."""

    params = [1, 2, 4]
    param_names = ["tasks"]
    unit = "x"
    timeout = 300

    def setup_cache(self):
        return run_case("fork_wait", "scaling", {"interop_threads": 2})

    def track_speedup(self, entry, tasks):
        return metric_value(entry, "speedup", K=tasks)
