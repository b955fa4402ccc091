"""The HTML report: built from real run records, checked in a real headless browser."""

from __future__ import annotations

import copy
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import visit
from inprocess import release_bench

from harness import records, registry
from harness.presenting import figures, report

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
# a real quick-profile run of every suite, committed as this machine kind's reference
REFERENCE = records.resolve_run(ROOT / "results" / "runs" / "amd-epyc-2c")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real run of the fork/wait suite (quick profile, telemetry on), without its clean_exit
    trials (20 fresh processes, most of the suite's time, and nothing the report tests need)."""
    out = tmp_path_factory.mktemp("runs")
    proc = subprocess.run([BIN / "release-bench", "run", "--suite", "fork_wait", "--skip",
                           "clean_exit", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    (path,) = out.rglob("*.json")
    return path


def test_report_sections_from_a_real_run(real_run, tmp_path):
    html = report.build([records.read_run(real_run)])
    for section in ("Release checklist", "TorchScript fork/wait parallelism", "beta",
                    "TorchScript fork/wait scaling", "Telemetry", "Machine", "full fingerprint"):
        assert section in html, section
    assert html.count("<svg") >= 2  # the scaling plot and at least one telemetry series
    # self-contained: nothing is fetched from elsewhere (XML namespaces are names and a link
    # to an issue is followed only when clicked)
    assert not re.search(r"""(?:src=|<link[^>]*href=)["']?(?:https?:)?//""", html)


def test_report_cli_defaults_and_bad_input(real_run, tmp_path, capsys):

    runs_dir = real_run.parent.parent
    out = release_bench(capsys, "report", "--runs-dir", str(runs_dir), "--out",
                     str(tmp_path / "r.html"))
    assert out.returncode == 0 and (tmp_path / "r.html").exists()
    empty = release_bench(capsys, "report", "--runs-dir", str(tmp_path / "none"))
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1


def test_report_page_in_a_real_browser(real_run, tmp_path):
    page_file = report.write([real_run], tmp_path / "report.html")
    page = visit(page_file.as_uri(), "report-fork-wait", count=("svg", "table", "h3"))
    assert page.console_errors == []
    assert page.title == "torch-release-bench report"
    for section in ("Release checklist", "fork_wait", "Telemetry", "Machine"):
        assert section in page.text
    assert page.counts["svg"] >= 2 and page.counts["table"] >= 2
    assert page.screenshot.exists() and page.screenshot.stat().st_size > 10_000


def test_every_suite_declares_figures_and_each_draws_from_a_real_run():
    """Each suite's figures, from a real run of every suite: none comes out empty. A figure
    whose metrics were renamed would."""
    run = records.read_run(REFERENCE)
    for name in registry.suite_names():
        fns = registry.figures(name)
        assert fns, f"suite {name} declares no report figure"
        entries = [e for e in run.results if e.suite == name]
        assert entries, f"the reference run has no {name} results"
        for fn in fns:
            fig = fn(entries)
            assert fig is not None and not fig.empty, f"{name}: {fn.__name__} came out empty"
            if fig.rows:  # a table shows figures, not only labels
                assert any(re.search(r"\d", str(v)) for r in fig.rows for v in r.values())


def test_a_figure_comes_out_empty_when_its_metric_is_renamed():
    run = records.read_run(REFERENCE)
    entries = [dataclasses.replace(e, metrics=tuple(
        dataclasses.replace(m, name=m.name.replace("speedup", "speed_up")) for m in e.metrics))
        for e in run.results if e.suite == "fork_wait"]
    (scaling,) = [f for f in registry.figures("fork_wait") if f.__name__ == "scaling"]
    assert scaling(entries) is None  # which the test above reports as an empty figure


def test_a_run_without_a_suites_cases_draws_none_of_its_figures():
    for name in registry.suite_names():
        for fn in registry.figures(name):
            assert fn([]) is None, f"{name}: {fn.__name__} drew a figure of nothing"


def test_figures_read_labels_as_version_1_records_packed_them_into_the_name():
    run = records.read_run(REFERENCE)
    entry = dataclasses.replace(run.results[0], metrics=(
        records.Metric("speedup[mode=bf16]", 1.5, "x", kind="ratio"),
        records.Metric("speedup[fp16]", 1.25, "x", kind="ratio"),
        records.Metric("speedup", None, "x", kind="ratio", labels={"mode": "tf32"}),
        records.Metric("speedup", 1.1, "x", kind="ratio", labels={"mode": "fp32"})))
    got = figures.by_label(entry, "speedup", "mode")
    assert {k: m.value for k, m in got.items()} == {"bf16": 1.5, "fp16": 1.25, "fp32": 1.1}
    # a fixed label narrows to version-2 metrics, which carry their labels
    assert list(figures.by_label(entry, "speedup", "mode", mode="fp32")) == ["fp32"]


def test_build_leaves_the_runs_alone_and_escapes_what_they_say():
    run = records.read_run(REFERENCE)
    hostile = "rpc'><script>alert(1)</script>"
    first = dataclasses.replace(run.results[0], suite=hostile, reason="<b>not bold</b>")
    run = dataclasses.replace(run, results=(first, *run.results[1:]))
    # the records are frozen, but what they hold (tables, telemetry, machine) is not
    before = copy.deepcopy(run)
    html = report.build([run])
    assert run == before
    assert "<script>alert(1)</script>" not in html and "<b>not bold</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_numbers_carry_three_significant_figures():
    assert figures.sig(0.000123456) == "0.000123" and figures.sig(1234.5678) == "1.23e+03"
    m = records.Metric("speedup", 1.18321, "x", stats={"ci": [1.0912, 1.2734]})
    assert figures.with_interval(m) == "1.18 [1.09, 1.27]"
    assert figures.with_interval(None) == ""  # a figure the run did not record: an empty cell


def test_a_report_of_old_runs_does_without_a_suite_that_no_longer_imports(monkeypatch):
    real = registry.load

    def load(name: str):
        if name == "profiler":
            raise ImportError("a suite of this checkout that this torch cannot import")
        return real(name)

    monkeypatch.setattr(registry, "load", load)
    shown = report._suites()
    assert "profiler" not in shown and "fork_wait" in shown


def test_every_suite_figure_in_a_real_browser(tmp_path):
    """The reference run's page in headless Chromium: every declared figure's title is on the
    page and every plot is an SVG; the screenshot is results/screenshots/report.png."""
    page_file = report.write([REFERENCE], tmp_path / "report.html")
    page = visit(page_file.as_uri(), "report", count=("svg", "table", "h3"))
    assert page.console_errors == []
    run = records.read_run(REFERENCE)
    made = [fn([e for e in run.results if e.suite == name])
            for name in registry.suite_names() for fn in registry.figures(name)]
    for fig in made:
        assert fig.title in page.text, fig.title
    plots = sum(1 for f in made if f.svg)
    assert page.counts["svg"] >= plots and page.counts["h3"] >= len(registry.suite_names())
    assert page.screenshot.stat().st_size > 50_000


def test_the_matrix_page_counts_changes_inside_the_tolerance_in_every_step():
    """A step's `worse` and `better` are columns of the verdicts table, also for a record
    written before them (its counts lack the keys: 0)."""
    side = {"cases": {"amp/gemm[cpu default]": {"outcome": "pass", "warnings": []}},
            "headlines": []}
    step = {"from": "a", "to": "b", "changes": [], "headline_verdicts": []}
    record = {"versions": [{"label": x, "torch": x} for x in "abc"], "rounds": 5,
              "sides": dict.fromkeys("abc", side),
              "steps": [{**step, "counts": {"regression": 0, "worse": 3, "better": 1}},
                        {**step, "from": "b", "to": "c", "counts": {"regression": 1}}]}
    page = report.build_matrix(record)
    table = page[page.index('id="verdicts"'):]
    heads = re.findall(r"<th>([^<]*)</th>", table)
    assert heads[:5] == ["versions", "regression", "improvement", "worse", "better"]
    rows = [re.findall(r"<td>([^<]*)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)
            if "<td>" in r]
    assert rows[0][:5] == ["a → b", "0", "0", "3", "1"]
    assert rows[1][:5] == ["b → c", "1", "0", "0", "0"]


def test_every_page_marks_a_result_judged_by_older_checks(tmp_path, monkeypatch):
    """A result of a case whose checks have a later version than the one that judged it (or
    of a record before results carried it) is marked stale on the report, in its row and its
    suite's, with a line that counts them; a current one is not. (The history page's marks:
    tests/test_history.py.)"""
    run = records.read_run(REFERENCE)
    results = [dataclasses.replace(
        e, check_version=registry.find_case(e.suite, e.case).check.number)
        for e in run.results]
    first = results[0]
    case = registry.find_case(first.suite, first.case)
    suite = registry.load(first.suite)
    monkeypatch.setattr(suite, "cases", [dataclasses.replace(
        c, check=type(c.check)(c.check.number + 1, "a control added")) if c is case else c
        for c in suite.cases])
    other = next(i for i, e in enumerate(results) if e.case != first.case)
    results[other] = dataclasses.replace(results[other], check_version=None)
    stale = [e for e in results if e.case == first.case or e is results[other]]
    path = records.write_run(tmp_path / "run.json", dataclasses.replace(run, results=tuple(
        results)))
    page = visit(report.write([path], tmp_path / "report.html").as_uri(), "report-stale",
                 count=("td .stale", "p .stale"))
    assert page.console_errors == []
    assert page.counts["td .stale"] == len(stale) + len({e.suite for e in stale})
    assert page.counts["p .stale"] == 1
    assert f"{len(stale)} of its results were judged by checks that have changed" in page.text
