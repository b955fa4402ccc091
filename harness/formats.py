"""How a figure is written in a reason, a table or a page: a value in a readable unit, a
share as a percentage, a rate of trials with its interval."""

from __future__ import annotations

_SCALE = {
    "s": [(1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")],
    "B": [(2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B")],
}


def fmt_value(value: float | None, unit: str) -> str:
    """A figure with a readable unit: 0.00123 s -> '1.23 ms', 3.2e6 B -> '3.05 MiB'."""
    if value is None:
        return "n/a"
    if unit in _SCALE:
        for factor, name in _SCALE[unit]:
            if abs(value) >= factor or factor == _SCALE[unit][-1][0]:
                return f"{value / factor:.3g} {name}"
    if unit == "x":
        return f"{value:.3g}x"
    return f"{value:.4g} {unit}".rstrip()


def fmt_percent(fraction: float) -> str:
    """A fraction as a percentage to two significant digits, never in exponent form:
    0.0123 -> '1.2%', 1.0 -> '100%'."""
    return f"{float(f'{100 * fraction:.2g}'):g}%"


def fmt_rate(k: int, n: int, low: float, high: float) -> str:
    """A rate of trials with its interval: '2/20 [1.2%, 32%]'."""
    return f"{k}/{n} [{fmt_percent(low)}, {fmt_percent(high)}]"
