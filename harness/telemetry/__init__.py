"""Hardware telemetry sampled while cases run (filled in by the telemetry work)."""


def sampler_factory(devices, interval_s: float = 0.1):
    return None
