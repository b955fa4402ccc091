"""The AMP suite's report figures: training-step speedup and memory against fp32, and the
GEMM ladder."""

from __future__ import annotations

from harness.presenting.figures import (
    Figure,
    by_label,
    error_bars,
    interval,
    lines,
    plot,
    runs_of,
    subplots,
)
from harness.records import Result
from suites.amp.cases import suite


@suite.figure
def train_step(entries: list[Result]) -> Figure | None:
    """Bars of the autocast speedup over fp32 (with its interval) and of peak memory over
    fp32, per model and mode."""
    rows = []
    for e in entries:
        if e.case != "train_step":
            continue
        speed = by_label(e, "speedup", "mode")
        memory = by_label(e, "memory_ratio", "mode")
        extra = ", ".join(f"{k}={v}" for k, v in e.params.items() if k != "model")
        for mode, m in speed.items():
            label = (f"{e.params.get('model')} {mode} [{e.device}"
                     f"{', ' + extra if extra else ''}]")
            rows.append((label, m, memory.get(mode)))
    if not rows:
        return None
    fig, axes = subplots(1, 2, figsize=(10, 0.35 * len(rows) + 1.4), sharey=True)
    y = list(range(len(rows)))
    speed_ax, memory_ax = axes
    speed_ax.barh(y, [r[1].value for r in rows], xerr=error_bars([r[1] for r in rows]),
                  color="#4c72b0", capsize=3)
    speed_ax.set_title("training-step speedup over fp32 (x, higher is better)", fontsize=9)
    memory_ax.barh(y, [r[2].value if r[2] else 0 for r in rows], color="#dd8452")
    memory_ax.set_title("peak memory / fp32 (x, lower is better)", fontsize=9)
    for ax, idx in ((speed_ax, 1), (memory_ax, 2)):
        ax.axvline(1.0, color="k", lw=.8)
        for i, r in enumerate(rows):
            if r[idx]:  # the label right of the bar and of its interval
                right = max(r[idx].value, (interval(r[idx]) or (0, 0))[1])
                ax.text(right, i, f" {r[idx].value:.3g}", va="center", fontsize=7)
    speed_ax.set_yticks(y, [r[0] for r in rows], fontsize=7)
    speed_ax.invert_yaxis()
    return plot("Autocast training step against fp32", fig)


@suite.figure
def gemm_ladder(entries: list[Result]) -> Figure | None:
    """Matmul TFLOP/s against size, one line per dtype, with intervals."""
    runs = runs_of(entries, "gemm_ladder", "tflops")
    if not runs:
        return None
    fig, ax = subplots(figsize=(5.5, 3.6))
    for e in runs:
        lines(ax, e, "tflops", "n", by="dtype",
              style=lambda dtype, e=e: {"fmt": "o-", "capsize": 3,
                                        "label": f"{dtype} [{e.device}]"})
    ax.set(xscale="log", xlabel="matrix size n (n x n x n)", ylabel="TFLOP/s")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    ax.grid(alpha=.3, which="both")
    return plot("Matmul throughput by dtype", fig)
