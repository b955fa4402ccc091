"""`release-bench compare BASELINE CANDIDATE`: what changed between two runs, and whether
any change is a regression.

Results are matched by (suite, case, device, params) and metrics by name. A metric regresses
when it moves past its kind's threshold in its bad direction AND, where both runs recorded
statistics, the change is significant: the two interquartile ranges do not overlap. Defaults
follow PyTorch's HUD: ratios (speedups, memory savings) and throughputs must stay at 0.95x of
the baseline or above, latencies and times at 1.15x or below. A conformance case that
passed and now fails is a regression whatever its figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.cases import param_id

# kind -> tolerated relative change in the bad direction: 0.05 means a speedup may fall to
# 0.95x of the baseline, 0.15 that a latency may grow to 1.15x.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "ratio": 0.05,
    "throughput": 0.05,
    "time": 0.15,
    "latency": 0.15,
    "bytes": 0.10,
    "overhead": 0.15,
    "error": 0.15,
}
# Absolute slack for kinds whose baseline may be near zero or negative (an error of 0 B, an
# overhead of -0.3%), where a relative change means nothing.
ABSOLUTE_SLACK = {"error": 1e-9, "overhead": 1.0}


@dataclass
class Change:
    key: str  # suite/case[device params]
    metric: str
    unit: str
    kind: str
    baseline: float | None
    candidate: float | None
    factor: float | None  # candidate / baseline
    significant: bool | None  # None when no statistics were recorded
    verdict: str  # "regression", "improvement", "noise", "unchanged", "new", "gone"

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _key(e: dict) -> str:
    return f"{e['suite']}/{e['case']}[{e.get('device', '')} {param_id(e['params'])}]"


def _iqr_range(m: dict) -> tuple[float, float] | None:
    s = m.get("stats") or {}
    if "median" not in s or "iqr" not in s:
        return None
    return s["median"] - s["iqr"] / 2, s["median"] + s["iqr"] / 2


def _significant(a: dict, b: dict) -> bool | None:
    ra, rb = _iqr_range(a), _iqr_range(b)
    if ra is None or rb is None:
        return None
    return ra[1] < rb[0] or rb[1] < ra[0]


def compare_metric(key: str, a: dict, b: dict, thresholds: dict[str, float]) -> Change:
    kind, better = b.get("kind", "value"), b.get("better")
    va, vb = a["value"], b["value"]
    factor = vb / va if va not in (None, 0) and vb is not None else None
    sig = _significant(a, b)
    verdict = "unchanged"
    tolerance = thresholds.get(kind)
    if better in ("higher", "lower") and tolerance is not None and None not in (va, vb):
        allowed = max(tolerance * abs(va), ABSOLUTE_SLACK.get(kind, 0.0))
        gain = (vb - va) if better == "higher" else (va - vb)  # > 0 means better
        if gain < -allowed:
            verdict = "regression" if sig is not False else "noise"
        elif gain > allowed:
            verdict = "improvement" if sig is not False else "noise"
    return Change(key, b["name"], b["unit"], kind, va, vb, factor, sig, verdict)


def compare_runs(base: dict, cand: dict,
                 thresholds: dict[str, float] | None = None) -> list[Change]:
    th = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    base_by_key = {_key(e): e for e in base["results"]}
    changes: list[Change] = []
    for e in cand["results"]:
        key = _key(e)
        old = base_by_key.pop(key, None)
        if old is None:
            changes.append(Change(key, "(case)", "", "case", None, None, None, None, "new"))
            continue
        if old["outcome"] == "pass" and e["outcome"] in ("fail", "error"):
            changes.append(Change(key, "(outcome)", "", "conformance", None, None, None, None,
                                  "regression"))
        old_metrics = {m["name"]: m for m in old["metrics"]}
        for m in e["metrics"]:
            if m["name"] in old_metrics:
                changes.append(compare_metric(key, old_metrics[m["name"]], m, th))
    changes.extend(Change(k, "(case)", "", "case", None, None, None, None, "gone")
                   for k in base_by_key)
    return changes


def changes_table(changes: list[Change], show_all: bool = False) -> list[dict[str, Any]]:
    order = {"regression": 0, "improvement": 1, "noise": 2, "new": 3, "gone": 4, "unchanged": 5}
    rows = []
    for c in sorted(changes, key=lambda c: (order[c.verdict], c.key, c.metric)):
        if not show_all and c.verdict == "unchanged":
            continue
        rows.append({
            "verdict": c.verdict, "case": c.key, "metric": c.metric, "kind": c.kind,
            "baseline": c.baseline, "candidate": c.candidate,
            "change": "" if c.factor is None else f"{c.factor:.3f}x",
            "significant": {True: "yes", False: "no (IQRs overlap)", None: "n/a"}[c.significant],
        })
    return rows
