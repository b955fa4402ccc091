"""What a process tree listens on: the tests of listeners (one host, several hosts) share it."""

from __future__ import annotations

import psutil


def listeners(root: psutil.Process) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every TCP listener of `root` and its descendants.

    psutil reads each process's own /proc/PID/net, so a process inside a network namespace
    shows the listeners of that namespace."""
    out = set()
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.add((c.laddr.ip, c.laddr.port, p.name()))
        except psutil.Error:
            continue
    return out
