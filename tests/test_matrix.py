"""Environments per torch version (`release-bench env`) and the release matrix, without
downloading a torch build: the environments here reuse .venv's packages (`env create
--reuse`), and two "versions" differ by changes planted in one of them (tests/planted)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import asv_project
import pytest
import torch
import torchvision
from browser import needs_asv_dashboard_scripts, served, visit
from inprocess import release_bench

sys.path.insert(0, str(Path(__file__).parent / "planted"))
from wrap import planted_python  # noqa: E402

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix)
TORCH = torch.__version__.split("+")[0]


def _uncalibrated(args: tuple[str, ...]) -> tuple[str, ...]:
    """A matrix with fixed rounds and floors, whatever calibration is committed."""
    return (*args, "--calibration", "none") if args[0] == "matrix" else args


def _rb(*args: str, envs: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([BIN / "release-bench", *_uncalibrated(args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env=os.environ | {"RELEASE_BENCH_ENVS": str(envs)})


def _here(capsys, monkeypatch, *args: str, envs: Path) -> subprocess.CompletedProcess:
    """`_rb` in this process: a refusal, with no interpreter to start."""
    from harness.releases import envs as store

    monkeypatch.setattr(store, "ENVS", envs)
    return release_bench(capsys, *_uncalibrated(args))


def _one_error_line(out: subprocess.CompletedProcess, progress: bool = False) -> str:
    """The one line of a refusal; with `progress`, after lines that said what was under way
    (a build that fails half-way)."""
    lines = out.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("release-bench:")]
    assert out.returncode == 2 and errors == lines[-1:], out.stderr
    assert progress or len(lines) == 1, out.stderr
    return lines[-1]


def test_env_create_list_and_remove_reusing_the_venvs_packages(tmp_path):
    envs = tmp_path / "envs"
    out = _rb("env", "create", TORCH, "--reuse", str(VENV), envs=envs)
    assert out.returncode == 0, out.stderr
    assert f"torch {torch.__version__}, torchvision {torchvision.__version__}" in out.stdout
    marker = json.loads((envs / f"torch-{TORCH}" / "release-bench-env.json").read_text())
    assert marker["torch"] == torch.__version__ and marker["reuses"] == str(VENV)
    assert marker["disk_bytes"] > 0 and marker["built_s"] > 0
    assert TORCH in _rb("env", "list", envs=envs).stdout
    again = _rb("env", "create", TORCH, "--reuse", str(VENV), envs=envs)
    assert "exists already" in _one_error_line(again)
    assert _rb("env", "remove", TORCH, envs=envs).returncode == 0
    assert not (envs / f"torch-{TORCH}").exists()
    assert _rb("env", "list", envs=envs).stdout.strip() == ""


def test_a_half_built_environment_is_never_listed_or_used(tmp_path, capsys, monkeypatch):
    envs = tmp_path / "envs"
    (envs / "torch-2.13.0" / "bin").mkdir(parents=True)  # a build killed half-way
    assert _here(capsys, monkeypatch, "env", "list", envs=envs).stdout.strip() == ""
    used = _here(capsys, monkeypatch, "matrix", "2.13.0", str(VENV), "--suite", "fork_wait",
                 envs=envs)
    assert "no environment for torch 2.13.0" in _one_error_line(used)


def test_an_unknown_version_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    envs = tmp_path / "envs"
    # the registry pip is given: a local index of two torch releases (no test goes online)
    index = tmp_path / "simple" / "torch"
    index.mkdir(parents=True)
    index.joinpath("index.html").write_text("<html><body>" + "".join(
        f'<a href="torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl">torch-{v}</a>'
        for v in ("2.13.0", TORCH)) + "</body></html>")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", index.parent.as_uri())
    unknown = _rb("env", "create", "0.0.1", envs=envs)  # asks the registry, which has no such torch
    assert "torch 0.0.1 is not on the package registry" in _one_error_line(unknown)
    assert not (envs / "torch-0.0.1").exists()
    assert "not a torch release version" in _one_error_line(
        _here(capsys, monkeypatch, "env", "create", "latest", envs=envs))
    assert "no environment for torch 2.13.0" in _one_error_line(
        _here(capsys, monkeypatch, "env", "remove", "2.13.0", envs=envs))


def test_a_torchvision_that_does_not_import_fails_the_build_and_leaves_nothing(tmp_path):
    # an environment whose torchvision was built for another torch, as the registry's
    # torchvision can be beside a CPU-only torch: it raises on import
    broken = tmp_path / "broken"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(broken)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(broken), "platbase": str(broken)})
                ["purelib"])
    (site / "torchvision").mkdir(parents=True)
    (site / "torchvision" / "__init__.py").write_text(
        'raise ImportError("torchvision was built for torch 2.13.0 (planted)")\n')
    (site / "packages.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n")
    envs = tmp_path / "envs"
    out = _rb("env", "create", TORCH, "--reuse", str(broken), envs=envs)
    line = _one_error_line(out, progress=True)
    assert "do not import" in line and "torchvision was built for torch 2.13.0" in line
    assert "--without-torchvision" in line
    assert not (envs / f"torch-{TORCH}").exists()
    # built without torchvision on request: the record says so
    out = _rb("env", "create", TORCH, "--reuse", str(broken), "--without-torchvision",
              envs=envs)
    assert out.returncode == 0 and "torchvision none" in out.stdout, out.stderr
    marker = json.loads((envs / f"torch-{TORCH}" / "release-bench-env.json").read_text())
    assert marker["torchvision"] is None


def test_the_matrix_lists_a_feature_that_broke_and_a_warning_that_appeared(tmp_path, capsys,
                                                                         monkeypatch):
    before = planted_python(tmp_path / "before", "")
    after = planted_python(tmp_path / "after", "fork_warns=1,fork_threaded=1")
    out = _rb("matrix", str(before), str(after), "--suite", "fork_wait", "--case",
              "eager_fork_is_serial", "--out", str(tmp_path / "m"), envs=tmp_path / "envs")
    assert out.returncode == 1, out.stdout + out.stderr
    (path,) = (tmp_path / "m").rglob("matrix.json")
    record = json.loads(path.read_text())
    assert record["rounds"] == 2
    outcomes = [next(iter(record["sides"][str(p)]["cases"].values()))["outcome"]
                for p in (before, after)]
    assert outcomes == ["pass", "fail"]
    (step,) = record["steps"]
    # the planted fork never calls torch's, so torch's own deprecation warning goes with it
    assert {c["what"] for c in step["changes"]} == {"outcome", "warning appeared",
                                                    "warning went"}
    (appeared,) = [c for c in step["changes"] if c["what"] == "warning appeared"]
    assert appeared["warning"] == "FutureWarning: torch.jit.fork is deprecated (planted)"
    (went,) = [c for c in step["changes"] if c["what"] == "warning went"]
    assert "`torch.jit.fork` is deprecated" in went["warning"]
    assert "pass -> fail" in out.stdout and "warning appeared" in out.stdout
    assert sorted(p.name for p in path.parent.glob("logs/*")) == ["side-0.log", "side-1.log"]
    # the verdicts again from the stored rounds, without measuring: the same changes
    again = _here(capsys, monkeypatch, "matrix", "--judge", str(path.parent),
                  envs=tmp_path / "envs")
    assert again.returncode == 1, again.stdout + again.stderr
    assert json.loads(path.read_text())["steps"][0]["changes"] == step["changes"]
    # the release-matrix page, in a real browser
    page_file = tmp_path / "matrix.html"
    made = _here(capsys, monkeypatch, "report", "--matrix", str(path.parent), "--out",
                 str(page_file), envs=tmp_path / "envs")
    assert made.returncode == 0, made.stderr
    page = visit(page_file.as_uri(), "matrix-planted", count=("table", ".changed", ".warns"))
    assert page.console_errors == [] and page.title == "torch release matrix"
    for text in ("Features × versions", "eager_fork_is_serial", "warning appeared",
                 "torch.jit.fork is deprecated (planted)", "pass → fail"):
        assert text in page.text, text
    assert page.counts["table"] == 4 and page.counts[".changed"] == 1
    assert page.counts[".warns"] == 2  # each version's warnings, hover for their text


def test_the_matrix_of_one_torch_twice_lists_no_change(tmp_path, capsys, monkeypatch):
    envs = tmp_path / "envs"
    assert _here(capsys, monkeypatch, "env", "create", TORCH, "--reuse", str(VENV),
                 envs=envs).returncode == 0
    out = _rb("matrix", str(VENV), TORCH, "--suite", "fork_wait", "--case",
              "release_notes_example", "--rounds", "1", "--out", str(tmp_path / "m"),
              envs=envs)
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = (tmp_path / "m").rglob("matrix.json")
    record = json.loads(path.read_text())
    assert [v["torch"] for v in record["versions"]] == [torch.__version__] * 2
    assert record["steps"][0]["changes"] == []


def test_bad_input_to_the_matrix_is_one_line(tmp_path, capsys, monkeypatch):
    envs = tmp_path / "envs"

    def here(*args):
        return _here(capsys, monkeypatch, *args, envs=envs)

    assert "at least two" in _one_error_line(here("matrix", str(VENV)))
    assert "named twice" in _one_error_line(here("matrix", str(VENV), str(VENV)))
    assert "not a matrix folder" in _one_error_line(here("matrix", "--judge", str(tmp_path)))
    assert "no environment for torch 9.9.9" in _one_error_line(here("matrix", "9.9.9",
                                                                    str(VENV)))
    # an environment whose Python is gone
    assert here("env", "create", TORCH, "--reuse", str(VENV)).returncode == 0
    (envs / f"torch-{TORCH}" / "bin" / "python").unlink()
    gone = here("matrix", TORCH, str(VENV), "--suite", "fork_wait")
    assert "cannot run the suites" in _one_error_line(gone) or \
        "not a virtual environment" in _one_error_line(gone)


def test_the_committed_release_matrix_renders_every_version(tmp_path, capsys, monkeypatch):
    """The matrix measured over three torch releases on this machine kind (results/matrix)."""
    (path,) = sorted((ROOT / "results" / "matrix" / "amd-epyc-2c").glob("*.json"))[-1:]
    record = json.loads(path.read_text())
    page_file = tmp_path / "matrix.html"
    made = _here(capsys, monkeypatch, "report", "--matrix", str(path), "--out", str(page_file),
                 envs=tmp_path)
    assert made.returncode == 0, made.stderr
    page = visit(page_file.as_uri(), "release-matrix", count=("table", "tr", "td .stale"))
    assert page.console_errors == []
    for v in record["versions"]:
        assert f"torch {v['torch']}" in page.text
    cases = {c for side in record["sides"].values() for c in side["cases"]}
    assert page.counts["tr"] >= len(cases) + len(record["steps"])
    # each outcome judged by checks that have changed since is marked, and counted
    from harness.releases.history import stale_cases

    stale = sum(len(stale_cases(side)) for side in record["sides"].values())
    assert page.counts["td .stale"] == stale
    assert (f"{stale} outcomes were judged by checks that have changed" in page.text) == bool(
        stale)


ASV_BENCH = """
import torch

