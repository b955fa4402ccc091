"""The HTML report: built from real run records, checked in a real headless browser."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import visit

from harness import records, report

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real run of the fork/wait suite (quick profile, telemetry on)."""
    out = tmp_path_factory.mktemp("runs")
    proc = subprocess.run([BIN / "release-bench", "run", "--suite", "fork_wait", "--out",
                           str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    (path,) = out.rglob("*.json")
    return path


def test_report_sections_from_a_real_run(real_run, tmp_path):
    html = report.build([records.read_run(real_run)])
    for section in ("Release checklist", "TorchScript fork/wait parallelism", "beta",
                    "TorchScript fork/wait scaling", "Telemetry", "Machine", "full fingerprint"):
        assert section in html, section
    assert html.count("<svg") >= 2  # the scaling plot and at least one telemetry series
    # self-contained: nothing is loaded from elsewhere (XML namespaces are names, not loads)
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", html)


def test_report_cli_defaults_and_bad_input(real_run, tmp_path):
    runs_dir = real_run.parent.parent
    out = subprocess.run([BIN / "release-bench", "report", "--runs-dir", str(runs_dir),
                          "--out", str(tmp_path / "r.html")], capture_output=True, text=True)
    assert out.returncode == 0 and (tmp_path / "r.html").exists()
    empty = subprocess.run([BIN / "release-bench", "report", "--runs-dir",
                            str(tmp_path / "none")], capture_output=True, text=True)
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1


def test_report_page_in_a_real_browser(real_run, tmp_path):
    page_file = report.write([real_run], tmp_path / "report.html")
    page = visit(page_file.as_uri(), "report", count=("svg", "table", "h3"))
    assert page.console_errors == []
    assert page.title == "torch-release-bench report"
    for section in ("Release checklist", "fork_wait", "Telemetry", "Machine"):
        assert section in page.text
    assert page.counts["svg"] >= 2 and page.counts["table"] >= 2
    assert page.screenshot.exists() and page.screenshot.stat().st_size > 10_000
