"""The text summary a run prints: its tables cut to a length, and its totals saying what an
inconclusive case is."""

from __future__ import annotations

from harness import records
from harness.presenting import summary


def test_a_table_is_cut_to_its_limit_and_says_how_many_rows_it_left_out():
    assert summary.table_text([]) == "(empty)"
    text = summary.table_text([{"i": i} for i in range(5)], limit=3)
    assert text.splitlines() == ["i", "0", "1", "2", "... 2 more rows in the run file"]


def test_the_totals_explain_an_inconclusive_case():
    result = records.Result.from_json({
        "suite": "s", "case": "c", "kind": "conformance", "device": "cpu", "params": {},
        "outcome": "inconclusive", "reason": "interval across the limit"})
    run = records.new_run({"name": "m", "cpu": {}, "gpus": []}, "quick").with_result(result)
    text = summary.run_summary(run)
    assert "1 inconclusive" in text
    assert "1 inconclusive: a check's interval reached across its limit" in text
