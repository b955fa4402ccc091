"""Does a feature's minimal program end cleanly? Run it in many fresh processes and look at
how each one ended.

A feature that works but kills its process on the way out (an abort in a destructor at
interpreter shutdown, a thread left running, a hang in shutdown) breaks every batch job that
uses it, and no check inside the process can see it. `trials` runs a program N times, each in
fresh processes (`world` of them for a multi-process program, with a rendezvous store the
launcher hosts on loopback, as torchrun does), two trials at a time. A process ended cleanly
when it exited with status 0, within the timeout, printed no "terminate called", and left no
process of its process group running.

`record` turns the trials into the conformance case's check, its rate with an exact
(Clopper-Pearson) interval, e.g. "2/20 [1.2%, 32%]", and a table of every abnormal end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from harness import formats
from harness.running import launch

ROOT = Path(__file__).resolve().parents[2]
PARALLEL = 2  # trials at a time: the machines this runs on have two cores
TRIALS = {"quick": 20, "full": 100}
# What the C++ runtime prints when std::terminate runs (a joinable std::thread destroyed, an
# exception escaping a destructor): the process then aborts, status 134 from a shell.
TERMINATE = "terminate called"


@dataclass
class End:
    """How one process of one trial ended."""

    rank: int
    status: int | None  # exit status; None when it was killed by a signal or timed out
    signal: str | None  # the signal that ended it (SIGABRT, SIGSEGV, ...), or None
    timed_out: bool
    terminate_called: bool  # "terminate called ..." on its stderr
    leftover: int  # processes of its process group still running after it ended (then killed)
    last_line: str  # the last line of its stderr

    @property
    def clean(self) -> bool:
        return (self.status == 0 and not self.timed_out and not self.terminate_called
                and not self.leftover)

    def how(self) -> str:
        """One phrase: how it ended, when not cleanly."""
        parts = []
        if self.timed_out:
            parts.append("timed out")
        elif self.signal:
            parts.append(f"killed by {self.signal}")
        elif self.status:
            parts.append(f"exit status {self.status}")
        if self.terminate_called:
            parts.append("'terminate called'")
        if self.leftover:
            parts.append(f"{self.leftover} process(es) left running")
        return ", ".join(parts) or "clean"


def _leftovers(pgid: int) -> int:
    """Kill what is left of a process group (a child the program started and never reaped);
    how many there were."""
    left = [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == pgid]
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    # SIGKILL is delivered asynchronously: wait until each is dead (gone, or a zombie that
    # its new parent has yet to reap), so that nothing of the trial outlives it
    deadline, dying = time.monotonic() + 10, left
    while dying and time.monotonic() < deadline:
        dying = [p for p in dying if _running(p)]
        time.sleep(0.02)
    return len(left)


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _end(rank: int, proc: subprocess.Popen, err_path: Path, deadline: float) -> End:
    try:
        status = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        status = proc.wait()
        timed_out = True
    # the process led its own process group (start_new_session): whatever still runs in it is
    # its leftover
    leftover = _leftovers(proc.pid)
    err = err_path.read_text(errors="replace")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    sig = signal.Signals(-status).name if status < 0 and not timed_out else None
    return End(rank, None if status < 0 or timed_out else status, sig, timed_out,
               TERMINATE in err, leftover, lines[-1][:200] if lines else "")


def run_once(argv: Sequence[str], world: int = 1, timeout_s: float = 60.0,
             env: dict[str, str] | None = None) -> list[End]:
    """One trial: `python argv...` in `world` fresh processes (RANK, WORLD_SIZE and a
    loopback rendezvous store in their environment when world > 1); how each ended."""
    base = os.environ | {"PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))} | (env or {})
    store = None
    if world > 1:
        store, port = launch.bound_store(timeout_s=timeout_s)
        base |= launch.agent_store_env(launch.LOOPBACK, port) | {"WORLD_SIZE": str(world)}
    with tempfile.TemporaryDirectory(prefix="release-bench-exit-") as tmp:
        procs, errs = [], []
        try:
            for rank in range(world):
                errs.append(Path(tmp) / f"{rank}.err")
                with open(errs[-1], "wb") as err:
                    procs.append(subprocess.Popen(
                        [sys.executable, *argv], env=base | {"RANK": str(rank),
                                                             "LOCAL_RANK": str(rank)},
                        stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT,
                        start_new_session=True))
            deadline = time.monotonic() + timeout_s
            return [_end(r, p, e, deadline)
                    for r, (p, e) in enumerate(zip(procs, errs, strict=True))]
        finally:
            for p in procs:  # an error above must not leave a trial running
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            del store  # the store lives until every rank has ended


def trials(argv: Sequence[str], n: int, world: int = 1, timeout_s: float = 60.0,
           env: dict[str, str] | None = None, parallel: int = PARALLEL) -> list[list[End]]:
    """`n` trials of the program, `parallel` at a time."""
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(lambda _: run_once(argv, world, timeout_s, env), range(n)))


def rate_interval(k: int, n: int) -> tuple[float, float]:
    """The exact 95% interval of a rate of k in n."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def fmt_rate(k: int, n: int) -> str:
    return formats.fmt_rate(k, n, *rate_interval(k, n))


def record(ctx: Any, program: str, results: list[list[End]]) -> bool:
    """The check (every trial ended cleanly), the abnormal-exit rate with its interval, and a
    table of the abnormal ends, in `ctx`; returns whether all were clean."""
    n = len(results)
    bad = [(i, e) for i, ends in enumerate(results) for e in ends if not e.clean]
    k = len({i for i, _ in bad})
    lo, hi = rate_interval(k, n)
    # one sample per trial (1: it ended abnormally), with the exact interval of the rate
    ctx.metric("abnormal_exit_rate", k / n, "fraction", kind="rate", better="lower",
               labels={"program": program}, ci=(lo, hi), count=n,
               samples=[float(any(not e.clean for e in ends)) for ends in results])
    ctx.table(f"abnormal exits: {program}",
              [{"trial": i, **asdict(e), "how": e.how()} for i, e in bad], show=bool(bad))
    messages = sorted({f"{e.how()}: {e.last_line}" for _, e in bad})
    # each distinct way a process ended badly, for the expectations' signatures to match one
    # by one: a second kind of failure beside a known one is not excused by it
    failures = ctx.details.setdefault("failures", [])
    failures += [f"{program}: {m}" for m in messages]
    detail = f"{formats.fmt_rate(k, n, lo, hi)} trials ended abnormally"
    if messages:
        detail += "; " + " | ".join(messages[:3])
    return ctx.check(f"{program} ends cleanly in {n} fresh processes", k == 0, detail)


# The conformance case's parameters: N trials per program.
PARAMS = {"quick": [{"trials": TRIALS["quick"]}], "full": [{"trials": TRIALS["full"]}]}


def check_programs(ctx: Any, programs: dict[str, Sequence[str]], world: int = 1,
                   timeout_s: float = 60.0) -> None:
    """A suite's `clean_exit` case: each program (name -> argv after `python`) run in
    `ctx.params["trials"]` trials of fresh processes, checked and recorded."""
    n = int(ctx.params["trials"])
    for name, argv in programs.items():
        record(ctx, name, trials(argv, n, world, timeout_s))
    ctx.note(f"each trial: {world} fresh process(es), {PARALLEL} trials at a time, "
             f"{timeout_s:.0f} s timeout; clean = status 0, no 'terminate called', no "
             "process left running")
