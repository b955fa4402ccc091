"""Memory profiler (1.6 beta): are the reported bytes and times right, and what does it cost?

PyTorch's own memory-profiler test checks only the sign of the reported bytes; this suite
checks the bytes, against ground truth computed without the profiler (truth.py):

- known_allocations: empty/zeros/rand of many sizes and dtypes report exactly their bytes
  (the CUDA caching allocator's block on CUDA), and their frees the same bytes, negative;
- resnet18_ops: the release notes' example (torchvision resnet18, 5x3x224x224): per-op
  reported memory equals the bytes of the tensors each op keeps, from module output shapes;
  conv2d totals 47.37 MB and addmm 19.53 KB as in the release notes' table;
- peak_memory: peak live memory rebuilt from the time-stamped memory records equals a known
  sequence's peak (CPU) and torch.cuda.max_memory_allocated (CUDA);
- timing_accuracy: record_function regions around spins of known length (a CPU busy-wait,
  torch.cuda._sleep on the GPU) report their duration within TIME_TOLERANCE;
- overhead (benchmark): a resnet18 training step with the profiler off / on / with memory /
  with shapes, side by side in one run.

Each conformance case runs all three profiler APIs (apis.py) and puts them side by side in
one accuracy table: case, truth, what each API reported, error.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.autograd.profiler as autograd_profiler
import torch.nn.functional as F
from torch.autograd import DeviceType

from harness import stats
from harness.cases import CheckVersion, Context, FeatureAbsent, FromSetting, Skip, Suite, TrackView
from harness.running import clean_exit as clean_exit_programs
from suites.profiler import apis, truth

suite = Suite(
    "profiler",
    feature="memory profiler",
    status="beta",
    summary="reported bytes and times equal ground truth; profiler overhead on a model step",
)

# the versions of checks that changed since the first (harness.cases.CheckVersion)
API_CHECK = CheckVersion(
    2, "torch raising under one profiler API fails that API's check and the case goes on "
    "with the others; an API that raises when made counts as present")

TIMING_CHECK = CheckVersion(
    3, "three checks added: record_function used as a decorator ends each call's region with "
    "the call; a region with no op inside reports all its time as its own (Self CPU); "
    "key_averages' row of those regions sums their calls and times")
ALLOCATIONS_CHECK = CheckVersion(
    3, "two checks added: on the CPU no region reports device memory, and a local run's "
    "regions say node_id -1 (under the Kineto profilers)")

TIME_TOLERANCE = 0.05  # relative; the aim
# timing_accuracy times regions of the lengths its settings declare. record_function adds its
# own cost to each region (region_offset: from ~12 us up to ~460 us measured on quiet 2-core
# machines here, more when busy), which is up to 10% of a 5 ms region; so the 5% check
# applies from MIN_CHECKED_S, and shorter regions are reported (time_error) but not checked.
MIN_CHECKED_S = 20e-3
REPEATS = 3  # regions per duration in a session, odd; the median discards a preempted one

FACTORIES = {"empty": torch.empty, "zeros": torch.zeros, "rand": torch.rand}
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64)
OTHER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)
BIG = (5120, 5120)  # 104,857,600 B in float32: "over 100 MB"
SHAPES = ((1,), (7,), (1000,), (1000, 1000), (12345, 3), BIG)


@dataclass(frozen=True)
class Allocations:
    """Known allocations: each factory of `factories` in each dtype of `dtypes` at each shape of
    `shapes`, in that order (rand makes floating dtypes only)."""

    factories: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[int, ...], ...]

    def __iter__(self) -> Iterator[tuple[str, torch.dtype, tuple[int, ...]]]:
        return ((f, d, s) for f in self.factories for d in self.dtypes for s in self.shapes
                if f != "rand" or d in FLOAT_DTYPES)

    def __str__(self) -> str:  # as `list` prints a setting
        return (f"{'/'.join(self.factories)} x "
                f"{'/'.join(str(d).removeprefix('torch.') for d in self.dtypes)} x "
                f"{', '.join('x'.join(map(str, s)) for s in self.shapes)}")


def _apis(ctx: Context, names: tuple[str, ...] = apis.API_NAMES) -> tuple[str, ...]:
    have, missing = apis.available(names)
    for api, why in missing.items():
        ctx.note(f"profiler API {api} not in this torch ({why}): not covered")
    if not have:
        raise Skip("none of the profiler APIs is available")
    return have


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _all_exact(ctx: Context, name: str, pairs: list[tuple[str, int, int | None]]) -> None:
    """One check that every (case, expected, reported) pair is exact, naming the misses."""
    misses = [f"{case}: expected {want}, got {got}" for case, want, got in pairs if got != want]
    ctx.check(name, not misses, f"{len(pairs) - len(misses)}/{len(pairs)} exact"
              + (f"; {'; '.join(misses[:3])}" if misses else ""))


# --- known allocations -----------------------------------------------------------------------

# Empty regions profiled first in each session: what a region reports with nothing allocated
# in it, subtracted from every region's report. From torch 2.0 it is 0 B; torch 1.13's
# record_function allocates a 4-byte handle tensor before the region and frees it inside, so
# every region there reports 4 B less than what it allocated (an empty one, -4 B).
CONTROL_REGIONS = 3


def region_cost(ctx: Context, api: str, controls: list[int]) -> int:
    """The bytes an empty region reports under `api` (the median of the control regions),
    recorded as a figure: what every region's report is corrected by."""
    own = int(statistics.median(controls))
    ctx.metric("empty_region_bytes", own, "B", kind="value", labels={"api": api})
    if own or len(set(controls)) > 1:
        ctx.note(f"{api}: empty record_function regions reported {controls} B (the region's "
                 f"own cost); every region's bytes are corrected by {own} B")
    return own


