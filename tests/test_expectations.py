"""Expected results: a known upstream defect is green with its issue, anything else that
fails (or passes where a failure is expected) is red; the file cannot hold an entry without a
ticket; `update` proposes the edit a set of runs calls for."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli, records
from harness.adapters.pytest_adapter import _expected_marks
from harness.comparing import expectations
from suites.fork_wait.cases import suite as fork_wait
from tests.planted.wrap import planted_python

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
MACHINE = {"name": "m", "torch": {"version": "2.14.1+cu130"}, "python": "3.11.7",
           "os": "Linux-6.1-x86_64-with-glibc2.36"}

ABORT = '''
[[expect]]
case = "fork_wait/clean_exit"
outcome = ["fail"]
signature = "terminate called without an active exception"
issue = "https://github.com/pytorch/pytorch/issues/38228"
summary = "aborts at exit"
when = { torch = ">=2.12.1", device = "cpu", platform = "linux" }
rate = { release_notes = [RELEASE_NOTES], chains = [CHAINS] }
'''


def _file(tmp_path: Path, text: str, name: str = "expectations.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _abort(release_notes: str = "0.1, 1.0", chains: str = "0.02, 1.0") -> str:
    return ABORT.replace("RELEASE_NOTES", release_notes).replace("CHAINS", chains)


def _run(python: Path | str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`release-bench run` of fork/wait's clean_exit, two trials per program, in `python`."""
    return subprocess.run([str(python), "-m", "harness.cli", "run", "--suite", "fork_wait",
                           "--only", "clean_exit", "--param", "trials=2", "--no-telemetry",
                           "--out", str(tmp_path / "runs"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def _entry(outcome: str = "fail", reason: str = "", failures: list[str] | None = None,
           rates: dict[str, tuple[int, int]] | None = None, device: str = "cpu",
           case: str = "clean_exit") -> records.Result:
    metrics = tuple(records.Metric("abnormal_exit_rate", k / n, "fraction", "rate", "lower",
                                   labels={"program": p}, stats={"n": n})
                    for p, (k, n) in (rates or {}).items())
    return records.Result("fork_wait", case, outcome, reason, device=device, metrics=metrics,
                          details={"failures": failures} if failures else {})


def _run_of(*results: records.Result) -> records.Run:
    return dataclasses.replace(records.new_run(MACHINE, "quick"), results=results)


def test_a_failure_the_entry_describes_is_expected_and_green_with_its_issue():
    entries = expectations.parse(_abort())
    j = expectations.judge_result(
        _entry(failures=["release_notes: killed by SIGABRT, 'terminate called': terminate "
                         "called without an active exception"],
               rates={"release_notes": (14, 20), "chains": (3, 20)}), MACHINE, entries)
    assert j.status == "expected-fail" and not j.unexpected
    assert j.issue == "https://github.com/pytorch/pytorch/issues/38228"
    assert j.rates[0].startswith("release_notes 14/20 [")


def test_another_failure_under_the_entry_a_new_failure_and_a_pass_are_unexpected():
    entries = expectations.parse(_abort())
    other = _entry(failures=["release_notes: killed by SIGABRT, 'terminate called': terminate "
                             "called without an active exception",
                             "chains: timed out: still running"])
    j = expectations.judge_result(other, MACHINE, entries)
    assert j.status == "unexpected-fail" and "chains: timed out" in j.why
    new = _entry(reason="check x failed", case="release_notes_example")
    assert expectations.judge_result(new, MACHINE, entries).status == "unexpected-fail"
    passed = _entry(outcome="pass")
    j = expectations.judge_result(passed, MACHINE, entries)
    assert j.status == "unexpected-pass" and "remove the entry" in j.why


def test_a_pass_in_too_few_trials_to_rule_the_defect_out_is_expected_and_enough_are_not():
    """A defect seen in a share of trials (10% and more, the entry says) need not show in
    20: 0/20's interval [0%, 17%] still reaches the range, and the pass is the known defect
    not seen. 0/40 ([0%, 8.8%]) is below it: the defect may be fixed."""
    entries = expectations.parse(_abort("0.1, 1.0", "0.02, 1.0"))
    few = _entry(outcome="pass", rates={"release_notes": (0, 20), "chains": (0, 20)})
    j = expectations.judge_result(few, MACHINE, entries)
    assert j.status == "expected-fail" and "too few to rule it out" in j.why, j
    assert "38228" in j.issue and "release_notes 0/20 [0%, 17%]" in j.rates[0]
    enough = _entry(outcome="pass", rates={"release_notes": (0, 40), "chains": (0, 40)})
    j = expectations.judge_result(enough, MACHINE, entries)
    assert j.status == "unexpected-pass" and "release_notes 0/40" in j.why, j
    # a rate the entry gives no range for cannot say the pass is the defect unseen
    other = _entry(outcome="pass", rates={"release_notes": (0, 20), "a_new_program": (0, 20)})
    assert expectations.judge_result(other, MACHINE, entries).status == "unexpected-pass"


def test_a_rate_is_judged_against_its_expected_range_by_its_interval():
    entries = expectations.parse(_abort("0.3, 0.9", "0.0, 0.5"))
    failures = ["x: terminate called without an active exception"]
    inside = _entry(failures=failures, rates={"release_notes": (4, 20), "chains": (2, 20)})
    assert expectations.judge_result(inside, MACHINE, entries).status == "expected-fail"
    above = _entry(failures=failures, rates={"release_notes": (12, 20), "chains": (19, 20)})
    j = expectations.judge_result(above, MACHINE, entries)
    assert j.status == "unexpected-fail" and "chains 19/20" in j.why
    below = _entry(failures=failures, rates={"release_notes": (0, 100), "chains": (1, 100)})
    j = expectations.judge_result(below, MACHINE, entries)
    assert j.status == "unexpected-pass" and "release_notes 0/100" in j.why


def test_an_entry_applies_only_where_its_conditions_hold():
    entries = expectations.parse(_abort())
    failing = _entry(failures=["terminate called without an active exception"])
    older = copy.deepcopy(MACHINE)
    older["torch"]["version"] = "2.11.0"
    assert expectations.judge_result(failing, older, entries).status == "unexpected-fail"
    mac = {**MACHINE, "os": "macOS-15.1-arm64-arm-64bit"}
    assert expectations.judge_result(failing, mac, entries).status == "unexpected-fail"
    assert expectations.judge_result(
        dataclasses.replace(failing, device="cuda"), MACHINE, entries).status == "unexpected-fail"
    assert expectations.judge_result(failing, MACHINE, entries).status == "expected-fail"


def test_an_error_is_not_the_failure_an_entry_expects_and_a_flaky_defects_pass_is_green():
    entries = expectations.parse(_abort())
    j = expectations.judge_result(_entry(outcome="error", reason="worker died"), MACHINE,
                                  entries)
    assert (j.status, j.why) == ("unexpected-fail", "error, where the entry expects fail")
    flaky = expectations.parse(_abort().replace('outcome = ["fail"]',
                                                'outcome = ["fail", "pass"]'))
    j = expectations.judge_result(_entry(outcome="pass"), MACHINE, flaky)
    assert (j.status, j.why) == ("pass", "")
    # a torch whose version cannot be read is not one the entry's range names
    unknown = {**MACHINE, "torch": {"version": "main-nightly"}}
    failing = _entry(failures=["terminate called without an active exception"])
    assert expectations.judge_result(failing, unknown, entries).status == "unexpected-fail"


def test_a_rate_range_for_every_label_applies_where_none_names_the_figures_label():
    entries = expectations.parse(ABORT.replace(
        "rate = { release_notes = [RELEASE_NOTES], chains = [CHAINS] }", "rate = [0.3, 0.9]"))
    failures = ["x: terminate called without an active exception"]
    above = _entry(failures=failures, rates={"release_notes": (100, 100)})
    j = expectations.judge_result(above, MACHINE, entries)
    assert j.status == "unexpected-fail" and "(expected 30%-90%)" in j.why, j.why


@pytest.mark.parametrize("text, says", [
    ('[[expect]]\ncase = "a/b"\noutcome = "fail"\n', "`issue` must be the URL"),
    (f'[[expect]]\ncase = "a/b"\noutcome = "fail"\nissue = "{expectations.PLACEHOLDER_ISSUE}"\n',
     "`issue` must be the URL"),
    ('[[expect]]\ncase = "a/b"\noutcome = "pass"\nissue = "https://x.org/i/1"\n',
     "expects no failure"),
    ('[[expect]]\ncase = "a/b"\noutcome = "fail"\nissue = "https://x.org/i/1"\n'
     'when = { torch = "2.x" }\n', "not a PEP 440 specifier"),
    ('[[expect]]\ncase = "a/b"\noutcome = "fail"\nissue = "https://x.org/i/1"\ncolour = 1\n',
     "unknown key 'colour'"),
    ('[[expect]]\ncase = "a/b"\noutcome = "fail"\nissue = "https://x.org/i/1"\n'
     'rate = [0.5, 0.2]\n', "`rate` range"),
    ('[[expect]\n', "not valid TOML"),
])
def test_a_bad_file_is_one_line(text, says, tmp_path, capsys):
    with pytest.raises(expectations.ExpectationsError, match=says):
        expectations.parse(text)
    assert cli.main(["run", "--suite", "fork_wait", "--only", "clean_exit", "--dry-run",
                     "--expectations", str(_file(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert says.split("`")[-1][:10] in err and len(err.strip().splitlines()) == 1, err


ENTRY = 'case = "a/b"\noutcome = "fail"\nissue = "https://x.org/i/1"\n'
WHEN = "`when` takes torch, device, platform, python"


@pytest.mark.parametrize("text, says", [
    ('expect = [1]\n', "entry 1: not a table"),
    ('[[expect]]\ncase = "ab"\noutcome = "fail"\n', "entry 1: `case` must be 'suite/case'"),
    ('[[expect]]\ncase = "a/b"\noutcome = ["fail", "broken"]\n',
     "entry 1 (a/b): `outcome` must be one or a list of"),
    (f'[[expect]]\n{ENTRY}signature = "(unclosed"\n',
     "entry 1 (a/b): `signature` is not a regular expression (missing ), unterminated"),
    (f'[[expect]]\n{ENTRY}when = {{ gpu = "H200" }}\n', f"entry 1 (a/b): {WHEN}; got 'gpu'"),
    (f'[[expect]]\n{ENTRY}when = "linux"\n', f"entry 1 (a/b): {WHEN}"),
    (f'[expected]\n{ENTRY}', "unknown table 'expected' (entries are [[expect]] tables)"),
])
def test_each_malformed_entry_is_named_with_what_is_wrong(text, says):
    """The same one line as above (shown there through the command line), for each way an
    entry can be malformed."""
    with pytest.raises(expectations.ExpectationsError) as e:
        expectations.parse(text)
    assert str(e.value).startswith(f"expectations: {says}"), e.value


def test_the_repositorys_file_is_valid_and_names_only_cases_that_exist():
    entries = expectations.load()
    assert entries and not expectations.stale(entries, expectations.known_cases())


def test_an_entry_naming_no_case_is_stale():
    entries = expectations.parse(_abort().replace("fork_wait/clean_exit", "fork_wait/gone"))
    assert [x.case for x in expectations.stale(entries, expectations.known_cases())] == [
        "fork_wait/gone"]


def test_the_pytest_view_derives_a_strict_xfail_from_the_file(monkeypatch):
    case = fork_wait.case("clean_exit")
    (mark,) = _expected_marks(case, "cpu")
    assert mark.name == "xfail" and mark.kwargs["strict"] is True
    assert "pytorch/pytorch/issues/38228" in mark.kwargs["reason"]
    assert _expected_marks(fork_wait.case("release_notes_example"), "cpu") == []
    intermittent = expectations.parse(_abort().replace('["fail"]', '["fail", "pass"]'))
    monkeypatch.setattr("harness.adapters.pytest_adapter._expectations",
                        lambda: tuple(intermittent))
    (mark,) = _expected_marks(case, "cpu")
    assert mark.kwargs["strict"] is False


# --- the command, on real runs with planted outcomes ---------------------------------------


def test_a_planted_pass_of_the_expected_failure_fails_the_run(tmp_path):
    """Fixed (a planted clean exit), against an entry that expects 90% of trials and more to
    abort: two clean trials ([0%, 84%]) are then enough to fall below it."""
    fixed = planted_python(tmp_path / "fixed", "exit_clean=1")
    most = _file(tmp_path, _abort("0.9, 1.0", "0.9, 1.0"), "most.toml")
    out = _run(fixed, tmp_path, "--expectations", str(most))
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "unexpected-pass: fork_wait/clean_exit" in out.stderr
    assert "pytorch/pytorch/issues/38228" in out.stderr
    (path,) = (tmp_path / "runs").rglob("*.json")
    run = records.read_run(path)
    assert run.results[0].status == "unexpected-pass"
    assert run.expectations["counts"]["unexpected-pass"] == 1


def test_a_failure_other_than_the_known_one_fails_the_run(tmp_path):
    other = planted_python(tmp_path / "other", "exit_status=3")
    out = _run(other, tmp_path)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "unexpected-fail: fork_wait/clean_exit" in out.stderr
    assert "signature does not match" in out.stderr and "exit status 3" in out.stderr


def test_a_rate_inside_its_range_passes_and_one_above_it_fails(tmp_path):
    aborts = planted_python(tmp_path / "aborts", "exit_abort=1")  # every process aborts
    inside = _file(tmp_path, _abort("0.5, 1.0", "0.5, 1.0"), "inside.toml")
    out = _run(aborts, tmp_path, "--expectations", str(inside))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "expected-fail: fork_wait/clean_exit" in out.stderr and "2/2" in out.stderr
    assert "1 expected-fail" in out.stdout  # the summary counts it
    above = _file(tmp_path, _abort("0.0, 0.1", "0.0, 0.1"), "above.toml")
    out = _run(aborts, tmp_path, "--expectations", str(above))  # 2/2: at least 16%
    assert out.returncode == 1 and "rate above its expected range" in out.stderr, out.stderr
    # without expectations the same failure is just a failure
    out = _run(aborts, tmp_path, "--expectations", "none", "--param", "trials=1")
    assert out.returncode == 1 and "expectations" not in out.stdout.split("totals")[-1]


def test_update_proposes_an_entry_for_a_new_failure_that_cannot_land_without_a_ticket(
        tmp_path):
    run = _run_of(_entry(failures=["chains: timed out: stuck"], rates={"chains": (3, 20)}),
                  _entry(reason="3 of 4 checks failed", case="release_notes_example"))
    path = records.write_run(tmp_path / "run.json", run)
    empty = _file(tmp_path, "# expected results\n")
    out = subprocess.run([BIN / "release-bench", "expectations", "update", str(path), "--file",
                          str(empty)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "+case = \"fork_wait/clean_exit\"" in out.stdout
    assert "fork_wait/release_notes_example: new entry" in out.stdout
    assert empty.read_text() == "# expected results\n"  # only printed
    out = subprocess.run([BIN / "release-bench", "expectations", "update", str(path), "--file",
                          str(empty), "--write"], capture_output=True, text=True, timeout=120)
    assert "name the issue of each new entry" in out.stdout
    written = empty.read_text()
    assert written.startswith("# expected results\n") and '"chains" = [0.03, 0.38]' in written
    with pytest.raises(expectations.ExpectationsError, match="`issue` must be the URL"):
        expectations.parse(written)


def test_update_removes_an_entry_whose_case_now_passes_and_a_stale_one():
    text = "# head\n" + _abort() + _abort().replace("fork_wait/clean_exit", "fork_wait/gone")
    # 0/20 [0%, 17%] cannot rule out a defect seen in 10% of trials: nothing to change
    unseen = _run_of(_entry(outcome="pass", rates={"release_notes": (0, 20)}))
    assert expectations.update(_abort(), [unseen], expectations.known_cases()).changes == []
    run = _run_of(_entry(outcome="pass", rates={"release_notes": (0, 40)}))
    upd = expectations.update(text, [run], expectations.known_cases())
    assert upd.new.strip() == "# head"
    assert any("passed in every run it applies to: removed" in c for c in upd.changes)
    assert any("names no case of the suites: removed" in c for c in upd.changes)
    # passed in one run and failed in another: intermittent, 'pass' joins its outcomes
    failed = _run_of(_entry(failures=["terminate called without an active exception"]))
    upd = expectations.update(_abort(), [run, failed], expectations.known_cases())
    assert 'outcome = ["fail", "pass"]' in upd.new and "'pass' added" in upd.changes[0]


def test_an_entry_removed_goes_with_the_comment_lines_just_above_it():
    """The comment of an entry is its own: removed with it; the file's head stays."""
    text = "# head\n\n# why the abort is expected\n" + _abort().lstrip("\n")
    run = _run_of(_entry(outcome="pass", rates={"release_notes": (0, 40)}))
    assert expectations.update(text, [run], expectations.known_cases()).new == "# head\n\n"


def test_a_rate_without_its_trials_is_not_held_to_the_entrys_range():
    """A rate whose trial count was not recorded has no interval: it is neither inside nor
    outside the entry's range, and the failure stays expected by its signature."""
    entry = _entry(failures=["terminate called without an active exception"],
                   rates={"release_notes": (19, 20)})
    counted = dataclasses.replace(entry.metrics[0], stats={})
    j = expectations.judge_result(dataclasses.replace(entry, metrics=(counted,)), MACHINE,
                                  expectations.parse(_abort("0.1, 0.5")))
    assert j.status == "expected-fail" and j.rates == []
    assert expectations.judge_result(entry, MACHINE, expectations.parse(
        _abort("0.1, 0.5"))).status == "unexpected-fail"  # with its trials: above the range


def test_without_the_repositorys_file_nothing_is_expected(tmp_path, monkeypatch):
    monkeypatch.setattr(expectations, "DEFAULT_FILE", tmp_path / "expectations.toml")
    assert expectations.load() == []
    with pytest.raises(expectations.ExpectationsError):  # a file asked for by name must exist
        expectations.load(tmp_path / "expectations.toml")


def test_a_merged_matrix_run_is_judged_by_the_signature_of_every_round():
    from harness.comparing import campaign

    entries = expectations.parse(_abort())
    abort = ("release_notes: killed by SIGABRT, 'terminate called': terminate called without "
             "an active exception")
    passed = _run_of(_entry("pass"))
    failed = _run_of(_entry(failures=[abort]))
    merged = campaign.merge_runs([passed, failed, passed], "matrix")
    (e,) = merged.results
    assert e.outcome == "fail" and e.details["failures"] == [abort]
    assert expectations.judge_result(e, MACHINE, entries).status == "expected-fail"
    # a round's failure the signature does not match makes the merged run unexpected
    hung = _run_of(_entry(failures=["chains: timed out: still running"]))
    (e,) = campaign.merge_runs([failed, passed, hung], "matrix").results
    j = expectations.judge_result(e, MACHINE, entries)
    assert j.status == "unexpected-fail" and "chains: timed out" in j.why
    assert merged.notes[0].startswith("matrix: merged from 3 runs")


def test_a_failure_is_read_from_the_failed_checks_and_a_changed_one_is_left_for_a_person():
    """A result without a list of failures is judged by its failed checks: the known abort
    is expected; a timeout under the same entry is unexpected, and `update` leaves the entry
    (and the comment above it) as it is, saying why: a new defect, or a changed one?"""
    text = "# expected results\n\n# the abort at exit\n" + _abort()
    entries = expectations.parse(text)

    def failing(detail: str) -> records.Result:
        return dataclasses.replace(_entry(), checks=(
            records.Check("chains ends cleanly in 20 fresh processes", True, "0/20"),
            records.Check("release_notes ends cleanly in 20 fresh processes", False, detail)))

    known = failing("14/20 trials ended abnormally; killed by SIGABRT, 'terminate called': "
                    "terminate called without an active exception")
    assert expectations.judge_result(known, MACHINE, entries).status == "expected-fail"
    changed = failing("2/20 trials ended abnormally; timed out")
    j = expectations.judge_result(changed, MACHINE, entries)
    assert j.status == "unexpected-fail" and "timed out" in j.why
    upd = expectations.update(text, [_run_of(changed)], expectations.known_cases())
    assert upd.new == upd.old == text
    assert upd.changes == [f"{j.key}: {j.why} (left as it is: a new defect, "
                           "or a changed one?)"]


def test_check_judges_each_run_and_exits_1_exactly_when_something_is_unexpected(tmp_path,
                                                                                capsys):
    """`release-bench expectations check RUN...`: the torch of each run, what the file says of
    it, exit 0 when every failure is the one expected and 1 when one is not; `update` of a
    run the file already describes changes nothing; a malformed file is one line, exit 2."""
    from harness import cli

    entries = _file(tmp_path, _abort())
    known = records.write_run(tmp_path / "known.json", _run_of(_entry(
        failures=["release_notes: killed by SIGABRT, 'terminate called': terminate called "
                  "without an active exception"],
        rates={"release_notes": (14, 20), "chains": (3, 20)})))
    new = records.write_run(tmp_path / "new.json", _run_of(
        _entry(reason="check x failed", case="release_notes_example")))
    assert cli.main(["expectations", "check", str(known), "--file", str(entries)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{known}: torch 2.14.1+cu130"
    assert out[-1] == f"expectations ({entries}): 1 expected-fail; nothing unexpected"
    assert cli.main(["expectations", "check", str(known), str(new), "--file", str(entries)]) == 1
    out, err = capsys.readouterr()
    assert f"{new}: torch 2.14.1+cu130" in out.splitlines() and out.endswith("; 1 unexpected\n")
    assert "unexpected-fail: fork_wait/release_notes_example" in err, err
    assert "no expectation covers it" in err, err
    assert cli.main(["expectations", "update", str(known), "--file", str(entries)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "expectations.toml: nothing to change"
    bad = _file(tmp_path, "[[expect]]\ncase = 1\n", "bad.toml")
    for action in ("check", "update"):
        assert cli.main(["expectations", action, str(known), "--file", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("release-bench: error: ") and err.count("\n") == 1, err
