"""The fork/wait suite's report figure: speedup against the number of forked tasks."""

from __future__ import annotations

from harness.presenting.figures import Figure, by_label, error_bars, plot, subplots
from harness.records import Result
from suites.fork_wait.cases import suite


@suite.figure
def scaling(entries: list[Result]) -> Figure | None:
    """Measured speedup over serial (with its interval) and the ideal min(K, cores, threads),
    one line pair per inter-op thread count."""
    runs = [e for e in entries if e.case == "scaling" and by_label(e, "speedup", "K")]
    if not runs:
        return None
    fig, ax = subplots(figsize=(5.5, 3.6))
    top = 1.0
    for e in sorted(runs, key=lambda e: e.params.get("interop_threads", 0)):
        speedup = {int(k): m for k, m in by_label(e, "speedup", "K").items()}
        ideal = {int(k): m.value for k, m in by_label(e, "ideal", "K").items()}
        ks = sorted(speedup)
        n = e.params.get("interop_threads")
        bars = ax.errorbar(ks, [speedup[k].value for k in ks],
                           yerr=error_bars([speedup[k] for k in ks]), fmt="o-", capsize=3,
                           label=f"measured, {n} inter-op threads")
        ax.plot(sorted(ideal), [ideal[k] for k in sorted(ideal)], "--",
                color=bars.lines[0].get_color(), alpha=.6, label=f"ideal min(K, cores, {n})")
        top = max(top, *(m.value for m in speedup.values()), *ideal.values())
    ax.set(xlabel="independent forked tasks K", ylabel="speedup over serial (x)",
           ylim=(0, top * 1.2))
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    ax.grid(alpha=.3)
    return plot("TorchScript fork/wait scaling", fig)
