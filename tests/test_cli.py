"""`release-bench` as a user meets it: the installed console script in real subprocesses, and
its bad input through the same entry point (cli.main) in this process."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from inprocess import release_bench

from harness import cli, records
from harness.cases import PROFILES
from harness.commands import common
from harness.commands.common import UsageError

ROOT = Path(__file__).resolve().parent.parent
EXE = shutil.which("release-bench") or str(Path(sys.executable).parent / "release-bench")


def cli_run(*args, cwd=None):
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def listed(text: str) -> dict[str, list[str]]:
    """`list`'s lines under each case, by "suite/case"."""
    out: dict[str, list[str]] = {}
    suite, lines = "", None
    for line in text.splitlines():
        words = line.split()
        if not line.startswith(" "):
            suite, lines = line.split(":")[0], None
        elif line.startswith("  ") and words[0] in ("conformance", "benchmark"):
            lines = out.setdefault(f"{suite}/{words[1]}", [])
        elif words[0] == "workload":
            lines = None
        elif lines is not None:
            lines.append(line.strip())
    return out


def dry_run(text: str) -> dict[str, list[str]]:
    """`run --dry-run`'s indented lines under each run it would do, by its label."""
    out: dict[str, list[str]] = {}
    lines = None
    for line in text.splitlines():
        if line.startswith("would run "):
            lines = out.setdefault(line.removeprefix("would run "), [])
        elif line.startswith("    ") and lines is not None:
            lines.append(line.strip())
        else:
            lines = None
    return out


# Settings as the suites declare them, spelled out here rather than read back from the
# registry; "on cuda" where a device has its own.
DECLARED = {
    "quick": {
        "rpc/round_trip": ["sizes = (4, 65536, 4194304)", "launch_timeout_s = 240",
                           "plan = Plan(seconds=0.08, min_samples=30, max_samples=800, "
                           "rounds=8, sessions=6, warmup_s=0.03)"],
        "ddp_rpc/step_time": ["launches = 6", "rounds = 2", "steps_per_round = 10"],
        "ddp_rpc/matches_reference": ["steps = 20"],
        "fork_wait/scaling": ["tasks = (1, 2, 4)"],
        "telemetry/sampling_overhead": ["run_time_s = 3"],
        "profiler/timing_accuracy": ["durations_s = (0.005, 0.02, 0.1)"],
        "amp/gemm_ladder": ["sizes on cpu = (256, 512, 1024)",
                            "sizes on cuda = (1024, 2048, 4096, 8192)"],
    },
    "full": {
        "rpc/round_trip": ["sizes = (4, 64, 1024, 16384, 65536, 262144, 1048576, 4194304, "
                           "16777216, 67108864)", "launch_timeout_s = 900",
                           "plan = Plan(seconds=0.5, min_samples=20, max_samples=10000, "
                           "rounds=16, sessions=8, warmup_s=0.2)"],
        "ddp_rpc/step_time": ["launches = 10", "rounds = 3", "steps_per_round = 25"],
        "ddp_rpc/matches_reference": ["steps = 40"],
        "fork_wait/scaling": ["tasks = (1, 2, 4, 8)"],
        "telemetry/sampling_overhead": ["run_time_s = 20"],
        "profiler/timing_accuracy": ["durations_s = (0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5)"],
        "amp/gemm_ladder": ["sizes on cpu = (256, 512, 1024, 2048, 4096)",
                            "sizes on cuda = (512, 1024, 2048, 4096, 8192, 16384)"],
    },
}


