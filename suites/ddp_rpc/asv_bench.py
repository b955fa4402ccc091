"""asv view of the DDP+RPC suite: the local step it compares with, and the hybrid's step
time and its phases from the suite's `step_time` case (DDP inside the hybrid model),
generated from the suite's definitions (harness.adapters.asv_adapter)."""

import torch

from harness.adapters import asv_adapter
from suites.ddp_rpc import cases

globals().update(asv_adapter.views(__name__))


def setup(*params):
    """asv runs this before every benchmark of the module: the local step runs with the
    threads each of the hybrid's processes has."""
    torch.set_num_threads(cases.threads_per_process())
