"""Stands in for harness.running.telemetry.Telemetry in tests: every case's summary says `reasons`
(none: a valid, uncontended measurement)."""

from __future__ import annotations

HOST_BUSY = "host busy: other processes used 98% of a core on average"


class FakeTelemetry:
    def __init__(self, *reasons: str):
        self.reasons = list(reasons)
        self.info = {"fake": True}  # the run-level part

    def sampler(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def summary(self, iterations=None):
        return {"valid": not self.reasons, "invalid_reasons": self.reasons}

    def close(self):
        pass
