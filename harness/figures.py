"""What a suite's report figures are made of, and how they read a run.

A suite declares its figures beside its metrics, in `suites/<name>/figures.py`:

    @suite.figure
    def my_figure(entries: list[dict]) -> Figure | None:
        ...                       # the run's entries of this suite, as in the record
        return plot("What the figure shows", fig)

A figure is a matplotlib plot (inlined in the page as SVG) or a table; None when the run holds
nothing it draws. Metrics are read by name and labels (`by_label`), with the interval the
record keeps for them (`error_bars`), never by parsing metric names. The report
(`harness.report`) knows no suite and no metric: it lays out what the figures return.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import matplotlib

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


def metrics(entry: dict, name: str) -> list[dict]:
    return [m for m in entry["metrics"] if m["name"] == name and m.get("value") is not None]


def runs_of(entries: list[dict], case: str, name: str) -> list[dict]:
    """The entries of case `case` that recorded the metric `name`."""
    return [e for e in entries if e["case"] == case and metrics(e, name)]


def label_values(entry: dict, name: str, label: str) -> list[Any]:
    """The distinct values of label `label` over the entry's metrics called `name`, sorted."""
    return sorted({(m.get("labels") or {}).get(label) for m in metrics(entry, name)} - {None})


def value(entry: dict, name: str) -> float | None:
    """The value of the entry's metric `name` (one without labels), or None."""
    found = metrics(entry, name)
    return found[0]["value"] if found else None


def by_label(entry: dict, name: str, label: str, **fixed: Any) -> dict[Any, dict]:
    """{value of label `label`: metric} for the metrics called `name` whose other labels
    include `fixed`. Version-1 records packed the label into the name (`name[label=value]`
    or `name[value]`); those are read too, their values as strings."""
    out: dict[Any, dict] = {}
    for m in entry["metrics"]:
        if m.get("value") is None:
            continue
        labels = m.get("labels") or {}
        if m["name"] == name and label in labels:
            if all(labels.get(k) == v for k, v in fixed.items()):
                out[labels[label]] = m
        elif not fixed and (hit := re.fullmatch(
                rf"{re.escape(name)}\[(?:{re.escape(label)}=)?(.+)\]", m["name"])):
            out[hit.group(1)] = m
    return out


def interval(metric: dict) -> tuple[float, float] | None:
    """The metric's confidence interval, where the record has one."""
    ci = (metric.get("stats") or {}).get("ci")
    if not ci or ci[0] is None or ci[1] is None:
        return None
    return float(ci[0]), float(ci[1])


def error_bars(ms: list[dict], scale: float = 1.0) -> list[list[float]]:
    """matplotlib's yerr/xerr ([below], [above]) for metrics `ms`; 0 where no interval."""
    below, above = [], []
    for m in ms:
        ci = interval(m)
        v = m["value"]
        below.append(max(0.0, (v - ci[0]) * scale) if ci else 0.0)
        above.append(max(0.0, (ci[1] - v) * scale) if ci else 0.0)
    return [below, above]


def with_interval(metric: dict | None, scale: float = 1.0) -> str:
    """"1.18 [1.09, 1.27]": the value and its interval, to SIGNIFICANT digits."""
    if metric is None:
        return ""
    text = sig(metric["value"] * scale)
    if ci := interval(metric):
        text += f" [{sig(ci[0] * scale)}, {sig(ci[1] * scale)}]"
    return text


def line(ax: Any, entry: dict, name: str, x: str, *, scale: float = 1.0,
         fixed: dict[str, Any] | None = None, **style: Any) -> None:
    """Draw the metrics called `name` against their numeric label `x` (the other labels as in
    `fixed`), times `scale`, with their intervals as error bars."""
    by_x = {float(k): m for k, m in by_label(entry, name, x, **(fixed or {})).items()}
    xs = sorted(by_x)
    ax.errorbar(xs, [by_x[k]["value"] * scale for k in xs],
                yerr=error_bars([by_x[k] for k in xs], scale=scale), **style)


def lines(ax: Any, entry: dict, name: str, x: str, by: str,
          style: Callable[[Any], dict[str, Any]], scale: float = 1.0) -> None:
    """One `line` per value of label `by`, styled by `style(value)`."""
    for v in label_values(entry, name, by):
        line(ax, entry, name, x, scale=scale, fixed={by: v}, **style(v))


def subplots(*args: Any, **kw: Any) -> tuple[Any, Any]:
    return plt.subplots(*args, **kw)