# `allocations`: the grids of (factory, dtype, shape) allocated, one after another
@suite.conformance(devices=("cpu", "cuda"), settings={
    "quick": {"allocations": (
        Allocations(tuple(FACTORIES), (torch.float32,), ((1,), (1000,), (1000, 1000), BIG)),
        Allocations(("zeros",), FLOAT_DTYPES[1:] + OTHER_DTYPES, ((7,), (1000, 1000))))},
    "full": {"allocations": (
        Allocations(tuple(FACTORIES), FLOAT_DTYPES + OTHER_DTYPES, SHAPES),)}},
    tracks=[TrackView("ProfilerMemoryError", "Largest byte error over the known allocations, "
                      "per profiler API (0 when exact).", unit="B",
                      labels={"api": apis.API_NAMES}, tracks=["max_abs_error"])],
    check=ALLOCATIONS_CHECK)
def known_allocations(ctx: Context) -> None:
    """Known allocations report exactly their bytes (CUDA: the allocator's block), and frees
    the same bytes, negative."""
    device, cuda = ctx.device, ctx.device == "cuda"
    allocs = [a for grid in ctx.settings["allocations"] for a in grid]
    labels = [f"{f} {str(d).removeprefix('torch.')} {'x'.join(map(str, s))}"
              for f, d, s in allocs]
    rows = [{"case": label} for label in labels]
    for api in _apis(ctx):
        with ctx.exercising(f"{api}: profiles the known allocations"):
            with apis.open_profiler(api, device) as prof:
                for j in range(CONTROL_REGIONS):  # the region's own bytes: nothing allocated in it
                    with autograd_profiler.record_function(f"empty {j}"):
                        pass
                for i, (factory, dtype, shape) in enumerate(allocs):
                    if cuda:  # a fresh segment each time, so that the block rule applies
                        torch.cuda.empty_cache()
                        before = torch.cuda.memory_allocated()  # gpu-only: the caching allocator
                    with autograd_profiler.record_function(f"alloc {i}"):
                        t = FACTORIES[factory](shape, dtype=dtype, device=device)
                    rows[i]["bytes"] = apis.storage(t).nbytes()
                    if cuda:
                        rows[i]["allocator_B"] = torch.cuda.memory_allocated() - before
                    with autograd_profiler.record_function(f"free {i}"):
                        del t
            found = apis.regions(prof, [f"{k} {i}" for i in range(len(allocs))
                                        for k in ("alloc", "free")]
                                 + [f"empty {j}" for j in range(CONTROL_REGIONS)])
            own = region_cost(ctx, api, [apis.event_bytes(found[f"empty {j}"], device)
                                         for j in range(CONTROL_REGIONS)])
            for i, row in enumerate(rows):
                row["truth_B"] = truth.device_bytes(row["bytes"], device)
                row[f"{api}_B"] = apis.event_bytes(found[f"alloc {i}"], device) - own
                row[f"{api}_free_B"] = apis.event_bytes(found[f"free {i}"], device) - own
            _all_exact(ctx, f"{api}: allocations report the true bytes",
                       [(r["case"], r["truth_B"], r[f"{api}_B"]) for r in rows])
            _all_exact(ctx, f"{api}: frees report the same bytes, negative",
                       [(r["case"], -r["truth_B"], r[f"{api}_free_B"]) for r in rows])
            if cuda:
                _all_exact(ctx, f"{api}: bytes equal the allocator's allocated-bytes delta",
                           [(r["case"], r["allocator_B"], r[f"{api}_B"]) for r in rows])
            else:  # nothing was allocated on a device: no region may say otherwise
                phantom = {n: int(e.device_memory_usage) for n, e in found.items()
                           if e.device_memory_usage}
                ctx.check(f"{api}: no device memory where only the CPU allocated", not phantom,
                          f"{len(phantom)} of {len(found)} regions report device bytes"
                          + (f", e.g. {min(phantom.items())}" if phantom else ""))
            # FunctionEvent's docstring: "Node identifier for distributed profiling (-1 if not
            # applicable)"; a table shows a Node ID column as soon as one event has another.
            # Not the legacy profiler's: its records carry the process's RPC worker id once an
            # RPC agent has run in the process, shut down or not (0 after rank 0's)
            if api != "legacy":
                remote = {n: e.node_id for n, e in found.items() if e.node_id != -1}
                ctx.check(f"{api}: a local run's regions say node_id -1", not remote,
                          f"{len(remote)} of {len(found)} regions carry another node_id"
                          + (f", e.g. {min(remote.items())}" if remote else ""))
            for r in rows:  # the largest miss of any API so far, allocation or free
                r["error_B"] = max(r.get("error_B", 0), abs(r[f"{api}_B"] - r["truth_B"]),
                                   abs(r[f"{api}_free_B"] + r["truth_B"]))
            worst = max(max(abs(r[f"{api}_B"] - r["truth_B"]),
                            abs(r[f"{api}_free_B"] + r["truth_B"])) for r in rows)
            ctx.metric("max_abs_error", worst, labels={"api": api},
                       unit="B", kind="error", better="lower")
    for r in rows:
        r["error_B"] = r.pop("error_B", None)  # last column (None: no API got that far)
    ctx.metric("allocations", len(rows), "", kind="count")
    ctx.table("accuracy", rows, show=True)
    if cuda:
        ctx.note(truth.CUDA_RULE)
        if truth.alloc_conf():
            ctx.note(f"allocator settings in effect: {truth.alloc_conf()!r}")
    else:
        ctx.note("CPU: the CPU allocator reports the requested bytes (tensor nbytes)")


