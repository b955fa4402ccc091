"""The shaped-link check (shaped_link.py) on records built from the link's arithmetic: it passes
where the round trips grow at the rate it is told, and fails where they do not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness import records
from suites.rpc import shaped_link

KiB, MiB = 2**10, 2**20
SIZES = [4, 64 * KiB, 256 * KiB, MiB, 4 * MiB]
RATE = 100e6


def _run(link_bps: float | None, ddp_outcome: str = "pass",
         fixed_s: float = 300e-6) -> records.Run:
    """A run whose p50 round trips are a fixed cost plus two crossings at `link_bps`."""
    metrics = []
    for path in shaped_link.PATHS:
        for n in SIZES:
            wire = 2 * n * 8 * shaped_link.WIRE_PER_PAYLOAD / link_bps if link_bps else n * 1e-9
            metrics.append(records.Metric("p50", fixed_s + wire, "s",
                                          labels={"path": path, "bytes": n}))
    return records.new_run({"name": "test"}, "quick", results=(
        records.Result("rpc", "round_trip", "pass", metrics=tuple(metrics)),
        records.Result("ddp_rpc", "matches_reference", ddp_outcome),
    ))


def _failed(result: dict) -> list[str]:
    return [c["name"] for c in result["checks"] if not c["passed"]]


def test_a_link_at_the_rate_passes():
    result = shaped_link.check(_run(None), _run(RATE), RATE)
    assert _failed(result) == []
    assert result["rows"][0]["slope_error_pct"] == pytest.approx(0, abs=1e-6)


def test_a_link_slower_than_the_rate_fails_slope_and_bandwidth():
    failed = _failed(shaped_link.check(_run(None), _run(0.8 * RATE), RATE))
    assert len(failed) == 6  # slope and bandwidth, for each of the three paths
    assert all("slope" in f or "4 MiB" in f for f in failed)


def test_a_link_faster_than_the_rate_fails_the_slope():
    failed = _failed(shaped_link.check(_run(None), _run(1.2 * RATE), RATE))
    assert len([f for f in failed if "slope" in f]) == 3


def test_ddp_rpc_failing_across_hosts_fails_the_check():
    failed = _failed(shaped_link.check(_run(None), _run(RATE, ddp_outcome="fail"), RATE))
    assert failed == ["DDP+RPC matches its reference across hosts (shaped)"]


def test_too_few_sizes_is_an_error():
    run = _run(RATE)
    round_trip, *rest = run.results
    kept = tuple(m for m in round_trip.metrics
                 if m.labels["bytes"] not in (256 * KiB, MiB, 4 * MiB))
    run = replace(run, results=(replace(round_trip, metrics=kept), *rest))
    with pytest.raises(ValueError, match="fewer than two payload sizes"):
        shaped_link.slope(shaped_link.p50s(run), "tcp")


def test_a_delay_check_passes_at_twice_the_delay_and_fails_off_it():
    base, delay = _run(None), 1e-3
    ok = shaped_link.check(base, _run(RATE), RATE, _run(None, fixed_s=300e-6 + 2 * delay), delay)
    assert _failed(ok) == [] and len(ok["checks"]) == 11
    off = shaped_link.check(base, _run(RATE), RATE, _run(None, fixed_s=300e-6 + 1.5 * delay),
                            delay)
    assert len([f for f in _failed(off) if "delay" in f]) == 3


def test_records_are_read_from_a_file_or_a_folder(tmp_path):
    """A folder's records (the rpc run and the ddp_rpc run) are read together."""
    shaped = _run(RATE)
    rpc_run, ddp_run = (replace(shaped, results=(e,)) for e in shaped.results)
    records.write_run(tmp_path / "shaped" / "rpc.json", rpc_run)
    records.write_run(tmp_path / "shaped" / "ddp_rpc.json", ddp_run)
    records.write_run(tmp_path / "unshaped.json", _run(None))
    loaded = shaped_link.load(tmp_path / "shaped")
    assert [e.case_id for e in loaded.results] == ["ddp_rpc/matches_reference",
                                                   "rpc/round_trip"]
    assert shaped_link.p50s(loaded) == shaped_link.p50s(shaped)
    result = shaped_link.check(shaped_link.load(tmp_path / "unshaped.json"), loaded, RATE)
    assert _failed(result) == []


def test_a_file_that_is_not_a_run_record_is_an_error(tmp_path, capsys):
    (tmp_path / "unshaped.json").write_text('{"results": []}')
    records.write_run(tmp_path / "shaped.json", _run(RATE))
    argv = ["--rate-mbit", "100", str(tmp_path / "unshaped.json"), str(tmp_path / "shaped.json")]
    assert shaped_link.main(argv) == 2
    assert "not a torch-release-bench run" in capsys.readouterr().err


def test_a_folder_without_run_records_is_an_error(tmp_path, capsys):
    """A run that failed before writing its record leaves its folder empty: one line, exit 2."""
    (tmp_path / "shaped").mkdir()
    records.write_run(tmp_path / "unshaped.json", _run(None))
    argv = ["--rate-mbit", "100", str(tmp_path / "unshaped.json"), str(tmp_path / "shaped")]
    assert shaped_link.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run records under" in err, err
