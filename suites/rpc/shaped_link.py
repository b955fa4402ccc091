"""Ground truth for the RPC suite across hosts: round trips over a link shaped to a known rate.

`scripts/netns-check.sh` runs the suite between two network namespaces joined by a veth pair,
once unshaped and once with `tc tbf` holding each direction to a known rate. A payload of N
bytes then crosses the link in N x (frame / segment) x 8 / rate seconds, once each way, so
the round trip grows with the payload by a known slope. This module reads both run records
and checks, for the TCP floor, TensorPipe over uv and Gloo:

- the slope of the p50 round trip over the payload sizes from 64 KiB to 4 MiB is within 10%
  of two crossings at the rate;
- a 4 MiB round trip moves its bytes at 80-100% of the rate (each way);
- the DDP+RPC hybrid still matches its single-process reference across the hosts;
- where the kernel has `netem` (not this project's machines), with a delay added each way
  instead of the rate: the 4-byte round trip grows by twice the delay within 10%.

The default TensorPipe paths are not checked: between processes of one kernel TensorPipe may
move payloads with its cma channel (process_vm_readv), which never touches the link; the
forced uv path (channel "basic") does.

    python -m suites.rpc.shaped_link --rate-mbit 100 UNSHAPED SHAPED

UNSHAPED and SHAPED are run records, or folders whose records (the rpc run and the ddp_rpc
run) are read together.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from scipy import stats

from harness import records

KiB, MiB = 2**10, 2**20
SLOPE_SIZES = (64 * KiB, 4 * MiB)  # the slope is fitted over payloads in this range
BANDWIDTH_SIZE = 4 * MiB
SLOPE_TOLERANCE = 0.10
BANDWIDTH_RANGE = (0.80, 1.00)
DELAY_TOLERANCE = 0.10
DELAY_SIZE = 4  # the delay check compares round trips of this payload
PATHS = {"tcp": "TCP floor", "tp_uv": "TensorPipe (uv)", "gloo": "Gloo send/recv"}
# Bytes on the wire per byte of TCP payload: a 1500-byte MTU carries 1448 bytes of payload
# (20 IP + 32 TCP with timestamps) in a 1514-byte frame, as tbf counts it.
MTU, IP_TCP_HEADERS, ETHERNET_HEADER = 1500, 52, 14
WIRE_PER_PAYLOAD = (MTU + ETHERNET_HEADER) / (MTU - IP_TCP_HEADERS)


def load(path: Path) -> records.Run:
    """A run record; for a folder, its first record holding the results of every record
    under it."""
    if path.is_dir():
        files = sorted(path.rglob("*.json"))
        if not files:
            raise ValueError(f"no run records under {path}")
        runs = [records.read_run(f) for f in files]
        return replace(runs[0], results=tuple(e for run in runs for e in run.results))
    return records.read_run(path)


def p50s(run: records.Run) -> dict[tuple[str, int], float]:
    """(path, bytes) -> p50 round trip in seconds, from a run's rpc/round_trip case."""
    out = {}
    for entry in run.results:
        if entry.case_id == "rpc/round_trip":
            for m in entry.metrics:
                if m.name == "p50" and m.value is not None:
                    out[m.labels["path"], int(m.labels["bytes"])] = m.value
    return out


def slope(p50: dict[tuple[str, int], float], path: str) -> tuple[float, list[int]]:
    """Seconds per payload byte of the round trip, fitted over SLOPE_SIZES; and the sizes."""
    lo, hi = SLOPE_SIZES
    sizes = sorted(n for (p, n) in p50 if p == path and lo <= n <= hi)
    if len(sizes) < 2:
        raise ValueError(f"{path}: fewer than two payload sizes in {lo}..{hi} bytes")
    fit = stats.linregress(sizes, [p50[path, n] for n in sizes])
    return float(fit.slope), sizes


def _size(nbytes: int) -> str:
    return f"{nbytes // KiB}KiB" if nbytes >= KiB else f"{nbytes}B"


def expected_slope(rate_bps: float) -> float:
    """Seconds per payload byte of a round trip: two crossings at the rate."""
    return 2 * 8 * WIRE_PER_PAYLOAD / rate_bps