# --- resnet18, the release notes' example ----------------------------------------------------

# The release notes' table (1.6, CPU, resnet18, 5x3x224x224): op -> (CPU Mem, Self CPU Mem,
# calls) as printed there.
RELEASE_NOTES = {
    "aten::empty": ("94.79 MB", "94.79 MB", 123),
    "aten::resize_": ("11.48 MB", "11.48 MB", 2),
    "aten::addmm": ("19.53 KB", "19.53 KB", 1),
    "aten::empty_strided": ("4 B", "4 B", 1),
    "aten::conv2d": ("47.37 MB", "0 B", 20),
}
NOTES_INPUT = (5, 3, 224, 224)


def fmt_memory(nbytes: int) -> str:
    """Bytes as the profiler's tables print them (KB = 1024 B, MB = 1024 KB, 2 decimals)."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


def _resnet18(device: str):
    try:
        import torchvision
    except ImportError as e:
        raise Skip(f"torchvision is not importable: {e}") from e
    return torchvision.models.resnet18().to(device)  # training mode, as in the notes


# `passes`: profiled forward passes per API. Where an allocation or a free falls at an op's
# boundary, torch 2.0-2.3 gave it to the op before, the op after or to none, differently from
# pass to pass (seen here: 4 of 12 passes of torch 2.0.0, 2 of 8 of 2.3.0, 0 of 12 of 2.14.1);
# a single pass would make that a coin toss, so every pass is checked and counted.
@suite.conformance(devices=("cpu", "cuda"), needs=("torchvision",),
                   settings={"quick": {"passes": 3}, "full": {"passes": 10}}, check=API_CHECK)
def resnet18_ops(ctx: Context) -> None:
    """resnet18 (5x3x224x224): each op's reported memory equals the bytes of the tensors it
    keeps, from output shapes, in every profiled pass; conv2d 47.37 MB and addmm 19.53 KB as
    in the release notes."""
    device, cuda = ctx.device, ctx.device == "cuda"
    model = _resnet18(device)
    x = torch.randn(*NOTES_INPUT, device=device)
    # the hooked forward is also the warm-up (cuBLAS workspace, oneDNN primitives)
    expected = truth.resnet_forward_bytes(model, x)
    rows = {op: {"op": op, "calls": e.calls, "analytic_B": e.total(device), "why": e.why}
            for op, e in expected.items()}
    total = {"op": "whole forward", "calls": 1,
             "analytic_B": sum(e.total(device) for e in expected.values()),
             "why": "sum of the rows: every tensor the forward keeps"}
    notes_rows = {op: {"op": op, "release_1.6": f"{mem} ({self_mem} self, {calls} calls)"}
                  for op, (mem, self_mem, calls) in RELEASE_NOTES.items()}
    for api in _apis(ctx):
        with ctx.exercising(f"{api}: profiles resnet18's forward"):
            passes = [_profiled_forward(api, model, x, device)
                      for _ in range(ctx.settings["passes"])]
            exact = _check_each_op(ctx, api, expected, passes, rows)
            ctx.metric("exact_passes", exact, "passes", kind="count", better="higher",
                       labels={"api": api})
            ops, region, delta = passes[0]
            total[f"{api}_B"] = apis.event_bytes(region, device)
            if cuda:
                ctx.check(f"{api}: forward total equals the allocator's delta",
                          total[f"{api}_B"] == delta,
                          f"reported {total[f'{api}_B']} B, memory_allocated grew {delta} B")
            else:
                ctx.check(f"{api}: forward total equals analytic",
                          total[f"{api}_B"] == total["analytic_B"],
                          f"reported {total[f'{api}_B']} B, analytic {total['analytic_B']} B")
            if not cuda and tuple(x.shape) == NOTES_INPUT:
                _release_notes_checks(ctx, api, ops)
            for op, row in notes_rows.items():
                got = ops.get(op)
                row[api] = (f"{fmt_memory(apis.event_bytes(got, device))} "
                            f"({fmt_memory(apis.self_bytes(got, device))} self, {got.count} calls)"
                            if got else "not recorded")
    ctx.table("per_op", _with_error_column(list(rows.values()) + [total]), show=True)
    if not cuda:  # the release notes' table is of a CPU run
        ctx.table("release_notes", list(notes_rows.values()), show=True)
    _resnet18_notes(ctx, cuda)


def _profiled_forward(api: str, model, x: torch.Tensor,
                      device: str) -> tuple[dict, object, int | None]:
    """One forward pass on `device` under the profiler `api`: its op table, the forward's
    region, and on CUDA how much memory_allocated grew."""
    cuda = device == "cuda"
    _sync(device)
    before = torch.cuda.memory_allocated() if cuda else 0
    with apis.open_profiler(api, device, shapes=True) as prof:
        with autograd_profiler.record_function("resnet18 forward"):
            out = model(x)
    _sync(device)
    delta = torch.cuda.memory_allocated() - before if cuda else None
    del out
    return apis.op_table(prof), apis.regions(prof, ["resnet18 forward"])["resnet18 forward"], \
        delta


def _check_each_op(ctx: Context, api: str, expected: dict, passes: list[tuple],
                   rows: dict[str, dict]) -> int:
    """Check each op's reported bytes and calls against the analytic figure in every pass;
    fill its row (the first pass that missed, else the first). Returns the passes in which
    every op was exact."""
    device, cuda = ctx.device, ctx.device == "cuda"
    exact = [True] * len(passes)
    for op, e in expected.items():
        lo, hi = e.bounds(device)
        seen = []
        for ops, region, _ in passes:
            got = ops.get(op)
            if op == truth.OUTSIDE_OPS:  # the region's own memory, net of all ops in it
                reported, calls = apis.self_bytes(region, device), None
            else:
                reported = apis.event_bytes(got, device) if got else None
                calls = got.count if got else 0
            seen.append((reported, calls, reported is not None and lo <= reported <= hi
                         and (e.calls is None or calls == e.calls)))
        if cuda and op == "aten::batch_norm":
            continue  # cuDNN's batch norm may keep a reserve buffer the model omits
        shown = next((s for s in seen if not s[2]), seen[0])
        rows[op][f"{api}_B"], rows[op][f"{api}_calls"] = shown[0], shown[1]
        exact = [a and s[2] for a, s in zip(exact, seen, strict=True)]
        good = sum(s[2] for s in seen)
        ctx.check(f"{api}: {op} equals analytic", good == len(seen),
                  f"exact in {good} of {len(seen)} passes; reported "
                  + ", ".join(sorted({f"{s[0]} B in {s[1]} calls" for s in seen}))
                  + ", analytic " + (f"{lo} B" if lo == hi else f"{lo}..{hi} B")
                  + f" in {e.calls} calls")
    return sum(exact)


def _with_error_column(table: list[dict]) -> list[dict]:
    """Each row's largest error over the APIs (None when one reported nothing, or when no
    API's figure is shown: batch_norm's row on CUDA)."""
    for row in table:
        got = [row[f"{a}_B"] for a in apis.API_NAMES if f"{a}_B" in row]
        row["error_B"] = (None if not got or any(g is None for g in got)
                          else max(abs(g - row["analytic_B"]) for g in got))
        row["why"] = row.pop("why")  # the long column last
    return table


def _resnet18_notes(ctx: Context, cuda: bool) -> None:
    ctx.note("memory lands as 'self' on the op that calls the allocator (aten::empty, "
             "max_pool2d_with_indices, addmm); per-op figures here are inclusive (children "
             "included, frees inside the op netted out), as the CPU Mem column")
    ctx.note("1.6's max_pool2d resized its outputs with aten::resize_ (11.48 MB, 2 calls); "
             "today's max_pool2d_with_indices allocates the same 11.48 MB itself")
    if cuda:
        ctx.note("CUDA: analytic_B is each tensor's block from a fresh segment; as blocks "
                 "freed earlier in the pass are reused, an op may report from the 512 B "
                 "rounding up to 1 MiB more per tensor over 1 MiB (a block the allocator did "
                 "not split): the check accepts that range. batch_norm is not checked per op "
                 "(cuDNN may keep a reserve buffer); the whole forward is checked exactly "
                 "against torch.cuda.memory_allocated")


def _release_notes_checks(ctx: Context, api: str, ops: dict) -> None:
    """conv2d's total and addmm's self memory print as in the 1.6 release notes' table."""
    for op, column, value in (("aten::conv2d", "total", RELEASE_NOTES["aten::conv2d"][0]),
                              ("aten::addmm", "self", RELEASE_NOTES["aten::addmm"][1])):
        got = ops.get(op)
        b = (apis.event_bytes(got, "cpu") if column == "total"
             else apis.self_bytes(got, "cpu")) if got else None
        shown = fmt_memory(b) if b is not None else "not recorded"
        ctx.check(f"{api}: {op} {column} prints {value} as in the release notes",
                  shown == value, f"prints {shown} ({b} B)")


