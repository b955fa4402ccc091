"""The suites' asv views (suites/<name>/asv_bench.py) against the definitions they share: each
time view's grid is its workload's quick grid, each figure view finds every figure it tracks
in a real run record with the record's own unit, and no case runs twice in one asv run."""

from __future__ import annotations

import copy
import importlib
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from harness import asv_adapter as asv
from harness import records, registry
from harness.cases import param_id

ROOT = Path(__file__).resolve().parent.parent
# a real quick-profile run of every suite, committed as this machine kind's reference
REFERENCE = records.resolve_run(ROOT / "results" / "runs" / "amd-epyc-2c")


def _views(base: type) -> list[type]:
    out = []
    for name in registry.suite_names():
        if importlib.util.find_spec(f"suites.{name}.asv_bench") is None:
            continue
        module = importlib.import_module(f"suites.{name}.asv_bench")
        out += [v for v in vars(module).values()
                if isinstance(v, type) and issubclass(v, base) and v.__module__ == module.__name__
                and (v.__dict__.get("workload") or v.__dict__.get("case"))]
    return out


TIME_VIEWS = _views(asv.WorkloadTime)
FIGURE_VIEWS = _views(asv.CaseFigures)


def _combinations(view: type) -> list[tuple]:
    return list(itertools.product(*view.params))


def _reference_entries(case_id: str) -> dict[tuple[str, str], dict]:
    run = records.read_run(REFERENCE)
    return {(e["device"], param_id(e["params"])): e for e in run["results"]
            if f"{e['suite']}/{e['case']}" == case_id}


def _tracks(view: type) -> list[str]:
    return [m for m in dir(view) if m.startswith("track_")]


def test_every_suite_with_workloads_has_views_of_both_kinds():
    assert {v.workload.split("/")[0] for v in TIME_VIEWS} >= {"amp", "rpc", "fork_wait",
                                                               "profiler", "ddp_rpc"}
    assert {v.case.split("/")[0] for v in FIGURE_VIEWS} == {v.workload.split("/")[0]
                                                            for v in TIME_VIEWS}


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
        looked_up: list[dict] = []
        find = v.metric
        v.metric = lambda name, find=find, seen=looked_up: seen.append(find(name)) or seen[-1]
        for track in _tracks(view):
            value = getattr(v, track)(entries, *combo)
            m = looked_up[-1]
            assert value == m["value"], (combo, track)
            unit = getattr(getattr(view, track), "unit", view.unit)
            assert unit == m["unit"], (view.__name__, track, unit, m["unit"])


def test_a_renamed_metric_or_a_label_never_recorded_fails_the_view():
    entries = copy.deepcopy(_reference_entries("fork_wait/scaling"))
    view = importlib.import_module("suites.fork_wait.asv_bench").ForkWaitSpeedup
    for entry in entries.values():
        for m in entry["metrics"]:
            if m["name"] == "speedup":
                m["name"] = "speedup_renamed"
    v = view()
    v.setup(entries, "cpu", 2, 2)
    with pytest.raises(KeyError, match="recorded no metric 'speedup"):
        v.track_speedup(entries, "cpu", 2, 2)
    with pytest.raises(asv.NotAvailable, match="recorded nothing"):
        v.setup(entries, "cpu", 2, 3)


def test_views_of_one_case_share_one_cache_so_no_case_runs_twice():
    by_case: dict[str, set] = {}
    for view in FIGURE_VIEWS:
        by_case.setdefault(view.case, set()).add(view.setup_cache)
    # asv keys its cache by the function's source line: one function, one run of the case
    assert all(len(fns) == 1 for fns in by_case.values()), by_case
    for fns in by_case.values():
        (fn,) = fns
        assert fn.__module__.startswith("suites.")  # not the base's, which every class shares


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


@pytest.mark.parametrize("view", ["suites.profiler.asv_bench:ProfilerStepTime",
                                  "suites.amp.asv_bench:TrainStepTime"])
def test_a_workload_whose_package_is_missing_is_skipped_not_failed(monkeypatch, view):
    """An environment built without torchvision (release-bench env create
    --without-torchvision) reports the views of workloads that need it as n/a, whichever way
    the workload finds out (a failed import, or its own Skip)."""
    module, name = view.split(":")
    view = getattr(importlib.import_module(module), name)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # `import torchvision` now fails
    combos = [c for c in _combinations(view) if "resnet" in repr(c) or "profiler" in module]
    with pytest.raises(asv.NotAvailable, match="torchvision"):
        view().setup(*combos[0])
