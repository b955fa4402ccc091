"""Every conformance case has a "feature off" plant: a break test that turns its release
feature off, API left in place, and shows the case then fails (each suite's test_breaks.py,
FEATURE_OFF). A case missing from those tables is a check nobody has seen fail with its
feature gone."""

from __future__ import annotations

import importlib

import pytest

from harness import registry
from harness.records import param_id


@pytest.mark.parametrize("suite", registry.all_suites(), ids=lambda s: s.name)
def test_every_conformance_case_has_a_feature_off_plant(suite):
    table = importlib.import_module(f"suites.{suite.name}.test_breaks").FEATURE_OFF
    named = {name for name, _ in table}
    for case in suite.cases:
        if case.kind != "conformance":
            continue
        assert case.name in named, f"{suite.name}/{case.name} has no feature-off plant"
        # each entry is named by the parameters it runs with: one of the case's sets, or a
        # smaller one (fewer clean_exit trials, a smaller training step)
        for (name, params_id), (_, params) in table.items():
            if name == case.name:
                assert params_id == param_id(params), (name, params_id, params)