# --- peak live memory ------------------------------------------------------------------------


# `step_batch`, `step_image`: the resnet18 training step profiled on CUDA (the release notes'
# input size)
@suite.conformance(devices=("cpu", "cuda"), settings={
    p: {"step_batch": 5, "step_image": 224} for p in ("quick", "full")}, check=API_CHECK)
def peak_memory(ctx: Context) -> None:
    """Peak live memory rebuilt from the memory records equals a known sequence's peak, and
    on CUDA torch.cuda.max_memory_allocated (also over a resnet18 training step)."""
    device, cuda = ctx.device, ctx.device == "cuda"
    run, analytic = truth.allocation_sequence(device)
    workloads = {"allocation sequence": run}
    if cuda:
        workloads["resnet18 training step"] = model_step(
            device, "off", batch=ctx.settings["step_batch"], image=ctx.settings["step_image"])
    rows = []
    for api in _apis(ctx, apis.KINETO_APIS):
        with ctx.exercising(f"{api}: records the memory of each program"):
            for name, fn in workloads.items():
                fn()  # warm-up: lazy workspaces are not part of the step's peak
                _sync(device)
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                with apis.open_profiler(api, device) as prof:
                    fn()
                    _sync(device)
                peak, final = apis.peak_live(apis.memory_records(prof, device))
                row = {"case": f"{name} [{api}]", "analytic_B": analytic if fn is run else None}
                if cuda:
                    row["max_memory_allocated_B"] = torch.cuda.max_memory_allocated() - base
                row["reconstructed_B"] = peak
                want = row["max_memory_allocated_B"] if cuda else analytic
                row["error_B"] = peak - want
                rows.append(row)
                ctx.check(f"{api}: {name} peak equals "
                          f"{'max_memory_allocated' if cuda else 'the analytic peak'}",
                          peak == want, f"reconstructed {peak} B, truth {want} B")
                if fn is run:
                    if cuda:
                        ctx.check(f"{api}: {name} peak equals the analytic peak",
                                  peak == analytic,
                                  f"reconstructed {peak} B, analytic {analytic} B")
                    ctx.check(f"{api}: {name} frees balance allocations", final == 0,
                              f"{final} B still live at the end by the records")
                ctx.metric("peak_abs_error", abs(peak - want), "B", kind="error",
                           better="lower", labels={"api": api, "program": name})
    ctx.table("peak", rows, show=True)
    ctx.note("the legacy API keeps no time-stamped memory records: peaks cover the Kineto "
             "APIs (torch.profiler.profile, torch.autograd.profiler.profile)")


