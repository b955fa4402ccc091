"""asv view of the telemetry suite: the busy workload its overhead case samples beside,
generated from the suite's definitions (harness.asv_adapter)."""

from harness import asv_adapter

globals().update(asv_adapter.views(__name__))
