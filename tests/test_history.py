"""The release history and bisect, and what they stand on: environments built with uv from pip's
configuration, checks whose API a release lacks (`n/a`), the 1.6 API record. No torch build is
downloaded: the "releases" here are environments of .venv's torch, some with a planted change
(tests/planted: an API removed, a warning added, a feature broken)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from browser import visit

from harness import cli
from harness.records import CaseKey, MetricKey
from harness.releases import api_record, bisect, envs
from suites.amp import gradscaler

sys.path.insert(0, str(Path(__file__).parent / "planted"))
from wrap import planted_python  # noqa: E402

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
TORCH = torch.__version__


def _rb(*args: str, envs_dir: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([BIN / "release-bench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT,
                          env=os.environ | {"RELEASE_BENCH_ENVS": str(envs_dir)})


def fake_release(envs_dir: Path, version: str, plant: str = "") -> Path:
    """An environment recorded as torch `version`: .venv's torch, with `plant` planted."""
    folder = envs_dir / f"torch-{version}"
    planted_python(folder / "bin" / "python", plant)
    env = envs.TorchEnv(version=version, path=str(folder), torch=TORCH, torchvision=None,
                        cuda=None, python=sys.version.split()[0], built_s=0.0, disk_bytes=0,
                        reuses=sys.prefix, build={"local": None, "cuda": None})
    (folder / envs.MARKER).write_text(json.dumps(env.__dict__))
    return folder


def _built_env(tmp_path: Path, version: str) -> envs.TorchEnv:
    """The record of an environment built for torch `version` (60 s, 2 GiB, 1 GiB added)."""
    return envs.TorchEnv(version=version, path=str(tmp_path / version), torch=version,
                         torchvision=None, cuda=None, python="3.11.7", built_s=60.0,
                         disk_bytes=2**31, added_bytes=2**30)


# ---------------------------------------------------------------- environments

