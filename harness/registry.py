"""Finds the suites: every package `suites/<name>/` with a `cases` module defining `suite`."""

from __future__ import annotations

import importlib
import pkgutil

import suites
from harness.cases import Case, Suite


def suite_names() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.iter_modules(suites.__path__)
        if m.ispkg and importlib.util.find_spec(f"suites.{m.name}.cases") is not None
    )


def load(name: str) -> Suite:
    if name not in suite_names():
        raise KeyError(name)
    return importlib.import_module(f"suites.{name}.cases").suite


def all_suites() -> list[Suite]:
    return [load(n) for n in suite_names()]


def figures(name: str) -> list:
    """The report figures suite `name` declares (in `suites/<name>/figures.py`, imported only
    here: runs need no plotting)."""
    suite = load(name)
    if importlib.util.find_spec(f"suites.{name}.figures") is not None:
        importlib.import_module(f"suites.{name}.figures")
    return suite.figures


def find_case(suite: str, case: str) -> Case | None:
    """The case `suite/case` of today's suites, or None where there is none (a record of a
    case since removed or renamed)."""
    try:
        return load(suite).case(case)
    except KeyError:
        return None