# --- time accuracy ---------------------------------------------------------------------------


def region_label(seconds: float) -> str:
    return f"{seconds * 1e3:g} ms"


def _device_durations(prof, api: str, labels: list[str]) -> list[float]:
    """Seconds each GPU spin took by the profiler, in the order run: the spin kernels
    (Kineto), or each region's device time (legacy: CUDA events at the region's ends)."""
    if api == "legacy":
        regions = [e for e in apis.host_events(prof) if e.name in set(labels)]
        return [e.device_time_total / 1e6 for e in sorted(regions,
                                                           key=lambda e: e.time_range.start)]
    kernels = sorted((e for e in apis.events(prof)  # gpu-only: CUPTI's kernel events
                      if e.device_type == DeviceType.CUDA and "spin_kernel" in e.name),
                     key=lambda e: e.time_range.start)
    return [k.device_time_total / 1e6 for k in kernels]


def _host_durations(prof, labels: list[str]) -> list[float]:
    """Seconds each region took by the profiler, in the order run."""
    regions = [e for e in apis.host_events(prof) if e.name in set(labels)]
    return [e.cpu_time_total / 1e6 for e in sorted(regions, key=lambda e: e.time_range.start)]


@dataclass(frozen=True)
class TimedSession:
    """One profiler session of timing_accuracy: per region length, the median relative error
    of its regions (reported / truth - 1); and the straight line through every region of the
    session, reported = offset + (1 + clock_scale) * truth, which separates the two errors a
    region can carry: record_function's fixed cost (offset) and a profiler clock that runs
    fast or slow against perf_counter (clock_scale, the same share at every length)."""

    errors: dict[str, float]
    offset_s: float
    clock_scale: float


