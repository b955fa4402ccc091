"""asv view of the RPC suite: the round trips the CLI times, and the round_trip and
batched_update cases' percentiles and ratios, generated from the suite's definitions
(harness.adapters.asv_adapter).

The time_* benchmarks call from the asv process to a peer that the first workload starts
through the launcher (caller.LocalPeer). The peer lives as long as the process: asv calls
setup and teardown around every sample, and a peer restarted each time would leave asv
waiting on start-ups rather than timing round trips (the process closes it at exit).
"""

from harness.adapters import asv_adapter

globals().update(asv_adapter.views(__name__))
