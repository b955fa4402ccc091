"""Harness self-check: telemetry reads the hardware, and sampling does not slow what it watches."""
