"""The telemetry suite's report figure: what sampling the hardware costs a measured loop."""

from __future__ import annotations

from harness.presenting.figures import Figure, metrics, table, with_interval
from harness.records import Result
from suites.telemetry.cases import suite

SHOWN = ("time_sampling_off", "time_sampling_on", "time_sampling_off_again", "overhead",
         "control_difference", "samples_taken")


@suite.figure
def sampling_overhead(entries: list[Result]) -> Figure | None:
    """The loop's time with sampling off, on and off again, and the overhead, with intervals."""
    rows = [{"figure": name, "value [interval]": with_interval(m), "unit": m.unit}
            for e in entries if e.case == "sampling_overhead"
            for name in SHOWN for m in metrics(e, name)]
    return table("Telemetry sampling overhead", rows) if rows else None
