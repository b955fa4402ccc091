"""The launcher: values back by rank, and every kind of worker failure as a clear error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness.running import launch as launching
from harness.running.launch import LOOPBACK, LaunchError, free_port, launch

pytestmark = pytest.mark.distributed


# Workers must be module-level: spawn pickles them by name.
def report_env(rank, world):
    return {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")} | {
        "pid": os.getpid(), "arg_rank": rank, "world": world}


def abort_on_the_way_out():
    """Setup: the worker ends by SIGABRT after writing its result, as a process using torch's
    fork/wait does at exit in some runs."""
    os._exit = lambda code: os.abort()


def raise_on_rank1(rank, world):
    if rank == 1:
        raise ValueError("boom from rank 1")
    return rank


def return_a_lock(rank, world):
    import threading

    return threading.Lock()  # cannot be pickled back to the parent


def exit_hard(rank, world):
    if rank == 0:
        print("about to exit hard", flush=True)
        os._exit(3)
    return rank


def kill_self(rank, world):
    os.kill(os.getpid(), signal.SIGKILL)


def hang(rank, world):
    time.sleep(3600)


def hang_with_child(rank, world):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(os.environ["CHILD_PID_FILE"] + str(rank), "w") as f:
        f.write(str(child.pid))
    time.sleep(3600)


def rank0_hangs_rank1_raises(rank, world):
    if rank == 1:
        time.sleep(0.5)
        raise RuntimeError("rank 1 failed first")
    time.sleep(3600)


def rejoin_three_times(rank, world):
    """Join the same RPC and Gloo group three times in a row, using both each time."""
    import torch
    import torch.distributed as dist
    from torch.distributed import rpc

    from harness.running import rpc_group

    got = []
    for session in range(3):
        options = rpc.TensorPipeRpcBackendOptions(init_method=rpc_group.rendezvous_url())
        with rpc_group.joined(rank, world, f"w{rank}", options, dist.default_pg_timeout,
                              session=session):
            t = torch.tensor([float(rank + 1 + 10 * session)])
            dist.all_reduce(t)
            other = rpc.rpc_sync(f"w{1 - rank}", torch.add, args=(torch.tensor([rank]), session))
            got.append((t.item(), other.item()))
    return got


def warn_and_return(rank, world):
    import warnings

    warnings.warn("a warning from the worker", UserWarning, stacklevel=1)
    return rank


def break_math():
    import math

    math.pi = 3.0


def read_pi(rank, world):
    import math

    return math.pi


def _stray_children():
    """Our descendants, less multiprocessing's resource tracker (it lives as long as we do)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _all_dead(pids):
    return not [p for p in pids if psutil.pid_exists(p) and
                psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_returns_values_by_rank_with_loopback_env():
    out = launch(report_env, 3, timeout_s=60)
    assert [o["arg_rank"] for o in out] == [0, 1, 2]
    assert [o["RANK"] for o in out] == ["0", "1", "2"]
    assert {o["MASTER_ADDR"] for o in out} == {LOOPBACK}
    assert len({o["MASTER_PORT"] for o in out}) == 1
    assert _all_dead([o["pid"] for o in out])


def test_workers_join_the_same_rpc_and_gloo_group_again_session_after_session():
    """Measurements pool fresh sessions of one pair of processes (suites/rpc/measure.py): a
    Gloo group after the first must not meet the keys its predecessor left in the store."""
    out = launch(rejoin_three_times, 2, timeout_s=120)
    assert out[0] == [(3.0, 0.0), (23.0, 1.0), (43.0, 2.0)]
    assert out[1] == [(3.0, 1.0), (23.0, 2.0), (43.0, 3.0)]


def test_worker_exception_names_rank_type_and_message():
    with pytest.raises(LaunchError) as err:
        launch(raise_on_rank1, 2, timeout_s=60)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("worker rank 1 raised ValueError: boom from rank 1")
    failure = err.value.failures[0]
    assert "raise_on_rank1" in failure.traceback


def test_a_result_that_cannot_be_pickled_is_a_clear_error():
    with pytest.raises(LaunchError) as err:
        launch(return_a_lock, 1, timeout_s=60)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("worker rank 0 raised TypeError: result could not be pickled: ")


def test_hard_exit_reports_exit_code_and_log():
    with pytest.raises(LaunchError) as err:
        launch(exit_hard, 2, timeout_s=60)
    assert "worker rank 0 exited with code 3 without a result" in str(err.value)
    assert "about to exit hard" in err.value.failures[0].log_tail


def test_signal_death_is_named():
    with pytest.raises(LaunchError, match="killed by signal SIGKILL"):
        launch(kill_self, 1, timeout_s=60)


def test_hang_times_out_and_every_process_is_reaped(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as err:
        launch(hang_with_child, 2, timeout_s=8, env={"CHILD_PID_FILE": str(tmp_path / "pid")})
    elapsed = time.monotonic() - t0
    assert "timed out" in str(err.value) and "ranks 0, 1" in str(err.value)
    assert elapsed < 8 + 15, f"took {elapsed:.1f} s to give up"
    children = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
    assert _all_dead(children)
    assert not _stray_children()


def test_first_failure_is_the_root_cause_and_peers_are_stopped():
    with pytest.raises(LaunchError) as err:
        launch(rank0_hangs_rank1_raises, 2, timeout_s=120, grace_s=1)
    assert str(err.value) == ("worker rank 1 raised RuntimeError: rank 1 failed first "
                              "(then: rank 0 stopped)")
    assert [f.kind for f in err.value.failures] == ["exception", "stopped"]
    assert not _stray_children()


def test_worker_warnings_reach_the_parent():
    with pytest.warns(UserWarning, match="a warning from the worker"):
        launch(warn_and_return, 1, timeout_s=60)


def test_a_result_returned_before_an_abort_at_exit_is_kept_and_the_abort_said():
    with pytest.warns(RuntimeWarning, match="worker rank 0 returned its result, then was "
                                            "killed by signal SIGABRT"):
        assert launch(raise_on_rank1, 1, timeout_s=60, setup=abort_on_the_way_out) == [0]


def test_setup_runs_in_the_worker_before_fn():
    assert launch(read_pi, 1, timeout_s=60, setup=break_math) == [3.0]


def test_free_port_is_bindable_on_loopback():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind((LOOPBACK, port))


def ignore_sigterm_and_sleep(ready):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(120)


def test_a_worker_that_ignores_sigterm_is_killed_and_an_interrupt_does_not_cut_reaping_short(
        monkeypatch):
    """Reaping ends a worker that ignores SIGTERM with SIGKILL; a Ctrl-C that lands while
    reaping lets it finish first and is raised after; a process that ended meanwhile is
    neither running nor an error to kill."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=ignore_sigterm_and_sleep, args=(ready,))
    p.start()
    assert ready.wait(60)  # SIGTERM is ignored from here
    launching._reap([p])
    assert not p.is_alive() and p.exitcode == -signal.SIGKILL

    calls = []

    def reap(procs):
        calls.append(procs)
        if len(calls) == 1:
            raise KeyboardInterrupt("signal SIGTERM")

    monkeypatch.setattr(launching, "_reap", reap)
    with pytest.raises(KeyboardInterrupt, match="signal SIGTERM"):
        launching._reap_through_interrupts(["worker"])
    assert calls == [["worker"], ["worker"]]  # reaped to the end, then the interrupt

    gone = 2**22 + 1  # above Linux's largest pid
    assert launching.still_running([gone]) == []
    killed = []

    def kill(pid, sig):
        killed.append(pid)
        raise ProcessLookupError(pid)  # it ended between the check and the kill

    monkeypatch.setattr(launching.os, "kill", kill)
    launching.kill_leftovers([os.getpid()])
    assert killed == [os.getpid()]


def leave_a_thread_running(rank, world):
    import threading

    # not a daemon: the interpreter's teardown would wait for it, as for RPC/Gloo threads
    threading.Thread(target=time.sleep, args=(3600,), name="left-running").start()
    return rank


def test_a_worker_that_leaves_a_thread_running_ends_cleanly_once_it_has_returned():
    """A worker ends at once with its status, skipping the interpreter's teardown, which would
    wait for every thread that is not a daemon: the launch returns its value, not a timeout,
    and no 'returned its result, then ...' warning says the worker ended otherwise."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert launch(leave_a_thread_running, 1, timeout_s=30) == [0]
    assert not [w for w in caught if "returned its result, then" in str(w.message)]


def test_a_torch_whose_store_takes_no_listening_socket_gets_a_store_on_the_same_port(
        monkeypatch):
    """torch before 2.2: TCPStore takes no listening socket (master_listen_fd, use_libuv).
    The launcher lets go of the port it was given and the store binds it itself: a client
    reaches the store on that port."""
    from datetime import timedelta

    import torch.distributed as dist

    real = dist.TCPStore  # (the store that binds its port itself listens on every interface,
    # as in that torch; only this test's client, on loopback, talks to it)

    def older_tcpstore(host, port, *, is_master, wait_for_workers, timeout):
        return real(host, port, is_master=is_master, wait_for_workers=wait_for_workers,
                    timeout=timeout)

    monkeypatch.setattr(launching.dist, "TCPStore", older_tcpstore)
    store, port = launching.bound_store(LOOPBACK, 0, timeout_s=10)
    client = real(LOOPBACK, port, is_master=False, timeout=timedelta(seconds=10))
    client.set("from the client", b"seen")
    assert store.get("from the client") == b"seen"


def test_reaping_goes_on_when_a_workers_children_cannot_be_listed_or_end_before_the_kill(
        monkeypatch):
    """psutil may fail to list a worker's children (the worker ended meanwhile, or access is
    denied), and a child may end between the listing and its kill: every worker is stopped
    all the same, and neither is an error."""
    import multiprocessing as mp
    from types import SimpleNamespace

    ctx = mp.get_context("spawn")
    unlisted, parent = ctx.Process(target=time.sleep, args=(60,)), ctx.Process(
        target=time.sleep, args=(60,))
    unlisted.start()
    parent.start()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    child = psutil.Process(ended.pid)
    ended.wait()  # gone and reaped: killing it raises NoSuchProcess

    real = psutil.Process

    def process(pid):
        if pid == unlisted.pid:
            raise psutil.AccessDenied(pid)
        if pid == parent.pid:
            return SimpleNamespace(children=lambda recursive: [child])
        return real(pid)

    monkeypatch.setattr(launching.psutil, "Process", process)
    try:
        launching._reap([unlisted, parent])
    finally:
        for p in (unlisted, parent):
            p.kill()
            p.join(5)
    assert (unlisted.exitcode, parent.exitcode) == (-signal.SIGTERM, -signal.SIGTERM)
