"""The RPC suite's report figure: round-trip p50 against payload, per path."""

from __future__ import annotations

from harness.figures import Figure, by_label, error_bars, metrics, plot, subplots
from suites.rpc.cases import suite

FLOORS = ("tcp", "tcp@shm", "tcp@uv")  # the TCP floors measured beside each launch


@suite.figure
def round_trip(entries: list[dict]) -> Figure | None:
    """Round-trip p50 (us, with its interval) against payload, log-log, one line per path;
    the TCP floor dashed."""
    runs = [e for e in entries if e["case"] == "round_trip" and metrics(e, "p50")]
    if not runs:
        return None
    fig, ax = subplots(figsize=(6.5, 4))
    for e in runs:
        paths = sorted({(m.get("labels") or {}).get("path") for m in e["metrics"]
                        if m["name"] == "p50"} - {None})
        for path in paths:
            by_size = {int(n): m for n, m in by_label(e, "p50", "bytes", path=path).items()}
            xs = sorted(by_size)
            style = "k--" if path == "tcp" else (":" if path in FLOORS else "o-")
            ax.errorbar(xs, [by_size[x]["value"] * 1e6 for x in xs],
                        yerr=error_bars([by_size[x] for x in xs], scale=1e6), fmt=style,
                        ms=3, capsize=2, alpha=.5 if path in FLOORS[1:] else 1,
                        label=f"{path} (floor)" if path in FLOORS else path)
    ax.set(xscale="log", yscale="log", xlabel="payload (bytes)", ylabel="round trip p50 (us)")
    ax.grid(alpha=.3, which="both")
    ax.legend(fontsize=7)
    devices = ", ".join(sorted({e.get("device", "") for e in runs}))
    return plot(f"RPC round trip against payload [{devices}]", fig)
