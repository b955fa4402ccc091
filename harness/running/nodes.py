"""Runs across several hosts: torchrun places one node agent on each host; node 0 runs the
suites, and every multi-process case spreads its ranks over the hosts.

What runs where, for `release-bench multihost` on every host:

    release-bench multihost            hosts the rendezvous store on the endpoint's host,
    │                                  bound to the endpoint's address only
    └─ torchrun --rdzv-backend c10d    joins the rendezvous (is_host=false: the store above)
       └─ python -m harness.running.nodes      the node agent: node 0 runs the selected cases; the
          │                            others serve their share of each case's ranks
          └─ spawned workers           `harness.running.launch.LocalRanks`, as on one machine

Node 0's agent hands its `Cluster` to the run (`commands.run.run_across_hosts`), the runner
to each case's `Context`, and the case's `ctx.launch` to `launch.launch`, which then calls
`Cluster.launch`: nothing else learns that the run spans hosts.

Rank r of a case runs on node r % nnodes, so a two-process case puts its client on node 0
and its peer on node 1. The node agents talk through the rendezvous store under a prefix of
their own: node 0 posts each host's share of a launch as a job, each host posts a report
(values, failures and warnings by rank), and node 0 beats a heartbeat while it lives.

Every listener binds to the interface the user names (`--iface`), never to every interface:
the rendezvous store (`launch.bound_store`), each case's store, TensorPipe and Gloo
(TP_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) and the suites' own helper sockets
(`launch.bind_address`). torchrun's agent would otherwise host stores on `*`: it is told
not to (`is_host=false`, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import psutil
import torch.distributed as dist

from harness.running import launch, machine

RDZV_ENV = "RELEASE_BENCH_RDZV"  # host:port of the rendezvous store, for the node agents
IFACE_ENV = "RELEASE_BENCH_IFACE"
PREFIX = "release-bench"
BEAT_S = 1.0  # every node agent's heartbeat period
BEAT_LOST_S = 20.0  # a node whose heartbeat stops this long is lost
FINISH_GRACE_S = 15.0  # how long torchrun gets to exit after node 0's agent has finished
REPORT_MARGIN_S = 15.0  # how much longer than a launch's timeout node 0 waits for a host
LEAVE_TIMEOUT_S = 60.0  # how long the store's host waits for the other hosts to finish
REACH_STORE_S = 5.0  # how long a host that does not hold the store tries to reach it at the end
POLL_S = 0.2  # how often a waiting node looks at the store
PR_SET_PDEATHSIG = 1  # prctl option, from <linux/prctl.h>


class NodeError(RuntimeError):
    """A host of the run failed or vanished; str() is one line."""


@dataclass(frozen=True)
class Node:
    rank: int
    hostname: str
    iface: str
    addr: str
    fingerprint: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def label(self) -> str:
        """How records name this host (two nodes on one machine share a hostname)."""
        return f"node {self.rank} ({self.hostname} {self.addr})"

    def worker_env(self) -> dict[str, str]:
        """What pins a worker's listeners on this host to its interface."""
        return {"GLOO_SOCKET_IFNAME": self.iface, "TP_SOCKET_IFNAME": self.iface,
                launch.BIND_ADDR_ENV: self.addr}

    def describe(self) -> dict[str, Any]:
        return {"node": self.rank, "hostname": self.hostname, "iface": self.iface,
                "addr": self.addr, "machine": self.fingerprint}


def iface_address(iface: str) -> str:
    """The IPv4 address of interface `iface` (one line if there is none)."""
    addrs = psutil.net_if_addrs()
    if iface not in addrs:
        raise NodeError(f"no network interface named {iface!r} here "
                        f"(there are: {', '.join(sorted(addrs))})")
    for a in addrs[iface]:
        if a.family == socket.AF_INET:
            return a.address
    raise NodeError(f"interface {iface!r} has no IPv4 address")


def placement(nprocs: int, nnodes: int) -> dict[int, list[int]]:
    """The ranks each node runs: rank r on node r % nnodes."""
    out: dict[int, list[int]] = {}
    for r in range(nprocs):
        out.setdefault(r % nnodes, []).append(r)
    return out


