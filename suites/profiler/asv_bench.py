"""asv view of the profiler suite: the model step it times, its overheads and accuracy,
generated from the suite's definitions (harness.asv_adapter)."""

from harness import asv_adapter

globals().update(asv_adapter.views(__name__))
