"""The profiler suite's report figures: how far each API's figures are from the truth, and
what profiling costs."""

from __future__ import annotations

from harness.presenting.figures import Figure, metrics, table, with_interval
from harness.records import Result
from suites.profiler.cases import suite

ACCURACY = {"known_allocations": "max_abs_error", "peak_memory": "peak_abs_error",
            "timing_accuracy": "time_error"}


@suite.figure
def accuracy(entries: list[Result]) -> Figure | None:
    """Each API's error against the known truth: allocations, peaks and region times."""
    rows = []
    for e in entries:
        name = ACCURACY.get(e.case)
        for m in metrics(e, name) if name else []:
            rows.append({"case": e.case, "api": m.labels.get("api"),
                         "of": m.labels.get("program") or m.labels.get("region") or "",
                         "error": with_interval(m), "unit": m.unit, "outcome": e.outcome})
    return table("Profiler figures against the truth", rows) if rows else None


@suite.figure
def overhead(entries: list[Result]) -> Figure | None:
    """The step time under each profiling mode, over the unprofiled step."""
    rows = [{"mode": m.labels.get("mode"), "overhead [interval]": with_interval(m),
             "unit": m.unit}
            for e in entries if e.case == "overhead" for m in metrics(e, "overhead")]
    return table("Profiling overhead", rows) if rows else None
