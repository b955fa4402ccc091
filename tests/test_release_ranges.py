"""The releases the cases declare for what they exercise (`Since`), checked against the
release history's records, which are the evidence: every `n/a` the history recorded is a
declared absence, and every declared absence the history covers was recorded `n/a`, with the
API the declaration names. A declaration that claims too much or too little fails here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness import registry
from harness.cases import declared_absence
from harness.records import result_key

HISTORY = Path(__file__).resolve().parent.parent / "results" / "history"


def _records() -> list[dict]:
    """Every committed record, of every machine's history: a declaration holds on each."""
    return [json.loads(p.read_text()) for p in sorted(HISTORY.glob("*/torch-*.json"))]


def _runs() -> dict[str, tuple]:
    """Each CPU run of a conformance case the history records, by its key: (case, params)."""
    out = {}
    for suite in registry.all_suites():
        for case in suite.cases:
            if case.kind == "conformance" and "cpu" in case.devices:
                for params in case.param_sets("quick", "cpu"):
                    out[result_key(suite.name, case.name, "cpu", params)] = (case, params)
    return out


RECORDS = _records()


def test_the_history_covers_the_releases_the_declarations_name():
    releases = {r["release"] for r in RECORDS}
    declared = {s.release for case, _ in _runs().values() for s in case.since}
    assert declared, "no case declares a first release"
    for release in declared:  # the first release that has it, and the one before, recorded
        assert release in releases, release


def mismatches(record: dict, runs: dict[str, tuple]) -> list[str]:
    """Where one release's record and the declarations disagree."""
    out = []
    for key, entry in record["cases"].items():
        if key not in runs:
            continue  # a case recorded then, since renamed or gone
        case, params = runs[key]
        gap = declared_absence(case.since, "cpu", params, record["release"])
        if entry["outcome"] == "n/a" and gap is None:
            out.append(f"{key} is n/a in {record['release']}, undeclared: {entry['reason']}")
        elif entry["outcome"] == "n/a" and not entry["reason"].startswith(
                f"{gap.what}: not in torch"):
            out.append(f"{key}: declared absent {gap.what}, recorded {entry['reason']}")
        elif entry["outcome"] != "n/a" and gap is not None:
            out.append(f"{key} is declared absent from {record['release']} ({gap.what}, "
                       f"from {gap.release}) but was {entry['outcome']}")
    return out


@pytest.mark.parametrize("record", RECORDS,
                         ids=[f"{r['machine']['name']}-{r['release']}" for r in RECORDS])
def test_n_a_in_the_history_exactly_where_a_case_declares_its_api_absent(record):
    assert mismatches(record, _runs()) == []


@pytest.mark.parametrize(("release", "wrong"), [("2.4.0", "2.3.0"), ("2.2.0", "2.2.2")])
def test_a_declaration_one_release_off_disagrees_with_the_history(release, wrong):
    runs = _runs()
    key = "amp/grad_scaler[cpu default]"
    case, params = runs[key]
    shifted = dataclasses.replace(case, since=tuple(
        dataclasses.replace(s, release=release) for s in case.since))
    record = next(r for r in RECORDS if r["release"] == wrong
                  and r["machine"]["name"] == "amd-epyc-2c")
    assert mismatches(record, {**runs, key: (shifted, params)}) != []
