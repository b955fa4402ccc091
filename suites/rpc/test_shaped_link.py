"""The shaped-link check (shaped_link.py) on records built from the link's arithmetic: it passes
where the round trips grow at the rate it is told, and fails where they do not."""

from __future__ import annotations

import pytest

from suites.rpc import shaped_link

KiB, MiB = 2**10, 2**20
SIZES = [4, 64 * KiB, 256 * KiB, MiB, 4 * MiB]
RATE = 100e6


def _run(link_bps: float | None, ddp_outcome: str = "pass", fixed_s: float = 300e-6) -> dict:
    """A run whose p50 round trips are a fixed cost plus two crossings at `link_bps`."""
    metrics = []
    for path in shaped_link.PATHS:
        for n in SIZES:
            wire = 2 * n * 8 * shaped_link.WIRE_PER_PAYLOAD / link_bps if link_bps else n * 1e-9
            metrics.append({"name": "p50", "labels": {"path": path, "bytes": n},
                            "value": fixed_s + wire})
    return {"results": [
        {"suite": "rpc", "case": "round_trip", "metrics": metrics, "outcome": "pass"},
        {"suite": "ddp_rpc", "case": "matches_reference", "metrics": [],
         "outcome": ddp_outcome},
    ]}


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
    run["results"][0]["metrics"] = [m for m in run["results"][0]["metrics"]
                                    if m["labels"]["bytes"] != MiB * 4
                                    and m["labels"]["bytes"] != 256 * KiB
                                    and m["labels"]["bytes"] != MiB]
    with pytest.raises(ValueError, match="fewer than two payload sizes"):
        shaped_link.slope(shaped_link.p50s(run), "tcp")


def test_a_delay_check_passes_at_twice_the_delay_and_fails_off_it():
    base, delay = _run(None), 1e-3
    ok = shaped_link.check(base, _run(RATE), RATE, _run(None, fixed_s=300e-6 + 2 * delay), delay)
    assert _failed(ok) == [] and len(ok["checks"]) == 11
    off = shaped_link.check(base, _run(RATE), RATE, _run(None, fixed_s=300e-6 + 1.5 * delay),
                            delay)
    assert len([f for f in _failed(off) if "delay" in f]) == 3
