"""Does a process forked from one that imported torch end as a fresh process does?

The clean_exit cases run each trial in fresh processes, and most of a trial is torch's import
(2.5-3.8 s of CPU each on a 2-core VM). Forking every trial's processes from a server that
imported torch once, as multiprocessing's forkserver does, would save most of that. This
script measures whether such a process still shows the one defect clean_exit is known to
catch: pytorch#38228, fork/wait's programs aborting at exit ("terminate called", SIGABRT) in a
share of fresh processes. Each run is `python -m suites.fork_wait.minimal PROGRAM`:

- fresh: a new interpreter, as clean_exit runs it;
- bare: forked from this script before it imports torch (the child imports it);
- torch: forked from this script after `import torch`.

A forked child runs the module as `python -m` does (runpy's own entry point) and ends through
the interpreter's own shutdown. The runs go one at a time, each way alternating with fresh
ones: first fresh and bare, then, once this script has imported torch, fresh and torch.

    .venv/bin/python scripts/fork-after-import.py [--trials 30] [--program release_notes]

Prints each way's abort rate with its exact interval, as clean_exit gives it.
"""

from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = "suites.fork_wait.minimal"


def fresh(program: str) -> bool:
    """Whether a fresh process of the program ended abnormally."""
    out = subprocess.run([sys.executable, "-m", MODULE, program], cwd=ROOT, timeout=120,
                         capture_output=True, text=True,
                         env=os.environ | {"PYTHONPATH": str(ROOT)})
    return out.returncode != 0 or "terminate called" in out.stderr


def forked(program: str) -> bool:
    """Whether a process forked from this one ended abnormally."""
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(err.fileno(), 2)
            sys.argv = [MODULE, program]
            runpy._run_module_as_main(MODULE)  # noqa: SLF001 (what `python -m` calls)
            # unwinds to the top of this interpreter, which then shuts down as a fresh one does
            raise SystemExit(0)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status) != 0 or b"terminate called" in err.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=30, help="runs of each way (default 30)")
    parser.add_argument("--program", default="release_notes",
                        choices=("release_notes", "chains"))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    aborted = {"fresh": 0, "bare": 0, "torch": 0}
    for way in ("bare", "torch"):
        if way == "torch":
            import torch  # noqa: F401 (the point: imported before the forks)
        for _ in range(args.trials):
            aborted["fresh"] += fresh(args.program)
            aborted[way] += forked(args.program)
    from harness.running.clean_exit import fmt_rate  # the rate as clean_exit gives it

    for way, k in aborted.items():
        print(f"{way:6} {args.program}: {fmt_rate(k, args.trials * (2 if way == 'fresh' else 1))}"
              " aborted")


if __name__ == "__main__":
    main()
