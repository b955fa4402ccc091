"""A release-bench command run through `cli.main` in the test's own process, returned as a
subprocess would return it: for refusals and other short commands, without the seconds a
fresh interpreter spends importing torch."""

from __future__ import annotations

import subprocess

from harness import cli


def release_bench(capsys, *args: str) -> subprocess.CompletedProcess:
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)
