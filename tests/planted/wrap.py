"""Make a Python executable that runs with a planted slowdown (see sitecustomize.py here).

    python tests/planted/wrap.py DEST "matmul=0.25,rpc_us=100"

writes DEST, a script that execs this Python with the slowdown planted; `release-bench ab`
and `release-bench run` take it like any environment's Python.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def planted_python(dest: str | Path, spec: str, python: str = sys.executable) -> Path:
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH={shlex.quote(str(HERE))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"RELEASE_BENCH_PLANT={shlex.quote(spec)}\n"
        "export PYTHONPATH RELEASE_BENCH_PLANT\n"
        f"exec {shlex.quote(python)} \"$@\"\n")
    os.chmod(dest, 0o755)
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(planted_python(sys.argv[1], sys.argv[2]))
