"""`pytest --benchmark-json FILE` on a suite records the suite's own workloads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_benchmark_json_holds_workloads_and_fingerprint(tmp_path):
    out_file = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(ROOT / "suites/fork_wait/test_fork_wait.py"), "-k", "test_workload",
         f"--benchmark-json={out_file}", "--benchmark-max-time=0.2"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out_file.read_text())
    names = {b["extra_info"]["workload"] for b in doc["benchmarks"]}
    assert names == {"forked_tasks", "serial_tasks"}
    for b in doc["benchmarks"]:
        assert b["options"]["warmup"] >= 1  # warm-up on (stored as its iteration count)
        assert "sync_clock" in b["options"]["timer"]
        assert b["stats"]["median"] > 0 and b["stats"]["rounds"] >= 3
        assert b["extra_info"]["telemetry"]["samples"] >= 2
        assert "valid" in b["extra_info"]["telemetry"]
    assert doc["machine_info"]["release_bench"]["torch"]["version"]
    assert "nvml" in doc["machine_info"]["release_bench_telemetry"]
