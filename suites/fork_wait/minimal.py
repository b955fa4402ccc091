"""The fork/wait suite's minimal programs, for its `clean_exit` case: each runs once in a
fresh process and returns, and the case looks at how the process ends.

    python -m suites.fork_wait.minimal release_notes  # the 1.6 release notes' example
    python -m suites.fork_wait.minimal chains         # two forked matmul chains (issue 16)
"""

from __future__ import annotations

import sys

import torch

from suites.fork_wait import scripted


def scripted_with_forks(fn):
    """`fn` scripted; the program must exercise fork/wait: with TorchScript off, fork runs
    inline and a clean exit says nothing."""
    fn = scripted.script(fn)
    assert scripted.forks_in(fn), "no prim::fork: TorchScript did not script the program"
    return fn


def release_notes() -> None:
    out = scripted_with_forks(scripted.release_notes_example)(torch.ones([]))
    assert out.item() == -100, out


def chains() -> None:
    xs, w = scripted.inputs(tasks=2, size=128)
    scripted_with_forks(scripted.forked)(xs, w, 20)


PROGRAMS = {"release_notes": release_notes, "chains": chains}

if __name__ == "__main__":
    PROGRAMS[sys.argv[1]]()
