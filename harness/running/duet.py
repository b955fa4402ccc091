"""Duet measurement: the two sides of a round run at the same time, each on its own half of the
machine, the halves swapped from one round to the next.

On a shared VM the level of a CPU-bound figure wanders from minute to minute (a neighbour, the
hypervisor), and sequential rounds (A, then B) see that wander as noise in their ratio. Run
together, A and B meet the same interference, and their ratio keeps less of it (Bulej et al.,
"Duet Benchmarking: Improving Measurement Accuracy in the Cloud", ICPE 2020). One vCPU can also
be slow for a while on its own, which simultaneity does not cancel: the sides swap halves every
other round, and `campaign` judges each swapped pair of rounds as one (the mean of its two log
ratios), so a slow half weighs on both sides alike.

The parts here are small: which CPUs make the two halves (`halves`), pinning a process to its
half with as many intra-op threads as it has CPUs (`pin`), and the barrier the two processes
wait at before each case, so that their measurements start together (`Barrier`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

SYSFS = Path("/sys/devices/system")
# How long a process waits at the barrier for its partner before measuring alone (its
# partner died, or skipped the case): longer than any import or model build here.
BARRIER_TIMEOUT_S = 120.0
POLL_S = 0.002  # the barrier's polling interval: the start skew of the two sides, at most


class DuetError(Exception):
    """A machine or an option that cannot hold a duet (the message is one line)."""


def parse_cpu_list(text: str) -> list[int]:
    """CPUs as Linux lists them, and as `--cpus` takes them: "0-3,8,10-11"."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise DuetError(f"not a CPU list: {text!r} (expected e.g. 0-3,8)") from None
    if not out:
        raise DuetError(f"not a CPU list: {text!r} (expected e.g. 0-3,8)")
    return sorted(set(out))


def cpu_list_text(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _core_groups(cpus: list[int], sysfs: Path) -> list[tuple[int, ...]]:
    """The CPUs grouped by physical core (SMT siblings together), ordered by NUMA node and
    then by number; a CPU whose topology is unreadable is a core of its own on node 0."""
    node_of = {}
    for node in sorted(sysfs.glob("node/node[0-9]*")):
        if (listed := _read(node / "cpulist")) is not None:
            for c in parse_cpu_list(listed) if listed else []:
                node_of[c] = int(node.name[4:])
    groups: dict[tuple[int, ...], None] = {}
    allowed = set(cpus)
    for c in cpus:
        siblings = _read(sysfs / "cpu" / f"cpu{c}" / "topology" / "thread_siblings_list")
        group = tuple(x for x in parse_cpu_list(siblings) if x in allowed) if siblings else (c,)
        groups[group or (c,)] = None
    return sorted(groups, key=lambda g: (node_of.get(g[0], 0), g[0]))


def halves(cpus: Iterable[int] | None = None,
           sysfs: Path = SYSFS) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two halves of the CPUs this process may use (or of `cpus`), equal in whole physical
    cores: on this 2-vCPU VM one CPU each; on a two-socket host one NUMA node each, where the
    nodes hold equal cores. A core left over from an odd count is left out."""
    allowed = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    groups = _core_groups(allowed, sysfs)
    if len(groups) < 2:
        raise DuetError(f"a duet needs two cores, one for each side; this process may use "
                        f"{len(groups)} ({cpu_list_text(allowed)})")
    half = len(groups) // 2
    return (tuple(c for g in groups[:half] for c in g),
            tuple(c for g in groups[half:2 * half] for c in g))


def pin(cpus: Iterable[int]) -> None:
    """Pin this process (and the workers it starts, which inherit it) to `cpus`, with as many
    intra-op threads as CPUs (the run record's `measured` says so)."""
    import torch

    cpus = sorted(cpus)
    try:
        os.sched_setaffinity(0, cpus)
    except (OSError, ValueError) as e:
        raise DuetError(f"--cpus {cpu_list_text(cpus)}: cannot pin to them ({e})") from e
    torch.set_num_threads(len(cpus))


@dataclass(frozen=True)
class Barrier:
    """Where the two processes of a duet round meet before each case: a folder both were
    given, in which each leaves a file per case and waits for the other's. Files rather than
    a pipe: the processes are started by the campaign, not by each other, and a process that
    died leaves its partner a timeout, not a hang."""

    folder: Path
    parties: int = 2
    timeout_s: float = BARRIER_TIMEOUT_S
    me: str = field(default_factory=lambda: str(os.getpid()))  # this party's mark

    def wait(self, name: str) -> tuple[bool, float]:
        """Arrive at the barrier `name` and wait for the others: (whether they all came,
        seconds waited)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{name}.{self.me}").touch()
        t0 = time.monotonic()
        while len(list(self.folder.glob(f"{name}.*"))) < self.parties:
            if time.monotonic() - t0 > self.timeout_s:
                return False, time.monotonic() - t0
            time.sleep(POLL_S)
        return True, time.monotonic() - t0