class Matmul:
    repeat = (3, 5, 2.0)

    def setup(self):
        torch.set_num_threads(1)
        self.a = torch.randn(128, 128)

    def time_mm(self):
        torch.mm(self.a, self.a)

    def track_torch_minor(self):
        return int(torch.__version__.split(".")[1])
"""


@pytest.mark.slow
def test_asv_draws_one_line_per_torch_environment(tmp_path):
    """What `make asv-envs` does over .envs/: each environment is an asv environment of
    its own ("existing"), filed under one commit, so the dashboard draws a line for each."""
    needs_asv_dashboard_scripts()
    envs = tmp_path / "envs"
    assert _rb("env", "create", TORCH, "--reuse", str(VENV), envs=envs).returncode == 0
    repo, env = asv_project.make(tmp_path, "versions", {"bench.py": ASV_BENCH})
    asv_project.git(repo, "add", "-A")
    asv_project.git(repo, "commit", "-qm", "bench")
    commit = asv_project.git(repo, "rev-parse", "HEAD")

    def asv(*args: str) -> subprocess.CompletedProcess:
        return asv_project.asv(repo, env, *args)

    pythons = [VENV / "bin" / "python", envs / f"torch-{TORCH}" / "bin" / "python"]
    for python in pythons:
        out = asv("run", "-E", f"existing:{python}", "--machine", "versions",
                  "--set-commit-hash", commit, "--launch-method", "spawn")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = [p for p in (repo / "results" / "versions").glob("*.json")
               if p.name != "machine.json"]
    assert len(results) == 2  # one result file per environment, for the same commit
    pub = subprocess.run([BIN / "release-bench", "asv-publish"], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=600)
    assert pub.returncode == 0, pub.stderr
    with served(repo / "html") as url:
        graph = visit(f"{url}/index.html", "asv-versions", then_hash="bench.Matmul.time_mm",
                      wait_for="#main-graph canvas", count=("#main-graph canvas",))
    assert graph.console_errors == []
    # the graph's environment selector: one entry, and one line, per torch environment
    for python in pythons:
        assert f"python-{python}" in graph.text, graph.text[-2000:]


def test_the_asv_version_axis_builds_one_environment_per_torch_release():
    """asv.versions.conf.json, read by asv itself: one virtualenv per torch release, each
    torch pinned with the torchvision that pins it back, and none without a torch (asv's
    matrix product would otherwise add a bare environment, whose pip resolves the newest
    torch)."""
    from asv import config, environment

    conf = config.Config.load(str(ROOT / "asv.versions.conf.json"))
    envs = list(environment.get_environments(conf, None))
    torches = [e._requirements.get("torch") for e in envs]
    assert None not in torches and len(set(torches)) == len(torches) >= 3
    assert {e.tool_name for e in envs} == {"virtualenv"}
    for e in envs:
        tv = e._requirements.get("torchvision")
        if tv is not None:  # torchvision 0.N.x pins torch 2.(N-15).x
            assert int(tv.split(".")[1]) - 15 == int(e._requirements["torch"].split(".")[1])
    # the project goes in without its dependencies: pyproject's unpinned torchvision would
    # replace the pinned torch
    assert all("--no-deps" in cmd for cmd in conf.install_command if "{wheel_file}" in cmd)


def test_a_case_that_ran_and_is_n_a_in_the_next_version_is_flagged():
    from harness.presenting import report
    from harness.releases.matrix import LOST, outcome_changes

    def side(outcome: str) -> dict:
        return {"cases": {"amp/grad_scaler[cpu default]": {
            "outcome": outcome, "reason": "" if outcome != "n/a" else "declared", "warnings": []}}}

    (lost,) = outcome_changes(side("pass"), side("n/a"), "2.3.0", "2.4.0")
    assert lost["flag"] == LOST
    (came,) = outcome_changes(side("n/a"), side("pass"), "2.2.2", "2.3.0")
    assert "flag" not in came  # what a later release brings is no news
    assert all("flag" not in c for c in outcome_changes(side("skip"), side("n/a"), "a", "b"))
    # the history page shows the flag beside the change
    recs = [{"release": v, "torch": v, "torchvision": None, "without_torchvision": None,
             "api": [], "build": {}, "env": None,
             "machine": {"name": "m", "cpu": "c"},
             "recorded": "2026-12-04T00:00:00Z", "project": {"commit": "abc1234"}, **side(o)}
            for v, o in (("2.3.0", "pass"), ("2.4.0", "n/a"))]
    assert "FLAG: " + LOST in report.build_history(recs)


def test_the_matrix_command_says_each_versions_failures_its_headline_verdicts_and_stages(
        tmp_path, monkeypatch, capsys):
    """The command's lines from a judged matrix (`matrix.judge_again` standing in): with
    `--expectations none` any failure counts; each step's headline figures with their
    factor and interval, a figure without a factor as n/a; the verdicts after each stage of
    further rounds. A regression or a failure is exit 1."""
    from harness import cli
    from harness.releases import matrix

    def case(outcome: str) -> dict:
        return {"outcome": outcome, "warnings": [], "expected": None}

    res = {"dir": str(tmp_path), "versions": [{"label": "a", "torch": "2.10.0"},
                                               {"label": "b", "torch": "2.11.0"}],
           "sides": {"a": {"cases": {"fork_wait/x[cpu]": case("pass")}},
                     "b": {"cases": {"fork_wait/x[cpu]": case("fail")}}},
           "steps": [{"from": "a", "to": "b", "counts": {"unchanged": 1},
                      "changes": [], "headline_verdicts": [
                          {"case": "amp/gemm_ladder[cpu]", "metric": "tflops",
                           "labels": "n=256", "factor": 0.95, "interval": [0.93, 0.97],
                           "verdict": "unchanged"},
                          {"case": "rpc/round_trip[cpu]", "metric": "p50", "labels": None,
                           "factor": None, "interval": None, "verdict": "inconclusive"}]}],
           "max_rounds": {"judged": [
               {"rounds": {"a": 2, "b": 2}, "minutes": 1.5, "counts": {"inconclusive": 1}},
               {"rounds": {"a": 4, "b": 4}, "minutes": 3.0, "counts": {"unchanged": 1}}]}}
    monkeypatch.setattr(matrix, "judge_again", lambda *_args: res)
    status = cli.main(["matrix", "--judge", str(tmp_path), "--expectations", "none",
                       "--calibration", "none"])
    out = capsys.readouterr().out
    assert status == 1, out  # b's failure, with no expectations to excuse it
    for line in ("torch 2.11.0: 1 fail; 0 cases warned",
                 "  headline amp/gemm_ladder[cpu] tflops n=256: 0.95x [0.93, 0.97] unchanged",
                 "  headline rpc/round_trip[cpu] p50 : n/a inconclusive",
                 "after 2 rounds (1.5 min): 1 inconclusive",
                 "after 4 rounds (3.0 min): 1 unchanged"):
        assert line in out, line
    res["sides"]["b"]["cases"]["fork_wait/x[cpu]"] = case("pass")
    assert cli.main(["matrix", "--judge", str(tmp_path), "--expectations", "none",
                     "--calibration", "none"]) == 0


def test_a_versions_headline_figures_are_kept_with_their_interval_and_count():
    """What the matrix keeps of a version's run: every headline figure of its benchmark
    cases (a real quick run of every suite, committed), with its unit, interval and count."""
    from harness import records
    from harness.releases import matrix

    run = records.read_run(records.resolve_run(ROOT / "results" / "runs" / "amd-epyc-2c"))
    side = matrix.summarize_side(run)
    headline = [(e.key, m) for e in run.results for m in e.metrics if m.headline]
    assert headline and len(side["headlines"]) == len(headline)
    for kept, (key, m) in zip(side["headlines"], headline, strict=True):
        assert (kept["case"], kept["name"], kept["value"], kept["unit"]) == (
            key, m.name, m.value, m.unit)
        assert kept["ci"] == (m.stats or {}).get("ci") and kept["n"] == (m.stats or {}).get("n")
    assert any(h["case"].startswith("amp/gemm_ladder[") for h in side["headlines"])
    assert any(h["ci"] for h in side["headlines"])


def test_a_matrix_of_one_environment_is_refused():
    from harness.comparing.campaign import CampaignError
    from harness.releases import matrix

    with pytest.raises(CampaignError, match="at least two environments"):
        matrix.matrix([sys.executable], [], [], 2, Path("unused"), print)


def test_a_half_built_environment_is_replaced_and_a_build_of_another_torch_leaves_nothing(
        tmp_path, monkeypatch):
    """`env create` over a folder a killed build left starts afresh; an environment whose
    torch is not the version asked for (here: .venv's torch, reused, asked to be another
    release) is refused in one line and removed."""
    from harness.releases import envs

    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    other = "2.10.0" if TORCH != "2.10.0" else "2.11.0"
    half = envs.env_dir(other)
    (half / "bin").mkdir(parents=True)
    (half / "left-by-a-killed-build").write_text("")
    with pytest.raises(envs.EnvError, match=re.escape(
            f"asked for torch {other}, the environment has {torch.__version__}")):
        envs.create(other, reuse=VENV)
    assert not half.exists()
    with pytest.raises(envs.EnvError, match="neither a venv folder nor a Python"):
        envs.create(other, reuse=tmp_path / "no-such-env")


def test_building_an_environment_where_none_is_and_uvs_own_failures(tmp_path, monkeypatch):
    """An environment is built only where none is and building is allowed; uv, where the
    project's requirements did not install it, is found on PATH or is one line; an install
    uv refuses is one line with all uv said kept; pip's index is passed on to uv."""
    import builtins

    from harness.releases import envs

    monkeypatch.setattr(envs, "ENVS", tmp_path / "envs")
    made, lines = [], []
    monkeypatch.setattr(envs, "create", lambda version, **kw: made.append(version) or "env")
    assert envs.get_or_create("2.10.0", True, False, lines.append) == ("env", True)
    assert made == ["2.10.0"] and lines == ["torch 2.10.0: building its environment"]
    with pytest.raises(envs.EnvError, match="no environment for torch 2.10.0"):
        envs.get_or_create("2.10.0", False, False, lines.append)

    assert envs.uv_cache_dir().is_absolute()
    with pytest.raises(envs.InstallError, match="^the planted package: ") as e:
        envs._uv_install(Path(sys.executable), ["--no-index", "release-bench-no-such-package"],
                         "the planted package")
    assert "release-bench-no-such-package" in e.value.output
    asked = []
    with monkeypatch.context() as m:  # what it asks of uv, without emptying this machine's cache
        m.setattr(envs.subprocess, "run", lambda cmd, **kw: asked.append(cmd))
        envs.forget_cached(("torch", "torchvision"))
    assert asked == [[envs.uv_bin(), "cache", "clean", "torch", "torchvision"]]

    monkeypatch.setattr(envs, "pip_config", lambda: {"index-url": ["https://pypi.org/simple"]})
    assert envs.uv_options()[-2:] == ["--index-url", "https://pypi.org/simple"]

    real_import = builtins.__import__

    def without_uv(name, *args, **kwargs):
        if name == "uv":
            raise ImportError("No module named 'uv'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_uv)
    monkeypatch.setattr(envs.shutil, "which", lambda _name: "/usr/local/bin/uv")
    assert envs.uv_bin() == "/usr/local/bin/uv"
    monkeypatch.setattr(envs.shutil, "which", lambda _name: None)
    with pytest.raises(envs.EnvError, match=r"uv is not installed \(pip install uv\)"):
        envs.uv_bin()


def test_disk_in_use_counts_a_file_linked_twice_once_and_skips_one_gone_meanwhile(
        tmp_path, monkeypatch):
    from harness.releases import envs

    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "b").hardlink_to(tmp_path / "a")
    (tmp_path / "gone").write_bytes(b"y" * 500)
    real = os.lstat

    def lstat(path, *args, **kwargs):
        if str(path).endswith("gone"):
            raise FileNotFoundError(path)  # removed between the listing and its stat
        return real(path, *args, **kwargs)

    monkeypatch.setattr(envs.os, "lstat", lstat)
    assert envs.disk_in_use(tmp_path) == real(tmp_path / "a").st_blocks * 512


