"""The page tests' browser helper: which loads of an asv graph page it repeats."""

from __future__ import annotations

import browser
import pytest
from browser import ASV_FLOT_RACE, ASV_GRAPH_LOADS, PageVisit

RACE = f"uncaught: {ASV_FLOT_RACE}, height = 100"


@pytest.mark.parametrize(("loads", "then_hash", "calls", "errors"), [
    ([[RACE], []], "graph", 2, []),  # the race once: loaded again, clean
    ([[RACE]] * 5, "graph", ASV_GRAPH_LOADS, [RACE]),  # on every load: still an error
    ([[RACE, "HTTP 404: x.js"], []], "graph", 1, [RACE, "HTTP 404: x.js"]),  # anything else
    ([[RACE], []], None, 1, [RACE]),  # not a graph page opened by its address: never again
])
def test_only_asvs_flot_race_on_a_graph_page_is_loaded_again(monkeypatch, loads, then_hash,
                                                              calls, errors):
    made = []

    def load(*args):
        made.append(args)
        return PageVisit("t", "", list(loads[len(made) - 1]))

    monkeypatch.setattr(browser, "_visit_once", load)
    assert browser.visit("u", "n", then_hash=then_hash).console_errors == errors
    assert len(made) == calls