def _timed_session(api: str, device: str, durations: tuple[float, ...]) -> TimedSession:
    """One profiler session of REPEATS regions of each length, interleaved."""
    cuda = device == "cuda"
    spin = truth.GpuSleep() if cuda else truth.busy_wait
    labels = [region_label(d) for d in durations]
    run = [(lb, d) for _ in range(REPEATS) for lb, d in zip(labels, durations, strict=True)]
    measured = []
    with apis.open_profiler(api, device, memory=False) as prof:
        for lb, d in run:
            with autograd_profiler.record_function(lb):
                measured.append(spin(d))
    reported = _device_durations(prof, api, labels) if cuda else _host_durations(prof, labels)
    if len(reported) != len(run):
        raise FeatureAbsent(apis.api_of(prof), f"recorded {len(reported)} of the "
                            f"{len(run)} regions run")
    errors = {lb: statistics.median(r / m - 1 for (name, _), r, m
                                    in zip(run, reported, measured, strict=True) if name == lb)
              for lb in labels}
    slope, offset = np.polyfit(measured, reported, 1)
    return TimedSession(errors, float(offset), float(slope - 1))


DECORATED_S = 20e-3  # each call of the decorated function, and the gap after it
DECORATED_TOLERANCE = 0.5  # a region that ran on into the gap reads about +100%


@dataclass(frozen=True)
class DecoratedCalls:
    """What `_decorated_calls` saw: per region recorded, its relative error against its call
    and the share of its time it reports as its own (Self CPU); and the calls made."""

    errors: list[float]
    self_shares: list[float]
    calls: int
    row: dict[str, tuple[float, float]]  # key_averages' row: (its figure, its events' sum)


def _decorated_calls(api: str, device: str) -> DecoratedCalls:
    """A function labelled by `record_function` used as a decorator (one instance for every
    call, as ContextDecorator has it), called twice with as long a busy gap after each call,
    outside any region. A region that ends only when the next call replaces it, or never,
    shows here and nowhere else: the other regions are each a fresh `with
    record_function(...)` dropped at once. No op runs inside a call, so all of its time is
    its own: Self CPU equals CPU total."""

    @autograd_profiler.record_function("decorated")
    def labelled() -> float:
        return truth.busy_wait(DECORATED_S)

    measured = []
    with apis.open_profiler(api, device, memory=False) as prof:
        for _ in range(2):
            measured.append(labelled())
            truth.busy_wait(DECORATED_S)
    regions = sorted((e for e in apis.host_events(prof) if e.name == "decorated"),
                     key=lambda e: e.time_range.start)
    avg = apis.op_table(prof).get("decorated")
    row = {f: (getattr(avg, f) if avg else float("nan"), sum(getattr(e, f) for e in regions))
           for f in ("count", "cpu_time_total", "self_cpu_time_total")}  # an event's count is 1
    return DecoratedCalls(
        [e.cpu_time_total / 1e6 / m - 1 for e, m in zip(regions, measured, strict=False)],
        [e.self_cpu_time_total / e.cpu_time_total for e in regions if e.cpu_time_total],
        len(measured), row)


