"""asv view of the telemetry suite: the busy workload its overhead case samples beside,
generated from the suite's definitions (harness.adapters.asv_adapter)."""

from harness.adapters import asv_adapter

globals().update(asv_adapter.views(__name__))
