"""Records know the checks that judged them: each case's `CheckVersion` moves with the code
that judges it, and a record of an older version is stale wherever it is read.

tests/data/check-digests.json holds, per case, its check version and a digest of its judging
code (`harness.cases.judging_code`). When that code changes, either what it judges changed
(declare the next `CheckVersion`, with what changed) or it did not (a refactor); either way
the digests are written again with

    python tests/test_check_versions.py --update
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path

import pytest

import suites
from harness import registry
from harness.cases import UNVERSIONED, CheckVersion, judging_code, stale_reason
from harness.releases import history

DIGESTS = Path(__file__).parent / "data" / "check-digests.json"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def current() -> dict[str, dict]:
    return {c.id: {"version": c.check.number, "digest": digest(judging_code(c))}
            for s in registry.all_suites() for c in s.cases}


def test_a_case_whose_judging_code_changed_declares_a_new_check_version_or_says_it_did_not():
    stored = json.loads(DIGESTS.read_text())
    problems = []
    for case_id, now in current().items():
        was = stored.get(case_id)
        if was is None:
            problems.append(f"{case_id}: not in {DIGESTS.name}")
        elif now["version"] < was["version"]:
            problems.append(f"{case_id}: check version went back from {was['version']} to "
                            f"{now['version']}")
        elif now["digest"] != was["digest"] and now["version"] == was["version"]:
            problems.append(f"{case_id}: its judging code changed under check version "
                            f"{now['version']}")
    assert not problems, ("; ".join(problems) + ". Where what a case judges changed, declare "
                          "its next CheckVersion (with what changed); then write the digests "
                          "again: python tests/test_check_versions.py --update")


def test_the_judging_code_reaches_the_helpers_a_case_calls_in_its_suite(tmp_path, monkeypatch):
    """A change of a helper the case calls (through its module, as `truth.bytes_of`) changes
    the digest: a control added to a helper is a change of the check."""
    pkg = tmp_path / "zz_checks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "truth.py").write_text("def expected(n):\n    return 4 * n\n")
    (pkg / "cases.py").write_text(
        "from harness.cases import Suite\nfrom suites.zz_checks import truth\n"
        "suite = Suite('zz_checks', 'f', 'beta', 's')\n"
        "@suite.conformance()\ndef bytes_exact(ctx):\n"
        "    ctx.check('exact', truth.expected(3) == 12)\n")
    monkeypatch.setattr(suites, "__path__", [*suites.__path__, str(tmp_path)])
    cases = importlib.import_module("suites.zz_checks.cases")
    try:
        before = judging_code(cases.suite.case("bytes_exact"))
        assert "def expected" in before
        (pkg / "truth.py").write_text("def expected(n):\n    return 4 * n - 4  # a control\n")
        importlib.reload(sys.modules["suites.zz_checks.truth"])
        importlib.reload(cases)
        assert digest(judging_code(cases.suite.case("bytes_exact"))) != digest(before)
    finally:
        for name in [m for m in sys.modules if m.startswith("suites.zz_checks")]:
            del sys.modules[name]


def test_a_record_of_older_checks_is_stale_and_says_why():
    case = registry.find_case("profiler", "known_allocations")
    newer = type(case)(**{**case.__dict__, "check": CheckVersion(case.check.number + 1,
                                                                 "a control added")})
    assert stale_reason(case, case.check.number) is None
    assert "a control added" in stale_reason(newer, case.check.number)
    assert stale_reason(case, None) == UNVERSIONED
    assert stale_reason(None, 1) is None  # a case gone from the suites: nothing to hold


def test_a_history_record_names_its_stale_cases():
    rec = {"cases": {
        "profiler/known_allocations[cpu default]": {"suite": "profiler", "outcome": "fail"},
        "amp/grad_scaler[cpu default]": {
            "suite": "amp", "outcome": "pass",
            "check_version": registry.find_case("amp", "grad_scaler").check.number},
        "amp/no_such_case[cpu default]": {"suite": "amp", "outcome": "pass"}}}
    assert history.stale_cases(rec) == {
        "profiler/known_allocations[cpu default]": UNVERSIONED}


def test_check_versions_are_whole_numbers_from_one():
    with pytest.raises(ValueError):
        CheckVersion(0)


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(__doc__)
    DIGESTS.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")
