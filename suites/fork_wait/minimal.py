"""The fork/wait suite's minimal programs, for its `clean_exit` case: each runs once in a
fresh process and returns, and the case looks at how the process ends.

    python -m suites.fork_wait.minimal release_notes  # the 1.6 release notes' example
    python -m suites.fork_wait.minimal chains         # two forked matmul chains (issue 16)
"""

from __future__ import annotations

import sys

import torch

from suites.fork_wait import scripted


def release_notes() -> None:
    out = scripted.script(scripted.release_notes_example)(torch.ones([]))
    assert out.item() == -100, out


def chains() -> None:
    xs, w = scripted.inputs(tasks=2, size=128)
    scripted.script(scripted.forked)(xs, w, 20)


PROGRAMS = {"release_notes": release_notes, "chains": chains}

if __name__ == "__main__":
    PROGRAMS[sys.argv[1]]()