@pytest.mark.parametrize("profile", PROFILES)
def test_list_prints_each_cases_declared_settings_for_the_profile(profile, capsys):
    from harness import registry

    assert cli.main(["list", "--profile", profile]) == 0
    text = capsys.readouterr().out
    blocks = listed(text)
    # each suite under its title and the feature's status in the 1.6 release
    assert "fork_wait: TorchScript fork/wait parallelism (1.6 status: beta)" in text
    prefix = f"{profile}: "
    for suite in registry.all_suites():
        for c in suite.cases:
            shown = blocks[c.id]
            assert [x for x in shown if x.startswith(prefix)] == [
                prefix + x for x in c.describe_params(profile) + c.describe_settings(profile)
            ], c.id
            assert not any(x.startswith(f"{p}: ") for x in shown for p in PROFILES
                           if p != profile), c.id  # the profile asked for only
    for case, lines in DECLARED[profile].items():
        assert {prefix + x for x in lines} <= set(blocks[case]), case
    # a benchmark's rounds in a campaign, by this machine's calibration (its factor, or 1)
    from harness.commands.ab import DEFAULT_ROUNDS
    from harness.comparing import calibration
    from harness.running import machine

    cal, _ = calibration.for_machine(machine.fingerprint())
    for suite in registry.all_suites():
        for c in suite.cases:
            if c.kind == "benchmark":
                factor = cal.rounds_factor.get(f"{suite.name}.{c.name}", 1) if cal else 1
                assert (f"campaign rounds: {factor * DEFAULT_ROUNDS} a side by default (rounds "
                        f"factor {factor})") in blocks[c.id], c.id
                assert ("duet: yes" if c.duet else "duet: no") in " ".join(blocks[c.id]), c.id
    # the duet-capable benchmarks: the single-process CPU-bound ones, and the two
    # multi-process ones whose duet A/A was measured tighter than sequential rounds
    assert {c.id for s in registry.all_suites() for c in s.cases if c.duet} == {
        "amp/train_step", "amp/gemm_ladder", "profiler/overhead", "rpc/batched_update",
        "ddp_rpc/step_time"}


