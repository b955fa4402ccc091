"""The prepared scripts: the GPU check's dry run, and asv's view of the whole project."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_check_dry_run_selects_gpu_tests_and_cuda_cases(tmp_path):
    out = subprocess.run([ROOT / "scripts/gpu-check.sh", str(tmp_path), "--dry-run"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    log = (tmp_path / "dry-run.log").read_text()
    # pytest collected the gpu-marked tests (CUDA variants of suite cases among them), and
    # none of the CPU ones
    assert "tests/test_timing.py::test_cuda_timing_waits_for_the_kernel" in log
    assert "test_conformance[nvml_readings-cuda-default]" in log
    assert "test_measure_reports_statistics_of_a_known_duration" not in log
    assert "-cpu-" not in log
    # the CUDA cases of every suite that has them, and only CUDA cases
    planned = [ln for ln in log.splitlines() if ln.startswith("would run ")]
    assert planned and all("[cuda " in ln for ln in planned)
    assert "would run telemetry/nvml_readings[cuda default]" in log
    suites = {ln.split()[2].split("/")[0] for ln in planned}
    assert {"telemetry"} < suites


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
