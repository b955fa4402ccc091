"""The RPC suite's pieces, called in this process: the peer's services (which RPC runs on
TensorPipe's own threads, where coverage cannot follow), the caller's paths and local peer
when something goes wrong, and the helpers of the cases.

Tests that join an RPC group do it from this process, so none may start while another
group is open here: the fixture closes this process's local peer around each test.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import types

import pytest
import torch
import torch.distributed as dist
from torch.distributed import rpc

from harness.running import launch, rpc_group
from suites.rpc import caller, paths, remote, workers


@pytest.fixture(autouse=True)
def _no_local_peer():
    caller.close_local()
    yield
    caller.close_local()


def _serving_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "rpc-local-peer"}


# --- the peer's services -------------------------------------------------------------------


def test_the_blocking_update_waits_for_its_batch_and_answers_with_the_stepped_weights(
        monkeypatch):
    """The handler without async_execution holds its caller until the batch is full, then
    every request of the batch gets the weights after the batch's one step."""
    monkeypatch.setattr(remote, "servers", {})
    remote.configure_batch("batch", 2, 4)
    got: dict[int, torch.Tensor] = {}

    def push(i: int) -> None:
        got[i] = remote.blocking_update("batch", workers.batch_grads(2, 4)[i])

    first = threading.Thread(target=push, args=(0,), daemon=True)
    first.start()
    first.join(0.2)
    assert first.is_alive() and not got  # half a batch: no step yet
    second = threading.Thread(target=push, args=(1,), daemon=True)
    second.start()
    for t in (first, second):
        t.join(10)
        assert not t.is_alive()
    want = workers.batch_expected(2, 4)
    assert torch.equal(got[0], want) and torch.equal(got[1], want)
    assert not torch.equal(want, torch.ones(4))  # the step moved the weights


def test_the_release_notes_chained_function_adds_on_the_callee_then_in_its_callback(
        rpc_group_of_one):
    """async_add_chained, called where its RPC would run it (the worker of a group of one):
    x + y computed by the `to` worker, z added by the callback on the Future it returns."""
    from suites.rpc import release_notes

    with rpc_group_of_one("worker0"):
        fut = release_notes.async_add_chained("worker0", torch.ones(2), 2, 3)
        assert isinstance(fut, torch._C.Future)  # what @async_execution waits on
        assert torch.equal(fut.wait(), torch.full((2,), 6.0))


# --- the caller's paths --------------------------------------------------------------------


def test_closing_a_gloo_path_whose_echo_does_not_stop_says_so(monkeypatch):
    """Closing asks the peer to stop its echo, wakes the echo with one last message, and
    raises when the peer says the echo is still running after its wait."""
    asked, sent = [], []
    answers = {remote.start_gloo_echo: None, remote.stop_gloo_echo: None,
               remote.join_gloo_echo: False}  # the echo outlived the wait

    def rpc_sync(to, fn, args=()):
        asked.append((to, fn.__name__))
        return answers[fn]

    monkeypatch.setattr(rpc, "rpc_sync", rpc_sync)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "send", lambda t, dst: sent.append(dst))
    path = caller.GlooPingPong(torch.ones(4))
    with pytest.raises(RuntimeError, match="the peer's Gloo echo did not stop"):
        path.close()
    assert asked == [("worker1", name) for name in
                     ("start_gloo_echo", "stop_gloo_echo", "join_gloo_echo")]
    assert sent == [1] and not path.open


def test_a_tcp_path_whose_echo_hangs_up_mid_message_raises_connection_error(monkeypatch):
    """An echo that reads the message and closes without answering: the caller's round
    trip raises ConnectionError instead of waiting for bytes that will never come."""
    server = socket.create_server((launch.LOOPBACK, 0))
    server.settimeout(10)

    def hang_up_after_reading() -> None:
        with server:
            conn, _ = server.accept()
        with conn:
            got = b""
            while len(got) < 4:
                got += conn.recv(4 - len(got))

    listener = threading.Thread(target=hang_up_after_reading, daemon=True)
    listener.start()
    asked = []

    def rpc_sync(to, fn, args=()):
        asked.append((to, fn.__name__, args))
        return server.getsockname()[:2]

    monkeypatch.setattr(rpc, "rpc_sync", rpc_sync)
    path = caller.TcpPingPong(b"ping")
    try:
        with pytest.raises(ConnectionError, match="the TCP echo closed the connection"):
            path()
    finally:
        path.close()
    listener.join(10)
    assert asked == [("worker1", "start_tcp_echo", (4,))]


