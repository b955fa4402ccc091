"""The runner turns whatever a case does into exactly one outcome, and keeps partial runs."""

from __future__ import annotations

import os
import time
import warnings

import pytest
import torch
from fake_telemetry import HOST_BUSY, FakeTelemetry

from harness import records
from harness.cases import Context, FeatureAbsent, Since, Skip, Suite, has_api
from harness.running import runner

demo = Suite("demo", feature="a test suite", status="beta", summary="cases for the runner")
RELEASE = torch.__version__.split("+")[0]


@demo.conformance(devices=("cpu",))
def passes(ctx: Context):
    ctx.check("one is one", 1 == 1)


@demo.conformance(devices=("cpu",))
def fails(ctx: Context):
    ctx.check("one is one", True)
    ctx.check("two is three", 2 == 3, "2 != 3")


@demo.conformance(devices=("cpu",))
def checks_nothing(ctx: Context):
    pass


@demo.conformance(devices=("cpu",))
def raises(ctx: Context):
    raise ZeroDivisionError("division by zero\nsecond line")


@demo.conformance(devices=("cpu",))
def skips(ctx: Context):
    raise Skip("needs a thing this machine lacks")


FUTURE = Since("torch.no_such_api", "99.0", before="AttributeError: no such api")
PAST = Since("torch.autocast('cpu', dtype=torch.float16)", "2.2.0", device="cpu",
             params={"dtype": "float16"}, before="RuntimeError: bfloat16 only")


@demo.conformance(devices=("cpu",), since=[FUTURE])
def needs_an_api_of_a_later_release(ctx: Context):
    raise AssertionError("never runs: the runner reads the declaration first")


@demo.conformance(devices=("cpu",))
def finds_an_undeclared_api_missing(ctx: Context):
    raise FeatureAbsent("torch.no_such_api", "torch has no no_such_api")


@demo.conformance(devices=("cpu",), params=[{"dtype": "bfloat16"}, {"dtype": "float16"}],
                  since=[PAST])
def finds_a_declared_api_refusing(ctx: Context):
    raise FeatureAbsent(f"torch.autocast('cpu', dtype=torch.{ctx.params['dtype']})",
                        "autocast did not engage")


@demo.conformance(devices=("cpu",))
def judges_an_interval(ctx: Context):
    ctx.check_within("inside", [0.010, 0.011, 0.012], 0.05)
    ctx.check_within("across", [0.01, 0.09, 0.05], 0.05)


@demo.benchmark(devices=("cpu",))
def measures(ctx: Context):
    warnings.warn("deprecated thing", FutureWarning, stacklevel=1)
    ctx.measure("sleep", lambda: time.sleep(0.001), min_run_time=0.02)


@demo.benchmark(devices=("cpu",))
def measures_nothing(ctx: Context):
    pass


def crashing_worker(rank, world):
    raise OSError("worker could not start")


@demo.benchmark(devices=("cpu",))
def launches_a_crashing_worker(ctx: Context):
    ctx.launch(crashing_worker, 1, timeout_s=60)


def where_it_ran(rank, world, tag):
    return {"rank": rank, "world": world, "tag": tag, "pid": os.getpid(),
            "set_up": os.environ.get("DEMO_SET_UP")}


def set_up_worker():
    os.environ["DEMO_SET_UP"] = "yes"


@demo.conformance(devices=("cpu",))
def launches_two_workers(ctx: Context):
    ctx.details["ran"] = ctx.launch(where_it_ran, 2, ("hi",), timeout_s=60, label="demo worker")
    ctx.check("both ranks returned", [r["rank"] for r in ctx.details["ran"]] == [0, 1])


@demo.conformance(devices=("cpu", "cuda"))
def on_every_device(ctx: Context):
    ctx.check("ran", True)


def run(name, device="cpu"):
    return runner.execute(demo.case(name), device, {}, "quick")