def test_env_create_of_a_range_builds_each_release_once_and_sums_the_disk_it_added(
        monkeypatch, tmp_path, capsys):
    """`release-bench env create FIRST..LAST`: a release built already is said and left as it
    is; each other one is built, one line each; the last line sums the disk they added."""
    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    monkeypatch.setattr(envs, "registry_versions", lambda: ["2.14.1", "2.13.0", "2.12.1",
                                                            "2.12.0", "2.11.0"])
    fake_release(tmp_path / "envs", "2.12.1")
    built: list[str] = []

    def create(version, **kwargs):
        built.append(version)
        return _built_env(tmp_path, version)

    monkeypatch.setattr(envs, "create", create)
    assert cli.main(["env", "create", "2.12.0..2.13.0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert built == ["2.12.0", "2.13.0"]
    assert out[1] == "torch-2.12.1: built already", out
    assert out[0].startswith("torch-2.12.0: torch 2.12.0, torchvision none, CUDA none")
    assert out[0].endswith("built in 60 s, 2.00 GiB of files, 1.00 GiB added to the disk")
    assert out[-1] == ("3 releases; 2.00 GiB added to the disk in all (files shared between "
                       "environments counted once)")


def test_a_range_names_every_release_between_its_ends_oldest_first():
    served = ["2.14.1", "2.14.0", "2.13.0", "2.12.1", "2.12.0", "2.1.0"]
    assert envs.release_range("2.12.1..2.14.0", served) == ["2.12.1", "2.13.0", "2.14.0"]
    assert envs.release_range("2.13.0", served) == ["2.13.0"]
    with pytest.raises(envs.EnvError, match="not on the package registry"):
        envs.release_range("2.11.0..2.14.1", served)
    with pytest.raises(envs.EnvError, match="newer than the last"):
        envs.release_range("2.14.1..2.12.0", served)


def test_the_registrys_releases_respect_pips_constraints(monkeypatch, tmp_path):
    cap = tmp_path / "constraints.txt"
    cap.write_text("# a cap\ntorch<=2.14.1\ntorchvision<=0.29.1\n")
    monkeypatch.setattr(envs, "pip_config", lambda: {"constraint": [str(cap)]})
    listed = ("Available versions: 2.15.0, 2.14.1, 2.13.0+cpu, 2.13.0, 2.13.0rc1, 1.13.1")

    def fake_run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout=f"torch (2.15.0)\n{listed}\n",
                                           stderr="")

    monkeypatch.setattr(envs.subprocess, "run", fake_run)
    # above the cap, local builds and pre-releases are left out
    assert envs.registry_versions() == ["2.14.1", "2.13.0", "1.13.1"]
    # a constraints file gone, a line pip would not read as a requirement, a version the
    # registry lists that is not one: each passed over
    cap.write_text("-r base.txt\ntorch<=2.14.1  # the cap\n")
    monkeypatch.setattr(envs, "pip_config", lambda: {
        "constraint": [str(tmp_path / "gone.txt"), str(cap)]})
    listed = "Available versions: 2.14.1, 2.14-custom, 1.13.1"
    assert envs.registry_versions() == ["2.14.1", "1.13.1"]
    listed = ""  # the registry did not answer
    with pytest.raises(envs.EnvError, match="the package registry did not list torch"):
        envs.registry_versions()


def test_uv_is_given_pips_constraints_indexes_and_local_folders(monkeypatch):
    monkeypatch.setattr(envs, "pip_config", lambda: {
        "constraint": ["/etc/c.txt"], "extra-index-url": ["file:///a", "file:///b"],
        "find-links": ["/wheels"]})
    opts = envs.uv_options()
    assert opts[:2] == ["--index-strategy", "unsafe-best-match"]
    for pair in (["--constraint", "/etc/c.txt"], ["--extra-index-url", "file:///b"],
                 ["--find-links", "/wheels"]):
        assert any(opts[i:i + 2] == pair for i in range(len(opts)))
    assert "--find-links" not in envs.uv_options(local_files=False)


def test_an_old_release_gets_numpy_1_and_one_without_torchvision_is_built_without(monkeypatch):
    calls = []

    def fake_install(python, args, what):
        override = next((Path(args[i + 1]).read_text() for i, a in enumerate(args)
                         if a == "--override"), None)
        calls.append((args, override))
        if "torchvision" in args:
            raise envs.InstallError(f"{what}: error: No solution found",
                                    "hint: we only found wheels for `torchvision` (v0.10.1)")

    monkeypatch.setattr(envs, "_uv_install", fake_install)
    monkeypatch.setattr(envs, "pip_config", lambda: {})
    why = envs._install_release(Path("py"), "1.13.1", True, False, lambda s: None)
    assert "no torchvision for torch 1.13.1" in why
    (first, override), (second, _) = calls
    assert "torchvision" in first and "torchvision" not in second
    assert override == "numpy<2\n" and "torch==1.13.1" in second
    calls.clear()
    monkeypatch.setattr(envs, "_uv_install", lambda python, args, what: calls.append(args))
    assert envs._install_release(Path("py"), "2.5.0", True, False, lambda s: None) is None
    assert "--override" not in calls[0] and "torchvision" in calls[0]


def test_an_install_that_fails_for_another_reason_is_not_retried(monkeypatch):
    def fails(python, args, what):
        raise envs.InstallError(f"{what}: error: no space left", "error: no space left")

    monkeypatch.setattr(envs, "_uv_install", fails)
    monkeypatch.setattr(envs, "pip_config", lambda: {})
    with pytest.raises(envs.EnvError, match="no space left"):
        envs._install_release(Path("py"), "2.5.0", True, False, lambda s: None)


def test_the_build_is_read_from_torchs_configuration():
    build = envs.build_of(torch.__version__, torch.version.cuda, torch.__config__.show())
    assert envs.build_of("2.14.1+cu130", "13.0", "")["local"] == "cu130"
    assert envs.build_of("2.5.0", None, "")["local"] is None
    assert build["cpu_capability"] and build["compiler"].split()[0] in ("GCC", "clang")
    cpu_only = {**build, "local": "cpu", "cuda": None, "use_cuda": "OFF"}
    assert envs.same_build(build, build) == []
    assert any(d.startswith("local ") for d in envs.same_build(build, cpu_only))


def test_a_switch_spelled_otherwise_is_the_same_build():
    # torch 2.12.1 prints USE_CUDA=ON, 2.13.0 USE_CUDA=1: one build setting, two spellings
    a = {"local": "cu130", "cuda": "13.0", "use_cuda": "ON", "use_mkldnn": "ON"}
    assert envs.same_build(a, {**a, "use_cuda": "1"}) == []
    assert envs.same_build(a, {**a, "use_cuda": "OFF"}) == ["use_cuda ON -> OFF"]
    assert envs.same_build(a, {**a, "use_mkldnn": "0"}) == ["use_mkldnn ON -> 0"]


# ---------------------------------------------------------------- the 1.6 API record

def _works():
    return 1


def _warns():
    warnings.warn("`old_thing` is deprecated (see /some/file.py:12)", FutureWarning,
                  stacklevel=1)


def _removed():
    return torch.no_such_api


def _fails():
    raise AssertionError("gave 2, documented 3")


def _raises():
    raise RuntimeError("RPC is already initialized\nin a second line")


@pytest.mark.parametrize(("func", "status", "says"), [
    (_works, "works", ""), (_warns, "warns", "FutureWarning: `old_thing` is deprecated (see "
                                             "<file>)"),
    (_removed, "removed", "AttributeError"), (_fails, "fails", "gave 2, documented 3"),
    (_raises, "fails", "RuntimeError: RPC is already initialized")])
def test_an_example_works_warns_is_removed_or_fails(func, status, says):
    got = api_record.run(api_record.Example("demo", func.__name__, "1.6", func, "a demo"))
    assert got["status"] == status
    assert says in got["reason"] + "".join(got["warnings"])
    assert "\n" not in got["reason"]


def test_an_example_is_spelled_as_1_6_or_today():
    with pytest.raises(ValueError, match=r"spelling must be one of \('1.6', 'today'\)"):
        api_record.example("amp", "1.7")


def test_the_release_notes_examples_run_in_this_torch_and_break_where_their_api_is_gone(
        tmp_path):
    def record(python) -> dict:
        out = subprocess.run([str(python), "-m", "harness.releases.api_record"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300,
                             env=os.environ | {"PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, out.stderr
        return {r["example"]: r for r in map(json.loads, out.stdout.splitlines())}

    # every suite's examples (the RPC ones on loopback, a world of one)
    here = record(sys.executable)
    assert {e for e, r in here.items() if r["suite"] == "amp"} == {
        "cuda_amp_autocast_and_gradscaler", "cpu_amp_autocast_bfloat16",
        "autocast_and_amp_gradscaler"}
    assert {r["suite"] for r in here.values()} == {"amp", "profiler", "rpc", "fork_wait"}
    # today's spellings work; none of the 1.6 ones gives a wrong answer (each works, warns,
    # or its API is gone, as profile(use_cuda=) is from this torch)
    assert all(r["status"] in ("works", "warns") for r in here.values()
               if r["spelling"] == "today"), here
    assert not [r for r in here.values() if r["status"] == "fails"], here
    assert all(here[e]["status"] in ("works", "warns") for e in (
        "autograd_profiler_profile_memory", "init_rpc_tensorpipe_backend",
        "async_execution_chained", "scripted_fork_wait", "eager_fork_wait"))
    # (RPC's own API cannot be removed so: torch's RPC needs it to start)
    gone = record(planted_python(tmp_path / "py",
                                 "remove=torch.amp.GradScaler+torch.profiler.profile"))
    changed = {e: r["status"] for e, r in gone.items() if r["status"] != here[e]["status"]}
    assert changed == {"autocast_and_amp_gradscaler": "removed",
                       "torch_profiler_profile_memory": "removed"}, changed
    assert "GradScaler" in gone["autocast_and_amp_gradscaler"]["reason"]
    assert "profile" in gone["torch_profiler_profile_memory"]["reason"]


def test_an_environment_whose_examples_cannot_run_or_a_record_not_json_is_one_line(tmp_path):
    from harness.comparing.campaign import CampaignError
    from harness.releases import history

    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ImportError: libtorch_cpu.so: cannot open shared "
                      "object file' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(CampaignError, match=r"python: the release-notes examples did not run "
                                            r"\(ImportError: libtorch_cpu.so: cannot open"):
        history.api_record(broken, ["amp"])
    (tmp_path / "torch-2.4.0.json").write_text('{"schema": ')
    with pytest.raises(CampaignError, match=r"torch-2.4.0.json: not a history record "
                                            r"\(Expecting value"):
        history.read(tmp_path)


# ---------------------------------------------------------------- history

@pytest.mark.slow
def test_the_history_marks_each_change_at_the_first_release_that_shows_it(tmp_path):
    envs_dir, out = tmp_path / "envs", tmp_path / "history"
    # an "older release": torch 2.2.2, without the device-generic GradScaler (which the
    # grad_scaler case declares from 2.3.0), and eager fork warns
    fake_release(envs_dir, "2.2.2", "release=2.2.2,remove=torch.amp.GradScaler,fork_warns=1")
    fake_release(envs_dir, "2.14.1")
    args = ("history", "2.2.2..2.14.1", "--no-build", "--suite", "amp", "--suite",
            "fork_wait", "--skip", "autocast_op_lists", "--skip", "accuracy_parity", "--skip",
            "clean_exit", "--out", str(out), "--scratch", str(tmp_path / "scratch"))
    made = _rb(*args, envs_dir=envs_dir)
    assert made.returncode == 0, made.stdout + made.stderr
    old, new = (json.loads((out / f"torch-{v}.json").read_text()) for v in ("2.2.2", "2.14.1"))
    scaler = "amp/grad_scaler[cpu default]"
    assert old["cases"][scaler]["outcome"] == "n/a"
    assert old["cases"][scaler]["reason"] == f"torch.amp.GradScaler: not in torch 2.2.2 (from " \
        f"2.3.0; before: {gradscaler.CPU_SCALER.before})"
    assert new["cases"][scaler]["outcome"] == "pass"
    assert old["project"]["commit"] and old["machine"]["name"]
    examples = {a["example"]: a["status"] for a in old["api"]}
    assert examples["autocast_and_amp_gradscaler"] == "removed"
    assert "2.2.2 -> 2.14.1: amp/grad_scaler[cpu default]: outcome: n/a -> pass" in made.stdout
    assert ("2.2.2 -> 2.14.1: amp.autocast_and_amp_gradscaler: example: removed -> "
            in made.stdout)
    assert "warning went: FutureWarning: torch.jit.fork is deprecated (planted)" in made.stdout
    # a release recorded already is kept: the history grows by what it lacks
    again = _rb(*args, envs_dir=envs_dir)
    assert again.returncode == 0 and "0 releases recorded, 2 kept" in again.stdout
    # the page, in a real browser
    page_file = tmp_path / "history.html"
    shown = _rb("report", "--history", str(out), "--out", str(page_file), envs_dir=envs_dir)
    assert shown.returncode == 0, shown.stderr
    page = visit(page_file.as_uri(), "history-planted", count=("table", ".changed", ".na"))
    assert page.console_errors == [] and page.title == "torch release history"
    assert page.counts[".na"] >= 1 and page.counts[".changed"] >= 2
    for text in ("Features × releases", "The 1.6 API as 1.6 users wrote it",
                 "torch.amp.GradScaler: not in torch", "n/a → pass", "removed"):
        assert text in page.text, text


def _refused(capsys, *args: str) -> str:
    """The one line `release-bench ARGS` refuses with (in this process: no torch to import)."""
    assert cli.main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_history_refuses_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    out = ("--out", str(tmp_path / "h"))
    assert "no environment for torch 2.13.0" in _refused(capsys, "history", "2.13.0",
                                                         "--no-build", *out)
    assert "not a torch release version" in _refused(capsys, "history", "latest", *out)
    assert "no environment is built" in _refused(capsys, "history", *out)
    assert "no history records" in _refused(capsys, "report", "--history", str(tmp_path))


# ---------------------------------------------------------------- bisect

@pytest.mark.slow
def test_bisect_names_the_first_release_where_a_check_breaks(tmp_path):
    envs_dir = tmp_path / "envs"
    for version, plant in [("2.11.0", ""), ("2.12.0", ""), ("2.12.1", "fork_threaded=1"),
                           ("2.13.0", "fork_threaded=1")]:
        fake_release(envs_dir, version, plant)
    out = _rb("bisect", "2.11.0", "2.13.0", "--case", "fork_wait/eager_fork_is_serial",
              "--no-build", "--out", str(tmp_path / "b"), envs_dir=envs_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "first release that differs: torch 2.12.1" in out.stdout
    (path,) = (tmp_path / "b").rglob("bisect.json")
    rec = json.loads(path.read_text())
    assert rec["found"] == "2.12.1" and [s["release"] for s in rec["steps"]] == [
        "2.11.0", "2.13.0", "2.12.0", "2.12.1"]
    state = next(iter(rec["steps"][-1]["state"].values()))
    assert state["outcome"] == "fail" and rec["built"] == []
    assert rec["machine"] and len(rec["project"]["commit"]) == 40 and rec["started"]


def FakeChange(case: str, metric: str, labels: dict, factor: float):  # noqa: N802
    """A verdict as a step of the matrix would give it: a change past 5% either way."""
    from harness.comparing import compare

    verdict = ("regression" if factor > 1.05 else "improvement" if factor < 0.95
               else "unchanged")
    return compare.Change(CaseKey.parse(case), metric, labels, "s", "time",
                          compare.Verdict(verdict), 1.0, factor, factor,
                          [factor * 0.97, factor * 1.03])


def _fake_matrix(levels: dict[str, float], measured: list[list[str]]):
    """A matrix that "measures" each release's GEMM time as `levels` says."""
    def fake(sides, units, run_args, rounds, out, progress, thresholds, expected, cal,
             max_rounds):
        measured.append(list(sides))
        steps = [[FakeChange("amp/gemm_ladder[cpu default]", "time", {"n": 256},
                             levels[b] / levels[a])]
                 for a, b in zip(sides, sides[1:], strict=False)]
        return {"step_changes": steps, "dir": out}
    return fake


@pytest.mark.parametrize(("levels", "found", "why"), [
    ([1, 1, 1, 1, 1, 1.4, 1.4, 1.4, 1.4], "2.5.0", "changes from torch 2.4.0 to 2.5.0"),
    ([1, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4, 1.4], "2.1.0", "changes from torch 2.0.0"),
    ([1, 1, 1, 1.2, 1.2, 1.2, 1.44, 1.44, 1.44], None, "both halves changed"),
    ([1, 1, 1, 1, 1, 1, 1, 1, 1], None, "neither half changed"),
])
def test_bisect_of_a_figure_follows_the_verdicts_and_never_guesses(monkeypatch, tmp_path,
                                                                    levels, found, why):
    releases = ["2.0.0", "2.1.0", "2.2.0", "2.3.0", "2.4.0", "2.5.0", "2.6.0", "2.7.0", "2.8.0"]
    measured: list[list[str]] = []
    visited: list[str] = []
    monkeypatch.setattr(bisect.matrix, "matrix",
                        _fake_matrix(dict(zip(releases, levels, strict=True)), measured))
    monkeypatch.setattr(bisect, "_env", lambda v, *a: visited.append(v))
    res = bisect.bisect_metric(releases, None, "amp/gemm_ladder",
                               MetricKey.of("time", {"n": 256}),
                               5, None, tmp_path, lambda s: None)
    assert res["found"] == found and why in res["why"]
    if found:  # binary search: about log2(9) steps of three releases, never all nine
        assert len(measured) <= 4 and len(set(visited)) < len(releases)
        assert res["verdict"] == "regression" and res["factor"] == pytest.approx(1.4)


@pytest.mark.parametrize(("levels", "code", "said"), [
    ((1, 1, 1.4, 1.4), 0, "first release that differs: torch 2.12.1: 1.4x [1.36, 1.44] regression"),
    ((1, 1, 1, 1), 1, "no release named: neither half changed"),
])
def test_bisect_of_a_figure_prints_each_step_and_what_it_found(monkeypatch, tmp_path, capsys,
                                                               levels, code, said):
    """`release-bench bisect --metric`: one line per step (each half's verdict), then the
    release it names, or why none; exit 1 when none; the record beside it."""
    releases = ["2.11.0", "2.12.0", "2.12.1", "2.13.0"]
    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    for version in releases:
        fake_release(tmp_path / "envs", version)
    monkeypatch.setattr(bisect.matrix, "matrix",
                        _fake_matrix(dict(zip(releases, levels, strict=True)), []))
    monkeypatch.setattr(bisect, "_env", lambda v, *a: None)
    assert cli.main(["bisect", "2.11.0", "2.13.0", "--case", "amp/gemm_ladder", "--metric",
                     "time[n=256]", "--no-build", "--out", str(tmp_path / "b")]) == code
    out = capsys.readouterr().out.splitlines()
    assert "calibration" in out[0]  # which one: this machine's, or the defaults
    assert out[1].startswith("step 1 (") and ": 2.11.0 -> 2.12.0: " in out[1], out
    assert out[-2].startswith(said), out
    (path,) = (tmp_path / "b").rglob("bisect.json")
    assert out[-1] == f"the record is {path}"
    assert json.loads(path.read_text())["found"] == ("2.12.1" if code == 0 else None)


def test_bisect_names_no_release_when_the_ends_agree_or_the_figure_was_never_recorded(
        monkeypatch, tmp_path):
    """An outcome bisect whose two ends give the same outcome and warnings names no release,
    after two runs and no more; a figure bisect whose runs never recorded the figure is one
    CampaignError saying where the figures they did record are."""
    releases = ["2.11.0", "2.12.0", "2.12.1", "2.13.0"]
    ran: list[str] = []
    monkeypatch.setattr(bisect, "_env", lambda v, *a: SimpleNamespace(python_path=Path(v)))
    monkeypatch.setattr(bisect, "_state", lambda v, *a: ran.append(v) or {
        "fork_wait/eager_fork_is_serial[cpu]": {"outcome": "pass", "warnings": []}})
    res = bisect.bisect_outcome(releases, None, "fork_wait/eager_fork_is_serial", tmp_path,
                                lambda s: None)
    assert res["found"] is None and ran == ["2.11.0", "2.13.0"]
    assert res["why"] == "torch 2.11.0 and 2.13.0 give the same outcome and warnings"
    monkeypatch.setattr(bisect.matrix, "matrix", _fake_matrix(dict.fromkeys(releases, 1), []))
    with pytest.raises(bisect.CampaignError, match=r"amp/gemm_ladder recorded no p50 \(the "
                                                   r"figures it records are in "):
        bisect.bisect_metric(releases, None, "amp/gemm_ladder", MetricKey.of("p50"), 5, None,
                             tmp_path, lambda s: None)


def test_bisect_refuses_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    fake_release(tmp_path / "envs", "2.14.1")
    for args, says in [
        (("--case", "amp/nope"), "no case 'amp/nope'"),
        (("--case", "amp/grad_scaler", "--metric", "time"), "is a conformance case"),
        (("--case", "amp/gemm_ladder"), "name a figure with --metric"),
        (("--case", "amp/gemm_ladder", "--metric", "time[n]"), "is not label=value"),
        (("--case", "amp/grad_scaler"), "no environment for torch 2.12.0"),
    ]:
        assert says in _refused(capsys, "bisect", "2.12.0", "2.14.1", *args, "--no-build")


def test_a_metric_is_named_as_the_output_writes_it():
    assert bisect.parse_metric("time[dtype=autocast-bfloat16, n=256]") == MetricKey.of(
        "time", {"n": 256, "dtype": "autocast-bfloat16"})
    assert bisect.parse_metric("speedup") == MetricKey.of("speedup")
    for bad in ("time[n=1", "p50 us", ""):
        with pytest.raises(ValueError, match=r"is not a metric \(NAME or NAME\[label=value"):
            bisect.parse_metric(bad)


# ---------------------------------------------------------------- building on the way

def test_the_history_counts_what_it_built_and_with_discard_removes_it_even_after_a_failure(
        monkeypatch, tmp_path):
    """Each release built for the history adds its disk to the sum the command prints; with
    --discard its environment and uv's cached torch go after its record, also when recording
    failed (the disk is freed however the release ended)."""
    from harness.comparing.campaign import CampaignError
    from harness.releases import history

    removed: list[str] = []
    forgotten: list[tuple] = []
    monkeypatch.setattr(envs, "get_or_create",
                        lambda version, *a: (_built_env(tmp_path, version), True))
    monkeypatch.setattr(envs, "remove", removed.append)
    monkeypatch.setattr(envs, "forget_cached", forgotten.append)

    def record_release(version, *args):
        if version == "2.13.0":
            raise CampaignError("torch 2.13.0: the run wrote no record")
        return {"release": version, "wall_s": 1.0}

    monkeypatch.setattr(history, "record_release", record_release)
    folder = tmp_path / "history"
    done = history.history(["2.12.0"], folder, [], [], [], tmp_path, None, lambda s: None,
                           discard=True)
    assert done["built"] == ["2.12.0"] and done["added_bytes"] == 2**30
    assert done["recorded"] == ["2.12.0"] and (folder / "torch-2.12.0.json").exists()
    assert removed == ["2.12.0"] and forgotten == [("torch", "torchvision")]
    with pytest.raises(CampaignError, match="wrote no record"):
        history.history(["2.13.0"], folder, [], [], [], tmp_path, None, lambda s: None,
                        discard=True)
    assert removed == ["2.12.0", "2.13.0"] and not (folder / "torch-2.13.0.json").exists()
    # without --discard, what was built stays
    history.history(["2.14.1"], folder, [], [], [], tmp_path, None, lambda s: None)
    assert removed == ["2.12.0", "2.13.0"]


def test_history_and_bisect_say_a_failed_campaign_in_one_line(monkeypatch, tmp_path, capsys):
    """A release whose run fails (CampaignError) or whose environment cannot be built
    (EnvError) ends `history` and `bisect` with one line and exit 2; `history` without
    releases takes every environment built."""
    from harness.comparing.campaign import CampaignError
    from harness.releases import history

    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    for version in ("2.12.0", "2.13.0"):
        fake_release(tmp_path / "envs", version)
    asked: list[list[str]] = []

    def fails(versions, *args, **kwargs):
        asked.append(versions)
        raise CampaignError(f"torch {versions[0]}: the run wrote no record")

    monkeypatch.setattr(history, "history", fails)
    line = _refused(capsys, "history", "--no-build", "--out", str(tmp_path / "h"))
    assert line == "release-bench: error: history: torch 2.12.0: the run wrote no record"
    assert asked == [["2.12.0", "2.13.0"]]

    def cannot_build(*args, **kwargs):
        raise envs.EnvError("torch 2.13.0 cannot be installed: no space left")

    monkeypatch.setattr(bisect, "bisect_outcome", cannot_build)
    assert cli.main(["bisect", "2.12.0", "2.13.0", "--case", "fork_wait/eager_fork_is_serial",
                     "--no-build", "--out", str(tmp_path / "b")]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["bisecting 2 releases: 2.12.0 2.13.0", "release-bench: error: bisect: "
                    "torch 2.13.0 cannot be installed: no space left"]


def test_bisect_counts_the_environments_it_built_and_a_release_that_ran_no_case_is_an_error(
        monkeypatch, tmp_path):
    """bisect's record lists the releases it had to build; a release whose run recorded none
    of the case's parametrizations (the case skipped by name, or not in that release's
    suites) stops the bisection with one error rather than being taken as a state."""
    monkeypatch.setattr(envs, "get_or_create",
                        lambda version, *a: (_built_env(tmp_path, version), version == "2.13.0"))
    built: list[str] = []
    for version in ("2.12.0", "2.13.0"):
        assert bisect._env(version, True, False, lambda s: None, built).version == version
    assert built == ["2.13.0"]
    ran = {"fork_wait/scripted_fork_scales[cpu]": {"outcome": "pass", "warnings": [],
                                                   "reason": ""}}
    monkeypatch.setattr(bisect.campaign, "run_alone", lambda *a: None)
    monkeypatch.setattr(bisect.campaign, "new_folder", lambda *a: tmp_path)
    monkeypatch.setattr(bisect.matrix, "summarize_side", lambda side: {"cases": ran})
    assert bisect._state("2.12.0", Path("py"), None, "fork_wait/scripted_fork_scales",
                         tmp_path, print) == {
        "fork_wait/scripted_fork_scales[cpu]": {"outcome": "pass", "warnings": []}}
    with pytest.raises(bisect.CampaignError, match=r"torch 2\.12\.0 ran no "
                                                   r"fork_wait/eager_fork_is_serial$"):
        bisect._state("2.12.0", Path("py"), None, "fork_wait/eager_fork_is_serial", tmp_path,
                      print)


def test_an_environment_built_without_torchvision_from_the_registry_says_why(
        monkeypatch, tmp_path):
    """`env create --without-torchvision` of a registry release: torch and the base
    requirements are installed without torchvision, and the environment's record says it was
    left out on request. (uv stands in for the registry: the "install" puts .venv's packages
    on the new environment's path.)"""
    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    monkeypatch.setattr(envs, "registry_versions", lambda: [TORCH])
    monkeypatch.setattr(envs, "uv_cache_dir", lambda: tmp_path / "uv-cache")
    monkeypatch.setattr(envs, "pip_config", lambda: {})
    installs: list[list[str]] = []

    def install(python, args, what):
        installs.append(args)
        if f"torch=={TORCH}" in args:
            (envs._site_packages(python) / "release_bench_reuse.pth").write_text(
                "".join(f"{p}\n" for p in envs._import_path(Path(sys.executable))))

    monkeypatch.setattr(envs, "_uv_install", install)
    env = envs.create(TORCH, torchvision=False)
    torch_install, project = installs
    assert f"torch=={TORCH}" in torch_install and "torchvision" not in torch_install
    assert project[-2:] == ["-e", str(ROOT)]
    assert env.torchvision is None and env.without_torchvision_why == "--without-torchvision"
    assert env.torch == torch.__version__ and env.reuses is None
    assert envs.get(TORCH).without_torchvision_why == "--without-torchvision"


def test_a_release_notes_module_that_fails_to_import_is_an_error_not_a_suite_without_examples(
        monkeypatch):
    """A suite without a release_notes module has no examples; one whose module exists but
    cannot import (a package it needs is missing) raises, rather than passing as none."""
    def import_module(name):
        raise ModuleNotFoundError("No module named 'torchvision'", name="torchvision")

    monkeypatch.setattr(api_record.importlib, "import_module", import_module)
    with pytest.raises(ModuleNotFoundError, match="torchvision"):
        api_record.load("amp")
    monkeypatch.undo()
    assert api_record.load("telemetry") == []  # no release_notes module: no examples


def test_an_example_only_one_of_two_records_holds_is_no_change_between_the_releases():
    """An example that a record lacks (a record made before the project added it) says
    nothing of torch: the history lists only the examples both releases ran, and how they
    changed."""
    from harness.releases import history

    def record(release: str, **statuses: str) -> dict:
        return {"release": release, "cases": {}, "build": {}, "api": [
            {"suite": "amp", "example": name, "status": status, "reason": "", "warnings": []}
            for name, status in statuses.items()]}

    found = history.changes([record("2.12.0", grad_scaler="works"),
                             record("2.13.0", grad_scaler="removed", added_later="works")])
    assert [(c["case"], c["what"], c["from"], c["to"]) for c in found] == [
        ("amp.grad_scaler", "example", "works", "removed")]


def test_stale_records_again_only_the_suites_whose_checks_changed_and_keeps_the_rest(
        monkeypatch, tmp_path):
    """`history --stale`: a release whose record holds a case judged by older checks has that
    case's suite recorded again; its other suites' cases and examples stay as recorded, and
    a release with nothing stale is kept untouched."""
    from harness import registry
    from harness.comparing.campaign import Unit
    from harness.releases import history

    current = registry.find_case("amp", "grad_scaler").check.number
    profiler_now = registry.find_case("profiler", "known_allocations").check.number
    folder = tmp_path / "history"
    folder.mkdir()

    def record(release, cases, api):
        return {"schema": history.SCHEMA, "release": release, "recorded": "then",
                "project": {"commit": "old"}, "cases": cases, "headlines": [],
                "expectations": None, "api": api, "wall_s": 1.0}

    amp_case = {"suite": "amp", "outcome": "pass", "check_version": current}
    old = record("2.12.0", {
        "amp/grad_scaler[cpu default]": amp_case,
        "profiler/known_allocations[cpu default]": {"suite": "profiler", "outcome": "fail"}},
        [{"suite": "amp", "example": "a", "status": "works"},
         {"suite": "profiler", "example": "p", "status": "fails"}])
    fresh = record("2.13.0", {"amp/grad_scaler[cpu default]": amp_case}, [])
    for rec in (old, fresh):
        (folder / f"torch-{rec['release']}.json").write_text(json.dumps(rec))
    ran = []

    def record_release(version, python, env, units, run_args, suites, *rest):
        ran.append((version, [u.suite for u in units], suites))
        return record(version, {"profiler/known_allocations[cpu default]": {
            "suite": "profiler", "outcome": "pass", "check_version": profiler_now}},
            [{"suite": "profiler", "example": "p", "status": "works"}])

    monkeypatch.setattr(history, "record_release", record_release)
    monkeypatch.setattr(envs, "get_or_create",
                        lambda version, *a: (_built_env(tmp_path, version), False))
    units = [Unit("amp", ("grad_scaler",)), Unit("profiler", ("known_allocations",))]
    done = history.history(["2.12.0", "2.13.0"], folder, units, [], ["amp", "profiler"],
                           tmp_path, None, lambda s: None, stale=True)
    assert ran == [("2.12.0", ["profiler"], ["profiler"])]
    assert done["recorded"] == ["2.12.0"] and done["kept"] == ["2.13.0"]
    merged = json.loads((folder / "torch-2.12.0.json").read_text())
    assert merged["cases"]["amp/grad_scaler[cpu default]"] == amp_case
    assert merged["cases"]["profiler/known_allocations[cpu default]"]["outcome"] == "pass"
    assert {a["example"]: a["status"] for a in merged["api"]} == {"a": "works", "p": "works"}
    assert merged["kept"] == {"suites": ["amp"], "recorded": "then",
                              "project": {"commit": "old"}}
    assert history.stale_cases(merged) == {}
    # without --stale a recorded release is kept as it is, stale or not
    ran.clear()
    history.history(["2.12.0"], folder, units, [], ["amp", "profiler"], tmp_path, None,
                    lambda s: None)
    assert ran == []


@pytest.mark.parametrize("machine", sorted(p.name for p in (ROOT / "results" / "history")
                                           .iterdir() if p.is_dir()))
def test_a_committed_history_renders_every_release_and_marks_every_stale_case(machine,
                                                                              tmp_path):
    """Each committed history, in a real browser: every release it recorded is on the page,
    and no page shows a stale record unmarked: each case judged by checks that have changed
    since (or recorded before records carried their version) is marked in the features
    table, and the page says how many releases hold such cases."""
    from harness.releases import history

    folder = ROOT / "results" / "history" / machine
    recs = history.read(folder)
    stale = sum(len(history.stale_cases(r)) for r in recs)
    page_file = tmp_path / "history.html"
    shown = _rb("report", "--history", str(folder), "--out", str(page_file),
                envs_dir=tmp_path / "envs")
    assert shown.returncode == 0, shown.stderr
    page = visit(page_file.as_uri(), f"history-committed-{machine}",
                 count=("table.history td .stale", ".changed"))
    assert page.console_errors == []
    for r in recs:
        assert r["release"] in page.text, r["release"]
    assert page.counts["table.history td .stale"] == stale
    releases = sum(1 for r in recs if history.stale_cases(r))
    assert (f"{releases} of {len(recs)} releases hold cases judged by checks" in page.text
            ) == bool(stale)
    if machine == "amd-epyc-2c":  # every release the registry serves for this Python
        assert len(recs) == 29 and {"1.13.0", "2.14.1"} <= {r["release"] for r in recs}
        assert page.counts[".changed"] >= 10
        # the 1.6 profiler's device switch, removed in 2.14.0
        assert "unexpected keyword argument 'use_cuda'" in page.text
