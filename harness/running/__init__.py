"""Running cases: the runner, worker processes and hosts, timing, the machine's fingerprint
and the telemetry sampled while cases run."""
