"""What a suite's report figures are made of, and how they read a run.

A suite declares its figures beside its metrics, in `suites/<name>/figures.py`:

    @suite.figure
    def my_figure(entries: list[Result]) -> Figure | None:
        ...                       # the run's results of this suite (harness.records.Result)
        return plot("What the figure shows", fig)

A figure is a matplotlib plot (inlined in the page as SVG) or a table; None when the run holds
nothing it draws. Metrics are read by name and labels (`by_label`), with the interval the
record keeps for them (`error_bars`), never by parsing metric names. The report
(`harness.presenting.report`) knows no suite and no metric: it lays out what the figures return.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import matplotlib

from harness.records import Metric, Result

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "figure.dpi": 96})

SIGNIFICANT = 3  # digits a number carries in a figure's table or label


@dataclass
class Figure:
    title: str
    svg: str = ""  # a plot, as an inline SVG element
    rows: list[dict[str, Any]] = field(default_factory=list)  # or a table

    @property
    def empty(self) -> bool:
        return not self.svg and not self.rows


def plot(title: str, fig: Any) -> Figure:
    """A matplotlib figure as a report figure (the figure is closed)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return Figure(title, svg=text[text.index("<svg"):])  # the page is HTML: no XML prologue


def table(title: str, rows: list[dict[str, Any]]) -> Figure:
    """Rows as a report table, numbers to SIGNIFICANT digits."""
    return Figure(title, rows=[{k: sig(v) for k, v in r.items()} for r in rows])


def sig(value: Any, digits: int = SIGNIFICANT) -> Any:
    """A float to `digits` significant digits (other values as they are)."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.{digits}g}"
    return value


def metrics(entry: Result, name: str) -> list[Metric]:
    return [m for m in entry.metrics if m.name == name and m.value is not None]


def runs_of(entries: list[Result], case: str, name: str) -> list[Result]:
    """The entries of case `case` that recorded the metric `name`."""
    return [e for e in entries if e.case == case and metrics(e, name)]


def label_values(entry: Result, name: str, label: str) -> list[Any]:
    """The distinct values of label `label` over the entry's metrics called `name`, sorted."""
    return sorted({m.labels.get(label) for m in metrics(entry, name)} - {None})


def value(entry: Result, name: str) -> float | None:
    """The value of the entry's metric `name` (one without labels), or None."""
    found = metrics(entry, name)
    return found[0].value if found else None


def by_label(entry: Result, name: str, label: str, **fixed: Any) -> dict[Any, Metric]:
    """{value of label `label`: metric} for the metrics called `name` whose other labels
    include `fixed`. Version-1 records packed the label into the name (`name[label=value]`
    or `name[value]`); those are read too, their values as strings."""
    out: dict[Any, Metric] = {}
    for m in entry.metrics:
        if m.value is None:
            continue
        if m.name == name and label in m.labels:
            if m.has_labels(fixed):
                out[m.labels[label]] = m
        elif not fixed and (hit := re.fullmatch(
                rf"{re.escape(name)}\[(?:{re.escape(label)}=)?(.+)\]", m.name)):
            out[hit.group(1)] = m
    return out


def interval(metric: Metric) -> tuple[float, float] | None:
    """The metric's confidence interval, where the record has one."""
    low, high = metric.interval
    if low is None or high is None:
        return None
    return float(low), float(high)


def error_bars(ms: list[Metric], scale: float = 1.0) -> list[list[float]]:
    """matplotlib's yerr/xerr ([below], [above]) for metrics `ms`; 0 where no interval."""
    below, above = [], []
    for m in ms:
        ci = interval(m)
        v = m.value
        below.append(max(0.0, (v - ci[0]) * scale) if ci else 0.0)
        above.append(max(0.0, (ci[1] - v) * scale) if ci else 0.0)
    return [below, above]


def with_interval(metric: Metric | None, scale: float = 1.0) -> str:
    """"1.18 [1.09, 1.27]": the value and its interval, to SIGNIFICANT digits."""
    if metric is None:
        return ""
    text = sig(metric.value * scale)
    if ci := interval(metric):
        text += f" [{sig(ci[0] * scale)}, {sig(ci[1] * scale)}]"
    return text


def line(ax: Any, entry: Result, name: str, x: str, *, scale: float = 1.0,
         fixed: dict[str, Any] | None = None, **style: Any) -> None:
    """Draw the metrics called `name` against their numeric label `x` (the other labels as in
    `fixed`), times `scale`, with their intervals as error bars."""
    by_x = {float(k): m for k, m in by_label(entry, name, x, **(fixed or {})).items()}
    xs = sorted(by_x)
    ax.errorbar(xs, [by_x[k].value * scale for k in xs],
                yerr=error_bars([by_x[k] for k in xs], scale=scale), **style)


def lines(ax: Any, entry: Result, name: str, x: str, by: str,
          style: Callable[[Any], dict[str, Any]], scale: float = 1.0) -> None:
    """One `line` per value of label `by`, styled by `style(value)`."""
    for v in label_values(entry, name, by):
        line(ax, entry, name, x, scale=scale, fixed={by: v}, **style(v))


def subplots(*args: Any, **kw: Any) -> tuple[Any, Any]:
    return plt.subplots(*args, **kw)
