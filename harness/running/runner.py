"""Runs cases and turns what happened into result entries of the run record.

Data flows one way: case -> Context -> result entry -> run record on disk. The runner never
lets an exception out of a case: a raised Skip is a skip, a failed check a fail, anything
else (a worker that died, a bug) an error with its reason, so one bad case cannot end a run.
A case whose only failed checks are performance checks (a speedup floor, a latency bound),
measured while telemetry found the machine contended, is `invalid`: a void measurement, not
a broken feature.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness import cases, records
from harness.cases import Case, Context, FeatureAbsent, Params, Skip, param_id
from harness.records import Design, Outcome
from harness.running import machine
from harness.running.launch import LaunchError
from harness.running.telemetry import Telemetry

if TYPE_CHECKING:
    from harness.running.duet import Barrier
    from harness.running.launch import Cluster
    from harness.running.turns import Turns

MAX_REASON = 400


@dataclass(frozen=True)
class Planned:
    case: Case
    device: str
    params: Params

    @property
    def label(self) -> str:
        return f"{self.case.id}[{self.device} {param_id(self.params)}]"


def selects(case: Case, case_filter: str | None = None, skip: Iterable[str] = (),
            only: Iterable[str] | None = None) -> bool:
    """Whether a case is selected: its name contains `case_filter` (when given) and no text
    of `skip`, and `only` names it exactly (when given)."""
    return ((only is None or case.name in only)
            and (not case_filter or case_filter in case.name)
            and not any(text in case.name for text in skip))


def plan(
    suites: Iterable,
    profile: str,
    devices: Iterable[str],
    case_filter: str | None = None,
    overrides: Params | None = None,
    skip: Iterable[str] = (),
    only: Iterable[str] | None = None,
) -> list[Planned]:
    """Every (case, device, params) of the given suites that this run will execute: the
    cases whose name contains `case_filter` (all by default) and no text of `skip`, and
    that `only` names exactly (when given).

    `overrides` (the CLI's --param) set the parameters a case has in its sets or names in
    its `options`; sets that become identical are run once.
    """
    out = []
    for suite in suites:
        for case in suite.cases:
            if not selects(case, case_filter, skip, only):
                continue
            for device in devices:
                if device not in case.devices:
                    continue
                seen = []
                for p in case.param_sets(profile, device):
                    p = p | {k: v for k, v in (overrides or {}).items()
                             if k in p or k in case.options}
                    if p not in seen:
                        seen.append(p)
                        out.append(Planned(case, device, p))
    return out


@contextmanager
def _native_stderr(lines: list[str]) -> Iterator[None]:
    """Collect what is written to file descriptor 2 while a case runs.

    Native libraries (Kineto, Gloo, TensorPipe) write there directly, tens of lines per case,
    which would bury the progress lines. The text goes into the record instead. It is kept in
    a named file until the case ends, so a case that kills the process leaves it behind.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    tmp = tempfile.NamedTemporaryFile(prefix="release-bench-stderr-", suffix=".log",
                                      delete=False)
    try:
        os.dup2(tmp.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        tmp.seek(0)
        lines.extend(tmp.read().decode(errors="replace").splitlines())
        tmp.close()
        os.unlink(tmp.name)


def _stderr_notes(lines: list[str]) -> tuple[list[str], list[str]]:
    """(a one-line note, the distinct lines) for what a case wrote to stderr."""
    distinct = list(dict.fromkeys(ln.strip() for ln in lines if ln.strip()))
    if not distinct:
        return [], []
    note = (f"stderr (recorded, not shown): {len(lines)} lines, {len(distinct)} distinct, "
            f"first: {distinct[0][:160]}")
    return [note], distinct[:50]


def _warning_notes(caught: list[warnings.WarningMessage]) -> list[str]:
    notes = []
    for w in caught:
        text = f"{w.category.__name__} (recorded, not shown): {str(w.message).splitlines()[0]}"
        if text not in notes:
            notes.append(text)
    return notes


def _checks_reason(ctx: Context, failed: list[records.Check], how: str = "failed") -> str:
    parts = "; ".join(f"{c.name}: {c.detail}" if c.detail else c.name for c in failed)
    return f"{len(failed)} of {len(ctx.checks)} checks {how}: {parts}"


def _absent_detail(case: Case, ctx: Context, e: FeatureAbsent) -> str:
    """What a run found absent, against the release range the case declares for it."""
    release = cases.torch_release()
    declared = next((s for s in case.since if s.what == e.what
                     and s.applies(ctx.device, ctx.params)), None)
    return f"{e.how}, in torch {release}" + (
        f", which has it (from {declared.release})" if declared else "")


def _contended_reason(ctx: Context, telemetry: dict[str, Any] | None) -> str | None:
    """Why a failed case is `invalid` rather than failed, or None when its failure stands.

    A speedup floor or latency bound missed while telemetry saw the machine contended (host
    busy, heavy steal, a throttled or shared GPU) says nothing about the feature; a failed
    correctness check, or a performance check failed on an uncontended machine (or without
    telemetry, which cannot tell), still fails the case.
    """
    failed = [c for c in ctx.checks if c.failed]
    if not failed or not all(c.performance for c in failed):
        return None
    if not telemetry or telemetry.get("valid", True):
        return None
    parts = "; ".join(f"{c.name}: {c.detail}" if c.detail else c.name for c in failed)
    return (f"measured contended ({'; '.join(telemetry.get('invalid_reasons', []))}): "
            f"{len(failed)} of {len(ctx.checks)} checks failed, all performance: {parts}")


def execute(
    case: Case,
    device: str,
    params: Params,
    profile: str,
    telemetry: Telemetry | None = None,
    worker_setup: Callable[[], None] | None = None,
    cluster: Cluster | None = None,
    turns: Turns | None = None,
) -> records.Result:
    """Run one case once and return its result entry (never raises, except KeyboardInterrupt).

    With `telemetry`, the hardware is sampled while the case runs and the summary (power,
    energy, clocks, throttling, validity) goes into the entry. `worker_setup` runs in every
    worker process the case launches (`ctx.launch`), before its work: how a test breaks a
    feature on purpose inside workers (in this process, monkeypatch does it). With `cluster`
    (node 0 of a run across hosts) the case's workers are spread over its hosts, and the
    entry says which host each rank ran on. With `turns` (a side of a round in bursts) a case
    declared `bursts=True` measures in the turns they grant (harness.running.turns).
    """
    ctx = Context(device=device, profile=profile, params=dict(params), cluster=cluster,
                  worker_setup=worker_setup, settings=case.settings_for(profile, device),
                  turns=turns if case.bursts else None)
    started = records.now()
    sampled = telemetry is not None and case.sampled
    sampler = telemetry.sampler() if sampled else nullcontext()
    t0 = time.perf_counter()
    stderr_lines: list[str] = []
    with _native_stderr(stderr_lines), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome, reason = _run_guarded(case, ctx, sampler)
    stderr_note, stderr_distinct = _stderr_notes(stderr_lines)
    if stderr_distinct:
        ctx.details["stderr"] = stderr_distinct
    tel_summary = sampler.summary(ctx.iterations) if sampled else None
    if outcome == Outcome.FAIL and (contended := _contended_reason(ctx, tel_summary)):
        outcome, reason = Outcome.INVALID, contended
    result = records.Result(
        case.suite, case.name, outcome, reason[:MAX_REASON], kind=case.kind, device=device,
        params=dict(params), started=started, elapsed_s=round(time.perf_counter() - t0, 3),
        metrics=tuple(m.record() for m in ctx.metrics), checks=tuple(ctx.checks),
        notes=(*ctx.notes, *_warning_notes(caught), *stderr_note,
               *(tel_summary or {}).get("context", ())), tables=ctx.tables,
        shown_tables=tuple(ctx.shown_tables), details=ctx.details, telemetry=tel_summary,
        # the hosts each rank ran on: the pair a figure crossed
        placement=cluster.take_placements() if cluster is not None else None,
        check_version=case.check.number)
    return records.Result.from_json(records.scrub_paths(result.to_json()))


def _run_guarded(case: Case, ctx: Context, sampler) -> tuple[str, str]:
    """Run the case in `ctx`: its outcome and reason. Whatever it raises becomes one, except
    KeyboardInterrupt (Ctrl-C, or SIGTERM as Interrupted), which ends the run."""
    try:
        if ctx.device == "cuda" and not torch.cuda.is_available():
            raise Skip("CUDA is not available on this machine")
        release = cases.torch_release()
        if gap := cases.declared_absence(case.since, ctx.device, ctx.params, release):
            return Outcome.NA, gap.reason(release)
        torch.manual_seed(0)
        with sampler:
            case.func(ctx)
    except FeatureAbsent as e:
        ctx.check(f"{e.what} works", False, _absent_detail(case, ctx, e), raised=e.raised)
    except Skip as e:
        return Outcome.SKIP, str(e)
    except LaunchError as e:
        ctx.details["workers"] = e.failures_json()
        return Outcome.ERROR, str(e)
    except Exception as e:
        ctx.details["traceback"] = traceback.format_exc()
        return Outcome.ERROR, f"{type(e).__name__}: {e}".splitlines()[0]
    if failed := [c for c in ctx.checks if c.failed]:
        return Outcome.FAIL, _checks_reason(ctx, failed)
    if undecided := [c for c in ctx.checks if c.inconclusive]:
        return Outcome.INCONCLUSIVE, _checks_reason(ctx, undecided, "inconclusive")
    if case.kind == "conformance" and not ctx.checks:
        return Outcome.ERROR, "conformance case recorded no checks"
    if case.kind == "benchmark" and not (ctx.metrics or ctx.checks):
        return Outcome.ERROR, "benchmark case recorded no metrics"
    return Outcome.PASS, ""


INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during `run`: raised in the main thread to abandon the case under way.

    A KeyboardInterrupt, so that whatever already lets Ctrl-C through (the `except Exception`
    of `execute` and of the cases) lets SIGTERM through too, and every `finally` on the way
    out (launch's reaping of the workers) runs. `run` fills in `where` and `path` (the run
    record, by then marked interrupted) before it lets this out.
    """

    def __init__(self, signum: int, where: str = "", path: Path | None = None):
        super().__init__(signum)
        self.signum, self.where, self.path = signum, where, path

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process that signal ended."""
        return 128 + self.signum

    def __str__(self) -> str:
        return f"interrupted by {self.signame}" + (f" {self.where}" if self.where else "")


class SignalGuard:
    """Handlers that turn SIGINT and SIGTERM into `Interrupted`, for the length of a run (or of
    any command that must put things back on its way out: `mutants`).

    Why handlers of our own: Python raises KeyboardInterrupt on SIGINT only if SIGINT was not
    ignored when it started, and a run started in the background by a script (`cmd &` in a
    non-interactive shell) inherits SIGINT ignored: `kill -INT` did nothing and the run went
    on to the end. SIGTERM's default action ends this process alone, so the workers of the
    case under way (and the resource tracker they share) ran on, orphaned, and the record was
    never marked. Only the first signal raises; later ones are ignored so that reaping the
    workers and the last write of the record are not cut short. Handlers can be set only in
    the main thread; elsewhere the guard does nothing.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        main = threading.current_thread() is threading.main_thread()
        self.previous = {s: signal.getsignal(s) for s in INTERRUPT_SIGNALS} if main else {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            raise Interrupted(signum)

    def install(self) -> None:
        """(Re)install the handlers: a library may have replaced them during the last case."""
        for s in self.previous:
            signal.signal(s, self._handle)

    def check(self) -> None:
        """Raise `Interrupted` again if a signal came and something swallowed the exception
        (a case's `except BaseException`, or a `__del__`, where Python only prints it)."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    def restore(self) -> None:
        for s, h in self.previous.items():
            # None: a handler installed outside Python, which cannot be put back; default it
            signal.signal(s, signal.SIG_DFL if h is None else h)


def _measured(barrier: Barrier | None, turns: Turns | None = None) -> dict[str, Any]:
    """How this process measures: alone, as a side of a duet or of a round in bursts, on which
    CPUs, with how many intra-op threads."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    design = (Design.DUET if barrier is not None else Design.BURSTS if turns is not None
              else Design.SEQUENTIAL)
    return {"design": design, "cpus": cpus, "threads": torch.get_num_threads()}


def _mark_interrupted(run: records.Run, stop: Interrupted, planned: int) -> records.Run:
    """Say in the record that the run ended early, where, and why. `finished` stays null:
    it is the time of a run that ran to the end."""
    return dataclasses.replace(run, interrupted=True).with_notes(
        f"interrupted by {stop.signame} at {records.now()} {stop.where}; "
        f"{len(run.results)} of {planned} case runs finished and are kept, "
        f"the rest did not run")


def run(
    planned: list[Planned],
    profile: str,
    out_dir: str | Path,
    telemetry: Telemetry | None = None,
    progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    notes: Sequence[str] = (),
    cluster: Cluster | None = None,
    barrier: Barrier | None = None,
    turns: Turns | None = None,
) -> tuple[Path, records.Run]:
    """Execute the plan, rewriting the run file atomically after every case.

    With `cluster` (node 0 of a run across hosts) every case's workers are spread over its
    hosts, and the record lists them. With `barrier` (a side of a duet, `harness.running.duet`) each
    case starts when the other side reaches it too, and its entry says whether it did. With
    `turns` (a side of a round in bursts, `harness.running.turns`) its bursts cases measure in
    the referee's turns.

    A run interrupted part-way keeps every finished case on disk, with `finished` null.
    SIGINT, SIGTERM or a KeyboardInterrupt abandons the case under way (launch reaps its
    workers on the way out), marks the record `interrupted` with a note saying where and by
    which signal, and raises `Interrupted` carrying the record's path.
    """
    guard = SignalGuard()
    # fd 2 as it is now: an interrupt can land while execute() has it redirected to a file
    saved_stderr = os.dup(2)
    path: Path | None = None
    where = "before the first case"
    try:
        guard.install()
        # the command as typed, without this machine's path to the executable
        command = [Path(sys.argv[0]).name, *sys.argv[1:]]
        # a run across hosts (harness.running.nodes): node 0 writes the record, listing the hosts
        run_doc = records.new_run(machine.fingerprint(), profile, command=command,
                                  telemetry=telemetry.info if telemetry is not None else None,
                                  hosts=cluster.hosts() if cluster is not None else None,
                                  notes=tuple(notes), measured=_measured(barrier, turns))
        path = records.run_path(out_dir, run_doc)
        records.write_run(path, run_doc)
        width = len(str(len(planned)))
        for i, p in enumerate(planned, 1):
            guard.install()  # a library may have replaced the handlers during the last case
            where = f"during {p.label} (case {i} of {len(planned)})"
            progress(f"[{i:>{width}}/{len(planned)}] {p.label} ...")
            met = barrier.wait(f"case-{i}") if barrier is not None else None
            entry = execute(p.case, p.device, p.params, profile, telemetry, cluster=cluster,
                            turns=turns)
            if met is not None:
                entry = dataclasses.replace(entry, details={
                    **entry.details, "duet": {"partner": met[0], "waited_s": round(met[1], 3)}})
            run_doc = run_doc.with_result(entry)
            where = f"after {p.label} (case {i} of {len(planned)})"
            records.write_run(path, run_doc)
            tail = f" ({entry.reason})" if entry.reason else ""
            progress(f"[{i:>{width}}/{len(planned)}] {p.label} {entry.outcome} "
                     f"in {entry.elapsed_s:.1f} s{tail}")
            guard.check()
        run_doc = dataclasses.replace(run_doc, finished=records.now())
        records.write_run(path, run_doc)
        return path, run_doc
    except KeyboardInterrupt as e:
        sys.stderr.flush()
        os.dup2(saved_stderr, 2)
        # a plain KeyboardInterrupt (raised by a case, say) is SIGINT's, as Python has it
        stop = e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)
        stop.where, stop.path = where, path
        if path is not None:  # else the record was not written yet: nothing to keep
            records.write_run(path, _mark_interrupted(run_doc, stop, len(planned)))
        if stop is e:
            raise
        raise stop from e
    finally:
        guard.restore()
        os.close(saved_stderr)