def test_matrix_stale_runs_again_only_the_rounds_judged_by_older_checks(tmp_path, monkeypatch):
    """`matrix --judge DIR --stale`: a conformance unit whose results on one side were judged
    by older checks is run again on that side only, in each of its rounds; the rounds of
    current results stay as they were; a run that fails puts the old rounds back."""
    import shutil

    from harness import records, registry
    from harness.comparing import campaign
    from harness.comparing.campaign import CampaignError
    from harness.releases import matrix

    base = shutil.copytree(ROOT / "tests" / "data" / "matrix-planted-rate", tmp_path / "m")
    folders = sorted((base / "rounds").iterdir())

    def stamp(folder, current):
        path = records.resolve_run(folder)
        run = records.read_run(path)
        records.write_run(path, run.__class__(**{**run.__dict__, "results": tuple(
            e.__class__(**{**e.__dict__, "check_version": registry.find_case(
                e.suite, e.case).check.number if current else None}) for e in run.results)}))

    for folder in folders:  # side 1 ("after") current; side 0 recorded before the versions
        stamp(folder, folder.name.endswith("-1"))
    assert {u.name: sides for u, sides in matrix.stale_units(base).items()} == {
        "fork_wait": [0]}
    monkeypatch.setattr(matrix, "side_python", lambda label: (label, Path(sys.executable)))
    monkeypatch.setattr(campaign, "torch_version", lambda python: "2.14.1")
    ran = []

    def fake_run(self, steps):
        for step in steps:
            ran.append((step.unit.name, step.round, step.side))
            shutil.copytree(folders[step.round * 2 + 1], self._where(step.unit, step.round,
                                                                      self.sides[step.side]))

    monkeypatch.setattr(campaign.Campaign, "run", fake_run)
    kept = records.resolve_run(base / "rounds" / "fork_wait-00-1").read_text()
    assert matrix.run_stale_again(base, lambda s: None) == {"fork_wait": ["before"]}
    assert ran == [("fork_wait", 0, 0), ("fork_wait", 1, 0)]
    assert matrix.stale_units(base) == {}
    assert records.resolve_run(base / "rounds" / "fork_wait-00-1").read_text() == kept
    assert not (base / "stale-rounds").exists()
    # a run again that fails leaves the stale rounds as they were
    for folder in sorted((base / "rounds").iterdir()):
        stamp(folder, not folder.name.endswith("-0"))
    before = {p.name: records.resolve_run(p).read_text() for p in (base / "rounds").iterdir()}

    def fails(self, steps):
        raise CampaignError("before wrote no run for fork_wait")

    monkeypatch.setattr(campaign.Campaign, "run", fails)
    with pytest.raises(CampaignError):
        matrix.run_stale_again(base, lambda s: None)
    assert {p.name: records.resolve_run(p).read_text()
            for p in (base / "rounds").iterdir()} == before
