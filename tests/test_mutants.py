"""`release-bench mutants`: the machinery of mutation analysis, not the campaign (a documented
command, docs/guide.md). Two fixed mutants of GradScaler, one that a check kills and one that
no program can tell from torch, judged in the command's own environment; the module put back,
checked by hash, after a run and after SIGINT, SIGTERM or SIGKILL in the middle of judging;
and nothing written into the project's environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.releases import mutants
from harness.releases.mutants import Fate, Judgement, Mutant, Target

ROOT = Path(__file__).resolve().parent.parent
GRAD_SCALER = Target("amp/grad_scaler.py")
# `if self._device == "cuda":` made `!=`: a scaler on the CPU takes CUDA's path, and the
# first check (scale() multiplies the loss by the scale) fails
KILLED_BY_A_CHECK = "ReplaceComparisonOperator_Eq_NotEq#0"
# update()'s `if len(found_infs) == 0:` made `<= 0`: a length is never negative, so no
# program can tell the two apart
EQUIVALENT = "ReplaceComparisonOperator_Eq_LtE#5"

MODULE = '''\
def add(a, b):
    if a > b:
        return a + b
    return b


class Box:
    def get(self):
        return 1
'''


def test_targets_are_paths_in_torch():
    assert Target.parse("torch/amp/grad_scaler.py") == Target("amp/grad_scaler.py")
    assert Target.parse("amp/grad_scaler.py", ["GradScaler.step"]).name == \
        "amp.grad_scaler-step"
    for bad in ("amp/grad_scaler", "/etc/passwd.py", "../x.py"):
        with pytest.raises(mutants.MutantsError):
            Target.parse(bad)


def test_mutants_are_listed_by_cosmic_ray_with_their_function(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    found = mutants.list_mutants(path)
    names = {m.name for m in found}
    assert {"ReplaceComparisonOperator_Gt_Lt#0", "ReplaceBinaryOperator_Add_Sub#0",
            "NumberReplacer#0"} <= names
    assert {m.function for m in found} == {"add", "Box.get"}
    assert {m.function for m in mutants.list_mutants(path, ["Box"])} == {"Box.get"}
    with pytest.raises(mutants.MutantsError, match="no function 'nope'"):
        mutants.list_mutants(path, ["nope"])
    swap = next(m for m in found if m.name == "ReplaceComparisonOperator_Gt_Lt#0")
    assert mutants.diff(MODULE, mutants.mutated_source(MODULE, swap)) == \
        "-    if a > b:\n+    if a < b:"


def test_only_function_bodies_count_as_use():
    assert mutants.body_lines(MODULE) == {2, 3, 4, 9}
    # an overload's stub on its header's line runs when the class is made, not when called
    stubs = "class K:\n    def f(self) -> int: ...\n    def g(self):\n        return 1\n"
    assert mutants.body_lines(stubs) == {4}


def test_a_mutant_counts_as_run_where_coverage_counts_its_statement(tmp_path):
    """Coverage counts a statement at its first line: a mutant of a call's second line, or
    of a parameter's annotation below `def`, runs when that first line does."""
    src = "def f(\n    a: int | None,\n) -> int:\n    return g(1,\n             a - 2)\n"
    assert mutants.statement_starts(src) == {1: 1, 2: 1, 3: 1, 4: 4, 5: 4}
    (tmp_path / "m.py").write_text(src)
    found = {m.name: m for m in mutants.list_mutants(tmp_path / "m.py")}
    assert found["ReplaceBinaryOperator_BitOr_BitAnd#0"].lines == (1,)
    assert found["ReplaceBinaryOperator_Sub_Add#0"].lines == (4,)


def test_the_sample_is_fixed_by_its_seed_and_kept_in_module_order():
    names = [f"m{i}" for i in range(100)]
    a, b = mutants.sample(names, 10, 58), mutants.sample(names, 10, 58)
    assert a == b and len(a) == 10 and a == sorted(a, key=names.index)
    assert mutants.sample(names, 10, 59) != a
    assert mutants.sample(names[:3], 10, 58) == names[:3]


