"""One package per PyTorch 1.6 release feature; each holds its cases, checks and adapters."""
