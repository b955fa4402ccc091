"""A background sampler around one case, and the summary that goes into its record."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from harness.running.telemetry import gpu_processes
from harness.running.telemetry.host import HostReader
from harness.running.telemetry.nvml import NvmlReader, ReasonKind, reasons_of_kind


def trapezoid_rule(numpy: Any) -> Any:
    """The trapezoidal rule of a NumPy: np.trapezoid from 2.0, np.trapz (its name) before."""
    return getattr(numpy, "trapezoid", None) or numpy.trapz


_trapezoid = trapezoid_rule(np)

# Other processes using more than this much CPU (percent of one core, on average) make a
# timing on a 2-core machine untrustworthy.
HOST_BUSY_PCT = 50.0
# ...judged only over this many samples at least (the first covers the gap before the case).
HOST_BUSY_MIN_SAMPLES = 5
# A neighbour that is busy for part of a long case dilutes into a mean below that limit, yet
# slows the figures measured meanwhile tenfold (an rpc round trip here: 4 s at 60-100% of a
# core, in a 39 s case with a mean of 38%). So other processes above HOST_BUSY_PCT for this
# long without a break also make a case invalid. Our own process starts and worker spawns
# show as one or two samples above it (a worker is not yet in our process tree), never a
# second in a row.
HOST_BUSY_SPAN_S = 1.0
# CPU steal (time the hypervisor gave this VM's runnable vCPUs to someone else) above this
# share of all CPU time makes a case invalid. Wall-clock timings of CPU-bound code stretch by
# about 1 / (1 - steal on the cores they use); with one of two cores busy and the other idle,
# 10% of all CPU time can be ~20% of the busy core, past `compare`'s 15% tolerance for times
# (and 5% for ratios); below it steal is the 0-3% background that cloud VMs show at rest.
STEAL_PCT = 10.0
# ...judged only over this much CPU time at least (all cores): the kernel counts in 10 ms
# ticks, so a shorter case's share is too coarse to call.
STEAL_MIN_CPU_S = 1.0
# GPU process lists cost more than the other fields; read them every Nth sample.
PROCESS_EVERY = 10
MAX_POINTS = 100  # per series kept in the record, for plots


def _series(values: list[float | None], max_points: int) -> list[float | None]:
    """Bucket means down to `max_points`, 4 significant digits: small enough to commit."""
    arr = np.array([np.nan if v is None else v for v in values], dtype=float)
    if len(arr) > max_points:
        arr = np.array([b.mean() if not np.isnan(b).all() else np.nan
                        for b in np.array_split(arr, max_points)])
    return [None if np.isnan(v) else float(f"{v:.4g}") for v in arr]


def _stat(values: list[Any], fn) -> float | None:
    vals = [v for v in values if v is not None]
    return float(fn(vals)) if vals else None


def _steal_pct(rows: list[dict[str, Any]]) -> tuple[float | None, float]:
    """(steal in percent of all CPU time, CPU seconds it covers) between the first and the
    last host sample; (None, 0) when steal was not read."""
    read = [r for r in rows if "cpu_steal_s" in r]
    if len(read) < 2:
        return None, 0.0
    total = read[-1]["cpu_total_s"] - read[0]["cpu_total_s"]
    if total <= 0:
        return None, 0.0
    return 100.0 * (read[-1]["cpu_steal_s"] - read[0]["cpu_steal_s"]) / total, total


def _longest_span_s(times: list[float], values: list[float], limit: float) -> float:
    """The longest stretch of time (seconds, from sample to sample) over which every sample of
    `values` is above `limit`."""
    longest, start = 0.0, None
    for t, v in zip(times, values, strict=True):
        if v > limit:
            start = t if start is None else start
            longest = max(longest, t - start)
        else:
            start = None
    return longest


def _steal_series(rows: list[dict[str, Any]]) -> list[float | None]:
    """Steal in percent of all CPU time over each sampling interval (None for the first)."""
    out: list[float | None] = [None]
    for a, b in zip(rows, rows[1:], strict=False):
        total = b["cpu_total_s"] - a["cpu_total_s"]
        out.append(100.0 * (b["cpu_steal_s"] - a["cpu_steal_s"]) / total if total > 0 else None)
    return out


class Sampler:
    """Context manager: samples host and GPUs every `interval_s` on a daemon thread."""

    def __init__(self, host: HostReader, nvml: NvmlReader | None, interval_s: float = 0.1):
        self.host, self.nvml, self.interval_s = host, nvml, interval_s
        self.times: list[float] = []
        self.host_rows: list[dict[str, Any]] = []
        self.gpu_rows: list[dict[str, dict[str, Any]]] = []  # per sample: label -> row
        self._devices = {d.label: d for d in nvml.devices} if nvml else {}
        self.errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rapl: tuple[list[int] | None, list[int] | None] = (None, None)

    def __enter__(self) -> Sampler:
        self._t0 = time.monotonic()
        self._rapl = (self.host.rapl.read_uj(), None)
        self._take()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._take()
        self._rapl = (self._rapl[0], self.host.rapl.read_uj())
        self.duration_s = time.monotonic() - self._t0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        try:
            n = len(self.times)
            host = self.host.sample()  # first: the GPU processes are judged against its tree
            gpus = self.nvml.sample(with_processes=n % PROCESS_EVERY == 0) if self.nvml else {}
            for row in gpus.values():
                if row.get("processes") is not None:
                    row["others"] = gpu_processes.others(row["processes"],
                                                         self.host.tree_pids())
            self.host_rows.append(host)
            self.gpu_rows.append(gpus)
            self.times.append(time.monotonic() - self._t0)
        except Exception as e:  # telemetry never ends a run
            self.errors.setdefault("sampler", f"unavailable: {type(e).__name__}: {e}")

    # -- summary --------------------------------------------------------------------------
    def summary(self, iterations: int | None = None, max_points: int = MAX_POINTS) -> dict:
        h = self.host_rows
        host = {
            "cpu_util_mean_pct": _stat([r["cpu_util_pct"] for r in h[1:]], np.mean),
            "cpu_util_max_pct": _stat([r["cpu_util_pct"] for r in h[1:]], np.max),
            "other_cpu_mean_pct": _stat([r["other_cpu_pct"] for r in h[1:]], np.mean),
            "rss_max_bytes": int(_stat([r["rss_bytes"] for r in h], np.max) or 0),
            "load1_max": _stat([r["load1"] for r in h], np.max),
        }
        freqs = [f for r in h for f in r.get("cpu_freq_mhz", [])]
        if freqs:
            host.update(cpu_freq_mhz_min=min(freqs), cpu_freq_mhz_max=max(freqs))
        start, end = self._rapl
        if start and end:
            host["energy_j"] = self.host.rapl.delta_j(start, end)
        steal, steal_cpu_s = _steal_pct(h)
        if "cpu_steal" not in self.host.unavailable:
            host["cpu_steal_pct"] = steal
        invalid: list[str] = []
        judged = len(h) - 1 >= HOST_BUSY_MIN_SAMPLES
        busy_s = _longest_span_s(self.times[1:], [r["other_cpu_pct"] for r in h[1:]],
                                 HOST_BUSY_PCT)
        host["other_cpu_busy_span_s"] = round(busy_s, 2)
        if judged and (host["other_cpu_mean_pct"] or 0) > HOST_BUSY_PCT:
            invalid.append(f"host busy: other processes used {host['other_cpu_mean_pct']:.0f}% "
                           f"of a core on average")
        elif judged and busy_s >= HOST_BUSY_SPAN_S:
            invalid.append(f"host busy: other processes used more than {HOST_BUSY_PCT:.0f}% of "
                           f"a core for {busy_s:.1f} s in a row")
        if steal is not None and steal_cpu_s >= STEAL_MIN_CPU_S and steal > STEAL_PCT:
            invalid.append(f"heavy steal: the hypervisor took {steal:.0f}% of CPU time "
                           f"(limit {STEAL_PCT:.0f}%)")
        series: dict[str, list] = {
            "t_s": _series(self.times, max_points),
            "cpu_util_pct": _series([r["cpu_util_pct"] for r in h], max_points),
            "other_cpu_pct": _series([r["other_cpu_pct"] for r in h], max_points),
            "rss_bytes": _series([r["rss_bytes"] for r in h], max_points),
        }
        if h and all("cpu_steal_s" in r for r in h):
            series["cpu_steal_pct"] = _series(_steal_series(h), max_points)
        gpus, context = [], []
        for label in dict.fromkeys(k for rows in self.gpu_rows for k in rows):
            gpu, gpu_series = self._gpu_summary(label, iterations, invalid, context)
            gpus.append(gpu)
            series.update({f"{label}.{k}": _series(v, max_points) for k, v in gpu_series.items()})
        unavailable = {**self.host.unavailable, **self.errors}
        if self.nvml is not None:
            if self.nvml.error:
                unavailable["nvml"] = self.nvml.error
            unavailable.update(self.nvml.unavailable)
            for label in sorted(self.nvml.lost):
                unavailable[label] = "unavailable: GPU lost during the case"
        return {
            "interval_s": self.interval_s,
            "duration_s": round(getattr(self, "duration_s", 0.0), 3),
            "samples": len(self.times),
            "iterations": iterations,
            "host": host,
            "gpus": gpus,
            "unavailable": unavailable,
            "valid": not invalid,
            "invalid_reasons": invalid,
            "context": context,
            "series": series,
        }

    def _gpu_summary(self, label: str, iterations: int | None, invalid: list[str],
                     context: list[str]):
        rows = [r[label] for r in self.gpu_rows if label in r]
        times = [t for t, r in zip(self.times, self.gpu_rows, strict=True) if label in r]
        col = lambda k: [r.get(k) for r in rows]  # noqa: E731
        energy = [e for e in col("energy_j") if e is not None]
        power = col("power_w")
        if len(energy) >= 2:
            energy_j, method = energy[-1] - energy[0], "energy counter"
        elif sum(p is not None for p in power) >= 2:
            pts = [(t, p) for t, p in zip(times, power, strict=True) if p is not None]
            energy_j = float(_trapezoid([p for _, p in pts], [t for t, _ in pts]))
            method = "integrated power samples"
        else:
            energy_j, method = None, "unavailable"
        read = [r["clocks_event_reasons"] for r in rows if r.get("clocks_event_reasons")
                is not None]
        seen = sorted({n for names in read for n in names})
        others = list(dict.fromkeys(o for r in rows for o in r.get("others") or ()))
        gpu = {
            "index": self._devices[label].index,
            "label": label,
            "power_w_mean": _stat(power, np.mean),
            "power_w_max": _stat(power, np.max),
            "power_instant_w_max": _stat(col("power_instant_w"), np.max),
            "energy_j": energy_j,
            "energy_method": method,
            "energy_per_iteration_j": (energy_j / iterations
                                       if energy_j is not None and iterations else None),
            "temperature_max_c": _stat(col("temperature_c"), np.max),
            "sm_clock_mhz_min": _stat(col("sm_clock_mhz"), np.min),
            "sm_clock_mhz_max": _stat(col("sm_clock_mhz"), np.max),
            "mem_clock_mhz_min": _stat(col("mem_clock_mhz"), np.min),
            "mem_clock_mhz_max": _stat(col("mem_clock_mhz"), np.max),
            "utilization_mean_pct": _stat(col("utilization_pct"), np.mean),
            "memory_used_max_bytes": _stat(col("memory_used_bytes"), np.max),
            "clocks_event_reasons_seen": seen,
            # the share of readings in which each reason was set: a power cap held through
            # a heavy case reads near 1
            "clocks_event_share": {n: round(sum(n in names for names in read) / len(read), 3)
                                   for n in seen},
            "other_processes": others,
        }
        if slowed := reasons_of_kind(seen, ReasonKind.SLOWDOWN):
            invalid.append(f"{label} throttled: {', '.join(slowed)}")
        if limits := reasons_of_kind(seen, ReasonKind.LIMIT):
            share = ", ".join(f"{n} in {gpu['clocks_event_share'][n]:.0%}" for n in limits)
            context.append(f"{label} at a clock limit ({share} of readings; SM clock "
                           f"{_whole(gpu['sm_clock_mhz_min'])}-{_whole(gpu['sm_clock_mhz_max'])}"
                           f" MHz, power up to {_whole(gpu['power_w_max'])} W): its working "
                           "state under load, recorded, not contention")
        if others:
            invalid.append(f"{label} in use by another process ({'; '.join(others)})")
        series = {k: col(k) for k in ("power_w", "sm_clock_mhz", "temperature_c",
                                      "utilization_pct", "memory_used_bytes")}
        return gpu, series


def _whole(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f}"


def limit_change(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str | None:
    """Where two sides of a comparison ran their GPUs under different clock limits (a power
    cap on one side only, say): what differs, or None. Their figures were measured at
    different clocks, so a change between them is not the build's alone."""
    def limits(tel: dict[str, Any] | None) -> dict[str, set[str]]:
        return {g.get("label", f"gpu{g.get('index')}"):
                set(reasons_of_kind(g.get("clocks_event_reasons_seen") or [], ReasonKind.LIMIT))
                for g in (tel or {}).get("gpus") or ()}

    la, lb = limits(a), limits(b)
    diffs = []
    for label in sorted(la.keys() & lb.keys()):
        if only_a := sorted(la[label] - lb[label]):
            diffs.append(f"{label} {', '.join(only_a)} in the baseline only")
        if only_b := sorted(lb[label] - la[label]):
            diffs.append(f"{label} {', '.join(only_b)} in the candidate only")
    return ("GPU clock limits differ between the sides: " + "; ".join(diffs)) if diffs else None