@pytest.mark.parametrize("n, old, new", [(207, 25, 45), (39, 20, 30), (2000, 20, 40)])
def test_a_grown_sample_is_the_sample_a_new_campaign_would_draw(n, old, new):
    # a record's sample grown with --sample keeps every mutant already judged, and is the
    # sample that a campaign started with the larger size draws: its command reproduces it
    names = [f"m{i}" for i in range(n)]
    first = mutants.sample(names, old, 58)
    grown = mutants.grown_sample(names, first, new, 58)
    assert set(first) < set(grown) and grown == mutants.sample(names, new, 58)


def test_a_sample_that_cannot_grow_into_a_new_campaigns_is_refused():
    # random.sample switches method between these sizes over 22 names: the larger draw
    # does not hold the smaller one, and growing would judge a sample no command draws
    names = [f"m{i}" for i in range(22)]
    first = mutants.sample(names, 5, 58)
    assert not set(first) <= set(mutants.sample(names, 6, 58))
    with pytest.raises(mutants.MutantsError, match="does not hold the record's 5"):
        mutants.grown_sample(names, first, 6, 58)


def test_a_check_failed_because_torch_raised_is_an_error_and_judging_goes_on(monkeypatch,
                                                                              tmp_path):
    """The suite's kills by a check are wrong values caught, as PyTorch's tests' are their
    assertions: a case that reports a call that raised as its behaviour's check failing
    (Context.exercising) kills the mutant by an error, and the next case is run, whose check
    on a value may yet say what broke."""
    from harness.records import Check, Outcome, Result

    raised = Check("the hybrid trains to the end", False, "torch raised TypeError: x (at y)",
                   raised=True)
    wrong = Check("embedding matches reference", False, "max error 0.5")
    by_case = {"quick": [raised], "slow": [raised, wrong]}

    def run_in(env, argv, limit):
        case = argv[argv.index("--only") + 1]
        out = Path(argv[argv.index("--out") + 1])
        (out / "r.json").write_text(case)
        return mutants.Ran(1, (), 1.0)

    def read_results(out):
        return read_results_of((out / "r.json").read_text())

    def read_results_of(case):
        return [Result("ddp_rpc", case, Outcome.FAIL, kind="conformance", device="cpu",
                       checks=tuple(by_case[case]))]

    monkeypatch.setattr(mutants, "run_in", run_in)
    monkeypatch.setattr(mutants, "read_results", read_results)
    clean = {read_results_of(c)[0].key: mutants.CaseRun("pass", seconds=s)
             for c, s in (("quick", 1.0), ("slow", 9.0))}
    judged = mutants.judge_by_suite(None, "ddp_rpc", clean, 60.0, tmp_path)
    assert judged.fate is Fate.CHECK and judged.judges == ("ddp_rpc/quick", "ddp_rpc/slow")
    assert judged.by == ("ddp_rpc/slow: embedding matches reference",)
    by_case["slow"] = [raised]
    judged = mutants.judge_by_suite(None, "ddp_rpc", clean, 60.0, tmp_path)
    assert judged.fate is Fate.ERROR
    assert judged.by[0] == ("ddp_rpc/quick: the hybrid trains to the end: torch raised "
                            "TypeError: x (at y)")