def _undecided(sessions: list[TimedSession], checked: list[str]) -> bool:
    """Whether any checked length's error interval still reaches across the tolerance."""
    for lb in checked:
        _, low, high = stats.mean_ci([s.errors[lb] for s in sessions])
        if stats.within(low, high, TIME_TOLERANCE) is stats.Within.ACROSS:
            return True
    return False


# `durations_s`: the lengths of the regions timed, REPEATS regions each per session;
# `sessions`: the profiler sessions per API first measured, and at most
@suite.conformance(devices=("cpu", "cuda"), settings={
    "quick": {"durations_s": (5e-3, 20e-3, 100e-3), "sessions": (3, 9)},
    "full": {"durations_s": (1e-3, 2e-3, 5e-3, 10e-3, 50e-3, 100e-3, 500e-3),
             "sessions": (5, 15)}},
    tracks=[TrackView("ProfilerTimeError", "Relative error of a known region's reported "
                      "duration, per profiler API.", unit="%", tracks=["time_error"],
                      labels={"api": apis.API_NAMES,
                              "region": FromSetting("durations_s", region_label)})],
                   check=TIMING_CHECK)
def timing_accuracy(ctx: Context) -> None:
    """Regions of known length (CPU busy-wait; torch.cuda._sleep on GPU) report their
    duration within 5%, judged with the interval over independent profiler sessions
    (checked from 20 ms): pass inside it, fail past it, inconclusive across it once the
    further sessions are spent. And regions of a function decorated with `record_function`:
    each ends with its call, reports all its time as its own (no op runs inside), and
    key_averages' row of them sums their calls and times."""
    device, cuda = ctx.device, ctx.device == "cuda"
    durations = tuple(ctx.settings["durations_s"])
    first, cap = ctx.settings["sessions"]
    labels = [region_label(d) for d in durations]
    checked = [region_label(d) for d in durations if d >= MIN_CHECKED_S]
    rows = {lb: {"case": f"{'cuda._sleep' if cuda else 'busy-wait'} {lb}"} for lb in labels}
    for api in _apis(ctx):
        with ctx.exercising(f"{api}: times the known regions"):
            sessions = [_timed_session(api, device, durations) for _ in range(first)]
            while len(sessions) < cap and _undecided(sessions, checked):
                sessions.append(_timed_session(api, device, durations))
            for lb in labels:
                errors = [s.errors[lb] for s in sessions]
                mean, low, high = stats.mean_ci(errors)
                rows[lb][f"{api}_error_%"] = mean * 100
                rows[lb][f"{api}_interval_%"] = f"[{low * 100:+.2f}, {high * 100:+.2f}]"
                if lb in checked:
                    ctx.check_within(f"{api}: {lb} region within {TIME_TOLERANCE:.0%}", errors,
                                     TIME_TOLERANCE, fmt=lambda x: f"{x:+.2%}")
                ctx.metric("time_error", abs(mean) * 100, "%", kind="error", better="lower",
                           labels={"api": api, "region": lb}, samples=[e * 100 for e in errors],
                           ci=(low * 100, high * 100))
            ctx.metric("clock_scale", statistics.median(s.clock_scale for s in sessions) * 100,
                       "%", kind="error", better="lower", labels={"api": api},
                       samples=[s.clock_scale * 100 for s in sessions])
            ctx.metric("region_offset", statistics.median(s.offset_s for s in sessions), "s",
                       kind="error", better="lower", labels={"api": api},
                       samples=[s.offset_s for s in sessions])
            ctx.metric("sessions", len(sessions), "sessions", kind="count", labels={"api": api})
            dec = _decorated_calls(api, device)
            ctx.check(f"{api}: a decorated function's region ends with each call",
                      len(dec.errors) == dec.calls
                      and max(map(abs, dec.errors)) <= DECORATED_TOLERANCE,
                      f"{len(dec.errors)} of {dec.calls} calls recorded"
                      + "".join(f", {e:+.1%}" for e in dec.errors) + f" (calls of "
                      f"{DECORATED_S * 1e3:g} ms, each followed by {DECORATED_S * 1e3:g} ms "
                      "outside the region)")
            ctx.check(f"{api}: a region with no op inside reports all its time as its own",
                      bool(dec.self_shares) and all(abs(x - 1) < 1e-9 for x in dec.self_shares),
                      "Self CPU / CPU total: "
                      + (", ".join(f"{x:.3f}" for x in dec.self_shares) or "no region"))
            # key_averages "averages all function events over their keys": its row's totals
            # are its events' sums
            ctx.check(f"{api}: key_averages' row sums its events' calls and times",
                      all(a == b for a, b in dec.row.values()),
                      "; ".join(f"{f} {a:g} (events: {b:g})" for f, (a, b) in dec.row.items()))
    ctx.table("timing_accuracy", list(rows.values()), show=True)
    ctx.details["clocksource"] = truth.clocksource()
    ctx.note(f"tolerance {TIME_TOLERANCE:.0%} of the true duration: the mean over profiler "
             f"sessions ({first} to {cap}, each the median of {REPEATS} regions per length) "
             "with its 95% interval; truth is "
             + ("CUDA events around each torch.cuda._sleep" if cuda else
                "time.perf_counter_ns around each busy-wait, inside the region")
             + "; region_offset and clock_scale split the error into record_function's fixed"
             " cost and the profiler clock's rate against the truth's (a line through each"
             f" session's regions); regions under {MIN_CHECKED_S * 1e3:g} ms are reported, not"
             " checked")


