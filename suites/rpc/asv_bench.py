"""asv view of the RPC suite: the round trips the CLI times, and its percentiles and ratios.

The time_* benchmarks call from the asv process to a peer that the first workload starts
through the launcher (session.LocalPeer); teardown closes it. Percentiles, ratios to the
floor and throughputs come from the suite's own benchmark cases (run once in setup_cache).
"""

from harness.asv_adapter import metric_value, run_case, skip_without, synchronize
from suites.rpc import cases, paths, session

SIZES = cases.SIZES["quick"]


class TensorPipeRoundTrip:
    params = [["cpu", "cuda"], SIZES]
    param_names = ["device", "nbytes"]
    timeout = 120

    def setup(self, device, nbytes):
        skip_without(device)
        self.builtin = paths.tensorpipe_builtin(device, nbytes)
        self.python = paths.tensorpipe_python(device, nbytes)

    def teardown(self, device, nbytes):
        session.close_local()

    def time_builtin(self, device, nbytes):
        self.builtin()
        synchronize(device)

    def time_python(self, device, nbytes):
        self.python()
        synchronize(device)


class TensorPipeInFlight:
    params = [["cpu", "cuda"], SIZES]
    param_names = ["device", "nbytes"]
    timeout = 120

    def setup(self, device, nbytes):
        skip_without(device)
        self.batch = paths.tensorpipe_async(device, nbytes, cases.IN_FLIGHT)

    def teardown(self, device, nbytes):
        session.close_local()

    def time_rpc_async(self, device, nbytes):
        self.batch()
        synchronize(device)


class GlooRoundTrip:
    params = SIZES
    param_names = ["nbytes"]
    timeout = 120

    def setup(self, nbytes):
        self.pingpong = paths.gloo_pingpong("cpu", nbytes)

    def teardown(self, nbytes):
        session.close_local()

    def time_send_recv(self, nbytes):
        self.pingpong()


class TcpFloor:
    params = SIZES
    param_names = ["nbytes"]
    timeout = 120

    def setup(self, nbytes):
        self.pingpong = paths.tcp_pingpong("cpu", nbytes)

    def teardown(self, nbytes):
        session.close_local()

    def time_pingpong(self, nbytes):
        self.pingpong()


class BatchedUpdate:
    params = ["async", "blocking"]
    param_names = ["mode"]
    timeout = 120

    def setup(self, mode):
        self.batch = paths.batched_update("cpu", mode, 8)

    def teardown(self, mode):
        session.close_local()

    def time_batch_of_8(self, mode):
        self.batch()


class RoundTripPercentiles:
    """p50 and p99 round trip per path and payload, from the suite's round_trip case."""

    params = [[*cases.MAIN_PATHS, "tp_shm", "tp_uv"], SIZES]
    param_names = ["path", "nbytes"]
    unit = "seconds"
    timeout = 600

    def setup_cache(self):
        return run_case("rpc", "round_trip", {})

    def track_p50(self, entry, path, nbytes):
        return metric_value(entry, "p50", path=path, bytes=nbytes)

    def track_p99(self, entry, path, nbytes):
        return metric_value(entry, "p99", path=path, bytes=nbytes)


# ratio name -> (metric name, labels besides the size): each path over its run's TCP floor,
# the suite's sampling over a bare rpc_sync loop, uv over shm (each through its own floor)
RATIOS = {f"{p}/floor": ("over_floor", {"path": p}) for p in ["tp_builtin", "tp_python", "gloo",
                                                              "tp_shm", "tp_uv"]}
RATIOS.update({"tp_builtin/bare_loop": ("suite_over_bare_loop", {}),
               "tp_uv/tp_shm": ("uv_over_shm", {})})


class RoundTripRatios:
    """Ratios of the suite's round_trip case (interleaved in one run)."""

    params = [list(RATIOS), SIZES]
    param_names = ["ratio", "nbytes"]
    unit = "x"
    timeout = 600

    def setup_cache(self):
        return run_case("rpc", "round_trip", {})

    def track_ratio(self, entry, ratio, nbytes):
        name, labels = RATIOS[ratio]
        return metric_value(entry, name, bytes=nbytes, **labels)


class BatchedUpdateSpeedup:
    """Batched-update throughput with async_execution over the blocking handler."""

    unit = "x"
    timeout = 300

    def setup_cache(self):
        return run_case("rpc", "batched_update", {"requests": 8})

    def track_async_over_blocking(self, entry):
        return metric_value(entry, "async_over_blocking")