@pytest.mark.parametrize(
    ("name", "outcome", "reason"),
    [
        ("passes", "pass", ""),
        ("fails", "fail", "1 of 2 checks failed: two is three: 2 != 3"),
        ("checks_nothing", "error", "conformance case recorded no checks"),
        ("raises", "error", "ZeroDivisionError: division by zero"),
        ("skips", "skip", "needs a thing this machine lacks"),
        ("needs_an_api_of_a_later_release", "n/a",
         f"torch.no_such_api: not in torch {RELEASE} (from 99.0; before: AttributeError: no "
         "such api)"),
        ("finds_an_undeclared_api_missing", "fail",
         f"1 of 1 checks failed: torch.no_such_api works: torch has no no_such_api, in torch "
         f"{RELEASE}"),
        ("judges_an_interval", "inconclusive",
         "1 of 2 checks inconclusive: across: 0.05 [-0.0494, 0.149] over 3, limit 0.05: the "
         "interval reaches across the limit"),
        ("measures_nothing", "error", "benchmark case recorded no metrics"),
    ],
)
def test_outcomes(name, outcome, reason):
    entry = run(name)
    assert (entry.outcome, entry.reason) == (outcome, reason)


def test_a_declared_range_decides_n_a_and_a_refusal_inside_it_fails(monkeypatch):
    case = demo.case("finds_a_declared_api_refusing")
    # in this release the API is declared present: what the run finds is a failure
    entry = runner.execute(case, "cpu", {"dtype": "float16"}, "quick")
    assert entry.outcome == "fail"
    assert entry.reason.endswith(f"autocast did not engage, in torch {RELEASE}, which has it "
                                 "(from 2.2.0)")
    # in a release before it, the case does not run: n/a with the declared evidence
    monkeypatch.setattr(torch, "__version__", "2.1.2+cu121")
    entry = runner.execute(case, "cpu", {"dtype": "float16"}, "quick")
    assert (entry.outcome, entry.reason) == (
        "n/a", "torch.autocast('cpu', dtype=torch.float16): not in torch 2.1.2 (from 2.2.0; "
               "before: RuntimeError: bfloat16 only)")
    assert not entry.checks
    # the declaration names its parameter set and device: the other set still runs
    assert runner.execute(case, "cpu", {"dtype": "bfloat16"}, "quick").outcome == "fail"
    assert not PAST.applies("cuda", {"dtype": "float16"})


def test_a_declaration_needs_a_release():
    with pytest.raises(ValueError, match="is not a release"):
        Since("torch.thing", "latest", before="...")


def test_has_api_names_objects_submodules_and_keywords():
    assert has_api("torch.amp.GradScaler") and has_api("torch.distributed.rpc.functions")
    assert not has_api("torch.amp.NoSuchScaler") and not has_api("no_such_module.thing")
    assert has_api("torch.autocast(device_type)") and has_api("torch.profiler.profile(activities=)")
    assert not has_api("torch.autocast(no_such_keyword)")
    # a submodule its package does not import until asked, and one that is not there
    assert has_api("json.tool.main") and not has_api("json.no_such_tool")
    # a keyword of a function without a Python signature cannot be seen: never claimed
    assert not has_api("torch.add(alpha=)")


def test_error_keeps_the_traceback():
    assert "ZeroDivisionError" in run("raises").details["traceback"]


def test_benchmark_metric_carries_statistics_and_warnings_become_notes():
    entry = run("measures")
    assert entry.outcome == "pass"
    (m,) = entry.metrics
    assert m.unit == "s" and m.value >= 0.001
    st = m.stats
    assert st["n"] >= 4 and st["n"] == len(m.samples) and st["p25"] <= st["p75"]
    assert st["ci"][0] <= m.value <= st["ci"][1]
    assert any("FutureWarning" in n and "deprecated thing" in n for n in entry.notes)


@pytest.mark.distributed
def test_worker_failure_becomes_an_error_with_worker_details():
    entry = run("launches_a_crashing_worker")
    assert entry.outcome == "error"
    assert entry.reason == "worker rank 0 raised OSError: worker could not start"
    assert entry.details["workers"][0]["kind"] == "exception"


