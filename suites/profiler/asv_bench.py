"""asv view of the profiler suite: the model step it times, its overheads and accuracy,
generated from the suite's definitions (harness.adapters.asv_adapter)."""

from harness.adapters import asv_adapter

globals().update(asv_adapter.views(__name__))