def test_judging_again_by_a_new_case_only_merges_with_the_earlier_verdict(monkeypatch,
                                                                         tmp_path):
    """`--again survived --case new`: only the new case judges, and its verdict joins the
    earlier one. A kill by its check counts; its letting the mutant live does not undo an
    earlier kill; a mutant survives only if every case let it."""
    class Env:  # the module's copy, written and put back: nothing to do here
        def write_mutant(self, target, code): pass
        def put_back(self, target): pass
        def done_mutating(self): pass

    source = "def f(a):\n    return a + 1\n"
    m = Mutant("core/ReplaceBinaryOperator_Add_Sub", 0, 2, 2)
    old_cases = {"ddp_rpc/old[cpu default]": mutants.CaseRun("pass", (), (2,), 5.0)}
    new_cases = {"ddp_rpc/new[cpu default]": mutants.CaseRun("pass", (), (2,), 5.0)}
    asked = []

    def judge_by_suite(env, suite, cases, timeout_s, scratch):
        asked.append(sorted(cases))
        return later

    monkeypatch.setattr(mutants, "judge_by_suite", judge_by_suite)
    plan = mutants.Plan(Target("x.py"), "ddp_rpc", cases=("new",), again=(Fate.SURVIVED,))
    for earlier_fate, later_fate, want in [
            (Fate.SURVIVED, Fate.CHECK, Fate.CHECK), (Fate.SURVIVED, Fate.SURVIVED, Fate.SURVIVED),
            (Fate.ERROR, Fate.SURVIVED, Fate.ERROR), (Fate.ERROR, Fate.CHECK, Fate.CHECK),
            (Fate.CHECK, Fate.ERROR, Fate.CHECK), (Fate.ERROR, Fate.TIMEOUT, Fate.TIMEOUT)]:
        earlier = Judgement(earlier_fate, ("old broke",) if earlier_fate.killed else (),
                            ("ddp_rpc/old",), 50.0, "a")
        later = Judgement(later_fate, ("new broke",) if later_fate.killed else (),
                          ("ddp_rpc/new",), 5.0)
        record = mutants.Record(Target("x.py"), "ddp_rpc", "t", "h", "cr", 1, {}, 1,
                                {**old_cases, **new_cases}, {}, [m.name], 58, [m.name],
                                judged={m.name: {"suite": earlier.to_json()}})
        entry = mutants._judge(plan, Env(), record, m, source, tmp_path, "b")
        got = Judgement.from_json(entry["suite"])
        assert asked[-1] == ["ddp_rpc/new[cpu default]"]  # the earlier case is not run again
        assert got.fate is want, (earlier_fate, later_fate)
        assert got.judges == ("ddp_rpc/old", "ddp_rpc/new") and got.commit == "b"
        assert got.by == (earlier if want is earlier_fate and earlier_fate.killed
                          else later).by
    # a named case that judged before may judge otherwise now (fixed since): every case
    # judges, and its verdict replaces the earlier one
    earlier = Judgement(Fate.ERROR, ("new broke",), ("ddp_rpc/old", "ddp_rpc/new"), 50.0, "a")
    later = Judgement(Fate.SURVIVED, (), ("ddp_rpc/old", "ddp_rpc/new"), 5.0)
    record.judged[m.name] = {"suite": earlier.to_json()}
    got = Judgement.from_json(mutants._judge(plan, Env(), record, m, source, tmp_path,
                                             "b")["suite"])
    assert asked[-1] == ["ddp_rpc/new[cpu default]", "ddp_rpc/old[cpu default]"]
    assert got.fate is Fate.SURVIVED


def test_judging_again_first_surveys_the_cases_added_since_the_record(monkeypatch):
    """A case added to hold a contract a survivor broke joins the record when it runs the
    module; one that does not is left out, and a case already surveyed is not run again."""
    source = "def f(a):\n    return a + 1\n"
    record = mutants.Record(Target("x.py"), "ddp_rpc", "t", "h", "cr", 1,
                            {}, 1, {"ddp_rpc/old[cpu default]": mutants.CaseRun("pass", (), (2,))},
                            {}, [], 58, [])
    surveyed = []

    def survey_cases(env, target, suite, cases, timeout_s, scratch, log):
        surveyed.extend(cases)
        return {"ddp_rpc/new[cpu ddp=inside]": mutants.CaseRun("pass", (), (2,)),
                "ddp_rpc/unused[cpu default]": mutants.CaseRun("pass", (), ())}

    monkeypatch.setattr(mutants, "suite_cases", lambda suite, select, skip: ["old", "new",
                                                                              "unused"])
    monkeypatch.setattr(mutants, "survey_cases", survey_cases)
    plan = mutants.Plan(Target("x.py"), "ddp_rpc", again=(Fate.SURVIVED,))
    assert mutants._survey_new_cases(plan, None, record, source, None, lambda line: None)
    assert surveyed == ["new", "unused"]
    assert sorted(record.cases) == ["ddp_rpc/new[cpu ddp=inside]", "ddp_rpc/old[cpu default]"]
    assert record.cases_not_running == ["unused"]
    surveyed.clear()  # the next --again surveys neither again
    assert not mutants._survey_new_cases(plan, None, record, source, None, lambda line: None)
    assert surveyed == []


