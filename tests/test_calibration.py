"""A machine's calibration: from an A/A's rounds, each figure's and family's spread, whether
its level is drawn per process, and each benchmark's rounds factor; read back only for the
hardware it was measured on."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import records
from harness.cases import Context
from harness.comparing import calibrate, calibration, compare

BIN = Path(sys.executable).parent
MACHINE = {"name": "m", "cpu": {"model": "EPYC", "logical_cores": 2, "flags": {"avx2": True}},
           "gpus": []}


def _figure(rng, case: str, level: float, i: int, within: float = 0.01) -> records.Metric:
    """A time figure of `case` at `level`, from 30 samples that scatter `within` (log)."""
    ctx = Context("cpu", "quick", {})
    samples = list(level * rng.lognormal(0, within, 30))
    ctx.metric("t", float(np.median(samples)), "s", kind="time", better="lower",
               samples=samples, labels={"i": i})
    return ctx.metrics[0].record()


def _side(rng, rounds: int, per_process: dict[str, float]) -> list[records.Run]:
    """One side's runs: per round one process per case, each case's level drawn anew per
    process with the given log spread (0: the samples alone predict the rounds)."""
    runs = []
    for _ in range(rounds):
        for case, sd in per_process.items():
            level = float(rng.lognormal(0, sd))
            result = records.Result("s", case, "pass", device="cpu", metrics=tuple(
                _figure(rng, case, level, i) for i in range(4)))
            runs.append(records.new_run(MACHINE, "quick").with_result(result))
    return runs


def test_an_aa_gives_each_figure_and_family_its_spread_and_who_draws_per_process():
    rng = np.random.default_rng(1)
    spreads = {"noisy": 0.12, "steady": 0.0}
    a, b = _side(rng, 8, spreads), _side(rng, 8, spreads)
    cal = calibrate.measure(a, b, MACHINE, ["s.noisy", "s.steady"], 5, {"rounds": 8})
    noisy = cal.families[("s/noisy", "time")]
    steady = cal.families[("s/steady", "time")]
    assert 0.1 < noisy.sd < 0.3 and steady.sd < 0.02  # sqrt(2) x 12% for a ratio of two
    assert noisy.per_process is True and steady.per_process is False
    assert all(s.df == 7 for s in cal.figures.values())
    # the noisy one needs more rounds than the comparison's 5 to detect twice the tolerance
    assert cal.rounds_factor["s.noisy"] > 1 and cal.rounds_factor["s.steady"] == 1
    assert cal.rounds_factor["s.noisy"] <= calibrate.MAX_ROUNDS_FACTOR
    # read back as written
    again = calibration.Calibration.from_json(json.loads(json.dumps(cal.to_json())))
    assert again.figures == cal.figures and again.families == cal.families
    doc = cal.to_json()
    (fam,) = [f for f in doc["families"] if f["case"] == "s/noisy"]
    assert fam["rounds_for"]["0.05"] > fam["rounds_for"]["0.1"] > 5
    assert fam["detectable_at"]["5"] > fam["detectable_at"]["20"]


def test_a_figure_measured_in_sessions_takes_its_process_spread_from_them():
    """Within one process, a figure timed in sessions (a duet's, bursts') varies as its
    sessions do, over their number; without sessions, as its interval says; a figure with
    neither (a count, say) lends nothing."""
    # two sessions e^-0.1 and e^0.1: logs -0.1 and 0.1, whose sample variance is 0.02, so
    # their mean (the figure) varies by 0.02 / 2 in log terms
    with_sessions = records.Metric("t", 1.0, "s", "time", "lower", stats={"ci": [0.5, 2.0]},
                                   sessions=[math.exp(-0.1), math.exp(0.1)])
    with_interval = records.Metric("u", 1.0, "s", "time", "lower", stats={"ci": [0.9, 1.1]})
    bare = records.Metric("n", 3.0, "count", "count", "lower")
    result = records.Result("s", "c", "pass", device="cpu",
                            metrics=(with_sessions, with_interval, bare))
    within = calibrate._within_process([records.new_run(MACHINE, "quick").with_result(result)])
    key = result.case_key
    assert within[(key, with_sessions.key)][0] == pytest.approx(0.01)
    assert 0 < within[(key, with_interval.key)][0] < 0.01  # not the sessions' wide interval
    assert (key, bare.key) not in within


def test_detectable_change_and_rounds_agree():
    var = 0.08 ** 2
    n = calibration.rounds_for(var, 0.10)
    assert calibration.detectable(var, n) <= 0.10 < calibration.detectable(var, n - 1)
    assert calibration.rounds_for(0.0, 0.05) == 2


def test_a_calibration_is_used_only_on_the_hardware_it_measured(tmp_path):
    cal = calibration.Calibration(MACHINE, {}, {("s/c", "time"): calibration.Spread(0.01, 9)},
                                  {"s.c": 2}, measured={"rounds": 8, "started": "2026-12-03"})
    calibration.write(cal, tmp_path)
    got, line = calibration.for_machine(MACHINE, tmp_path)
    assert got is not None and got.rounds_factor == {"s.c": 2} and "8 rounds" in line
    moved = copy.deepcopy(MACHINE)
    moved["cpu"]["flags"]["avx512f"] = True
    got, line = calibration.for_machine(moved, tmp_path)
    assert got is None and "other hardware" in line and "conservative" in line
    got, line = calibration.for_machine({**MACHINE, "name": "other"}, tmp_path)
    assert got is None and "no calibration of other" in line
    # a file that is not a calibration (another tool's, a truncated write): the defaults, said
    path = calibration.path_for(MACHINE["name"], tmp_path)
    path.write_text(json.dumps({"schema": "release-bench-run/2"}))
    got, line = calibration.for_machine(MACHINE, tmp_path)
    assert got is None and line.startswith(
        f"calibration {path.name} unreadable (not a calibration ('release-bench-run/2')): "
        "conservative defaults")
    path.write_text('{"schema": ')
    assert calibration.for_machine(MACHINE, tmp_path)[1].startswith(
        f"calibration {path.name} unreadable (Expecting value")
    # a rounds count beyond reach is none, not a number past the cap
    assert calibration.rounds_for(1.0, 0.01, most=1000) is None


def test_the_calibrations_floor_holds_a_figure_that_looked_steady_by_chance():
    """Three rounds in which a figure whose level this machine draws per process happened to
    agree: the calibration's spread keeps it from being called a regression."""
    from harness.comparing import campaign

    rng = np.random.default_rng(5)
    steady = _side(rng, 3, {"c": 0.0})
    slower = [dataclasses.replace(run, results=tuple(
        dataclasses.replace(e, metrics=tuple(
            dataclasses.replace(m, value=m.value * 1.1, samples=[x * 1.1 for x in m.samples])
            for m in e.metrics)) for e in run.results)) for run in steady]
    reps = campaign.round_values(steady, slower)
    a, b = campaign.merge_runs(steady, "ab"), campaign.merge_runs(slower, "ab")
    bare = calibration.Calibration(MACHINE, {}, {}, {})
    assert {c.verdict for c in compare.compare_runs(a, b, compare.AB_THRESHOLDS,
                                                    replicates=reps, cal=bare)} == {"regression"}
    wide = calibration.Calibration(MACHINE, {}, {("s/c", "time"): calibration.Spread(0.04, 50)},
                                   {})
    assert {c.verdict for c in compare.compare_runs(a, b, compare.AB_THRESHOLDS,
                                                    replicates=reps, cal=wide)} == {
        "inconclusive"}