@pytest.mark.parametrize("profile", PROFILES)
def test_dry_run_prints_the_settings_of_each_case_it_would_run(profile, capsys):
    from harness import registry

    assert cli.main(["run", "--dry-run", "--profile", profile, "--device", "cpu",
                     "--device", "cuda", "--expectations", "none"]) == 0
    blocks = dry_run(capsys.readouterr().out)
    for suite in registry.all_suites():
        for c in suite.cases:
            for d in c.devices:
                first, *rest = [k for k in blocks if k.startswith(f"{c.id}[{d} ")]
                # under a case's first run on a device, once
                assert blocks[first] == c.describe_settings(profile, [d]), first
                assert all(blocks[k] == [] for k in rest), first
    for case, lines in DECLARED[profile].items():
        suite, name = case.split("/")
        for d in registry.load(suite).case(name).devices:
            label = next(k for k in blocks if k.startswith(f"{case}[{d} "))
            mine = [x.replace(f" on {d} = ", " = ") for x in lines
                    if " on " not in x or f" on {d} = " in x]
            assert set(mine) <= set(blocks[label]), label


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--suite", "nope"], "unknown suite 'nope'"),
        (["run", "--profile", "huge"], "invalid choice: 'huge'"),
        (["run", "--device", "tpu"], "invalid choice: 'tpu'"),
        (["run", "--suite", "fork_wait", "--case", "no-such-case"], "nothing to run"),
        (["show", "no/such/run.json"], "no such run file"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["ab", "a", "b", "--max-rounds", "5"], "--max-rounds must be above --rounds (5)"),
        (["ab", "a", "b", "--calibration", "no/such/calibration.json"], "not a calibration"),
        (["expectations", "check", "results/runs/amd-epyc-2c/20261130T071344Z-quick.json",
          "--file", "no/such/expectations.toml"], "no/such/expectations.toml: cannot read"),
        (["ab", "a"], "ab needs two environments, A and B (or --judge AB_DIR)"),
        (["ab", "a", "b", "--rounds", "0"], "--rounds must be at least 1, got 0"),
        (["ab", "a", "b", "--history", "README.md"], "--history README.md: not a folder of runs"),
        (["calibrate", "--rounds", "2"], "--rounds must be at least 3 to measure a spread"),
        (["calibrate", "--suite", "fork_wait", "--case", "release_notes_example"],
         "nothing to calibrate: no benchmark case matches the selection"),
        (["run", "--param", "trials"], "expected KEY=VALUE, got 'trials'"),
        (["run", "--telemetry-interval", "0"], "expected a positive number of seconds, got '0'"),
        (["run", "--suite", "fork_wait", "--param", "nope=1", "--dry-run"],
         "no case to run takes parameter 'nope'"),
        (["compare", "a.json", "b.json", "--threshold", "latency=much"],
         "expected KIND=TOLERANCE such as latency=0.2, got 'latency=much'"),
        (["report", "--matrix", "README.md"], "README.md: Expecting value"),
        (["report", "--matrix", "results/calibration/amd-epyc-2c.json"],
         "not a release-bench matrix record"),
        (["ab", sys.executable, sys.executable, "--suite", "fork_wait", "--case", "no_such"],
         "nothing to run: no case matches the given suite, case and skip"),
        (["bisect", "--case", "fork_wait/clean_exit", "2.10.0", "2.10.0"],
         "bisect: 2.10.0..2.10.0 holds fewer than two releases"),
        (["history", "2.10.0", "--suite", "fork_wait", "--skip", "e"],  # every case has an e
         "history: no conformance case is selected"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = release_bench(capsys, *args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1, out.stderr
    assert message in out.stderr and out.stderr.startswith("release-bench: error:")


def test_report_refuses_a_history_record_of_another_schema_in_one_line(tmp_path, capsys):
    (tmp_path / "torch-2.4.0.json").write_text('{"schema": "something-else"}')
    out = release_bench(capsys, "report", "--history", str(tmp_path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "not a history record (schema 'something-else')" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_requested_without_cuda_is_exit_2(capsys):
    out = release_bench(capsys, "run", "--device", "cuda")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "release-bench: error: --device cuda: CUDA is not available on this machine")


def test_show_rejects_a_corrupt_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "run.json"
    bad.write_text('{"schema_version": 1, "results": [')
    out = release_bench(capsys, "show", str(bad))
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "not valid JSON" in out.stderr


def test_run_writes_a_record_prints_progress_and_show_reads_it(tmp_path):
    # not a fork_wait case: torch's fork/wait crashes a process at exit now and then
    # (pytorch#38228, what fork_wait's clean_exit checks), which is not this test's business
    out = cli_run("run", "--suite", "rpc", "--case", "roundtrip", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "rpc/roundtrip[cpu default] pass in" in out.stderr
    assert "totals: 1 pass, 0 fail, 0 error, 0 skip" in out.stdout
    (path,) = tmp_path.rglob("*.json")
    run = records.read_run(path)
    assert run.profile == "quick" and run.finished
    assert run.torch_version == torch.__version__
    shown = cli_run("show", str(tmp_path))
    assert shown.returncode == 0 and "rpc/roundtrip" in shown.stdout


def lost_wait(fut: torch.jit.Future[torch.Tensor]) -> torch.Tensor:
    return torch.zeros(1)


def test_exit_1_when_a_case_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.jit, "wait", lost_wait)
    torch.jit._state._jit_caching_layer.clear()  # compile afresh with the broken wait
    try:
        code = cli.main(["run", "--suite", "fork_wait", "--case", "example", "--out",
                         str(tmp_path), "--no-telemetry"])
    finally:
        torch.jit._state._jit_caching_layer.clear()
    assert code == 1
    err = capsys.readouterr().err
    assert ("fail: fork_wait/release_notes_example [cpu default]: 1 of 2 checks failed: returns "
            "-100: returned 0.0") in err
    (path,) = tmp_path.rglob("*.json")
    assert json.loads(path.read_text())["results"][0]["outcome"] == "fail"


def test_show_of_an_ab_folder_counts_every_verdict(tmp_path, capsys):
    from harness.comparing import compare

    def change(verdict: str, factor: float) -> dict:
        return compare.Change(records.CaseKey("amp", "gemm", "cpu"), "time", {"n": 256}, "s",
                              "time", compare.Verdict(verdict), 1.0, factor, factor,
                              [factor * 0.9, factor * 1.1], 0.01, 0.02,
                              ).to_json() | {"field_of_a_later_version": 1}

    doc = {"A": "2.14.1", "B": "2.14.1", "rounds": 5, "calibration": None,
           "changes": [change("regression", 1.3), change("inconclusive", 1.05),
                       change("unchanged", 1.0), change("worse", 1.02)]}
    (tmp_path / "comparison.json").write_text(json.dumps(doc))
    out = release_bench(capsys, "show", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert ("1 regression, 0 improvement, 1 worse, 0 better, 1 inconclusive, 1 unchanged, "
            "0 unverified" in out.stdout)
    assert "worse/better = a change shown, its estimate inside the tolerance" in out.stdout
    (tmp_path / "comparison.json").write_text("{}")
    bad = release_bench(capsys, "show", str(tmp_path))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not a comparison" in bad.stderr


def test_a_calibration_of_other_hardware_or_another_design_is_refused_in_one_line():
    """--calibration FILE judges only comparisons of the hardware and the design it
    calibrated: anything else would take another machine's noise for this one's."""
    spec = str(ROOT / "results" / "calibration" / "intel-xeon-2c.bursts.json")
    calibrated = json.loads(Path(spec).read_text())["machine"]
    args = argparse.Namespace(calibration=[spec], design="bursts")
    cal, line = common.read_calibration(args, calibrated)
    assert cal.design == "bursts" and line == f"calibration: {spec}"
    for design, says in [("sequential", "these are sequential (release-bench calibrate)"),
                         ("duet", "these are duet (release-bench calibrate --design duet)")]:
        args = argparse.Namespace(calibration=[spec], design=design)
        with pytest.raises(UsageError, match=re.escape(f"{spec}: calibrates bursts rounds, "
                                                       f"and {says}")):
            common.read_calibration(args, calibrated)
    other = {**calibrated, "cpu": {**calibrated["cpu"], "logical_cores": 4}}
    with pytest.raises(UsageError, match=re.escape(f"--calibration {spec}: of other hardware "
                                                   f"(logical cores (2 vs 4))")):
        common.read_calibration(argparse.Namespace(calibration=[spec], design="bursts"), other)


NO_TORCH = """
import sys

class NoTorch:  # a Python with the project's dependencies but without torch
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoTorch())
from harness import cli
raise SystemExit(cli.main(sys.argv[1:]))
"""


def test_a_python_without_torch_is_one_line_naming_it():
    out = subprocess.run([sys.executable, "-c", NO_TORCH, "run", "--suite", "amp"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr == f"release-bench: error: torch is not installed in this Python " \
                         f"({sys.executable})\n"


def test_ctrl_c_outside_a_run_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "compare",
                        dataclasses.replace(cli.COMMANDS["compare"], main=interrupted))
    assert cli.main(["compare", "a.json", "b.json"]) == 130
    assert capsys.readouterr().err == "release-bench: interrupted\n"


def test_option_values_read_as_json_or_as_a_bare_word_and_seconds_as_a_number():
    assert common.param("trials=20") == ("trials", 20)
    assert common.param("model=resnet18") == ("model", "resnet18")  # not JSON: a string
    assert common.param('sizes=[64, 128]') == ("sizes", [64, 128])
    assert common.positive_float("0.25") == 0.25


def test_asv_machine_registers_this_machine_under_home_and_prints_its_name(
        monkeypatch, tmp_path, capsys):
    """`release-bench asv-machine` (as `make asv` calls it): the name `asv run --machine`
    takes, registered in asv's machine file under HOME."""
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copy(ROOT / "asv.conf.json", tmp_path)  # asv reads its configuration here
    monkeypatch.chdir(tmp_path)
    assert cli.main(["asv-machine"]) == 0
    name = capsys.readouterr().out.strip()
    machines = json.loads((tmp_path / ".asv-machine.json").read_text())
    assert name in machines and machines[name]["machine"] == name
    fingerprint = json.loads((tmp_path / "results" / "asv" / f"{name}.fingerprint.json")
                             .read_text())
    assert fingerprint["machine"]["name"] == name


def test_a_missing_module_other_than_torch_is_a_defect_not_a_usage_error(monkeypatch):
    """torch or torchvision missing from a Python is one line (exit 2); any other missing
    module is this project's defect and keeps its traceback."""
    def needs(name: str):
        def main(_args):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return main

    monkeypatch.setitem(cli.COMMANDS, "list", dataclasses.replace(cli.COMMANDS["list"],
                                                                  main=needs("torchvision")))
    assert cli.main(["list"]) == 2
    monkeypatch.setitem(cli.COMMANDS, "list", dataclasses.replace(cli.COMMANDS["list"],
                                                                  main=needs("jinja2")))
    with pytest.raises(ModuleNotFoundError, match="jinja2"):
        cli.main(["list"])


def test_asv_vendor_says_where_the_dashboards_scripts_are(capsys):
    """`release-bench asv-vendor` (run before the tests: `make test`, tox) with every package
    in the cache: nothing to fetch, exit 0, and where they are."""
    assert cli.main(["asv-vendor"]) == 0
    assert capsys.readouterr().out.startswith("asv dashboard scripts: in ")


def test_a_duet_on_one_core_is_refused_in_one_line(monkeypatch, capsys):
    """A duet pins each side to its own core: a process allowed one core cannot hold one."""
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0})
    assert cli.main(["ab", sys.executable, sys.executable, "--suite", "rpc", "--duet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("release-bench: error: --duet: a duet needs two cores") and (
        err.count("\n") == 1), err
