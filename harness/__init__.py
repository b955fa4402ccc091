"""torch-release-bench: the harness every suite uses.

Timing, fingerprint, records, launcher, runner, adapters and the CLI.
"""
