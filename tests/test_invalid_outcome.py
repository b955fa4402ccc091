"""`release-bench run` with a case whose speedup floor was missed on a contended machine: the
case is invalid, the summary counts it, and the run exits 0 unless something really failed."""

from __future__ import annotations

import pytest
from fake_telemetry import HOST_BUSY, FakeTelemetry

from harness import cli, registry
from harness.cases import Context, Suite
from harness.running import telemetry

contended = Suite("contended", feature="f", status="beta", summary="performance checks")


@contended.benchmark(devices=("cpu",))
def floor_missed(ctx: Context):
    ctx.metric("speedup", 0.95, "x", kind="ratio", better="higher")
    ctx.check("parallel at K=2", False, "speedup 0.95x, floor 1.50x", performance=True)


@contended.conformance(devices=("cpu",))
def wrong_result(ctx: Context):
    ctx.check("returns -100", False, "returned 0")


@pytest.fixture
def busy_machine(monkeypatch):
    monkeypatch.setattr(registry, "suite_names", lambda: ["contended"])
    monkeypatch.setattr(registry, "load", lambda name: contended)
    # every case measured while another process kept the host busy
    monkeypatch.setattr(telemetry, "Telemetry",
                        lambda interval_s, tree_of=None: FakeTelemetry(HOST_BUSY))


def test_an_invalid_case_is_counted_and_does_not_fail_the_run(busy_machine, tmp_path, capsys):
    code = cli.main(["run", "--case", "floor_missed", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0
    assert "totals: 0 pass, 0 fail, 0 error, 0 skip, 0 n/a, 1 invalid" in out
    assert "1 invalid: only performance checks failed" in out
    assert "invalid: contended/floor_missed [cpu default]: measured contended (host busy" in err


def test_a_failure_beside_an_invalid_case_still_fails_the_run(busy_machine, tmp_path, capsys):
    assert cli.main(["run", "--out", str(tmp_path)]) == 1
    out, _ = capsys.readouterr()
    assert "totals: 0 pass, 1 fail, 0 error, 0 skip, 0 n/a, 1 invalid" in out