def _client(host: str, port: int, timeout_s: float) -> dist.Store:
    """A client of the rendezvous store, under this run's prefix."""
    return _in_run(dist.TCPStore(host, port, is_master=False,
                                 timeout=timedelta(seconds=timeout_s)))


def _in_run(store: dist.Store) -> dist.Store:
    return dist.PrefixStore(f"{PREFIX}/{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}", store)


def _wrappers(store: dist.Store) -> dist.Store:
    """The keys the `multihost` commands and node 0's agent share (no run id: the commands
    do not know torchrun's)."""
    return dist.PrefixStore(f"{PREFIX}-wrappers", store)


class Heartbeats:
    """Every node agent beats once a second; a node silent for BEAT_LOST_S is lost."""

    def __init__(self, store: dist.Store):
        self.store = store
        self.seen: dict[int, tuple[int, float]] = {}

    @staticmethod
    def beat(host: str, port: int, rank: int, stop: threading.Event) -> None:
        """This node's heartbeat, on a store client of its own (one client per thread)."""
        store = _client(host, port, 60.0)
        while not stop.wait(BEAT_S):
            store.add(f"beat/{rank}", 1)

    def silent(self, rank: int) -> bool:
        beat, now = self.store.add(f"beat/{rank}", 0), time.monotonic()
        last, since = self.seen.get(rank, (-1, now))
        if beat != last:
            self.seen[rank] = (beat, now)
            return False
        return now - since > BEAT_LOST_S


def _set(store: dist.Store, key: str, obj: Any) -> None:
    store.set(key, pickle.dumps(obj))


def _get(store: dist.Store, key: str) -> Any:
    return pickle.loads(store.get(key))


