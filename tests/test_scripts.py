"""The prepared scripts: the GPU check's dry run, and asv's view of the whole project."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_check_dry_run_selects_gpu_tests_and_cuda_cases(tmp_path):
    """The dry run, as on the GPU image (nothing importable that the image lacks and no wheel
    brings): every gpu test but the pytest views of the suites' cases, and every CUDA case of
    every suite, each suite in a step of its own."""
    from harness import registry

    out = subprocess.run([ROOT / "scripts/gpu-check.sh", str(tmp_path), "--dry-run"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    log = (tmp_path / "dry-run.log").read_text()
    assert "tests/test_timing.py::test_cuda_timing_waits_for_the_kernel" in log
    assert ("suites/telemetry/test_telemetry_suite.py::"
            "test_nvml_checks_fail_when_the_energy_counter_is_broken") in log
    assert "suites/amp/test_amp.py::test_workload[" in log  # the adapter's CUDA path
    assert "::test_conformance[" not in log  # the run executes the cases themselves
    assert "test_measure_reports_statistics_of_a_known_duration" not in log
    assert "-cpu-" not in log
    planned = {ln.split()[2] for ln in log.splitlines() if ln.startswith("would run ")}
    cuda_cases = {f"{s.name}/{c.name}" for s in registry.all_suites() for c in s.cases
                  if "cuda" in c.devices}
    assert {p.split("[")[0] for p in planned} == cuda_cases
    assert "telemetry/nvml_readings[cuda" in " ".join(planned)


def test_gpu_check_refuses_to_run_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = subprocess.run([ROOT / "scripts/gpu-check.sh", str(tmp_path)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 2
    assert "no CUDA device visible to torch" in out.stderr


def test_asv_check_passes_on_every_suite():
    out = subprocess.run([Path(sys.executable).parent / "asv", "check", "-E", "existing"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "No problems found" in out.stdout, out.stdout + out.stderr


def test_validation_spread_gives_each_familys_sd_as_calibrate_measures_it(capsys):
    """`scripts/validation.py spread` on the stored planted GEMM ab: one row per family of the
    case, each the sd calibrate would keep from the same rounds (the plant moves the mean of
    the log ratios, not their spread)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import validation

    from harness.comparing import calibrate, campaign

    base = ROOT / "tests" / "data" / "ab-planted-gemm"
    rows = validation.spreads(base)
    rounds = campaign.load_rounds(base)
    cal = calibrate.measure(rounds["A"], rounds["B"], {}, [], 6, {})
    assert {r["family"]: r["sd"] for r in rows} == {
        f"{case} {kind}": s.sd for (case, kind), s in cal.families.items()}
    assert rows and all(r["design"] == "sequential" and 0 < r["sd"] < 1 for r in rows)
    assert validation.main(["spread", str(base)]) == 0
    assert "amp/gemm_ladder time" in capsys.readouterr().out


def test_gpu_only_lines_lists_what_no_test_ran_and_adds_a_selection_to_an_earlier_run(tmp_path):
    """scripts/gpu-only-lines.py over two one-test selections of harness/formats.py: the
    second, appended to the first's data, lists what neither ran."""
    source = (ROOT / "harness" / "formats.py").read_text().splitlines()
    n_a = 1 + source.index('        return "n/a"')
    percent = 1 + next(i for i, line in enumerate(source) if "100 * fraction" in line)
    for name, call in (("one", "fmt_value(None, 's') == 'n/a'"),
                       ("two", "fmt_percent(0.5) == '50%'")):
        (tmp_path / f"test_{name}.py").write_text(
            f"from harness.formats import fmt_percent, fmt_value\n\n\n"
            f"def test_{name}():\n    assert {call}\n")
    data = tmp_path / "coverage-data"

    def listing(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "scripts/gpu-only-lines.py", "--only",
                               "harness/formats.py", "--data", str(data), *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)

    first = listing("--", str(tmp_path / "test_one.py"))
    assert first.returncode == 0, first.stderr
    assert f"harness/formats.py:{percent}:" in first.stdout
    assert f"harness/formats.py:{n_a}:" not in first.stdout
    both = listing("--append", "--", str(tmp_path / "test_two.py"))
    assert both.returncode == 0, both.stderr
    assert f"harness/formats.py:{percent}:" not in both.stdout
    assert f"harness/formats.py:{n_a}:" not in both.stdout  # kept from the first run
    assert '"gpu_only": 0' in both.stdout and "-- 0 lines" in both.stdout
    bad = subprocess.run([sys.executable, "scripts/gpu-only-lines.py", "--append"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--data" in bad.stderr