class RecordingCluster:
    """Stands in for the hosts of a run across hosts (`harness.running.nodes.Cluster`): records each
    launch and runs its ranks in this process, where no launcher would."""

    def __init__(self):
        self.launches = []

    def launch(self, fn, nprocs, args, *, timeout_s, grace_s, setup, env, label, store_port,
               started=None):
        self.launches.append({"fn": fn, "nprocs": nprocs, "args": tuple(args), "setup": setup,
                              "label": label, "timeout_s": timeout_s})
        return [fn(rank, nprocs, *args) for rank in range(nprocs)]

    def take_placements(self):
        return [{"0": "node 0 (a 10.0.0.1)", "1": "node 1 (b 10.0.0.2)"}]

    def hosts(self):
        return [{"node": 0, "hostname": "a"}, {"node": 1, "hostname": "b"}]


def test_a_cases_workers_go_through_the_cluster_it_is_given():
    cluster = RecordingCluster()
    entry = runner.execute(demo.case("launches_two_workers"), "cpu", {}, "quick",
                           worker_setup=set_up_worker, cluster=cluster)
    assert entry.outcome == "pass", entry.reason
    (call,) = cluster.launches
    assert (call["fn"], call["nprocs"], call["args"], call["label"], call["timeout_s"]) == (
        where_it_ran, 2, ("hi",), "demo worker", 60)
    assert call["setup"] is set_up_worker  # the test's hook travels with the ranks
    assert {r["pid"] for r in entry.details["ran"]} == {os.getpid()}  # the fake ran them
    assert entry.placement == cluster.take_placements()


def test_a_run_given_a_cluster_hands_it_to_every_case_and_lists_its_hosts(tmp_path):
    cluster = RecordingCluster()
    planned = runner.plan([demo], "quick", ["cpu"], only=["launches_two_workers", "passes"])
    _, doc = runner.run(planned, "quick", tmp_path, progress=lambda s: None, cluster=cluster)
    assert doc.hosts == cluster.hosts()
    assert [e.outcome for e in doc.results] == ["pass", "pass"]
    assert len(cluster.launches) == 1  # `passes` launches nothing
    assert all(e.placement == cluster.take_placements() for e in doc.results)


@pytest.mark.distributed
def test_without_a_cluster_a_cases_workers_are_local_processes_set_up_by_the_hook():
    entry = runner.execute(demo.case("launches_two_workers"), "cpu", {}, "quick",
                           worker_setup=set_up_worker)
    assert entry.outcome == "pass", entry.reason
    ran = entry.details["ran"]
    assert [(r["rank"], r["world"], r["tag"], r["set_up"]) for r in ran] == [
        (0, 2, "hi", "yes"), (1, 2, "hi", "yes")]
    pids = {r["pid"] for r in ran}
    assert len(pids) == 2 and os.getpid() not in pids  # two spawned workers of this machine
    assert entry.placement is None and "placement" not in entry.to_json()
    assert "DEMO_SET_UP" not in os.environ  # the hook ran in the workers, not here


