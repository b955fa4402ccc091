"""The asv views against the definitions they are generated from (harness.adapters.asv_adapter): asv
discovers a time view of every workload and a figure view of every figure a case declares,
under the names its stored results are filed under; each time view's grid is its workload's
quick grid, each figure view finds every figure it tracks in a real run record with the
record's own unit, and no case runs twice in one asv run."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from asv_runner.discovery import disc_benchmarks

from harness import records, registry
from harness.adapters import asv_adapter as asv
from harness.cases import Suite, TrackView, param_id
from suites.rpc import cases as rpc_cases

ROOT = Path(__file__).resolve().parent.parent
# a real quick-profile run of every suite, committed as this machine kind's reference
REFERENCE = records.resolve_run(ROOT / "results" / "runs" / "amd-epyc-2c")

# what `asv run` finds under its benchmark_dir (asv.conf.json), found the way asv finds it:
# benchmark name ("amp.asv_bench.MatmulTime.time_matmul") -> asv's benchmark
DISCOVERED = {b.name: b for b in disc_benchmarks(str(ROOT / "suites"))}

# The names asv filed results under before the views were generated: a view renamed would
# start a new history and leave its stored one behind.
STORED_NAMES = {
    "amp": ["TrainStepTime.time_train_step", "MatmulTime.time_matmul",
            "AmpTrainStep.track_speedup", "AmpTrainStep.track_memory_ratio",
            "AmpTrainStep.track_peak_bytes", "AmpEnergy.track_energy_per_step",
            "AmpEnergy.track_power_mean", "GemmTflops.track_tflops"],
    "ddp_rpc": ["LocalStepTime.time_local_step", *(f"HybridStep.track_{t}" for t in (
        "step", "forward", "backward", "optimizer", "rpc_embedding_forward",
        "allreduce_dense_grads", "overhead_vs_local"))],
    "fork_wait": ["ForkedTime.time_forked", "SerialTime.time_serial",
                  "ForkWaitSpeedup.track_speedup"],
    "profiler": ["ProfilerStepTime.time_step", "ProfilerOverhead.track_overhead",
                 "ProfilerMemoryError.track_max_abs_error", "ProfilerTimeError.track_time_error"],
    "rpc": ["TensorPipeBuiltin.time_builtin", "TensorPipePython.time_python",
            "TensorPipeInFlight.time_rpc_async", "GlooRoundTrip.time_send_recv",
            "TcpFloor.time_pingpong", "BatchedUpdate.time_batch", "RoundTripLatency.track_p50",
            "RoundTripLatency.track_p99", "RoundTripOverFloor.track_over_floor",
            "RoundTripRatios.track_suite_over_bare_loop", "RoundTripRatios.track_uv_over_shm",
            "RoundTripRatios.track_async_speedup",
            "BatchedUpdateSpeedup.track_async_over_blocking"],
}


def _view_of(benchmark) -> type:
    return type(benchmark.func.__self__)


def expected_views(suites: list[Suite]) -> dict[str, str]:
    """Every benchmark the definitions call for, by the name asv must file it under: the
    time view of each workload, the track_* of each figure each case declares; each with the
    workload or case ("suite/name") it must read."""
    out = {}
    for suite in suites:
        for w in suite.workloads:
            cls, method = asv.time_view_name(w)
            out[f"{suite.name}.asv_bench.{cls}.{method}"] = f"{suite.name}/{w.name}"
        for case in suite.cases:
            for view in case.tracks:
                for t in view.tracks:
                    out[f"{suite.name}.asv_bench.{view.name}.track_{t.name}"] = case.id
    return out


def missing_views(expected: dict[str, str], discovered: dict) -> list[str]:
    """The expected benchmarks asv does not find, or finds reading something else."""
    return [f"{name} ({source})" for name, source in expected.items()
            if name not in discovered or _reads(_view_of(discovered[name])) != source]


def _reads(view: type) -> str:
    return getattr(view, "workload", "") or getattr(view, "case", "")


EXPECTED = expected_views(registry.all_suites())
VIEWS = sorted({_view_of(b) for b in DISCOVERED.values()}, key=lambda v: v.__qualname__)
TIME_VIEWS = [v for v in VIEWS if issubclass(v, asv.WorkloadTime)]
FIGURE_VIEWS = [v for v in VIEWS if issubclass(v, asv.CaseFigures)]


def test_asv_finds_a_view_of_every_workload_and_every_declared_figure():
    assert missing_views(EXPECTED, DISCOVERED) == []
    # and nothing the definitions do not call for
    assert sorted(set(DISCOVERED) - set(EXPECTED)) == []
    workloads = {w.suite for s in registry.all_suites() for w in s.workloads}
    assert {n.split(".")[0] for n in DISCOVERED if ".time_" in n} == workloads


def test_the_check_fails_for_a_workload_or_figure_without_a_view():
    """A workload without a view (as telemetry's busy_matmul once was), a declared figure
    without one, and a view of that name reading something else are all missing."""
    suite = Suite("s", feature="", status="", summary="")

    @suite.workload()
    def busy(device):
        """A workload."""

    @suite.benchmark(tracks=[TrackView("Figures", "", ["speedup"], unit="x")])
    def case(ctx):
        """A case."""

    expected = expected_views([suite])
    assert missing_views(expected, {}) == ["s.asv_bench.BusyTime.time_busy (s/busy)",
                                           "s.asv_bench.Figures.track_speedup (s/case)"]
    found = {"s.asv_bench.BusyTime.time_busy": _found(workload="s/busy"),
             "s.asv_bench.Figures.track_speedup": _found(case="s/other")}
    assert missing_views(expected, found) == ["s.asv_bench.Figures.track_speedup (s/case)"]


def _found(**reads: str) -> SimpleNamespace:
    """A benchmark as asv's discovery gives it, of a view reading `reads`."""
    view = type("View", (), reads)
    return SimpleNamespace(func=SimpleNamespace(__self__=view()))


def test_views_keep_the_names_their_stored_results_are_filed_under():
    stored = {f"{suite}.asv_bench.{n}" for suite, names in STORED_NAMES.items() for n in names}
    assert sorted(stored - set(DISCOVERED)) == []


def _combinations(view: type) -> list[tuple]:
    return list(itertools.product(*view.params))


def _reference_entries(case_id: str) -> dict[tuple[str, str], records.Result]:
    run = records.read_run(REFERENCE)
    return {(e.device, param_id(e.params)): e for e in run.results if e.case_id == case_id}


def _tracks(view: type) -> list[str]:
    return [m for m in dir(view) if m.startswith("track_")]


@pytest.mark.parametrize("view", TIME_VIEWS, ids=lambda v: v.__name__)
def test_a_time_view_times_exactly_its_workloads_quick_grid(view):
    w = asv._definition(view.workload, "workload")
    assert view.param_names[0] == "device"
    grid = [dict(zip(view.param_names, c, strict=True)) for c in _combinations(view)]
    for device in view.params[0]:
        defined = w.param_sets(asv.PROFILE, device)
        on_device = [{k: v for k, v in g.items() if k != "device"} for g in grid
                     if g["device"] == device]
        for p in defined:  # every defined set is timed...
            assert p in on_device, (device, p)
        for p in on_device:  # ...and a combination it does not define is skipped, not timed
            if p not in defined:
                with pytest.raises(asv.NotAvailable):
                    view().setup(device, *p.values())
    assert [m for m in dir(view) if m.startswith("time_")], "a time view with no time_ method"


@pytest.mark.parametrize("view", FIGURE_VIEWS, ids=lambda v: v.__name__)
def test_a_figure_view_finds_each_figure_in_a_real_run_with_its_unit(view):
    entries = _reference_entries(view.case)
    assert entries, f"the reference run has no {view.case}"
    combos = [c for c in _combinations(view) if asv.available(c[0])]
    if view.devices and not any(asv.available(d) for d in view.devices):
        pytest.skip(f"{view.__name__} is for {view.devices} only")
    assert combos and _tracks(view)
    for combo in combos:
        v = view()
        v.setup(entries, *combo)  # NotAvailable here would be a label the case never records
        looked_up: list[records.Metric] = []
        find = v.metric
        v.metric = lambda name, find=find, seen=looked_up: seen.append(find(name)) or seen[-1]
        for track in _tracks(view):
            value = getattr(v, track)(entries, *combo)
            m = looked_up[-1]
            assert value == m.value, (combo, track)
            unit = getattr(getattr(view, track), "unit", view.unit)
            assert unit == m.unit, (view.__name__, track, unit, m.unit)


def test_a_figure_views_setup_cache_runs_its_case_and_each_track_reads_that_run():
    """What `asv run` does with a figure view, here in one process: setup_cache runs the case
    once on every device here (as `release-bench run` would, telemetry included), and every
    benchmark of the view reads its figure from that run."""
    view = DISCOVERED["profiler.asv_bench.ProfilerMemoryError.track_max_abs_error"].func.__self__
    view = type(view)
    cache = view().setup_cache()
    assert {device for device, _ in cache} == {"cpu"} and len(cache) == 1
    (entry,) = cache.values()
    assert entry.outcome == "pass" and entry.telemetry["samples"] > 0
    for combo in _combinations(view):
        v = view()
        v.setup(cache, *combo)
        api = dict(zip(view.param_names, combo, strict=True))["api"]
        (m,) = [m for m in entry.metrics if m.name == "max_abs_error" and m.labels["api"] == api]
        assert v.track_max_abs_error(cache, *combo) == m.value == 0  # exact, on the CPU
    # a case that errored, or did not run, has no figures to track: asv marks it n/a
    (key,) = cache
    errored = {key: dataclasses.replace(entry, outcome="error", reason="worker died")}
    with pytest.raises(asv.NotAvailable, match="profiler/known_allocations on cpu: error: "
                                               "worker died"):
        view().setup(errored, *_combinations(view)[0])
    with pytest.raises(asv.NotAvailable, match="on cpu: not run"):
        view().setup({}, *_combinations(view)[0])


def test_a_renamed_metric_or_a_label_never_recorded_fails_the_view():
    entries = {k: dataclasses.replace(e, metrics=tuple(
        dataclasses.replace(m, name="speedup_renamed") if m.name == "speedup" else m
        for m in e.metrics)) for k, e in _reference_entries("fork_wait/scaling").items()}
    view = DISCOVERED["fork_wait.asv_bench.ForkWaitSpeedup.track_speedup"].func.__self__
    v = type(view)()
    v.setup(entries, "cpu", 2, 2)
    with pytest.raises(KeyError, match="recorded no metric 'speedup"):
        v.track_speedup(entries, "cpu", 2, 2)
    with pytest.raises(asv.NotAvailable, match="recorded nothing"):
        v.setup(entries, "cpu", 2, 3)


def test_views_of_one_case_share_one_cache_so_no_case_runs_twice():
    """asv runs one setup_cache per key and hands its result to every benchmark with that
    key: one key per case, shared by all its views, and no two cases under one key (they
    would read each other's entries)."""
    keys: dict[str, set] = {}
    for b in DISCOVERED.values():
        view = _view_of(b)
        if issubclass(view, asv.CaseFigures):
            keys.setdefault(view.case, set()).add(b.setup_cache_key)
        else:
            assert b.setup_cache_key is None, b.name
    assert all(len(k) == 1 for k in keys.values()), keys
    assert len({k for (k,) in keys.values()}) == len(keys), keys
    # the key is the case's own: its module and the first line of its definition
    line = inspect.getsourcelines(rpc_cases.round_trip)[1]
    assert keys["rpc/round_trip"] == {f"rpc.cases:{line}"}


# asv runs each benchmark in a process of its own; so does this check, since an RPC agent,
# once shut down, cannot be started again in the same process (a second LocalPeer hangs)
PEER_CHECK = """
from suites.rpc import caller
from suites.rpc.asv_bench import TensorPipeBuiltin as View
first = View()
first.setup("cpu", 4)
first.time_builtin("cpu", 4)
if hasattr(first, "teardown"):
    first.teardown("cpu", 4)
peer = caller._local
again = View()
again.setup("cpu", 4)
again.time_builtin("cpu", 4)
print("same peer" if caller._local is peer and peer.thread.is_alive() else "peer restarted")
"""


@pytest.mark.distributed
def test_the_rpc_peer_outlives_asvs_samples():
    """asv runs setup and teardown around every sample: the peer must not restart each time."""
    out = subprocess.run([sys.executable, "-c", PEER_CHECK], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "same peer"


@pytest.mark.parametrize("name", ["profiler.asv_bench.ProfilerStepTime.time_step",
                                  "amp.asv_bench.TrainStepTime.time_train_step"])
def test_a_workload_whose_package_is_missing_is_skipped_not_failed(monkeypatch, name):
    """An environment built without torchvision (release-bench env create
    --without-torchvision) reports the views of workloads that need it as n/a, whichever way
    the workload finds out (a failed import, or its own Skip)."""
    view = _view_of(DISCOVERED[name])
    monkeypatch.setitem(sys.modules, "torchvision", None)  # `import torchvision` now fails
    combos = [c for c in _combinations(view) if "resnet" in repr(c) or "profiler" in name]
    with pytest.raises(asv.NotAvailable, match="torchvision"):
        view().setup(*combos[0])


def test_a_view_that_cannot_run_here_says_why_and_a_bad_definition_is_refused(monkeypatch):
    """asv skips a view whose device, parameters or definition are not here, with the reason
    (NotAvailable); two views of one name, or an asv_name asv would not find, are refused
    when the views are made."""
    from suites.amp import asv_bench as amp_views
    from suites.fork_wait import asv_bench as fork_views

    monkeypatch.setattr(asv.torch.cuda, "is_available", lambda: False)
    with pytest.raises(asv.NotAvailable, match="cuda is not available here"):
        asv.skip_without("cuda")
    with pytest.raises(KeyError, match="fork_wait has no case 'nope'"):
        asv._definition("fork_wait/nope", "case")
    serial = fork_views.SerialTime()
    with pytest.raises(asv.NotAvailable, match="fork_wait/serial_tasks has no .* on cpu"):
        serial.setup("cpu", *(["not a value"] * (len(serial.param_names) - 1)))
    step = amp_views.AmpTrainStep()
    assert step.param_names[:2] == ["device", "model"]
    with pytest.raises(asv.NotAvailable, match="amp/train_step has no parameter set for "
                                               "{'model': 'no such model'"):
        step.setup({}, "cpu", "no such model", step.params[2][0])

    suite = Suite("s", feature="", status="", summary="")

    @suite.workload(asv_name="Same.time_a")
    def a(device):
        """A workload."""

    @suite.workload(asv_name="Same.time_b")
    def b(device):
        """Another, filed under the same class."""

    monkeypatch.setattr(registry, "load", lambda name: suite)
    with pytest.raises(ValueError, match="suite s has two asv views called Same"):
        asv.views("suites.s.asv_bench")
    bad = dataclasses.replace(suite.workloads[0], asv_name="Same.track_a")
    with pytest.raises(ValueError, match="s/a: asv_name 'Same.track_a' is not"):
        asv.time_view_name(bad)