def test_a_batched_update_of_an_unknown_mode_is_refused_before_any_call(monkeypatch):
    """Modes are "async" and "blocking"; anything else is a ValueError naming it, and the
    peer is never configured."""
    asked = []
    monkeypatch.setattr(rpc, "rpc_sync", lambda *a, **k: asked.append(a))
    with caller.client("cpu"):
        with pytest.raises(ValueError, match="mode must be 'async' or 'blocking', not 'sync'"):
            paths.batched_update("cpu", "sync", 2)
    assert asked == []


# --- this process's caller and local peer --------------------------------------------------


def test_a_caller_for_another_device_replaces_the_local_peer(monkeypatch):
    """A process whose local peer serves one device and now wants another (a GPU machine's
    pytest: the CPU workloads, then the CUDA ones) closes that peer before starting the
    next one, whose caller it gets."""
    events = []

    class Peer:  # what LocalPeer does with the caller: opens it, and closes it on close()
        def __init__(self, device: str):
            events.append(("open", device))
            self.client = caller.client(device)
            self.caller = self.client.__enter__()

        def close(self) -> None:
            events.append(("close", self.caller.device))
            self.client.__exit__(None, None, None)

    monkeypatch.setattr(caller, "LocalPeer", Peer)
    cpu = caller.current("cpu")
    assert caller.current("cpu") is cpu
    cuda = caller.current("cuda")
    assert cuda.device == "cuda" and caller.current("cuda") is cuda
    assert events == [("open", "cpu"), ("close", "cpu"), ("open", "cuda")]


def test_a_process_in_a_group_without_a_caller_for_the_device_is_refused():
    """With a caller open for the CPU (this process is worker0 of a case's group) and no
    local peer, asking for a CUDA caller raises: no second group is joined from here."""
    with caller.client("cpu"):
        with pytest.raises(RuntimeError,
                           match="this process is in an RPC group without a cuda caller"):
            caller.current("cuda")


def test_the_parents_leave_call_ends_the_serving_peer(monkeypatch):
    """serve_peer serves until its parent calls _leave_now through RPC; it then leaves the
    group at once (abandon: not gracefully, see serve_peer)."""
    members = []

    class Joined:
        def __init__(self, rank, world, spec, session=0):
            members.append(rpc_group.Membership(rank, world))

        def __enter__(self):
            return members[-1]

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(caller, "_leaving", threading.Event())
    monkeypatch.setattr(caller, "LEAVE_GRACE_S", 0.0)
    monkeypatch.setattr(caller, "joined", Joined)
    watched = []
    monkeypatch.setattr(caller, "_exit_when_orphaned", watched.append)
    counts = rpc_group.RpcCounts.counts()
    peer = threading.Thread(target=caller.serve_peer,
                            args=(1, 2, caller.GroupSpec(), os.getppid(), counts), daemon=True)
    peer.start()
    peer.join(0.2)
    assert peer.is_alive()  # serving
    caller._leave_now()
    peer.join(10)
    assert not peer.is_alive()
    assert [(m.rank, m.leave) for m in members] == [(1, "now")]
    assert watched == [os.getppid()]


def test_a_peer_whose_parent_died_exits_with_status_3(monkeypatch):
    """The peer's watch polls its parent's pid; once it has been re-parented (its parent
    died without telling it to leave), it exits with status 3."""
    parents = iter([1234, 1234, 1])  # the parent, twice; then init, which adopted it
    exits = []
    monkeypatch.setattr(caller, "os", types.SimpleNamespace(getppid=lambda: next(parents),
                                                            _exit=exits.append))
    caller._exit_when_orphaned(1234, poll_s=0.01)
    assert exits == [3]
    assert next(parents, None) is None  # it polled until the parent changed, no further


