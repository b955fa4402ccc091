"""Which of the compute processes NVML lists on a GPU are another's, inside a container too.

NVML names a process by its pid in the pid namespace the driver sees, the host's. In a
container the same process has another pid, and its /proc (mounted in the container's own
namespace) shows neither the host's pids nor, in /proc/PID/status's NSpid, the levels above
its own, so a listed pid cannot simply be looked up. The rule, at each reading of the list:

- a listed pid that is a process of this run's tree, as this /proc numbers them: ours;
- a listed pid that is a process of this /proc outside our tree and holds the GPU (a GPU
  device file open, or the CUDA driver library in its memory map): another's, on this machine
  or in this container;
- every other listed pid names a process this /proc cannot: no process has that pid here, or
  the one that has it does not hold the GPU (the same number in another namespace). Those are
  ours as long as our tree has that many processes holding the GPU that no listed pid named:
  a container sees its own GPU processes under the host's pids. Beyond that count they are
  another's: a process outside this container is using the GPU.

A process that has loaded the CUDA driver without a context on the GPU counts among ours
that hold it, so the rule leans to calling a listed process ours; it never calls one of ours
another's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
# what a process that uses an NVIDIA GPU holds open: the device, the control and UVM files
DEVICE_FILE = re.compile(r"^/dev/nvidia(\d+|ctl|-uvm)$")
DRIVER_LIBRARY = "libcuda.so"


def holds_gpu(pid: int, proc: Path = PROC) -> bool:
    """Whether process `pid` of this /proc holds the GPU: a GPU device file among its open
    files, or the CUDA driver library in its memory map (a sandbox may show its device files
    under other names)."""
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:  # gone, or not ours to read
        fds = []
    for fd in fds:
        try:
            if DEVICE_FILE.match(os.readlink(fd)):  # gpu-only: a CUDA process's files
                return True
        except OSError:  # closed meanwhile
            continue
    try:
        return DRIVER_LIBRARY in (proc / str(pid) / "maps").read_text()
    except OSError:
        return False


def _size(used: int | None) -> str:
    return "" if used is None else f", {used / 2**20:.0f} MiB"


def others(listed: Iterable[tuple[int, int | None]], tree: Iterable[int],
           proc: Path = PROC) -> list[str]:
    """Why each listed (pid, used bytes) that is not this run's is another's; [] when every
    listed process is ours. `tree`: the pids of this run's processes, as this /proc numbers
    them."""
    tree = set(tree)
    listed = list(listed)
    named = {pid for pid, _ in listed if pid in tree}
    out, unnamed = [], []
    for pid, used in listed:
        if pid in tree:
            continue
        if (proc / str(pid)).exists() and holds_gpu(pid, proc):
            out.append(f"pid {pid}: outside this run's processes, holds the GPU{_size(used)}")
        else:
            unnamed.append((pid, used))
    if not unnamed:
        return out
    holding = sum(1 for pid in tree - named if holds_gpu(pid, proc))
    if len(unnamed) > holding:
        pids = ", ".join(f"{pid}{_size(used)}" for pid, used in unnamed)
        out.append(f"{len(unnamed)} listed by pids of another namespace ({pids}) against "
                   f"{holding} of this run's processes holding the GPU unnamed: "
                   f"{len(unnamed) - holding} another's")
    return out
