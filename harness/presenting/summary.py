"""Plain-text views of a run record, for the terminal (`release-bench run` and `show`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from harness.cases import metric_id, param_id
from harness.formats import fmt_rate, fmt_value
from harness.records import Metric, Result, Run
from harness.records import Outcome as O


def fmt_metric(m: Metric) -> str:
    """A metric's value with its confidence interval where the record has one:
    '1.32x [1.25, 1.40]', '360 us [352 us, 371 us]'; a rate of trials as '2/20 [1.2%, 32%]'."""
    low, high = m.interval
    has_ci = low is not None and high is not None
    if m.kind == "rate" and m.value is not None and has_ci:
        return fmt_rate(round(m.value * m.count), m.count, low, high)
    text = fmt_value(m.value, m.unit)
    if has_ci:
        text += f" [{fmt_value(low, m.unit)}, {fmt_value(high, m.unit)}]"
    return text


def headline_first(metrics: Sequence[Metric]) -> list[Metric]:
    """Metrics with the headline ones first (a stable sort keeps the recorded order)."""
    return sorted(metrics, key=lambda m: not m.headline)


def key_figures(entry: Result, limit: int = 4) -> str:
    """The checks passed and the first `limit` metrics, headline ones first, in one line."""
    metrics = headline_first(entry.metrics)
    # metric_id, not str(m.key): the labels in the order the case recorded them
    shown = [f"{metric_id(m.name, m.labels)}={fmt_metric(m)}" for m in metrics[:limit]]
    more = len(entry.metrics) - limit
    if more > 0:
        shown.append(f"+{more} more")
    if entry.checks:
        passed = sum(c.passed for c in entry.checks)
        shown.insert(0, f"checks {passed}/{len(entry.checks)}")
    return ", ".join(shown)


def _rows_to_text(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def table_text(rows: list[dict[str, Any]], limit: int = 40) -> str:
    """A list of dicts as an aligned text table (first `limit` rows)."""
    if not rows:
        return "(empty)"
    cols = list(rows[0])
    body = [[_cell(r.get(c)) for c in cols] for r in rows[:limit]]
    text = _rows_to_text([cols, *body])
    if len(rows) > limit:
        text += f"\n... {len(rows) - limit} more rows in the run file"
    return text


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else str(v)


EXPECTATION_STATUSES = ("expected-fail", "unexpected-fail", "unexpected-pass")


def shown_outcome(e: Result) -> str:
    """A result's outcome as a person should read it: its status under the expectations
    where the run was judged by them (`expected-fail`, `UNEXPECTED-FAIL`, ...), else the
    outcome, failures in capitals."""
    status = e.status
    if status == "expected-fail":
        return status
    return status.upper() if status in ("fail", "error", "unexpected-fail",
                                        "unexpected-pass") else status


def _expected_note(e: Result) -> str:
    """The issue an expected failure is tracked by, or why a result was unexpected."""
    exp = e.expected or {}
    if exp.get("status") == "expected-fail":
        return f"expected: {exp.get('issue', '')}"
    return exp.get("why", "") if exp.get("status") in ("unexpected-fail",
                                                         "unexpected-pass") else ""


def _crossed(placement: dict[str, str]) -> str:
    """The hosts a case's ranks ran on, e.g. "ranks 0,2 on node 0; 1 on node 1"."""
    by_node: dict[str, list[str]] = {}
    for rank, host in placement.items():
        by_node.setdefault(host.split(" (")[0], []).append(rank)
    return "ranks " + "; ".join(f"{','.join(r)} on {n}" for n, r in by_node.items())


def run_summary(run: Run, tables: bool = True) -> str:
    torch_info = run.machine.get("torch", {})
    lines = [
        f"run {run.started} profile={run.profile} machine={run.machine_name} "
        f"torch={torch_info.get('version')} finished={run.finished or 'no (interrupted)'}",
        *[n for n in run.notes if n.startswith("interrupted by")],
        *[f"host node {h['node']}: {h['hostname']} {h['addr']} ({h['iface']}), "
          f"{h['machine'].get('name', '?')}" for h in run.hosts or []],
    ]
    rows = [["outcome", "case", "device", "params", "figures", "reason / flags"]]
    for e in run.results:
        flags = []
        if not e.valid and e.outcome != "invalid":  # else its reason says so
            flags.append("INVALID: " + "; ".join(e.telemetry.get("invalid_reasons", [])))
        flags += [_crossed(p) for p in e.placement or []]
        rows.append([
            shown_outcome(e),
            e.case_id,
            e.device,
            param_id(e.params),
            key_figures(e),
            "; ".join(filter(None, [_expected_note(e), e.reason, *flags])),
        ])
    lines.append(_rows_to_text(rows))
    counts = Counter(e.outcome for e in run.results)
    lines.append("totals: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in
                                        (O.PASS, O.FAIL, O.ERROR, O.SKIP, O.NA, O.INVALID,
                                         O.INCONCLUSIVE)))
    if judged := run.expectations:
        lines.append(f"expectations ({judged['source']}): " + ", ".join(
            f"{n} {s}" for s, n in judged["counts"].items() if n and s in EXPECTATION_STATUSES)
            + ("" if any(judged["counts"].get(s) for s in EXPECTATION_STATUSES) else "none apply"))
    if counts.get("inconclusive"):
        lines.append(f"{counts['inconclusive']} inconclusive: a check's interval reached across "
                     "its limit after every further measurement; listed, not failures")
    if counts.get("invalid"):
        lines.append(f"{counts['invalid']} invalid: only performance checks failed, on a machine "
                     "telemetry found contended; not failures, rerun them on a quiet machine")
    if tables:
        for e in run.results:
            for name in e.shown_tables:
                lines.append(f"\n{e.case_id} [{e.device} {param_id(e.params)}]: {name}")
                lines.append(table_text(e.tables[name]))
    return "\n".join(lines)