@pytest.mark.distributed
def test_a_local_peer_that_cannot_open_its_caller_sends_its_peer_away(monkeypatch):
    """A local peer opened while a caller is already open joins its group with the peer,
    then cannot open its caller: before the error reaches its opener it tells the peer to
    leave, leaves the group, and puts back the environment it changed."""
    keys = launch.agent_store_env(launch.LOOPBACK, 0)
    before = {k: os.environ.get(k) for k in keys}
    others = _serving_threads()
    with caller.client("cpu"):
        with pytest.raises(RuntimeError, match="a caller is already open in this process"):
            caller.LocalPeer("cpu")
    (serving,) = _serving_threads() - others
    serving.join(60)
    assert not serving.is_alive()  # the peer left when told, and its process ended
    assert not rpc.api._is_current_rpc_agent_set()
    assert {k: os.environ.get(k) for k in keys} == before


@pytest.mark.distributed
def test_a_local_peer_that_died_is_reported_when_it_is_closed():
    """A peer killed under its caller: closing the caller still leaves the group, and then
    raises the launcher's error naming how the peer died."""
    peer = caller.LocalPeer("cpu")
    pid = rpc.rpc_sync(caller.PEER, remote.whereabouts)["pid"]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(launch.LaunchError, match="rpc peer rank 0 was killed by signal SIGKILL"):
        peer.close()
    assert not rpc.api._is_current_rpc_agent_set()


# --- the cases' helpers -------------------------------------------------------------------


def test_the_in_flight_figures_skip_payloads_too_large_to_keep_in_flight():
    """round_trip times calls in flight only up to ASYNC_MAX_BYTES (each call in flight
    holds its own copy, 8 of them): a larger payload in the sweep is not timed in flight, and
    has no in-flight figures and no row; the others have both."""
    from harness.cases import Context
    from suites.rpc import cases

    small, large = 4, 2 * workers.ASYNC_MAX_BYTES
    assert workers.in_flight_sizes([small, workers.ASYNC_MAX_BYTES, large]) == [
        small, workers.ASYNC_MAX_BYTES]

    def timed(seconds: float) -> dict:
        times = [seconds * (1 + i / 100) for i in range(5)]
        return {"median": times[2], "times": times, "session_medians": times[:2]}

    main = {"sizes": {small: {"in_flight": {"rpc_sync": timed(2e-3), "rpc_async": timed(1e-3)}},
                      large: {}}}
    ctx = Context("cpu", "quick", {})
    cases._in_flight(ctx, main, [small, large])
    (row,) = ctx.tables["in_flight"]
    assert row["size"] == cases.size_label(small) and row["speedup"] == pytest.approx(2.0)
    assert {m.labels["bytes"] for m in ctx.metrics} == {small}


@pytest.mark.distributed
def test_a_round_trip_of_chosen_paths_measures_those_and_the_floor_only():
    """`--param paths=gloo,tp_uv` (how scripts/netns-check.sh asks for the paths it checks):
    the other paths, the bare-loop comparison and the calls in flight are not measured, and
    the note says which were left out; a path the case does not know is an error naming it."""
    from harness.running.runner import execute
    from suites.rpc import cases

    case = cases.suite.case("round_trip")
    entry = execute(case, "cpu", {"sizes": [4], "min_samples": 5, "paths": ["gloo", "tp_uv"]},
                    "quick")
    assert entry.outcome == "pass", entry.reason
    measured = {m.labels["path"] for m in entry.metrics if m.name == "p50"}
    assert measured == {"gloo", "tcp", "tp_uv", "tcp@uv"}
    assert not {m.name for m in entry.metrics} & {"suite_over_bare_loop", "async_speedup",
                                                  "uv_over_shm", "calls_per_s"}
    assert "paths left out (--param paths): tp_builtin, tp_python, bare_loop, tp_shm" in \
        entry.notes
    bad = execute(case, "cpu", {"sizes": [4], "paths": "gloo,tp_carrier_pigeon"}, "quick")
    assert bad.outcome == "error" and "tp_carrier_pigeon not among tp_builtin" in bad.reason


def test_an_async_call_that_raises_is_told_from_one_that_returns_the_wrong_thing():
    """async_execution's outcomes: a call that raised is marked so (its check fails as a
    crash), a plain call that hands back the Future is a wrong value, not a crash."""
    def boom():
        raise TypeError("boom")

    assert workers._outcome(boom) == {"value": None, "error": "TypeError: boom", "raised": True}
    future = torch.futures.Future()
    got = workers._outcome(lambda: future)
    assert got["error"] == "returned a torch.futures.Future, not its value"
    assert not got.get("raised")
    assert workers._outcome(lambda: 3) == {"value": 3, "error": None}