def test_a_mutant_is_judged_by_the_judges_that_run_its_lines():
    runs = {"a": mutants.CaseRun("pass", (), (1, 2, 3)), "b": mutants.CaseRun("pass", (), (9,))}
    m = Mutant("core/NumberReplacer", 0, 3, 4)
    assert mutants.judges_of(m, runs, runs) == ["a"]


def test_judgements_round_trip():
    j = Judgement(Fate.CHECK, ("amp/grad_scaler: defaults as documented",), ("amp/x",), 5.0,
                  "abc1234")
    assert Judgement.from_json(j.to_json()) == j
    assert Fate.TIMEOUT.killed and not Fate.SURVIVED.killed


def test_a_test_that_asserts_is_a_kill_by_a_check_and_a_crash_an_error():
    def ran(*frames_then_error: str) -> mutants.Ran:
        return mutants.Ran(1, ("Traceback (most recent call last):", *frames_then_error), 1.0)

    asserted = ran('  File "/x/torch/testing/_internal/distributed/rpc/rpc_test.py", line 9, '
                   'in test_add', '    self.assertEqual(a, b)',
                   '  File "/x/torch/testing/_internal/common_utils.py", line 4, in assertEqual',
                   "AssertionError: Tensor-likes are not equal!")
    assert mutants.test_verdict(asserted) is Fate.CHECK
    # torch's own assert in the library stops the test as any exception does
    torch_asserted = ran('  File "/x/torch/amp/autocast_mode.py", line 251, in __init__',
                         "AssertionError: Tried to use AMP with the `privateuseone` backend")
    assert mutants.test_verdict(torch_asserted) is Fate.ERROR
    assert mutants.test_verdict(ran('  File "/x/torch/amp/autocast_mode.py", line 2, in f',
                                    "TypeError: x")) is Fate.ERROR
    assert mutants.test_verdict(mutants.Ran(None, (), 9.0)) is Fate.TIMEOUT
    assert mutants.test_verdict(mutants.Ran(0, ("OK",), 1.0)) is None


# ---------------------------------------------------------------- the command, end to end

def _hash_and_inode(path: Path) -> tuple[str, int]:
    return mutants.sha256(path), path.stat().st_ino