# --- overhead --------------------------------------------------------------------------------

# What each contender turns on; "off" runs the step without a profiler.
PROFILER_MODES = {
    "off": None,
    "on": {},
    "memory": {"profile_memory": True},
    "shapes": {"record_shapes": True},
}
STEP_PARAMS = {"quick": [{"batch": 2, "image": 112}],
               "full": [{"batch": 2, "image": 112}, {"batch": 5, "image": 224}]}


@suite.workload(params={p: [{"mode": m, **s} for m in PROFILER_MODES for s in STEP_PARAMS[p]]
                        for p in STEP_PARAMS}, needs=("torchvision",),
                asv_name="ProfilerStepTime.time_step")
def model_step(device: str, mode: str, batch: int = 2, image: int = 112):
    """One resnet18 training step (forward, backward, SGD), under torch.profiler in `mode`."""
    model = _resnet18(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, image, image, generator=g).to(device)
    y = torch.randint(0, 1000, (batch,), generator=g).to(device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    settings = PROFILER_MODES[mode]
    if settings is None:
        return step
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    def profiled() -> None:
        # results are collected at exit; parsing them (events(), tables) is lazy, not timed
        with torch.profiler.profile(activities=activities, **settings):
            step()

    return profiled


@suite.benchmark(params=STEP_PARAMS, devices=("cpu", "cuda"), needs=("torchvision",), duet=True,
                 tracks=[TrackView("ProfilerOverhead", "Step time with the profiler over step "
                                   "time without, from the suite's overhead case.", unit="x",
                                   labels={"mode": [m for m in PROFILER_MODES if m != "off"]},
                                   tracks=["overhead"])])
def overhead(ctx: Context) -> None:
    """A resnet18 training step with the profiler off, on, with memory, with shapes: times
    and ratios to off, interleaved in one run."""
    p = ctx.params
    fns = {m: model_step(ctx.device, m, p["batch"], p["image"]) for m in PROFILER_MODES}
    # more rounds than the default 3: each contender's blocks are spread over the run
    t = ctx.measure_side_by_side(fns, name="step", label="mode",
                                 min_run_time=3 * ctx.min_run_time, rounds=5)
    off = t["off"].median
    rows = []
    for m in PROFILER_MODES:
        ratio = t[m].median / off
        if m != "off":
            ctx.ratio("overhead", t[m], t["off"], better="lower", headline=True,
                      labels={"mode": m})
        rows.append({"mode": m, "median_ms": t[m].median * 1e3,
                     "iqr_ms": t[m].iqr * 1e3, "ratio_to_off": ratio})
    ctx.table("overhead", rows, show=True)
    ctx.details["step"] = {"model": "resnet18", "batch": p["batch"], "image": p["image"],
                           "threads": torch.get_num_threads(), "profiler": "torch.profiler"}
    ctx.note("each profiled call is one whole torch.profiler.profile context around one step "
             "(start, record, collect at exit); parsing the results (events(), tables) is not "
             "timed")


@suite.conformance(params=clean_exit_programs.PARAMS)
def clean_exit(ctx: Context) -> None:
    """A training step profiled with profile_memory=True ends its process cleanly, in N fresh
    processes."""
    clean_exit_programs.check_programs(
        ctx, {"profile_memory_step": ["-m", "suites.profiler.minimal", ctx.device]})
