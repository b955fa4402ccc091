"""Memory profiler (1.6 beta): reported bytes and times against ground truth, and overhead."""
