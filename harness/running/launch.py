"""Multi-process runs on this machine: one launcher owns ports, timeouts and failures.

`launch(fn, nprocs, args)` starts `nprocs` spawned processes, each calling
`fn(rank, world_size, *args)` with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE set and every
listener pinned to loopback, and returns their return values by rank.

The launcher hosts the rendezvous store itself, as torchrun's agent does: a TCPStore bound to
MASTER_ADDR only (`bound_store`), with TORCHELASTIC_USE_AGENT_STORE set so that every
worker's `env://` or `tcp://MASTER_ADDR:MASTER_PORT` rendezvous is a client of it. Left to
itself, rank 0 would host that store on every interface (`*:PORT`), whatever address the
init_method names.

Whatever goes wrong becomes a `LaunchError` whose message is one line naming the first
failure:

- a worker raises: its exception type, message and traceback;
- a worker exits without a result (os._exit, a segfault, the OOM killer): its exit code or
  signal, and the tail of its log;
- a worker hangs: the timeout, and which ranks were still running.

When one worker fails its peers get `grace_s` to finish or fail on their own (a dead RPC
peer usually makes them raise), then they are stopped. In every case all workers and their
children are reaped before `launch` returns.

Across several hosts (`release-bench multihost`, over torchrun) the caller passes the run's
`cluster` (a case's `ctx.launch` does): `harness.running.nodes` places the ranks on every host, and
each host starts its share with the same machinery.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, NoReturn, Protocol

import psutil
import torch.distributed as dist
import torch.multiprocessing as mp

LOOPBACK = "127.0.0.1"
BIND_ADDR_ENV = "RELEASE_BENCH_BIND_ADDR"
LOG_TAIL_CHARS = 1500


@dataclass
class WorkerFailure:
    rank: int
    kind: str  # "exception", "exit", "timeout", "stopped"
    message: str
    traceback: str = ""
    log_tail: str = ""


class LaunchError(RuntimeError):
    """Workers failed; str() is one line naming the first failure."""

    def __init__(self, failures: list[WorkerFailure], label: str = "worker"):
        self.failures = failures
        first = failures[0]
        if first.kind == "timeout":
            ranks = ", ".join(str(f.rank) for f in failures if f.kind == "timeout")
            line = f"{label}s timed out: {first.message} (ranks {ranks} still running, killed)"
        else:
            line = f"{label} rank {first.rank} {first.message}"
            then = [f"rank {f.rank} {'stopped' if f.kind == 'stopped' else f.message}"
                    for f in failures[1:]]
            if then:
                line += f" (then: {'; '.join(then)})"
        super().__init__(line)

    def failures_json(self) -> list[dict[str, Any]]:
        return [asdict(f) for f in self.failures]


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def bound_store(host: str = LOOPBACK, port: int = 0,
                timeout_s: float = 300.0) -> tuple[dist.TCPStore, int]:
    """A TCPStore server listening on `host` only; returns (store, port).

    TCPStore binds its own listener to every interface; handed a socket that is already
    bound and listening (`master_listen_fd`, which needs the non-libuv server) it keeps to
    that address. The store owns the socket from then on.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A store that closed its connections first leaves them in TIME_WAIT on its port for a
    # minute; without SO_REUSEADDR (on both, Linux asks) the next store on that port (a
    # second run to the same --rdzv-endpoint) cannot bind. A port someone listens on is
    # still refused.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(512)  # TCPStore aborts the process if the socket is not listening yet
        port = sock.getsockname()[1]
        try:
            store = dist.TCPStore(host, port, is_master=True, master_listen_fd=sock.fileno(),
                                  use_libuv=False, wait_for_workers=False,
                                  timeout=timedelta(seconds=timeout_s))
            sock.detach()
        except TypeError:
            # torch before 2.2 takes no listening socket (nor use_libuv): its store binds the
            # port itself, on every interface, once this socket has let it go
            sock.close()
            store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                                  timeout=timedelta(seconds=timeout_s))
    finally:
        sock.close()  # a no-op once detached
    return store, port


