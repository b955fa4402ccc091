"""asv view of the AMP suite: the training step and GEMMs the CLI times, and the train_step
and gemm_ladder cases' speedups, memory, TFLOP/s and energy, generated from the suite's
definitions (harness.adapters.asv_adapter)."""

from harness.adapters import asv_adapter

globals().update(asv_adapter.views(__name__))