def test_cuda_without_cuda_skips(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    entry = run("on_every_device", device="cuda")
    assert entry.outcome == "skip" and "CUDA" in entry.reason


def test_plan_expands_devices_and_filters():
    planned = runner.plan([demo], "quick", ["cpu", "cuda"], case_filter="on_every")
    assert [(p.case.name, p.device) for p in planned] == [
        ("on_every_device", "cpu"), ("on_every_device", "cuda")]


def test_plan_leaves_out_skipped_cases():
    planned = runner.plan([demo], "quick", ["cpu"], skip=["measures", "fails"])
    names = [p.case.name for p in planned]
    assert "passes" in names and "raises" in names
    assert not [n for n in names if "measures" in n or "fails" in n]
    assert len(names) == len(runner.plan([demo], "quick", ["cpu"])) - 3


def test_plan_takes_only_the_cases_named_exactly():
    # `ab` runs one benchmark case per process by name; a name that another contains
    # ("measures" in "measures_nothing") must not pull that one in
    planned = runner.plan([demo], "quick", ["cpu"], only=["measures"])
    assert {p.case.name for p in planned} == {"measures"}
    planned = runner.plan([demo], "quick", ["cpu"], only=["passes", "raises"], skip=["raises"])
    assert {p.case.name for p in planned} == {"passes"}


def test_interrupted_run_keeps_finished_cases(tmp_path):
    interrupt = Suite("interrupt", feature="f", status="beta", summary="s")

    @interrupt.conformance(devices=("cpu",))
    def first(ctx):
        ctx.check("ok", True)

    @interrupt.conformance(devices=("cpu",))
    def second(ctx):
        raise KeyboardInterrupt

    planned = runner.plan([interrupt], "quick", ["cpu"])
    with pytest.raises(KeyboardInterrupt):
        runner.run(planned, "quick", tmp_path, progress=lambda s: None)
    (path,) = tmp_path.rglob("*.json")
    doc = records.read_run(path)
    assert doc.finished is None
    assert [e.case for e in doc.results] == ["first"]


@demo.conformance(devices=("cpu",))
def writes_to_fd2(ctx: Context):
    import os

    for _ in range(3):
        os.write(2, b"native library chatter\n")
    ctx.check("ran", True)


def test_native_stderr_goes_into_the_record_not_the_terminal(capfd):
    entry = run("writes_to_fd2")
    assert "native library chatter" not in capfd.readouterr().err
    assert entry.details["stderr"] == ["native library chatter"]
    assert any(n.startswith("stderr (recorded, not shown): 3 lines, 1 distinct")
               for n in entry.notes)


# --- performance checks on a contended machine -------------------------------------------------


BUSY = FakeTelemetry(HOST_BUSY)


@demo.benchmark(devices=("cpu",))
def misses_its_speedup_floor(ctx: Context):
    ctx.metric("speedup", 0.95, "x", kind="ratio", better="higher")
    ctx.check("returns the serial result", True)
    ctx.check("parallel at K=2", False, "speedup 0.95x, floor 1.50x", performance=True)


@demo.benchmark(devices=("cpu",))
def gives_a_wrong_result_and_misses_its_floor(ctx: Context):
    ctx.check("returns the serial result", False, "task 1 differs")
    ctx.check("parallel at K=2", False, "speedup 0.95x, floor 1.50x", performance=True)


def run_with(name, telemetry):
    return runner.execute(demo.case(name), "cpu", {}, "quick", telemetry)


def test_a_missed_performance_floor_under_contention_is_invalid():
    entry = run_with("misses_its_speedup_floor", BUSY)
    assert entry.outcome == "invalid"
    assert entry.reason == (
        "measured contended (host busy: other processes used 98% of a core on average): "
        "1 of 2 checks failed, all performance: parallel at K=2: speedup 0.95x, floor 1.50x")
    assert entry.checks[1] == records.Check("parallel at K=2", False,
                                            "speedup 0.95x, floor 1.50x", performance=True)
    assert not entry.checks[0].performance


def test_every_contention_reason_is_named():
    entry = run_with("misses_its_speedup_floor", FakeTelemetry(
        "heavy steal: the hypervisor took 25% of CPU time (limit 10%)",
        "gpu0 throttled: hw_thermal_slowdown"))
    assert entry.outcome == "invalid"
    assert entry.reason.startswith("measured contended (heavy steal: the hypervisor took 25% "
                                       "of CPU time (limit 10%); gpu0 throttled: ")


@pytest.mark.parametrize("telemetry", [FakeTelemetry(), None], ids=["valid", "no telemetry"])
def test_a_missed_performance_floor_on_a_quiet_machine_fails(telemetry):
    entry = run_with("misses_its_speedup_floor", telemetry)
    assert entry.outcome == "fail"
    assert entry.reason == "1 of 2 checks failed: parallel at K=2: speedup 0.95x, floor 1.50x"


def test_a_failed_correctness_check_fails_under_contention_too():
    entry = run_with("gives_a_wrong_result_and_misses_its_floor", BUSY)
    assert entry.outcome == "fail"
    assert entry.reason.startswith("2 of 2 checks failed: returns the serial result")


def test_invalid_is_a_recorded_outcome(tmp_path):
    planned = runner.plan([demo], "quick", ["cpu"], case_filter="misses_its_speedup_floor")
    path, _ = runner.run(planned, "quick", tmp_path, telemetry=BUSY, progress=lambda s: None)
    assert records.read_run(path).results[0].outcome == "invalid"
