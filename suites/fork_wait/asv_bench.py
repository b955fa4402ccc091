"""asv view of the fork/wait suite: the workloads the CLI times, and the scaling case's
speedups, generated from the suite's definitions (harness.adapters.asv_adapter). asv runs the
module's `setup` and `teardown` around every benchmark here."""

import time

import torch

from harness.adapters import asv_adapter

# Long enough for the inter-op threads to finish winding down the last forked tasks: with it, 0 of
# 30 fresh processes of two forked chains aborted at exit here, against 5 of 30 without.
SETTLE_S = 0.2

globals().update(asv_adapter.views(__name__))


def setup(*params):
    torch.set_num_threads(1)  # fork is the only parallelism, as in the suite


def teardown(*params):
    # The process ends right after this. Ended while the inter-op threads still wind down
    # the last forked tasks, it aborts ("terminate called", SIGABRT: pytorch/pytorch#38228)
    # and asv drops the timing with it. Let them finish first; the fork_wait clean_exit
    # case, not this view, owns the abort.
    time.sleep(SETTLE_S)
