"""Shared pytest setup for tests/ (the harness) and suites/ (the features)."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from harness.presenting import asv_dashboard
from harness.running import machine

# The tests' network traffic stays on loopback: asv's dashboard is vendored from the cache that
# `make test` fills first (`release-bench asv-vendor`), never downloaded by a test; this
# process's environment reaches every command and worker a test starts.
os.environ.setdefault(asv_dashboard.VENDOR_CACHE_ENV,
                      str(Path(__file__).resolve().parent / ".asv" / "vendor"))
os.environ[asv_dashboard.NO_DOWNLOAD_ENV] = "1"


# A test process of `pytest -n N` (pytest-xdist) is told so in its environment; the processes
# its tests start are not test processes of the run (a pytest among them would turn
# pytest-benchmark off, as it does under xdist).
for _name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
    os.environ.pop(_name, None)

# Where the test processes of one `pytest -n N` run (pytest-xdist, as `make test` runs it)
# keep the locks that take turns on the machine; set by the controlling process for its workers.
TURNS_ENV = "RELEASE_BENCH_TEST_TURNS"
_TURNS = pytest.StashKey[str]()


def pytest_configure(config):
    # an image's numpy or scipy older than this code needs: one line, before any test
    from harness import dependencies

    if found := dependencies.problems():
        pytest.exit("; ".join(found), returncode=2)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # the controlling process of `pytest -n N`: its workers start after this, with this
        # environment
        config.stash[_TURNS] = os.environ[TURNS_ENV] = tempfile.mkdtemp(
            prefix="release-bench-test-turns-")


def pytest_unconfigure(config):
    if turns := config.stash.get(_TURNS, None):
        shutil.rmtree(turns, ignore_errors=True)
        os.environ.pop(TURNS_ENV, None)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if {"slow", "distributed"} & set(item.keywords):
            item.add_marker(pytest.mark.alone)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; none on this machine (run tox -e gpu on a GPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under `pytest -n N`, a test marked `alone` (and every `slow` or `distributed` one: they
    time things, wait on timers and heartbeats, or start worker processes that a busy neighbour
    would slow past their limits or mark contended) runs with no other test beside it; the
    others run side by side. A readers-writer lock on a file: the others share it, an `alone`
    test takes it whole, and a gate in front of it lets no new test in while one waits for it
    (without the gate, two workers taking turns at sharing could keep it waiting for ever)."""
    folder = os.environ.get(TURNS_ENV) if hasattr(item.config, "workerinput") else None
    if folder is None:
        yield
        return
    alone = item.get_closest_marker("alone") is not None
    with open(Path(folder) / "gate", "a") as gate, open(Path(folder) / "machine", "a") as turn:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(turn, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)


# A test that takes longer than this is marked `slow` (pytest -m "not slow" leaves it out).
SLOW_S = 10.0


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Where the run's time went: the test files that took longest, and the tests that took
    longer than SLOW_S without the `slow` mark (so that the mark keeps meaning something)."""
    # every phase's report (setup, call, teardown: a fixture's work counts), each once
    reports = list({id(r): r for reports in terminalreporter.stats.values() for r in reports
                    if hasattr(r, "duration") and hasattr(r, "when")}.values())
    if not reports:
        return
    per_test: dict[str, float] = {}
    for r in reports:
        per_test[r.nodeid] = per_test.get(r.nodeid, 0.0) + r.duration
    per_file: dict[str, float] = {}
    for nodeid, seconds in per_test.items():
        per_file[nodeid.split("::")[0]] = per_file.get(nodeid.split("::")[0], 0.0) + seconds
    write = terminalreporter.write_line
    terminalreporter.section("time by test file")
    for path, seconds in sorted(per_file.items(), key=lambda x: -x[1])[:15]:
        write(f"{seconds:8.1f} s  {path}")
    slow = {r.nodeid for r in reports if "slow" in r.keywords}
    unmarked = sorted(((s, n) for n, s in per_test.items() if s > SLOW_S and n not in slow),
                      reverse=True)
    if unmarked:
        terminalreporter.section(f"over {SLOW_S:g} s without the slow mark")
        for seconds, nodeid in unmarked:
            write(f"{seconds:8.1f} s  {nodeid}")


def pytest_benchmark_update_machine_info(config, machine_info):
    # pytest-benchmark's own machine_info knows nothing of GPUs or the torch build.
    from harness.adapters.pytest_adapter import process_telemetry

    machine_info["release_bench"] = machine.fingerprint()
    machine_info["release_bench_telemetry"] = process_telemetry().info


PLANTED = Path(__file__).resolve().parent / "tests" / "planted"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # scripts/gpu-image.py's stand-in for the GPU image says so
        return False


# Test modules that import at the top what a GPU machine's image lacks (scripts/gpu-image.py):
# not collected there, or `pytest -m gpu` would stop at their import errors and run nothing.
collect_ignore = [path for path, module in (("tests/test_asv_views.py", "asv_runner"),
                                            ("tests/test_report.py", "matplotlib"))
                  if not _importable(module)]


class FeatureOff:
    """Release features turned off for one test, their API left in place
    (tests/planted/feature_off.py): in this process, undone after the test, and in every
    process the test starts (workers, minimal programs: the planted sitecustomize, through
    the environment)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, rehearsed: bool):
        self.monkeypatch = monkeypatch
        self.plants = _planted("feature_off")
        self.rehearsed = rehearsed  # on a CUDA rehearsal's stand-ins, set up by the test

    def __call__(self, names: str) -> None:
        """Turn off the features `names` ("autocast+rpc")."""
        self.plants.turn_off(names, self.monkeypatch.setattr)
        _plant_in_workers(self.monkeypatch, f"off={names}")

    def assert_fails(self, suite, table: dict, name: str, params_id: str,
                     device: str = "cpu"):
        """Run the case of a suite's FEATURE_OFF `table` entry with its plant (features to
        turn off, or a `worker_setup=` hook for its workers): it must fail, not pass, not be
        n/a, where unbroken it passes (its verdict shared by every test of the session, as
        the pytest view gives it; not asked on a rehearsal's stand-ins, which the test set up
        its own way). Returns its result entry."""
        from harness.running.runner import execute

        plant, params = table[name, params_id]
        if not self.rehearsed:
            passes_unbroken(suite.case(name), device, params)
        if isinstance(plant, str):
            self(plant)
        entry = execute(suite.case(name), device, params, "quick",
                        worker_setup=None if isinstance(plant, str) else plant)
        assert entry.outcome == "fail", f"{plant} off: {entry.outcome}: {entry.reason}"
        return entry


