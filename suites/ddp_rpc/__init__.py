"""DDP + RPC hybrid parallelism (1.6 beta): correctness against a single-process reference,
step time, and failure handling."""
