"""Host telemetry with psutil: CPU use and frequency, the run's memory, load, RAPL energy.

The CPU use of other processes (everything but this process and its children) is what tells
a noisy neighbour from our own work: on a 2-core machine one busy neighbour can halve a
benchmark, so the sampler reports it and the summary flags it. Steal time (a vCPU that was
runnable while the hypervisor ran another guest) is the same thing one level up: contention
no process list on this machine can see.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

RAPL_ROOT = Path("/sys/class/powercap")


class Rapl:
    """Package energy counters of Intel RAPL (powercap), where readable."""

    def __init__(self, root: Path = RAPL_ROOT):
        self.domains: list[tuple[Path, int]] = []  # (energy_uj file, wrap-around range)
        self.error: str | None = None
        zones = sorted(root.glob("intel-rapl:*")) if root.exists() else []
        zones = [z for z in zones if z.name.count(":") == 1]  # packages, not sub-zones
        if not zones:
            self.error = "unavailable: no RAPL powercap interface on this machine"
            return
        try:
            for z in zones:
                rng = int((z / "max_energy_range_uj").read_text())
                int((z / "energy_uj").read_text())  # readable at all? (root only since 2020)
                self.domains.append((z / "energy_uj", rng))
        except PermissionError:
            self.domains, self.error = [], "unavailable: RAPL energy_uj needs root"
        except (OSError, ValueError) as e:
            self.domains, self.error = [], f"unavailable: {e}"

    def read_uj(self) -> list[int] | None:
        if self.error:
            return None
        try:
            return [int(f.read_text()) for f, _ in self.domains]
        except (OSError, ValueError) as e:
            self.error = f"unavailable: {e}"
            return None

    def delta_j(self, start: list[int], end: list[int]) -> float:
        total = 0
        for (_, rng), a, b in zip(self.domains, start, end, strict=True):
            total += b - a if b >= a else b + rng - a  # the counter wrapped
        return total / 1e6


def steal_and_total(times: Any) -> tuple[float, float]:
    """(steal, total) CPU seconds of all cores from one `psutil.cpu_times()` reading.

    Guest time is left out of the total: Linux already counts it in user (and guest_nice in
    nice) time, and counting it twice would understate the steal share.
    """
    fields = times._asdict()
    total = sum(v for k, v in fields.items() if k not in ("guest", "guest_nice"))
    return float(fields["steal"]), float(total)


class HostReader:
    def __init__(self, pid: int | None = None,
                 cpu_times: Callable[[], Any] = psutil.cpu_times):
        """`cpu_times` reads the machine's cumulative CPU times (the tests inject fakes)."""
        self.me = psutil.Process(pid or os.getpid())
        self.cpu_times = cpu_times
        self.rapl = Rapl()
        self.unavailable: dict[str, str] = {}
        self._tree: dict[int, psutil.Process] = {}
        self._pids: frozenset[int] = frozenset()
        try:  # read once: a duet's side is pinned before its telemetry starts
            self._allowed: list[int] | None = sorted(self.me.cpu_affinity())
        except (AttributeError, psutil.Error):  # no affinity on this OS
            self._allowed = None
        psutil.cpu_percent(percpu=True)  # the first call only starts the interval
        self._tree_cpu_percent()
        freq = psutil.cpu_freq(percpu=True) if hasattr(psutil, "cpu_freq") else None
        if not freq:
            self.unavailable["cpu_freq"] = "unavailable: the kernel reports no CPU frequency"
        if self.rapl.error:
            self.unavailable["rapl"] = self.rapl.error
        if not hasattr(cpu_times(), "steal"):  # psutil reports steal on Linux only
            self.unavailable["cpu_steal"] = "unavailable: this OS reports no CPU steal time"

    def _tree_cpu_percent(self) -> float:
        """CPU percent (100 = one core) of this process and its descendants since last call.

        psutil measures a process's CPU percent between two calls on the same object, so the
        objects are kept from one sample to the next. Finding the descendants reads every
        process's parent (about a millisecond), so it is done only when the machine's set of
        processes changed (listing them costs ~50 us).
        """
        pids = frozenset(psutil.pids())
        procs = list(self._tree.values())
        if pids != self._pids or not procs:
            self._pids = pids
            try:
                procs = [self.me, *self.me.children(recursive=True)]
            except psutil.Error:
                procs = [self.me]
        total, tree = 0.0, {}
        for p in procs:
            p = self._tree.get(p.pid, p)
            try:
                total += p.cpu_percent(None)
                tree[p.pid] = p
            except psutil.Error:
                pass
        self._tree = tree
        return total

    def _cpus(self, count: int) -> list[int]:
        """The CPUs this process may run on, as indices of psutil's per-CPU list."""
        return [c for c in self._allowed or () if c < count] or list(range(count))

    def tree_pids(self) -> frozenset[int]:
        """The pids of this process and its descendants at the last sample."""
        return frozenset(self._tree) | {self.me.pid}

    def tree_rss(self) -> int:
        total = 0
        for p in self._tree.values():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def sample(self) -> dict[str, Any]:
        per_cpu = psutil.cpu_percent(percpu=True)
        ours = self._tree_cpu_percent()
        row: dict[str, Any] = {
            "cpu_util_pct": sum(per_cpu) / len(per_cpu),
            "cpu_util_per_core_pct": per_cpu,
            # what the rest of the machine used on the CPUs this process may run on, in percent
            # of one core: all of them, unless it is pinned (a side of a duet, whose partner
            # busies the other half and is no neighbour of its own)
            "other_cpu_pct": max(0.0, sum(per_cpu[c] for c in self._cpus(len(per_cpu)))
                                 - ours),
            "rss_bytes": self.tree_rss(),
            "load1": os.getloadavg()[0],
        }
        if "cpu_freq" not in self.unavailable:
            row["cpu_freq_mhz"] = [f.current for f in psutil.cpu_freq(percpu=True)]
        if "cpu_steal" not in self.unavailable:
            # cumulative counters: the summary takes the share over the case from their deltas
            row["cpu_steal_s"], row["cpu_total_s"] = steal_and_total(self.cpu_times())
        return row

    def static_info(self) -> dict[str, Any]:
        return {
            "logical_cores": psutil.cpu_count(),
            "rapl_domains": len(self.rapl.domains),
            "unavailable": dict(self.unavailable),
        }