@pytest.fixture
def feature_off(monkeypatch, request) -> FeatureOff:
    """See FeatureOff."""
    return FeatureOff(monkeypatch, rehearsed="cuda_rehearsal" in request.fixturenames)


def passes_unbroken(case, device: str = "cpu", params: dict | None = None):
    """The case's result entry unbroken, as the pytest view judges it (a pass; measured once
    per session and shared: harness.adapters.pytest_adapter.unbroken), or None where the
    expectations file expects it to fail here (there is no passing run to break). Ask before
    breaking anything."""
    from harness.adapters import pytest_adapter

    try:
        return pytest_adapter.unbroken(case, device, params)
    except pytest_adapter.ExpectedFailure:
        return None


def _planted(module: str, folder: Path = PLANTED):
    sys.path.insert(0, str(folder))
    try:
        return __import__(module)
    finally:
        sys.path.remove(str(folder))


def _plant_in_workers(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    """The planted sitecustomize, with `spec` added to what is planted already, in every
    process a test starts (through the environment)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(PLANTED), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("RELEASE_BENCH_PLANT", ",".join(
        filter(None, [os.environ.get("RELEASE_BENCH_PLANT"), spec])))


# Seconds of measurement per timed statement in a rehearsal: the timing code runs as on a
# GPU, but what it times on the CPU says nothing of a GPU.
REHEARSAL_RUN_TIME = 0.02


class CudaRehearsal:
    """A CUDA rehearsal on the CPU for one test (tests/planted/cuda_rehearsal.py): the GPU
    `family` of its GPUS stands in for a GPU in this process and in every process the test
    starts; NVML stands in through tests/fake_pynvml.py. `run` executes a case on "cuda"
    with some of its settings made small enough for the CPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, family: str):
        from harness import cases

        self.monkeypatch = monkeypatch
        plants = _planted("cuda_rehearsal")
        fake = _planted("fake_pynvml", PLANTED.parent)
        self.stand_in = plants.install(family, monkeypatch.setattr)
        self.gpu = self.stand_in.gpu
        self.nvml = plants.fake_nvml(self.gpu, fake)
        monkeypatch.setitem(sys.modules, "pynvml", self.nvml)
        monkeypatch.setitem(cases.MIN_RUN_TIME, "quick", REHEARSAL_RUN_TIME)
        _plant_in_workers(monkeypatch, f"cuda={family}")

    def small(self, suite, name: str, **settings) -> None:
        """Case `name` of `suite` runs with `settings` in place of its declared ones."""
        from harness.cases import Settings

        case = suite.case(name)
        declared = case.settings.by_profile
        smaller = Settings({k: {**v, **{n: x for n, x in settings.items() if n in v}}
                            for k, v in declared.items()})
        self.monkeypatch.setattr(suite, "cases", [
            dataclasses.replace(c, settings=smaller) if c is case else c for c in suite.cases])

    def run(self, suite, name: str, params: dict | None = None, **settings):
        from harness.running.runner import execute

        if settings:
            self.small(suite, name, **settings)
        return execute(suite.case(name), "cuda", params or {}, "quick")


@pytest.fixture
def cuda_rehearsal(monkeypatch):
    """`cuda_rehearsal("H200")`: see CudaRehearsal. The stand-ins leave after the test."""
    made: list[CudaRehearsal] = []

    def start(family: str) -> CudaRehearsal:
        made.append(CudaRehearsal(monkeypatch, family))
        return made[-1]

    # the fingerprint is computed once per process: not of a rehearsed GPU for other tests
    machine.fingerprint.cache_clear()
    yield start
    for r in made:
        r.stand_in.close()
    machine.fingerprint.cache_clear()


@pytest.fixture
def rpc_group_of_one(monkeypatch):
    """`with rpc_group_of_one(name):` this process as the only worker of an RPC group, named
    `name`, through a store on loopback that the test hosts: what a function served over RPC
    needs to run in the test's own thread (distributed autograd, @async_execution)."""
    from torch.distributed import rpc

    from harness.running import launch, rpc_group

    @contextlib.contextmanager
    def join(name: str):
        store, port = launch.bound_store(launch.LOOPBACK, timeout_s=60)
        for k, v in launch.agent_store_env(launch.LOOPBACK, port).items():
            monkeypatch.setenv(k, v)
        options = rpc.TensorPipeRpcBackendOptions(
            init_method=rpc_group.rendezvous_url(port), rpc_timeout=30)
        with rpc_group.joined(0, 1, name, options):
            yield
        del store  # after the group's shutdown, which reads it

    return join