def test_calibrate_keeps_the_calibration_of_other_hardware_of_the_same_name(tmp_path, capsys):
    from harness import cli
    from harness.running import machine

    theirs = copy.deepcopy(machine.fingerprint())
    flags = theirs["cpu"]["flags"]
    flags["avx512f"] = not flags.get("avx512f")
    cal = calibration.Calibration(theirs, {}, {("s/c", "time"): calibration.Spread(0.01, 9)},
                                  {"s.c": 2}, measured={"rounds": 8})
    path = calibration.write(cal, tmp_path)
    before = path.read_text()
    assert cli.main(["calibrate", "--suite", "profiler", "--case", "overhead", "--rounds", "3",
                     "--sequential", "--out", str(tmp_path),
                     "--work", str(tmp_path / "work")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "other hardware" in err and "avx512f" in err
    assert path.read_text() == before and not (tmp_path / "work").exists()


def test_calibrate_passes_over_an_unreadable_calibration_and_says_why_its_ab_cannot_run(
        tmp_path, capsys):
    """An unreadable file in the calibration's place holds nothing a reader could use: it is
    no reason to refuse (only other hardware's calibration is); an A/A that cannot start is
    one line, exit 2, and nothing is written."""
    from harness import cli
    from harness.running import machine

    path = calibration.path_for(machine.fingerprint()["name"], tmp_path, "sequential")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    assert cli.main(["calibrate", "--suite", "fork_wait", "--python", str(tmp_path / "none"),
                     "--out", str(tmp_path), "--work", str(tmp_path / "work")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "calibrate: " in err and "neither a venv folder" in err
    assert path.read_text() == "{not json" and not (tmp_path / "work").exists()


@pytest.mark.slow
def test_calibrate_runs_an_aa_here_and_writes_the_machines_calibration(tmp_path):
    """A real calibration: an A/A campaign of the profiler's overhead (one live campaign of the
    test suite, so its ab folder is checked here too), and the calibration written from it."""
    from harness.comparing import campaign

    out = subprocess.run([BIN / "release-bench", "calibrate", "--suite", "profiler", "--case",
                          "overhead", "--rounds", "3", "--sequential",
                          "--out", str(tmp_path / "cal"),
                          "--work", str(tmp_path / "work")],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    where = next((tmp_path / "work").glob("ab-*"))
    _check_the_ab_folder(where, rounds=3)
    (path,) = (tmp_path / "cal").glob("*.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == calibration.SCHEMA and doc["measured"]["rounds"] == 3
    assert f"calibration of sequential rounds written to {path}" in out.stdout
    # judged without a calibration, 3 rounds decide nothing either way (compare's
    # MIN_ROUNDS_UNCALIBRATED): a profiler step's level drawn per process lined up on 3
    # rounds here and was called a change
    counts = doc["measured"]["aa_counts"]
    assert counts["regression"] == counts["improvement"] == counts["unchanged"] == 0, counts
    busy = [e.contended() for runs in campaign.load_rounds(where).values() for run in runs
            for e in run.results if not e.valid]
    if busy:
        # a round measured on a contended machine is left out: 3 rounds then leave too few
        # pairs to measure a spread from, and the calibration has no figures to check
        pytest.skip(f"an A/A round was measured contended ({busy[0]})")
    assert {f["case"] for f in doc["families"]} == {"profiler/overhead"}
    assert "profiler.overhead" in doc["rounds_factor"]
    assert "rounds for 10%" in out.stdout
    # compare and ab read it by the machine's name: here, through --calibration
    assert calibration.Calibration.from_json(doc).figures


def _check_the_ab_folder(where: Path, rounds: int) -> None:
    """A campaign's folder: its rounds round by round, each side's merged run and log, the
    verdicts, and `ab --judge` giving the same verdicts again from the stored rounds."""
    cmp = json.loads((where / "comparison.json").read_text())
    assert sum(cmp["counts"].values()) == len(cmp["changes"]) >= 4
    folders = sorted(f.name for f in (where / "rounds").iterdir())
    assert folders == [f"profiler.overhead-{r:02d}-{s}" for r in range(rounds) for s in "AB"]
    for side in ("A", "B"):
        run = records.read_run(where / f"side-{side}.json")
        assert run.ab["schedule"] == "ABBAAB"[:2 * rounds]
        assert {e.details["rounds"] for e in run.results} == {rounds}
        assert (where / "logs" / f"side-{side}.log").stat().st_size > 0
    again = subprocess.run([BIN / "release-bench", "ab", "--judge", str(where),
                            "--calibration", "none"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads((where / "comparison.json").read_text())["changes"] == cmp["changes"]


def test_a_calibration_holds_no_spread_for_a_figure_without_a_relative_one():
    """A count, and a figure that reads zero in a round (a time below the clock's resolution),
    have no spread of log ratios: the calibration leaves them out rather than holding a
    spread of nothing, and still calibrates the case's other figures."""
    rng = np.random.default_rng(5)
    runs = {"a": [], "b": []}
    for side in runs.values():
        for r in range(6):
            ctx = Context("cpu", "quick", {})
            ctx.metric("t", float(rng.lognormal(0, 0.05)), "s", kind="time", better="lower")
            ctx.metric("events", 120.0, "events", kind="count")
            ctx.metric("gap", 0.0 if r == 3 else 1e-6, "s", kind="time", better="lower")
            result = records.Result("s", "c", "pass", device="cpu",
                                    metrics=tuple(m.record() for m in ctx.metrics))
            side.append(records.new_run(MACHINE, "quick").with_result(result))
    cal = calibrate.measure(runs["a"], runs["b"], MACHINE, ["s.c"], 5, {"rounds": 6})
    assert {key.name for (_case, key) in cal.figures} == {"t"}
    assert cal.figures[(records.CaseKey("s", "c", "cpu"), records.MetricKey.of("t"))].df == 5