def check(unshaped: records.Run, shaped: records.Run, rate_bps: float,
          delayed: records.Run | None = None, delay_s: float = 0.0) -> dict[str, Any]:
    """The rows of the check and whether each passed; `delayed` is a run over the link with
    `delay_s` added each way (netem), where the kernel has it."""
    before, after = p50s(unshaped), p50s(shaped)
    want = expected_slope(rate_bps)
    rows, checks = [], []
    for path, name in PATHS.items():
        got, sizes = slope(after, path)
        # payload bits per second of each crossing (the payload crosses twice per round trip)
        one_way_bps = 2 * BANDWIDTH_SIZE * 8 / after[path, BANDWIDTH_SIZE]
        fraction = one_way_bps / rate_bps
        measured = sorted(n for (p, n) in after if p == path)
        rows.append({"path": name,
                     **{f"unshaped_us@{_size(n)}": before.get((path, n), float("nan")) * 1e6
                        for n in measured},
                     **{f"shaped_us@{_size(n)}": after[path, n] * 1e6 for n in measured},
                     "slope_ns_per_B": got * 1e9, "expected_ns_per_B": want * 1e9,
                     "slope_error_pct": (got / want - 1) * 100,
                     "rate_fraction_4MiB": fraction})
        checks.append((f"{name}: slope within {SLOPE_TOLERANCE:.0%} of two crossings at the "
                       f"rate", abs(got / want - 1) <= SLOPE_TOLERANCE))
        lo, hi = BANDWIDTH_RANGE
        checks.append((f"{name}: 4 MiB moves at {lo:.0%}-{hi:.0%} of the rate",
                       lo <= fraction <= hi))
    if delayed is not None:
        rows_d, checks_d = _delay_check(before, p50s(delayed), delay_s)
        rows += rows_d
        checks += checks_d
    for label, run in (("unshaped", unshaped), ("shaped", shaped)):
        ref = [e for e in run.results if e.case_id == "ddp_rpc/matches_reference"]
        checks.append((f"DDP+RPC matches its reference across hosts ({label})",
                       bool(ref) and all(e.outcome == "pass" for e in ref)))
    return {"rate_bps": rate_bps, "rows": rows,
            "checks": [{"name": n, "passed": ok} for n, ok in checks]}


def _delay_check(before: dict[tuple[str, int], float], after: dict[tuple[str, int], float],
                 delay_s: float) -> tuple[list[dict[str, Any]], list[tuple[str, bool]]]:
    """The 4-byte round trip of each path grows by two delays (one each way)."""
    rows, checks = [], []
    for path, name in PATHS.items():
        growth = after[path, DELAY_SIZE] - before[path, DELAY_SIZE]
        rows.append({"path": f"{name} (delay)", "growth_ms": growth * 1e3,
                     "expected_ms": 2 * delay_s * 1e3})
        checks.append((f"{name}: a {delay_s * 1e3:g} ms delay each way adds "
                       f"{2 * delay_s * 1e3:g} ms within {DELAY_TOLERANCE:.0%}",
                       abs(growth / (2 * delay_s) - 1) <= DELAY_TOLERANCE))
    return rows, checks


def _print(result: dict[str, Any]) -> None:
    print(f"link shaped to {result['rate_bps'] / 1e6:g} Mbit/s each way; "
          f"expected slope {expected_slope(result['rate_bps']) * 1e9:.1f} ns per payload byte "
          f"(two crossings, {WIRE_PER_PAYLOAD:.4f} wire bytes per payload byte)")
    for row in result["rows"]:
        print("  " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                               for k, v in row.items()))
    for c in result["checks"]:
        print(f"  {'pass' if c['passed'] else 'FAIL'}  {c['name']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate-mbit", type=float, required=True)
    parser.add_argument("unshaped", type=Path)
    parser.add_argument("shaped", type=Path)
    parser.add_argument("--delayed", type=Path, help="a run with --delay-ms added each way")
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    try:
        runs = [load(p) for p in (args.unshaped, args.shaped)]
        delayed = load(args.delayed) if args.delayed else None
        result = check(*runs, args.rate_mbit * 1e6, delayed, args.delay_ms / 1e3)
    except (OSError, ValueError, KeyError, records.RecordError) as e:
        print(f"shaped_link: error: {e}", file=sys.stderr)
        return 2
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(c["passed"] for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