class Cluster:
    """The node agent's view of the run: this node, every node, and the store they share."""

    def __init__(self, store: dist.Store, me: Node, nodes: list[Node]):
        self.store, self.me, self.nodes = store, me, nodes
        self.jobs = {n.rank: 0 for n in nodes}  # jobs posted to (or taken by) each node
        self.launches = 0
        self.placements: list[dict[str, str]] = []
        self.hearts = Heartbeats(store)
        self.lost: dict[int, str] = {}  # node: why it is gone

    # --- node 0 ---------------------------------------------------------------------------

    def launch(self, fn: Callable[..., Any], nprocs: int, args: Sequence[Any], *,
               timeout_s: float, grace_s: float, setup: Callable[[], None] | None,
               env: dict[str, str] | None, label: str, store_port: int | None,
               started: dict[int, int] | None = None) -> list[Any]:
        """`launch.launch` across the hosts: this host's ranks start here, the others'
        on their hosts; one `LaunchError` names the first failure and where it happened."""
        store = None
        if store_port is None:
            store, store_port = launch.bound_store(self.me.addr, timeout_s=timeout_s)
        base = {**launch.agent_store_env(self.me.addr, store_port),
                "WORLD_SIZE": str(nprocs), **(env or {})}
        where = placement(nprocs, len(self.nodes))
        if gone := [k for k in where if k in self.lost]:
            # a host lost earlier: fail at once rather than wait for it again
            raise launch.LaunchError([launch.WorkerFailure(r, "exit", self.lost[k])
                                      for k in gone for r in where[k]], label)
        self.launches += 1
        stop_key = f"launch/{self.launches}/stop"
        remote = _RemoteShare(self)
        for k, ranks in where.items():
            if k != self.me.rank:
                remote.post(k, {"fn": fn, "ranks": ranks, "world": nprocs, "args": tuple(args),
                                "env": {**base, "LOCAL_WORLD_SIZE": str(len(ranks))},
                                "setup": setup, "label": label, "timeout_s": timeout_s,
                                "grace_s": grace_s, "stop_key": stop_key})
        mine = where.get(self.me.rank, [])
        local = launch.LocalRanks(fn, mine, nprocs, args,
                                  {**base, "LOCAL_WORLD_SIZE": str(len(mine)),
                                   **self.me.worker_env()}, setup, label)
        try:
            local.start()
            if started is not None:
                started.update(local.pids())
            results, failures = launch.gather(local, timeout_s + REPORT_MARGIN_S, grace_s,
                                              others=remote.poll, others_pending=remote.pending,
                                              poll_s=POLL_S)
            if remote.pending():
                remote.stop(stop_key, grace_s + REPORT_MARGIN_S, timeout_s, results, failures)
        finally:
            local.close()
            del store
        self.placements.append({str(r): self.nodes[k].label
                                for k, ranks in where.items() for r in ranks})
        if failures:
            raise launch.LaunchError(failures, label)
        return [results[r] for r in range(nprocs)]

    def hosts(self) -> list[dict[str, Any]]:
        """Every host of the run, as the record lists them."""
        return [n.describe() for n in self.nodes]

    def take_placements(self) -> list[dict[str, str]]:
        """The distinct rank-to-host maps of the launches since the last call."""
        seen: list[dict[str, str]] = []
        for p in self.placements:
            if p not in seen:
                seen.append(p)
        self.placements = []
        return seen

    def end(self) -> None:
        """Tell every node the run is over and wait (bounded) until each has gone."""
        self.store.set("end", b"1")
        others = [f"left/{n.rank}" for n in self.nodes
                  if n.rank != self.me.rank and n.rank not in self.lost]
        try:
            if others:
                self.store.wait(others, timedelta(seconds=LEAVE_TIMEOUT_S))
        except dist.DistStoreError:
            print("release-bench: some hosts did not confirm the end of the run",
                  file=sys.stderr)

    # --- every other node -------------------------------------------------------------------

    def serve(self) -> None:
        """Run this host's share of each launch node 0 posts, until node 0 ends the run."""
        k = self.me.rank
        while True:
            job_key = f"node/{k}/job/{self.jobs[k] + 1}"
            if self.store.check([job_key]):
                self.jobs[k] += 1
                job = _get(self.store, job_key)
                _set(self.store, f"{job_key}/report", self._run_share(job))
                continue
            if self.store.check(["end"]):
                self.store.set(f"left/{k}", b"1")
                return
            if self.hearts.silent(0):
                raise NodeError(f"{self.nodes[0].label} has been silent for "
                                f"{BEAT_LOST_S:g} s: giving up")
            time.sleep(0.1)

    def _run_share(self, job: dict[str, Any]) -> dict[str, Any]:
        local = launch.LocalRanks(job["fn"], job["ranks"], job["world"], job["args"],
                                  {**job["env"], **self.me.worker_env()}, job["setup"],
                                  job["label"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                local.start()
                results, failures = launch.gather(
                    local, job["timeout_s"], job["grace_s"], poll_s=POLL_S,
                    stop_requested=lambda: self.store.check([job["stop_key"]]))
            finally:
                local.close()
        return {"results": results, "failures": failures,
                "warnings": [(w.category, str(w.message), w.filename, w.lineno)
                             for w in caught]}


class _RemoteShare:
    """The ranks of one launch that run on other hosts, seen from node 0."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.waiting: dict[int, tuple[str, list[int]]] = {}  # node: (report key, ranks)

    def post(self, k: int, job: dict[str, Any]) -> None:
        c = self.cluster
        c.jobs[k] += 1
        key = f"node/{k}/job/{c.jobs[k]}"
        _set(c.store, key, job)
        self.waiting[k] = (f"{key}/report", job["ranks"])

    def pending(self) -> bool:
        return bool(self.waiting)

    def poll(self) -> list[tuple[int, bool, Any]]:
        out = []
        for k, (key, ranks) in list(self.waiting.items()):
            if not self.cluster.store.check([key]):
                if self.cluster.hearts.silent(k):  # the host died: its ranks with it
                    del self.waiting[k]
                    why = (f"was lost with {self.cluster.nodes[k].label}: no heartbeat "
                           f"for {BEAT_LOST_S:g} s")
                    self.cluster.lost[k] = why
                    out += [(r, False, launch.WorkerFailure(r, "exit", why)) for r in ranks]
                continue
            del self.waiting[k]
            report = _get(self.cluster.store, key)
            for category, message, filename, lineno in report["warnings"]:
                warnings.warn_explicit(message, category, filename, lineno)
            host = self.cluster.nodes[k].label
            out += [(r, True, v) for r, v in report["results"].items()]
            out += [(f.rank, False, replace(f, message=f"{f.message} (on {host})"))
                    for f in report["failures"]]
        return out

    def stop(self, stop_key: str, wait_s: float, timeout_s: float, results: dict[int, Any],
             failures: list[launch.WorkerFailure]) -> None:
        """Ask the hosts that have not reported to stop their ranks (`stop_key`), and wait up
        to `wait_s` for their reports: their values go to `results` and their failures to
        `failures` (the launch's outcomes so far), then a timeout for each rank of a host
        that still has not reported."""
        self.cluster.store.set(stop_key, b"1")
        end = time.monotonic() + wait_s
        while self.pending() and time.monotonic() < end:
            for rank, ok, value in self.poll():
                if ok:
                    results[rank] = value
                else:
                    failures.append(value)
            time.sleep(POLL_S)
        failures += self.silent(timeout_s)

    def silent(self, timeout_s: float) -> list[launch.WorkerFailure]:
        """A timeout for each rank of a host that never reported."""
        out = []
        for k, (_key, ranks) in sorted(self.waiting.items()):
            host = self.cluster.nodes[k].label
            out += [launch.WorkerFailure(r, "timeout", f"no report from host {host} within "
                                         f"{timeout_s + REPORT_MARGIN_S:g} s") for r in ranks]
        self.waiting.clear()
        return out


# --- the node agent (torchrun's worker) --------------------------------------------------------


def join(store: dist.Store, rank: int, nnodes: int, iface: str, timeout_s: float) -> Cluster:
    """Announce this node and wait until every node has."""
    me = Node(rank, socket.gethostname(), iface, iface_address(iface), machine.fingerprint())
    _set(store, f"nodes/{rank}", me)
    keys = [f"nodes/{k}" for k in range(nnodes)]
    try:
        store.wait(keys, timedelta(seconds=timeout_s))
    except dist.DistStoreError as e:
        missing = [k for k in keys if not store.check([k])]
        raise NodeError(f"{', '.join(missing)} never announced themselves within "
                        f"{timeout_s:g} s") from e
    return Cluster(store, me, [_get(store, k) for k in keys])


def agent_main(argv: Sequence[str]) -> int:
    """torchrun's worker on each host: node 0 runs `release-bench run ARGV` across the hosts,
    the others serve."""
    from harness.commands import run as run_command

    host, _, port = os.environ[RDZV_ENV].rpartition(":")
    rank, nnodes = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if int(os.environ.get("LOCAL_WORLD_SIZE", "1")) != 1:
        print("release-bench: run one node agent per host (--nproc-per-node 1)",
              file=sys.stderr)
        return 2
    raw = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=300))
    store = _in_run(raw)
    stop = threading.Event()
    threading.Thread(target=Heartbeats.beat, args=(host, int(port), rank, stop), daemon=True,
                     name="node-heartbeat").start()
    try:  # the heartbeat ends with the agent, however it ends, not only with its process
        cluster = join(store, rank, nnodes, os.environ[IFACE_ENV], 300.0)
        if rank != 0:
            try:
                cluster.serve()
            except NodeError as e:
                print(f"release-bench: node {rank}: {e}", file=sys.stderr)
                return 1
            return 0
        code = 1
        _wrappers(raw).set("started", "1")
        try:
            code = run_command.run_across_hosts(list(argv), cluster)
            return code
        finally:
            cluster.end()
            stop.set()  # before "finished": its reader may take the store away at once
            # and the summary out first: after "finished" the commands may stop torchrun
            sys.stdout.flush()
            sys.stderr.flush()
            # the command that hosts the store stops waiting for torchrun (whose exit
            # barrier waits for lost hosts too) once it has this, and waits for no lost
            # host's command
            _wrappers(raw).set("lost", str(len(cluster.lost)))
            _wrappers(raw).set("finished", str(code))
    finally:
        stop.set()


# --- the command on each host: `release-bench multihost` ---------------------------------------


@dataclass
class HostPlan:
    """What `multihost` was asked for, with SLURM's environment filled in."""

    nnodes: int
    rdzv_host: str
    rdzv_port: int
    iface: str
    join_timeout_s: float
    hosts_store: bool | None  # None: host it when the endpoint is an address of this machine


def plan_from(args: argparse.Namespace, env: dict[str, str]) -> HostPlan:
    """Read the command line, falling back on srun's variables (SLURM_NNODES, SLURM_NODEID,
    and MASTER_ADDR/MASTER_PORT as the batch script exports them)."""
    slurm = "SLURM_JOB_ID" in env and "SLURM_NNODES" in env
    nnodes = args.nnodes or (int(env["SLURM_NNODES"]) if slurm else None)
    endpoint = args.rdzv_endpoint
    if not endpoint and slurm and "MASTER_ADDR" in env:
        endpoint = f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '29400')}"
    if not nnodes or nnodes < 1:
        raise NodeError("give --nnodes N (or run under srun, which sets SLURM_NNODES)")
    if not endpoint:
        raise NodeError("give --rdzv-endpoint HOST:PORT (under srun, export MASTER_ADDR)")
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise NodeError(f"--rdzv-endpoint must be HOST:PORT, got {endpoint!r}")
    if host in ("0.0.0.0", "*", "::", ""):
        raise NodeError(f"the rendezvous must name one address, not {host!r}")
    hosts_store = (env["SLURM_NODEID"] == "0") if slurm and "SLURM_NODEID" in env else None
    return HostPlan(nnodes, host, int(port), args.iface, args.join_timeout, hosts_store)


def _local_addresses() -> set[str]:
    return {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}


def _host_rendezvous(plan: HostPlan) -> dist.TCPStore | None:
    """The rendezvous store, on this host when the endpoint is one of its addresses (or
    SLURM's node 0); None where another host has it. Of several agents on one machine (a
    test on loopback) the first to bind the port hosts it."""
    addr = socket.gethostbyname(plan.rdzv_host)
    if plan.hosts_store is False or (plan.hosts_store is None
                                     and addr not in _local_addresses()):
        return None
    try:
        store, _ = launch.bound_store(addr, plan.rdzv_port, timeout_s=plan.join_timeout_s)
    except (OSError, RuntimeError) as e:
        if plan.hosts_store:
            raise NodeError(f"cannot host the rendezvous on {addr}:{plan.rdzv_port}: {e}") from e
        return None  # taken: another agent of this machine hosts it
    return store


def torchrun_command(plan: HostPlan, addr: str, run_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(plan.nnodes), "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{plan.rdzv_host}:{plan.rdzv_port}",
            "--rdzv-conf", f"is_host=false,join_timeout={plan.join_timeout_s:g}",
            "--local-addr", addr, "--max-restarts", "0", "--monitor-interval", "0.5",
            "-m", "harness.running.nodes", *run_args]


def _end_with_parent() -> None:
    """In the child, before exec: SIGTERM it when this process dies, even by SIGKILL (Linux
    PR_SET_PDEATHSIG), so that no torchrun outlives the command that started it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _kill_group(proc: subprocess.Popen, term_s: float = 10.0) -> None:
    """Stop torchrun, its agent's workers and their workers (one process group): SIGTERM,
    and SIGKILL to what is left after `term_s`."""
    for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        # torchrun gone; its process group may still hold a straggler
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _why_torchrun_failed(tail: Sequence[str], plan: HostPlan) -> str:
    text = "\n".join(tail)
    if "RendezvousTimeoutError" in text:
        return (f"not all {plan.nnodes} hosts joined the rendezvous at {plan.rdzv_host}:"
                f"{plan.rdzv_port} within {plan.join_timeout_s:g} s")
    if "RendezvousConnectionError" in text or "DistNetworkError" in text:
        return f"cannot reach the rendezvous at {plan.rdzv_host}:{plan.rdzv_port}"
    for line in reversed(tail):
        if line.startswith("release-bench:"):
            return line.removeprefix("release-bench:").strip()
    return "a node agent failed; its log is above"


def multihost(plan: HostPlan, run_args: Sequence[str]) -> int:
    """This host's part of a run across hosts; returns the exit status (0, 1 or 2)."""
    addr = iface_address(plan.iface)
    store = _host_rendezvous(plan)
    env = os.environ | {
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",  # else the agent hosts a store on `*`
        RDZV_ENV: f"{socket.gethostbyname(plan.rdzv_host)}:{plan.rdzv_port}",
        IFACE_ENV: plan.iface,
        "GLOO_SOCKET_IFNAME": plan.iface, "TP_SOCKET_IFNAME": plan.iface,
        launch.BIND_ADDR_ENV: addr,
    }
    proc = subprocess.Popen(torchrun_command(plan, addr, run_args), env=env,
                            stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True, preexec_fn=_end_with_parent)
    # SIGTERM ends this command as Ctrl-C does: through the clean-up below
    signal.signal(signal.SIGTERM, _raise_interrupt)
    tail: deque[str] = deque(maxlen=60)

    def relay() -> None:  # torchrun's stderr goes on to ours; its end is kept for the verdict
        for line in proc.stderr:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))

    relayer = threading.Thread(target=relay, daemon=True)
    relayer.start()
    code: int | None = None  # None while torchrun runs (an interrupt comes in there)
    agent_code: int | None = None
    try:
        code, agent_code = _wait_torchrun(proc, store, plan)
    finally:
        _kill_group(proc)
        relayer.join(5)
        if store is not None:
            if agent_code is not None:  # the run took place: the other hosts leave through it
                _wait_for_others(store, plan)
            del store
        else:  # (interrupted, without waiting for node 0's status)
            said = wrapper_done(plan, wait=code is not None and agent_code is None)
            agent_code = said if said is not None else agent_code
    if agent_code is not None:  # node 0's run ended: its summary said what failed
        if code not in (0, None) and agent_code == 0:
            print(f"release-bench: multihost: {_after_the_run(code, tail)}", file=sys.stderr)
        return agent_code
    if code == 0:
        return 0
    print(f"release-bench: multihost: {_why_torchrun_failed(tail, plan)}", file=sys.stderr)
    return 1


