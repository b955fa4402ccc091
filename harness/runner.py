"""Runs cases and turns what happened into result entries of the run record.

Data flows one way: case -> Context -> result entry -> run record on disk. The runner never
lets an exception out of a case: a raised Skip is a skip, a failed check a fail, anything
else (a worker that died, a bug) an error with its reason, so one bad case cannot end a run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness import machine, records
from harness.cases import Case, Context, Params, Skip, param_id
from harness.launch import LaunchError
from harness.telemetry import Telemetry

MAX_REASON = 400


@dataclass(frozen=True)
class Planned:
    case: Case
    device: str
    params: Params

    @property
    def label(self) -> str:
        return f"{self.case.id}[{self.device} {param_id(self.params)}]"


def plan(
    suites: Iterable,
    profile: str,
    devices: Iterable[str],
    case_filter: str | None = None,
    overrides: Params | None = None,
) -> list[Planned]:
    """Every (case, device, params) of the given suites that this run will execute.

    `overrides` (the CLI's --param) set the parameters a case has in its sets or names in
    its `options`; sets that become identical are run once.
    """
    out = []
    for suite in suites:
        for case in suite.cases:
            if case_filter and case_filter not in case.name:
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


def _failed_checks_reason(ctx: Context) -> str:
    failed = [c for c in ctx.checks if not c.passed]
    parts = "; ".join(f"{c.name}: {c.detail}" if c.detail else c.name for c in failed)
    return f"{len(failed)} of {len(ctx.checks)} checks failed: {parts}"


def _contended_reason(ctx: Context, telemetry: dict[str, Any] | None) -> str | None:
    """Why a failed case is `invalid` rather than failed, or None when its failure stands.

    A speedup floor or latency bound missed while telemetry saw the machine contended (host
    busy, heavy steal, a throttled or shared GPU) says nothing about the feature; a failed
    correctness check, or a performance check failed on an uncontended machine (or without
    telemetry, which cannot tell), still fails the case.
    """
    failed = [c for c in ctx.checks if not c.passed]
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
) -> dict[str, Any]:
    """Run one case once and return its result entry (never raises, except KeyboardInterrupt).

    With `telemetry`, the hardware is sampled while the case runs and the summary (power,
    energy, clocks, throttling, validity) goes into the entry.
    """
    ctx = Context(device=device, profile=profile, params=dict(params))
    entry: dict[str, Any] = {
        "suite": case.suite,
        "case": case.name,
        "kind": case.kind,
        "device": device,
        "params": dict(params),
        "started": records.now(),
    }
    sampled = telemetry is not None and case.sampled
    sampler = telemetry.sampler() if sampled else nullcontext()
    t0 = time.perf_counter()
    outcome, reason = "pass", ""
    stderr_lines: list[str] = []
    with _native_stderr(stderr_lines), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if device == "cuda" and not torch.cuda.is_available():
                raise Skip("CUDA is not available on this machine")
            torch.manual_seed(0)
            with sampler:
                case.func(ctx)
            if any(not c.passed for c in ctx.checks):
                outcome, reason = "fail", _failed_checks_reason(ctx)
            elif case.kind == "conformance" and not ctx.checks:
                outcome, reason = "error", "conformance case recorded no checks"
            elif case.kind == "benchmark" and not (ctx.metrics or ctx.checks):
                outcome, reason = "error", "benchmark case recorded no metrics"
        except Skip as e:
            outcome, reason = "skip", str(e)
        except LaunchError as e:
            outcome, reason = "error", str(e)
            ctx.details["workers"] = e.failures_json()
        except Exception as e:
            outcome, reason = "error", f"{type(e).__name__}: {e}".splitlines()[0]
            ctx.details["traceback"] = traceback.format_exc()
    stderr_note, stderr_distinct = _stderr_notes(stderr_lines)
    if stderr_distinct:
        ctx.details["stderr"] = stderr_distinct
    tel_summary = sampler.summary(ctx.iterations) if sampled else None
    if outcome == "fail" and (contended := _contended_reason(ctx, tel_summary)):
        outcome, reason = "invalid", contended
    entry.update(
        outcome=outcome,
        reason=reason[:MAX_REASON],
        elapsed_s=round(time.perf_counter() - t0, 3),
        metrics=[m.to_json() for m in ctx.metrics],
        checks=[{"name": c.name, "passed": c.passed, "detail": c.detail}
                | ({"performance": True} if c.performance else {}) for c in ctx.checks],
        notes=ctx.notes + _warning_notes(caught) + stderr_note,
        tables=ctx.tables,
        shown_tables=ctx.shown_tables,
        details=ctx.details,
        telemetry=tel_summary,
    )
    return records.scrub_paths(entry)


def run(
    planned: list[Planned],
    profile: str,
    out_dir: str | Path,
    telemetry: Telemetry | None = None,
    progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> tuple[Path, dict]:
    """Execute the plan, rewriting the run file atomically after every case.

    A run interrupted part-way keeps every finished case on disk, with `finished` null.
    """
    # the command as typed, without this machine's path to the executable
    command = [Path(sys.argv[0]).name, *sys.argv[1:]]
    run_doc = records.new_run(machine.fingerprint(), profile, command=command)
    if telemetry is not None:
        run_doc["telemetry"] = telemetry.info
    path = records.run_path(out_dir, run_doc)
    records.write_json_atomic(path, run_doc)
    width = len(str(len(planned)))
    for i, p in enumerate(planned, 1):
        progress(f"[{i:>{width}}/{len(planned)}] {p.label} ...")
        entry = execute(p.case, p.device, p.params, profile, telemetry)
        run_doc["results"].append(entry)
        records.write_json_atomic(path, run_doc)
        tail = f" ({entry['reason']})" if entry["reason"] else ""
        progress(f"[{i:>{width}}/{len(planned)}] {p.label} {entry['outcome']} "
                 f"in {entry['elapsed_s']:.1f} s{tail}")
    run_doc["finished"] = records.now()
    records.write_json_atomic(path, run_doc)
    return path, run_doc
