"""Per-call latency samples, interleaved across paths, and their percentiles.

Percentiles need one time per call, which torch.utils.benchmark does not keep (it times
blocks of calls), so the latency sweep records `perf_counter` around each call here; the
percentiles themselves are numpy's. Throughput figures (calls per second) time whole
statements with harness.running.timing like every other suite.

Paths are sampled side by side in short blocks, in a new random order each round, so that a
noisy neighbour slows all of them alike and no path always follows the same other path (what
ran just before changes a block's latency here: TensorPipe calls right after a block of Gloo
ping-pongs are some 15% slower for the whole block).

The whole measurement runs in several RPC sessions, each a fresh init_rpc (and Gloo group and
TCP socket) between the same two processes, and a figure pools them. A path's latency level
is drawn anew each time its connections are set up, not once per process: here one pair of
processes, re-joining six times, gave TensorPipe p50s of 231 to 316 us (sd 13% of log), as
much as separate pairs of processes do, while the means of six sessions of separate pairs
varied by 4.4%. Pooling sessions is what makes a round's figure repeatable (Kalibera and
Jones: replicate at the level where the variance arises); a re-join costs about 0.1 s, a
fresh pair of processes several seconds. A figure's stability is read off as the spread between
its sessions' medians.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np

# A sampler takes a number of calls and returns the seconds each call took.
Sampler = Callable[[int], list[float]]


@dataclass(frozen=True)
class Plan:
    """How one launch samples every path; each profile's is declared with the round_trip
    case (cases.py)."""

    seconds: float  # per path and session
    min_samples: int  # per path and session
    max_samples: int
    rounds: int  # per session; a round is one block of calls of each path
    sessions: int = 2  # fresh RPC sessions, each measuring every path
    warmup_s: float = 0.05


def per_call(fn: Callable[[], object]) -> Sampler:
    """The suite's sampler: time each call of a statement."""

    def sample(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    return sample


def _warm(sampler: Sampler, seconds: float) -> float:
    """Call until `seconds` have passed (at least 5 calls); the median call time."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < seconds:
        times += sampler(1)
    return float(np.median(times))


def sample_interleaved(samplers: Mapping[str, Sampler], plan: Plan, seed: int = 0,
                       turn: Callable[[], AbstractContextManager] = nullcontext
                       ) -> dict[str, np.ndarray]:
    """Per-call seconds of each path in one session; each round samples every path once, in
    a random order (seeded: each session its own), inside a `turn()` (a burst of a round in
    turns, harness.running.turns; nothing otherwise)."""
    names = list(samplers)
    rng = np.random.default_rng(seed)
    wanted = {}
    for name, sampler in samplers.items():
        estimate = _warm(sampler, plan.warmup_s)
        wanted[name] = int(np.clip(plan.seconds / max(estimate, 1e-9), plan.min_samples,
                                   plan.max_samples))
    # Fewer rounds when some path wants fewer calls than there are rounds (large payloads),
    # so that one call per round does not multiply its count.
    rounds = max(1, min(plan.rounds, *wanted.values()))
    per_round = {name: -(-n // rounds) for name, n in wanted.items()}
    got: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        with turn():
            for i in rng.permutation(len(names)):
                got[names[i]] += samplers[names[i]](per_round[names[i]])
    return {name: np.asarray(v) for name, v in got.items()}


def summarize(sessions: list[np.ndarray]) -> dict[str, float | int | list[float]]:
    """Percentiles of all sessions together, and each session's median (seconds)."""
    samples = np.concatenate(sessions)
    p25, p50, p75, p90, p99 = np.percentile(samples, [25, 50, 75, 90, 99])
    # each session's p50, p90 and p99 (a row per session; one percentile call each)
    per_session = np.array([np.percentile(p, [50, 90, 99]) for p in sessions])
    return {
        "session_p90": per_session[:, 1].tolist(),
        "session_p99": per_session[:, 2].tolist(),
        "p50": float(p50), "p90": float(p90), "p99": float(p99), "iqr": float(p75 - p25),
        "mean": float(samples.mean()), "min": float(samples.min()), "n": int(samples.size),
        "session_p50": per_session[:, 0].tolist(),
        # how far apart the sessions' medians are, as a share of the smallest
        "session_spread": float(per_session[:, 0].max() / per_session[:, 0].min() - 1.0),
        "samples": samples.tolist(),  # every call, in time order per session
    }