def _wait_torchrun(proc: subprocess.Popen, store: dist.TCPStore | None, plan: HostPlan,
                   ) -> tuple[int | None, int | None]:
    """torchrun's exit status, and node 0's agent's once its run has finished.

    Every command watches the wrappers' keys: the one that hosts the store through it, the
    others as its clients once it is up. Node 0's agent says there when it has finished;
    torchrun then gets FINISH_GRACE_S to exit before it is stopped (its status is then None).
    Its exit barrier waits for every host's agent (up to its own 300 s), and an agent that
    failed (one that aborted at exit after the run, pytorch/pytorch#38228) never comes: a
    command whose torchrun failed says so, and the others stop theirs as soon as their
    agent has ended, instead of waiting out the grace, or the store host's LEAVE_TIMEOUT_S
    for a command that is still waiting.
    """
    shared = _wrappers(store) if store is not None else None
    finished: tuple[float, int] | None = None
    told_failed = False
    while True:
        try:
            code = proc.wait(0.5)
        except subprocess.TimeoutExpired:
            code = None
        if shared is None and store is None:
            shared = _reach_wrappers(plan)
        failed_elsewhere = False
        try:
            if shared is not None and code not in (None, 0) and not told_failed:
                shared.add("agents_failed", 1)
                told_failed = True
            if shared is not None and finished is None and shared.check(["finished"]):
                finished = (time.monotonic(), int(shared.get("finished")))
            failed_elsewhere = (shared is not None and finished is not None and
                                shared.add("agents_failed", 0) > int(told_failed))
        except (RuntimeError, dist.DistError):  # a client's link lost: reached again next time
            shared = None if store is None else shared
        if code is not None and finished is not None:
            return code, finished[1]
        if code is not None:  # node 0's agent may not have said so yet (where this command
            # has no store, it asks as it leaves: wrapper_done)
            return code, (_run_status(shared) if store is not None and shared is not None
                          else None)
        if finished is not None and ((failed_elsewhere and not _has_children(proc)) or
                                     time.monotonic() - finished[0] > FINISH_GRACE_S):
            # the run is over and this host's agent has ended: only torchrun's barrier is
            # left, which a SIGTERM does not interrupt
            _kill_group(proc, term_s=1.0)
            proc.wait()
            return None, finished[1]


