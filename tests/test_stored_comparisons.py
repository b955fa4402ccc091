"""Stored campaigns judged again: the verdicts a change of the engine must keep.

tests/data holds the rounds of two real campaigns and the verdicts they were given when they
ran: an ab of the GEMM ladder with a matmul slowdown planted on side B (6 rounds; 21
regressions, 6 inconclusive), and a matrix of two environments where a fork/wait check breaks
and a warning appears. They are judged again whenever the verdict words change
(scripts/rejudge.py counts what moved: nothing in either, neither when `worse` and `better`
came nor when a shown change reaching past the tolerance stopped being `inconclusive`). Their
folders use the layouts written before the campaign engine (an ab's rounds named by
their place in the A B B A schedule, a matrix's by round), which the engine still reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.comparing import ab
from harness.releases import matrix

DATA = Path(__file__).parent / "data"


def same_digits(doc):
    """A verdicts document with each float to 12 significant digits: the verdicts, counts and
    labels are compared exactly, the figures behind them to the last bits a CPU's SIMD path
    may change (numpy on an EPYC without AVX-512 rounds otherwise than with it)."""
    if isinstance(doc, float):
        return float(f"{doc:.12g}")
    if isinstance(doc, dict):
        return {k: same_digits(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [same_digits(v) for v in doc]
    return doc


def shown_changes_are_counted(changes) -> None:
    """No figure whose change is shown (adjusted p below 0.05) is `inconclusive` or
    `unchanged`: it counts in its direction."""
    for c in changes:
        if c["adjusted"] is not None and c["adjusted"] < 0.05:
            assert c["verdict"] in ("regression", "improvement", "worse", "better"), c


def test_a_stored_ab_is_judged_again_to_the_verdicts_it_was_given(tmp_path):
    folder = shutil.copytree(DATA / "ab-planted-gemm", tmp_path / "ab")
    stored = json.loads((folder / "comparison.json").read_text())
    res = ab.judge(folder)
    assert same_digits([c.to_json() for c in res["changes"]]) == same_digits(
        stored["changes"])
    shown_changes_are_counted(stored["changes"])
    assert stored["counts"]["regression"] == 21 and stored["counts"]["inconclusive"] == 6
    assert res["changes"] and not any(c["verdict"] == "unchanged" for c in stored["changes"])
    assert res["versions"] == {"A": "2.14.1+cu130", "B": "2.14.1+cu130"}
    # each side's merged run is written beside the rounds
    assert {"side-A.json", "side-B.json"} <= {p.name for p in folder.iterdir()}


def test_a_stored_matrix_is_judged_again_to_the_verdicts_it_was_given(tmp_path):
    folder = shutil.copytree(DATA / "matrix-planted-rate", tmp_path / "m")
    stored = json.loads((folder / "matrix.json").read_text())
    record = matrix.judge_again(folder)
    assert same_digits(record["steps"]) == same_digits(stored["steps"])
    outcomes = {label: {c: v["outcome"] for c, v in side["cases"].items()}
                for label, side in record["sides"].items()}
    assert outcomes == {label: {c: v["outcome"] for c, v in side["cases"].items()}
                        for label, side in stored["sides"].items()}
    (step,) = record["steps"]
    assert step["counts"]["regression"] == 1
    assert {c["what"] for c in step["changes"]} == {"outcome", "warning appeared",
                                                    "warning went"}
    # a side's merged run is named by its position, whatever its label
    assert {"side-0.json", "side-1.json"} <= {p.name for p in folder.iterdir()}


def test_an_ab_whose_side_has_no_rounds_is_one_error_line(tmp_path, capsys):
    from harness import cli

    folder = shutil.copytree(DATA / "ab-planted-gemm", tmp_path / "ab")
    for rounds in (folder / "rounds").glob("*-B"):
        shutil.rmtree(rounds)
    assert cli.main(["ab", "--judge", str(folder), "--calibration", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no rounds of side B in rounds/" in err, err
