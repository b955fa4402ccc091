"""Each telemetry self-check, shown to fail with the telemetry it checks turned off (the
checks broken one reading at a time are in test_telemetry_suite.py)."""

from __future__ import annotations

import pytest

from suites.telemetry import cases

# What turns each case's feature off (tests/planted/feature_off.py). Each must then fail.
FEATURE_OFF = {
    ("host_readings", "default"): ("host_telemetry", {}),
    ("nvml_readings", "default"): ("nvml", {}),
}


@pytest.mark.parametrize(("name", "params_id", "device"),
                         [("host_readings", "default", "cpu"),
                          pytest.param("nvml_readings", "default", "cuda",
                                       marks=pytest.mark.gpu)])
def test_each_case_fails_with_its_feature_off(feature_off, name, params_id, device):
    feature_off.assert_fails(cases.suite, FEATURE_OFF, name, params_id, device)