def _has_children(proc: subprocess.Popen) -> bool:
    """Whether torchrun still has a process of its own (its agent's worker)."""
    try:
        children = psutil.Process(proc.pid).children()
    except psutil.Error:
        return False
    return bool(launch.still_running(c.pid for c in children))


def _reach_wrappers(plan: HostPlan) -> dist.Store | None:
    """The wrappers' keys on the host of the store, or None while it cannot be reached."""
    try:
        return _wrappers(dist.TCPStore(plan.rdzv_host, plan.rdzv_port, is_master=False,
                                       timeout=timedelta(seconds=1)))
    except (RuntimeError, dist.DistError):
        return None


def _wait_for_others(store: dist.TCPStore, plan: HostPlan) -> None:
    """Keep the rendezvous store up until every other host's command is done with it (their
    agents' exit goes through it), for the hosts not lost, or LEAVE_TIMEOUT_S."""
    shared = _wrappers(store)
    shared.add("done", 1)
    lost = int(shared.get("lost")) if shared.check(["lost"]) else 0
    end = time.monotonic() + LEAVE_TIMEOUT_S
    while shared.add("done", 0) < plan.nnodes - lost and time.monotonic() < end:
        time.sleep(0.2)


def wrapper_done(plan: HostPlan, wait: bool = True) -> int | None:
    """A host that does not hold the store says it has finished with it, and returns node 0's
    agent's status if the run finished (None if it did not, or the store has gone)."""
    try:
        store = dist.TCPStore(plan.rdzv_host, plan.rdzv_port, is_master=False,
                              timeout=timedelta(seconds=REACH_STORE_S))
        shared = _wrappers(store)
        code = _run_status(shared, wait)
        shared.add("done", 1)
        return code
    except (RuntimeError, dist.DistError):
        return None  # the host of the store has gone already: nothing waits for us