def agent_store_env(host: str, port: int) -> dict[str, str]:
    """The variables that make a process's rendezvous a client of the store at host:port
    (torch's rendezvous honours TORCHELASTIC_USE_AGENT_STORE for MASTER_ADDR:MASTER_PORT)."""
    env = {"MASTER_ADDR": host, "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
           # torch before 2.1 reads it unconditionally with the agent's store (its key prefix)
           "TORCHELASTIC_RESTART_COUNT": os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")}
    if host == LOOPBACK:
        # Gloo and TensorPipe pick an interface by hostname otherwise; keep them on loopback.
        env.update(GLOO_SOCKET_IFNAME="lo", TP_SOCKET_IFNAME="lo")
    return env


def _write_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(obj, f)
    os.replace(tmp, path)


def _worker_main(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    args: Sequence[Any],
    workdir: str,
    env: dict[str, str],
    setup: Callable[[], None] | None,
) -> None:
    work = Path(workdir)
    # Everything the worker prints (including a fatal signal's traceback) goes to its log,
    # which the parent quotes when the worker dies.
    log = open(work / f"rank{rank}.log", "w", buffering=1)  # noqa: SIM115 - lives until exit
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    faulthandler.enable(log)
    os.environ.update(env, RANK=str(rank), LOCAL_RANK=str(rank))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if setup is not None:
                setup()
            result: dict[str, Any] = {"ok": True, "value": fn(rank, world_size, *args)}
            code = 0
        except BaseException as e:  # report everything, including SystemExit, to the parent
            result = {
                "ok": False,
                "type": type(e).__name__,
                "message": str(e).splitlines()[0] if str(e) else "",
                "traceback": traceback.format_exc(),
            }
            code = 1
    # The parent re-issues the workers' warnings, so a run records them as it records its own.
    result["warnings"] = list(
        {(w.category, str(w.message), w.filename, w.lineno) for w in caught}
    )
    try:
        _write_atomic(work / f"rank{rank}.pkl", result)
    except Exception as e:  # an unpicklable return value
        _write_atomic(work / f"rank{rank}.pkl", {
            "ok": False, "type": type(e).__name__,
            "message": f"result could not be pickled: {e}", "traceback": traceback.format_exc(),
        })
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: RPC/Gloo threads left behind by a failure can block it.
    _end_worker(code)


def _end_worker(code: int) -> NoReturn:
    """End this worker at once with status `code` (os._exit), first saving what coverage.py
    measured in it (scripts/gpu-only-lines.py), which os._exit would otherwise lose.

    Saved while coverage still measures, as coverage.py's own `patch = _exit` does: the data
    then holds every line that led here, this function's call included."""
    try:
        coverage = sys.modules.get("coverage")
        current = coverage.Coverage.current() if coverage is not None else None
        if current is not None:
            current.save()
    finally:  # whatever the save met: teardown is what this exit avoids
        os._exit(code)


def _log_tail(workdir: Path, rank: int) -> str:
    try:
        return (workdir / f"rank{rank}.log").read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""


def _collect(p: mp.Process, rank: int, workdir: Path) -> tuple[bool, Any]:
    """(True, value) for a worker that returned, (False, WorkerFailure) otherwise."""
    p.join()
    res_file = workdir / f"rank{rank}.pkl"
    if res_file.exists():
        with open(res_file, "rb") as f:
            res = pickle.load(f)
        for category, message, filename, lineno in res.get("warnings", []):
            warnings.warn_explicit(message, category, filename, lineno)
        if res["ok"]:
            if p.exitcode != 0:
                # It returned; only its way out went wrong (torch's fork/wait aborts at exit in
                # some processes). Keep the result and say so: the suites' clean_exit cases,
                # not every benchmark that uses the feature, own that defect.
                warnings.warn(f"worker rank {rank} returned its result, then "
                              f"{_how_it_ended(p.exitcode)}", RuntimeWarning, stacklevel=1)
            return True, res["value"]
        if not res["ok"]:
            return False, WorkerFailure(
                rank, "exception", f"raised {res['type']}: {res['message']}",
                res["traceback"], _log_tail(workdir, rank))
    return False, WorkerFailure(rank, "exit", f"{_how_it_ended(p.exitcode)} without a result",
                                "", _log_tail(workdir, rank))


def _how_it_ended(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by signal {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _reap(procs: list[mp.Process]) -> None:
    """Stop every worker still alive, and any process it started."""
    for p in procs:
        if p.pid is None or not p.is_alive():
            continue
        try:
            kids = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            kids = []
        p.terminate()
        p.join(2)
        if p.is_alive():
            p.kill()
            p.join(5)
        for k in kids:
            try:
                k.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(kids, timeout=5)
    for p in procs:
        if p.pid is not None:
            p.join(1)


def _reap_through_interrupts(procs: list[mp.Process], tries: int = 3) -> None:
    """`_reap`, carried to the end even when Ctrl-C (or the runner's SIGTERM handler, which
    raises a KeyboardInterrupt) lands part-way through it; the interrupt is raised afterwards.

    An interrupt cut short in `_reap` would leave the workers not yet stopped running,
    orphaned, after the run has gone. `tries` bounds it for someone pressing Ctrl-C on and on.
    """
    interrupt: KeyboardInterrupt | None = None
    for _ in range(tries):
        try:
            _reap(procs)
            break
        except KeyboardInterrupt as e:
            interrupt = interrupt or e
    if interrupt is not None:
        raise interrupt


class LocalRanks:
    """Some ranks of a launch, each in a spawned process of this machine, and their outcomes.

    `launch` starts every rank here; a run across hosts (`harness.running.nodes`) starts each
    host's share of the ranks in one of these on that host.
    """

    def __init__(self, fn: Callable[..., Any], ranks: Sequence[int], world: int,
                 args: Sequence[Any], env: dict[str, str],
                 setup: Callable[[], None] | None, label: str):
        self.workdir = Path(tempfile.mkdtemp(prefix="release-bench-launch-"))
        ctx = mp.get_context("spawn")
        self.procs = {
            rank: ctx.Process(target=_worker_main,
                              args=(fn, rank, world, tuple(args), str(self.workdir), env, setup),
                              name=f"{label}-{rank}", daemon=True)
            for rank in ranks
        }
        self.pending = dict(self.procs)

    def start(self) -> None:
        for p in self.procs.values():
            p.start()

    def pids(self) -> dict[int, int]:
        """The process id of each worker started."""
        return {rank: p.pid for rank, p in self.procs.items() if p.pid is not None}

    def wait(self, timeout: float) -> list[tuple[int, bool, Any]]:
        """(rank, True, value) or (rank, False, WorkerFailure) for each worker that ended
        within `timeout` seconds (`gather` asks only while some are pending)."""
        done = wait([p.sentinel for p in self.pending.values()], timeout=timeout)
        ended = []
        for rank, p in list(self.pending.items()):
            if p.sentinel in done:
                del self.pending[rank]
                ended.append((rank, *_collect(p, rank, self.workdir)))
        return ended

    def unfinished(self, stopped: bool, timeout_s: float) -> list[WorkerFailure]:
        """A failure for each worker still running: stopped (after a peer failed), else a
        timeout."""
        if stopped:
            return [WorkerFailure(r, "stopped", "stopped after a peer failed", "",
                                  _log_tail(self.workdir, r)) for r in sorted(self.pending)]
        return [WorkerFailure(r, "timeout", f"no result after {timeout_s:g} s", "",
                              _log_tail(self.workdir, r)) for r in sorted(self.pending)]

    def close(self) -> None:
        """Reap every worker and its children; remove the logs."""
        try:
            _reap_through_interrupts(list(self.procs.values()))
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


def gather(local: LocalRanks, timeout_s: float, grace_s: float,
           others: Callable[[], list[tuple[int, bool, Any]]] | None = None,
           others_pending: Callable[[], bool] = lambda: False,
           stop_requested: Callable[[], bool] = lambda: False,
           poll_s: float | None = None,
           ) -> tuple[dict[int, Any], list[WorkerFailure]]:
    """Wait for the workers' outcomes: (values by rank, failures in the order they matter).

    `others()` polls ranks that run elsewhere (on other hosts) while `others_pending()`;
    `stop_requested()` ends the wait early, as a peer's failure does; both are looked at every
    `poll_s` seconds. The first failure gives the rest `grace_s` to finish or fail on their
    own.
    """
    results: dict[int, Any] = {}
    failures: list[WorkerFailure] = []
    deadline = time.monotonic() + timeout_s
    stopped = False
    while local.pending or others_pending():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if stop_requested():
            stopped = True
            break
        step = remaining if poll_s is None else min(remaining, poll_s)
        batch = []
        if local.pending:
            ended = local.wait(step)
        else:  # only ranks elsewhere are left: look again in `step`
            time.sleep(step)
            ended = []
        if others is not None:
            ended += others()
        for rank, ok, value in ended:
            if ok:
                results[rank] = value
            else:
                batch.append(value)
        if batch and not failures:  # the first failure: peers get a grace period, no more
            deadline = min(deadline, time.monotonic() + grace_s)
        # Of failures seen together, a death comes before the exceptions it caused.
        failures.extend(sorted(batch, key=lambda f: f.kind != "exit"))
    failures.extend(local.unfinished(bool(failures) or stopped, timeout_s))
    return results, failures


class Cluster(Protocol):
    """Hosts that a launch spreads its ranks over: `nodes.Cluster`, which node 0 of a run
    across hosts hands to the runner, and the runner to each case's `Context`."""

    def launch(self, fn: Callable[..., Any], nprocs: int, args: Sequence[Any], *,
               timeout_s: float, grace_s: float, setup: Callable[[], None] | None,
               env: dict[str, str] | None, label: str, store_port: int | None,
               started: dict[int, int] | None = None) -> list[Any]: ...

    def hosts(self) -> list[dict[str, Any]]:
        """One entry per host, for the run record."""
        ...

    def take_placements(self) -> list[dict[str, str]]:
        """The hosts each rank of the launches since the last call ran on."""
        ...


def bind_address() -> str:
    """The address a worker's own listeners (the TCP floor's echo, say) bind to: this host's
    interface in a run across hosts, loopback otherwise. Never every interface."""
    return os.environ.get(BIND_ADDR_ENV, LOOPBACK)


def launch(
    fn: Callable[..., Any],
    nprocs: int,
    args: Sequence[Any] = (),
    *,
    timeout_s: float = 300.0,
    grace_s: float = 5.0,
    setup: Callable[[], None] | None = None,
    env: dict[str, str] | None = None,
    host: str = LOOPBACK,
    label: str = "worker",
    store_port: int | None = None,
    started: dict[int, int] | None = None,
    cluster: Cluster | None = None,
) -> list[Any]:
    """Run `fn(rank, nprocs, *args)` in `nprocs` spawned processes; return values by rank.

    `fn` and `setup` must be importable module-level functions (spawn pickles them by name);
    `setup()` runs in each worker before `fn`, for instance to patch torch on purpose.
    The workers rendezvous through a store this call hosts on `host`, or through the one the
    caller already hosts there at `store_port` (`bound_store`). With `cluster` (a run across
    hosts) the ranks are spread over its hosts instead (`harness.running.nodes`); a case's
    `ctx.launch` passes the run's. `started`, when given, receives the pid of each worker of
    this machine as soon as it starts (for checks that every one is reaped).
    """
    if nprocs < 1:
        raise ValueError("nprocs must be at least 1")
    if cluster is not None:
        return cluster.launch(fn, nprocs, args, timeout_s=timeout_s, grace_s=grace_s,
                              setup=setup, env=env, label=label, store_port=store_port,
                              started=started)
    if store_port is None:
        store, store_port = bound_store(host, timeout_s=timeout_s)
    else:
        store = None  # the caller hosts it
    worker_env = {
        **agent_store_env(host, store_port),
        "WORLD_SIZE": str(nprocs),
        "LOCAL_WORLD_SIZE": str(nprocs),
        BIND_ADDR_ENV: host,
    }
    worker_env.update(env or {})
    local = LocalRanks(fn, range(nprocs), nprocs, args, worker_env, setup, label)
    try:
        local.start()
        if started is not None:
            started.update(local.pids())
        results, failures = gather(local, timeout_s, grace_s)
    finally:
        local.close()
        del store  # closes its listener
    if failures:
        raise LaunchError(failures, label)
    return [results[r] for r in range(nprocs)]


def still_running(pids: Iterable[int]) -> list[int]:
    """The processes of `pids` that are still alive (a zombie counts as gone: it has ended and
    only waits for its parent to read its status)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def kill_leftovers(pids: Iterable[int]) -> None:
    """SIGKILL whatever of `pids` still runs (tests that stop the launcher reaping on purpose
    clean up with this)."""
    for pid in still_running(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