def _command(home: Path, out: Path, *names: str) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "mutants", "torch/amp/grad_scaler.py",
            "--suite", "amp", "--case", "grad_scaler", "--home", str(home), "--out", str(out),
            *[a for n in names for a in ("--mutant", n)]]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The command on the two fixed mutants, once for the module's tests: its record, the
    environment, and the project's GradScaler's hash and inode before it ran."""
    tmp = tmp_path_factory.mktemp("mutants")
    home, out = tmp / "home", tmp / "out"
    env = mutants.prepare(home)
    project_file = env.original(GRAD_SCALER)
    before = _hash_and_inode(project_file)
    proc = subprocess.run(_command(home, out, KILLED_BY_A_CHECK, EQUIVALENT), cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = mutants.read_record(out / f"{GRAD_SCALER.name}.json")
    return record, env, before, home, out


@pytest.mark.slow
def test_the_two_fixed_mutants_are_judged_as_they_should_be(smoke):
    record, env, before, _, _ = smoke
    killed = record.judgement(KILLED_BY_A_CHECK, "suite")
    assert killed.fate is Fate.CHECK
    assert killed.by == ("amp/grad_scaler: scale() multiplies the loss by the scale",)
    assert record.judgement(EQUIVALENT, "suite").fate is Fate.SURVIVED
    assert "-        if self._device == \"cuda\":" in record.judged[KILLED_BY_A_CHECK]["diff"]
    assert record.judged[KILLED_BY_A_CHECK]["line"] == 134
    # coverage found the case, and the lines it runs in GradScaler's methods
    assert list(record.cases) == ["amp/grad_scaler[cpu default]"]
    assert 134 in record.cases["amp/grad_scaler[cpu default]"].lines
    assert KILLED_BY_A_CHECK in record.reached and len(record.reached) < record.mutants
    # the command that reproduces it: where its environment lived is no part of it
    assert "--case grad_scaler" in record.command and "--home" not in record.command


@pytest.mark.slow
def test_the_module_is_restored_and_the_project_untouched(smoke):
    _, env, before, home, _ = smoke
    assert mutants.sha256(env.file(GRAD_SCALER)) == mutants.sha256(env.original(GRAD_SCALER))
    assert _hash_and_inode(env.original(GRAD_SCALER)) == before
    # the environment's copy is a file of its own, never a link to the project's
    assert env.file(GRAD_SCALER).stat().st_ino != before[1]
    assert not (home / mutants.MUTATING).exists()


def _start_and_wait_until_judging(home: Path, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen(_command(home, out, KILLED_BY_A_CHECK) + ["--again", "check"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 120
    while not (home / mutants.MUTATING).exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.1)
    time.sleep(1.5)  # the judge's run under way
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_command_restores_the_module(smoke, sig, status):
    _, env, before, home, out = smoke
    proc = _start_and_wait_until_judging(home, out)
    assert mutants.sha256(env.file(GRAD_SCALER)) != mutants.sha256(env.original(GRAD_SCALER))
    proc.send_signal(sig)
    got = proc.wait(60)
    said = proc.stdout.read()
    assert got == status, said[-3000:]
    assert "the module is restored" in said
    assert mutants.sha256(env.file(GRAD_SCALER)) == mutants.sha256(env.original(GRAD_SCALER))
    assert _hash_and_inode(env.original(GRAD_SCALER)) == before
    assert not (home / mutants.MUTATING).exists()


@pytest.mark.slow
def test_a_killed_command_leaves_the_next_one_to_restore_the_module(smoke):
    _, env, before, home, out = smoke
    proc = _start_and_wait_until_judging(home, out)
    proc.kill()
    proc.wait(30)
    assert mutants.sha256(env.file(GRAD_SCALER)) != mutants.sha256(env.original(GRAD_SCALER))
    # the judge it had started ends with it (SIGTERM on its parent's death)
    deadline = time.monotonic() + 60
    while _judges_alive(home):
        assert time.monotonic() < deadline, "a judge outlived the command"
        time.sleep(0.5)
    lines = []
    mutants.prepare(home, log=lines.append)
    assert lines == ["put back torch/amp/grad_scaler.py, left mutated by a command that was "
                     "killed"]
    assert mutants.sha256(env.file(GRAD_SCALER)) == mutants.sha256(env.original(GRAD_SCALER))
    assert _hash_and_inode(env.original(GRAD_SCALER)) == before


def _judges_alive(home: Path) -> bool:
    python = str(home / "env" / "bin" / "python")
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode() == python:
                    return True
            except OSError:
                continue
    return False


# ---------------------------------------------------------------- the committed campaign

RECORDS = ROOT / "results" / "validation" / "mutation"
VERDICTS = {"equivalent", "outside", "missed"}


def _committed():
    import json

    triage = json.loads((RECORDS / "triage.json").read_text()) \
        if (RECORDS / "triage.json").exists() else {}
    found = [mutants.read_record(p) for p in sorted(RECORDS.glob("*.json"))
             if p.name not in ("triage.json", "not-reached.json")]
    return found, triage


def test_every_survivor_of_the_committed_campaign_is_triaged():
    """Each mutant the suite let survive, now or before a check was added, has a verdict with
    its reason; a missed one names the check (or the case) added since, and it now kills the
    mutant: by a failed check, or, for a case, as PyTorch's own tests do, by a crash."""
    found, triage = _committed()
    for record in found:
        verdicts = triage.get(record.target.path, {})
        for name in record.sample:
            entry = record.judged.get(name)
            if entry is None:
                continue
            now = record.judgement(name, "suite")
            before = [Judgement.from_json(j) for j in entry.get("earlier", [])]
            if now.fate is not Fate.SURVIVED and all(b.fate is not Fate.SURVIVED
                                                     for b in before):
                continue
            v = verdicts.get(name)
            assert v and v["verdict"] in VERDICTS and v["why"], (record.target.path, name)
            if v["verdict"] == "missed":
                case_added = v["check"].startswith(f"{record.suite}/")
                assert (now.fate is Fate.CHECK or case_added and now.fate is Fate.ERROR) and any(
                    by.startswith(v["check"] + ":") if case_added else v["check"] in by
                    for by in now.by), (record.target.path, name, now)
            else:
                assert now.fate is Fate.SURVIVED, (record.target.path, name, now)
