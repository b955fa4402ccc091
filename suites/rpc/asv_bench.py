"""asv view of the RPC suite: the round trips the CLI times, and the round_trip and
batched_update cases' percentiles and ratios.

The time_* benchmarks call from the asv process to a peer that the first workload starts
through the launcher (caller.LocalPeer). The peer lives as long as the process: asv calls
setup and teardown around every sample, and a peer restarted each time would leave asv
waiting on start-ups rather than timing round trips (the process closes it at exit).
"""

from harness import asv_adapter as asv
from suites.rpc import cases

FLOORS = ("tcp",)  # each path's over_floor is its time over this one's
ROUND_TRIP_SIZES = list(asv.setting("rpc/round_trip", "sizes"))  # the payloads it measures


class TensorPipeBuiltin(asv.WorkloadTime):
    """rpc_sync of a builtin op (torch.add) on the peer."""

    workload = "rpc/tensorpipe_builtin"

    def time_builtin(self, *params):
        self.run()


class TensorPipePython(asv.WorkloadTime):
    """rpc_sync of a Python function that returns its argument."""

    workload = "rpc/tensorpipe_python"

    def time_python(self, *params):
        self.run()


class TensorPipeInFlight(asv.WorkloadTime):
    """`in_flight` rpc_async calls issued at once, then all awaited."""

    workload = "rpc/tensorpipe_async"

    def time_rpc_async(self, *params):
        self.run()


class GlooRoundTrip(asv.WorkloadTime):
    """Gloo send/recv ping-pong with the peer: the transport's lower bound."""

    workload = "rpc/gloo_pingpong"

    def time_send_recv(self, *params):
        self.run()


class TcpFloor(asv.WorkloadTime):
    """A raw TCP socket ping-pong with the peer: the floor."""

    workload = "rpc/tcp_pingpong"

    def time_pingpong(self, *params):
        self.run()


class BatchedUpdate(asv.WorkloadTime):
    """A batch of parameter-server updates, async_execution or blocking."""

    workload = "rpc/batched_update"

    def time_batch(self, *params):
        self.run()


class RoundTripLatency(asv.CaseFigures):
    """p50 and p99 round trip per path and payload, from the suite's round_trip case."""

    case = "rpc/round_trip"
    labels = {"path": list(cases.PATH_LABELS), "bytes": ROUND_TRIP_SIZES}
    unit = "s"

    def setup_cache(self):
        return self.run_case()

    def track_p50(self, *params):
        return self.value("p50")

    def track_p99(self, *params):
        return self.value("p99")


class RoundTripOverFloor(asv.CaseFigures):
    """Each path's p50 over the TCP floor measured beside it."""

    case = "rpc/round_trip"
    labels = {"path": [p for p in cases.PATH_LABELS if p not in FLOORS],
              "bytes": ROUND_TRIP_SIZES}
    unit = "x"
    setup_cache = RoundTripLatency.setup_cache

    def track_over_floor(self, *params):
        return self.value("over_floor")


class RoundTripRatios(asv.CaseFigures):
    """The suite's TensorPipe p50 over a bare rpc_sync loop, uv over shm, and rpc_async's
    speedup over rpc_sync, per payload."""

    case = "rpc/round_trip"
    labels = {"bytes": ROUND_TRIP_SIZES}
    unit = "x"
    setup_cache = RoundTripLatency.setup_cache

    def track_suite_over_bare_loop(self, *params):
        return self.value("suite_over_bare_loop")

    def track_uv_over_shm(self, *params):
        return self.value("uv_over_shm")

    def track_async_speedup(self, *params):
        return self.value("async_speedup")


class BatchedUpdateSpeedup(asv.CaseFigures):
    """Batched-update throughput with async_execution over the blocking handler."""

    case = "rpc/batched_update"
    unit = "x"

    def setup_cache(self):
        return self.run_case()

    def track_async_over_blocking(self, *params):
        return self.value("async_over_blocking")