def _run_status(shared: dist.Store, wait: bool = True) -> int | None:
    """Node 0's agent's status once its run has finished; None if it did not finish.

    Every agent leaves once the cluster ends, node 0's just before it says it has finished,
    so an agent that ended first (or died at exit) gives a run that started FINISH_GRACE_S
    to say so. A run still going that long after this host's agent ended has lost it.
    """
    end = time.monotonic() + (FINISH_GRACE_S if wait else 0.0)
    while (shared.check(["started"]) and not shared.check(["finished"])
           and time.monotonic() < end):
        time.sleep(POLL_S)
    return int(shared.get("finished")) if shared.check(["finished"]) else None


def _after_the_run(code: int, tail: Sequence[str]) -> str:
    """Why this host's torchrun failed (status `code`) although node 0's run finished and
    passed: its agent died at exit, which changes nothing in the record node 0 wrote."""
    what = f"this host's node agent ended with status {code} after node 0's run had finished"
    if any("terminate called without an active exception" in line for line in tail):
        # the abort at interpreter exit that fork_wait's clean_exit case measures
        what += " (an abort at exit: pytorch/pytorch#38228)"
    return what + "; the run's record and status are node 0's"


if __name__ == "__main__":
    sys.exit(agent_main(sys.argv[1:]))
