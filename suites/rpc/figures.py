"""The RPC suite's report figure: round-trip p50 against payload, per path."""

from __future__ import annotations

from harness.presenting.figures import Figure, lines, plot, runs_of, subplots
from harness.records import Result
from suites.rpc.cases import suite

FLOORS = ("tcp", "tcp@shm", "tcp@uv")  # the TCP floors measured beside each launch


def _path_style(path: str) -> dict:
    """Measured paths as lines with markers; the floors dashed (this launch's) or dotted."""
    return {"fmt": "k--" if path == "tcp" else (":" if path in FLOORS else "o-"), "ms": 3,
            "capsize": 2, "alpha": .5 if path in FLOORS[1:] else 1,
            "label": f"{path} (floor)" if path in FLOORS else path}


@suite.figure
def round_trip(entries: list[Result]) -> Figure | None:
    """Round-trip p50 (us, with its interval) against payload, log-log, one line per path;
    the TCP floor dashed."""
    runs = runs_of(entries, "round_trip", "p50")
    if not runs:
        return None
    fig, ax = subplots(figsize=(6.5, 4))
    for e in runs:
        lines(ax, e, "p50", "bytes", by="path", style=_path_style, scale=1e6)
    ax.set(xscale="log", yscale="log", xlabel="payload (bytes)", ylabel="round trip p50 (us)")
    ax.grid(alpha=.3, which="both")
    ax.legend(fontsize=7)
    devices = ", ".join(sorted({e.device for e in runs}))
    return plot(f"RPC round trip against payload [{devices}]", fig)
