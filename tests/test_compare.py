"""Verdicts: one set of statistics per metric, a test plus a tolerance, corrected for the number
of metrics; unverified without samples; history bands; the machine guard."""

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
from inprocess import release_bench

from harness import records, stats
from harness.cases import Context
from harness.comparing import calibration, compare

BIN = Path(sys.executable).parent
MACHINE = {"name": "m", "cpu": {"model": "Xeon", "logical_cores": 2,
                                "flags": {"avx512f": True, "amx_tile": True}}, "gpus": []}

KEY = records.CaseKey("s", "c", "cpu")  # a figure's case, where it matters not


def _samples(rng, centre: float, n: int = 40, spread: float = 0.03) -> list[float]:
    return list(centre * rng.lognormal(0.0, spread, n))


def _run(metrics: list[records.Metric | dict], machine: dict | None = None,
         **entry) -> records.Run:
    """A run of one result of case s/c (or as `entry` says) with `metrics`; fields a result
    does not have (an `index`, say) are kept as its extra fields."""
    result = records.Result.from_json({
        "suite": "s", "case": "c", "kind": "benchmark", "device": "cpu", "params": {},
        "outcome": "pass", "reason": "", **entry,
        "metrics": [m if isinstance(m, dict) else m.to_json() for m in metrics]})
    return records.new_run(copy.deepcopy(machine or MACHINE), "quick").with_result(result)


def _metric(name: str, samples: list[float] | None, kind: str = "time", q: float = 0.5,
            labels: dict | None = None, value: float | None = None) -> records.Metric:
    ctx = Context("cpu", "quick", {})
    if samples is None:
        m = ctx.metric(name, value, "s", kind=kind, better="lower", labels=labels)
    else:
        m = ctx.metric(name, float(np.quantile(samples, q)) if value is None else value, "s",
                       kind=kind, better="lower", samples=samples, q=q, labels=labels)
    return m.record()


def test_summary_keeps_bounded_samples_and_one_set_of_statistics():
    xs = list(np.random.default_rng(0).lognormal(0, 0.1, 1000))
    m = _metric("t", xs)
    assert len(m.samples) == stats.MAX_SAMPLES and m.count == 1000
    st = m.stats
    assert st["p25"] <= st["median"] <= st["p75"]
    assert st["ci"][0] <= st["median"] <= st["ci"][1]
    assert set(st) >= {"n", "median", "p25", "p75", "ci", "ci_level"}
    records.validate(_run([m]).to_json())


def test_a_ratio_carries_a_bootstrap_interval_from_its_inputs():
    rng = np.random.default_rng(1)
    ctx = Context("cpu", "quick", {})
    m = ctx.ratio("speedup", _samples(rng, 2.0), _samples(rng, 1.0))
    lo, hi = m.stats["ci"]
    assert lo < m.value < hi and 1.9 < lo and hi < 2.1
    assert len(m.samples) == 40  # paired block ratios, what compare tests


def _history(rng, metrics: int, runs: int = 4, between: float = 0.03,
             within: float = 0.2, level: float = 1.0) -> list[dict]:
    """Runs whose figures wander `between` (log sd) from run to run, each with samples."""
    return [_run([_metric("t", _samples(rng, level * rng.lognormal(0, between), spread=within),
                          labels={"i": i}) for i in range(metrics)]) for _ in range(runs)]


def test_identical_distributions_across_many_metrics_flag_nothing():
    """300 metrics from the same distributions, run after run: the tests, corrected for
    their number, leave every one unflagged, though many move past a tolerance by chance."""
    rng = np.random.default_rng(2)
    history = _history(rng, 300)
    cand = _history(rng, 300, runs=1)[0]
    changes = compare.compare_runs(history[-1], cand, {"time": 0.02}, history=history)
    assert sum(abs(c.beyond) for c in changes) > 10  # the tolerance alone would cry wolf
    assert compare.counts(changes)["regression"] == 0
    assert compare.counts(changes)["improvement"] == 0
    assert all(c.adjusted is not None for c in changes)  # every one was tested


def test_a_real_slowdown_is_a_regression_with_its_interval():
    rng = np.random.default_rng(3)
    history = [_run([_metric("t", _samples(rng, lv)), _metric("u", _samples(rng, lv))])
               for lv in (1.0, 1.02, 0.99)]
    b = _run([_metric("t", _samples(rng, 1.25)), _metric("u", _samples(rng, 1.0))])
    changes = {c.metric: c for c in compare.compare_runs(history[-1], b, history=history)}
    assert changes["t"].verdict == "regression"
    # the interval is of the change judged: the candidate against the history's level
    lo, hi = changes["t"].interval
    judged = changes["t"].judged_factor
    assert lo < judged < hi and lo > 1.1
    assert changes["t"].detectable < 0.25  # what this history lets through
    # "u" moved by less than its spread between runs: inside its 15% tolerance
    assert changes["u"].verdict == "unchanged", changes["u"].why
    assert 0.85 < changes["u"].interval[0] < changes["u"].interval[1] < 1.15
    assert compare.fmt_change(changes["t"]).startswith(f"{judged:.3g}x [")


def test_the_interval_is_the_judged_changes_and_carries_the_spread_between_runs():
    """ab's figures: each side's value is the median of its rounds' values, its samples the
    rounds' pooled. The rounds wander 10% from process to process while each round's samples
    are tight, so the samples' interval alone would be narrow; the interval shown is of the
    change judged (the rounds' values), as wide as the rounds' spread makes it, and a figure
    whose interval reaches from an improvement to a regression is inconclusive."""
    rng = np.random.default_rng(7)
    a_rounds, b_rounds = [1.0, 1.12, 0.93], [1.18, 1.02, 1.3]
    changes = []
    for i in range(4):  # a family of four such figures, as the sizes of one GEMM
        def side(levels, i=i):
            xs = [x for lv in levels for x in _samples(rng, lv, n=20, spread=0.01)]
            return _metric("t", xs, value=float(np.median(levels)), labels={"n": i})
        changes.append((side(a_rounds), side(b_rounds)))
    a = _run([m for m, _ in changes])
    b = _run([m for _, m in changes])
    key = a.results[0].case_key
    reps = {(key, m.key): compare.RoundValues(a_rounds, b_rounds)
            for m, _ in changes}
    for c in compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps):
        lo, hi = c.interval
        assert lo < c.judged_factor < hi
        assert hi / lo > 1.2  # the rounds' spread, not the samples'
        within_lo, within_hi = c.interval_within_runs
        assert within_hi / within_lo < 1.2
        assert lo < 0.95 and hi > 1.05 and c.verdict == "inconclusive"  # the interval says why
        assert "past the 5% tolerance" in c.why and "detectable change" in c.why


def test_a_factor_of_values_that_are_not_the_samples_quantile_lies_in_its_interval():
    """ab's merged value is the median of its rounds' values, not the quantile of the pooled
    samples; without a spread between runs (a kind judged on its samples alone) the samples'
    bootstrap still bounds the factor shown, not another statistic."""
    rng = np.random.default_rng(14)
    sa, sb = _samples(rng, 1.0, n=60, spread=0.02), _samples(rng, 1.3, n=60, spread=0.02)
    a = _metric("t", sa, value=1.2)  # the rounds' median, beside the samples' 1.0
    b = _metric("t", sb, value=1.3)
    c = compare.compare_metric(KEY, a, b, compare.DEFAULT_THRESHOLDS)
    lo, hi = c.interval
    assert lo < c.factor < hi and c.factor == pytest.approx(1.3 / 1.2)


def test_without_a_spread_between_runs_a_change_is_unverified():
    """Two runs alone cannot tell a regression from run-to-run noise: no verdict."""
    rng = np.random.default_rng(3)
    a = _run([_metric("t", _samples(rng, 1.0))])
    b = _run([_metric("t", _samples(rng, 1.5))])
    (c,) = compare.compare_runs(a, b)
    assert c.verdict == "unverified" and "spread between runs is unknown" in c.why
    assert c.pvalue < 1e-6  # though the samples within the runs differ beyond doubt


def test_a_tail_shift_is_judged_on_the_tail():
    """p99 moves (a slow mode appears) while the median does not: the quantile test sees it."""
    rng = np.random.default_rng(4)

    def calls():
        return _samples(rng, 1.0, n=400, spread=0.02)

    history = [_run([_metric("p99", calls(), q=0.99, kind="latency")]) for _ in range(3)]
    base = calls()
    tail = base[:360] + [3.0] * 40
    b = _run([_metric("p99", tail, q=0.99, kind="latency")])
    (c,) = compare.compare_runs(history[-1], b, history=history)
    assert c.verdict == "regression" and c.factor > 2
    # the same calls' median barely moved; without a history its spread between runs is
    # unknown, so no verdict either way
    (m,) = compare.compare_runs(_run([_metric("p50", base, kind="latency")]),
                                _run([_metric("p50", tail, kind="latency")]))
    assert m.verdict == "unverified" and abs(m.factor - 1) < 0.05


def test_metrics_without_samples_are_unverified_never_regressions():
    a = _run([_metric("t", None, value=1.0)])
    b = _run([_metric("t", None, value=3.0)])
    (c,) = compare.compare_runs(a, b)
    assert c.verdict == "unverified" and c.beyond == -1 and "no samples" in c.why


def test_version_1_records_are_read_and_their_metrics_unverified(tmp_path):
    v1 = _run([records.Metric("p50[gloo,4B]", 1.0, "s", "latency", "lower",
                              stats={"median": 1.0, "iqr": 0.1})])
    path = records.write_run(tmp_path / "v1.json", dataclasses.replace(v1, schema_version=1))
    old = records.read_run(path)
    (c,) = compare.compare_runs(old, old)
    assert c.verdict == "unverified"


def test_contended_results_are_left_out_and_said_so():
    rng = np.random.default_rng(5)
    a = _run([_metric("t", _samples(rng, 1.0))])
    b = _run([_metric("t", _samples(rng, 2.0))],
             telemetry={"valid": False, "invalid_reasons": ["host busy: 90%"]})
    (c,) = compare.compare_runs(a, b)
    assert c.verdict == "unverified" and "host busy" in c.why


def test_a_gpu_at_its_power_cap_on_one_side_only_is_said_and_not_judged():
    """Both sides valid, but the candidate's GPU ran at its power cap and the baseline's did
    not: its figures were measured at other clocks, so the change is not judged; the same
    cap on both sides is judged as usual (here: without a history, on its samples alone)."""
    rng = np.random.default_rng(5)

    def tel(*reasons):
        return {"valid": True, "invalid_reasons": [], "gpus": [
            {"label": "gpu0", "clocks_event_reasons_seen": list(reasons)}]}

    a = _run([_metric("t", _samples(rng, 1.0))], telemetry=tel())
    b = _run([_metric("t", _samples(rng, 2.0))], telemetry=tel("sw_power_cap"))
    (c,) = compare.compare_runs(a, b)
    assert c.verdict == "unverified"
    assert c.why == ("GPU clock limits differ between the sides: gpu0 sw_power_cap in the "
                     "candidate only")
    a = _run([_metric("t", _samples(rng, 1.0))], telemetry=tel("sw_power_cap"))
    (c,) = compare.compare_runs(a, b)
    assert c.why.startswith("the spread between runs is unknown")  # judged, no history


def test_a_contended_run_in_the_history_lends_no_figure_to_the_spread_between_runs():
    """A history run that telemetry found contended is left out of the history as it is of
    a comparison: its level (here twice the others) would widen the spread between runs."""
    rng = np.random.default_rng(6)
    busy = {"valid": False, "invalid_reasons": ["host busy: 90%"]}
    history = [_run([_metric("t", _samples(rng, lv, spread=0.01))], **extra)
               for lv, extra in ((1.0, {}), (2.0, {"telemetry": busy}), (1.01, {}), (0.99, {}))]
    (values,) = compare.history_replicates(history).values()
    assert len(values.baseline) == 3 and max(values.baseline) < 1.05, values.baseline


def test_the_spread_between_runs_absorbs_wandering_and_passes_a_step_outside_it():
    rng = np.random.default_rng(6)
    # five earlier runs whose level wanders +-10% between runs, though each is tight within
    levels = [1.0, 1.1, 0.92, 1.05, 0.97]
    history = [_run([_metric("t", _samples(rng, lv, spread=0.01))]) for lv in levels]
    within = _run([_metric("t", _samples(rng, 1.12, spread=0.01))])
    outside = _run([_metric("t", _samples(rng, 1.6, spread=0.01))])
    (c,) = compare.compare_runs(history[-1], within, history=history)
    assert c.pvalue < 1e-6  # within-run statistics alone would cry wolf
    # not flagged; nor unchanged: runs that wander 10% cannot show 12% inside a 15% tolerance
    assert c.verdict == "inconclusive" and c.p_between > 0.05
    assert c.band[0] < 1.12 < c.band[1] and c.detectable > 0.1
    (c,) = compare.compare_runs(history[-1], outside, history=history)
    assert c.verdict == "regression"


def test_a_metric_noisier_than_its_family_keeps_its_own_spread():
    """The family's spread moderates a metric's own, never hides a metric that is noisy."""
    rng = np.random.default_rng(10)
    runs = []
    for _ in range(4):
        quiet = [_metric("t", _samples(rng, rng.lognormal(0, 0.01), spread=0.01),
                         labels={"i": i}) for i in range(8)]
        noisy = _metric("t", _samples(rng, rng.lognormal(0, 0.3), spread=0.01),
                        labels={"i": "noisy"})
        runs.append(_run([*quiet, noisy]))
    cand = _run([_metric("t", _samples(rng, 1.3, spread=0.01), labels={"i": i})
                 for i in [*range(8), "noisy"]])
    changes = {c.labels["i"]: c for c in compare.compare_runs(runs[-1], cand, history=runs)}
    assert all(changes[i].verdict == "regression" for i in range(8))
    assert changes["noisy"].detectable > changes[0].detectable


def test_history_restarts_after_a_step():
    values = [1.0, 1.01, 0.99, 1.0, 2.0, 2.02, 1.98, 2.01]
    assert compare._current_segment(values) == values[4:]


def _write(tmp_path: Path, name: str, run: records.Run) -> Path:
    return records.write_run(tmp_path / name, run)


def _compare(capsys, *args: str) -> subprocess.CompletedProcess:
    # the conservative defaults: the verdicts must not depend on the committed calibration
    return release_bench(capsys, "compare", *map(str, args), "--calibration", "none")


def test_compare_refuses_verdicts_across_machines_and_names_the_fields(tmp_path, capsys):
    rng = np.random.default_rng(7)
    other = copy.deepcopy(MACHINE)
    other["cpu"]["flags"]["amx_tile"] = False
    other["cpu"]["logical_cores"] = 4
    a = _write(tmp_path, "a.json", _run([_metric("t", _samples(rng, 1.0))]))
    b = _write(tmp_path, "b.json", _run([_metric("t", _samples(rng, 1.0))], machine=other))
    out = _compare(capsys, a, b)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "logical cores (2 vs 4)" in out.stderr and "amx_tile" in out.stderr
    judged = _compare(capsys, a, b, "--across-machines")
    assert judged.returncode == 0 and "different hardware, judged anyway" in judged.stdout


def test_compare_takes_the_baselines_folder_as_history_and_prints_what_it_can_detect(
        tmp_path, capsys):
    rng = np.random.default_rng(8)
    hist = tmp_path / "hist"
    for i, lv in enumerate([1.0, 1.1, 0.92, 1.05]):
        _write(hist, f"2026010{i}T000000Z-quick.json",
               _run([_metric("t", _samples(rng, lv), labels={"i": j}) for j in range(6)]))
    base, cand = hist / "20260103T000000Z-quick.json", _write(
        tmp_path, "c.json",
        _run([_metric("t", _samples(rng, 1.12), labels={"i": j}) for j in range(6)]))
    out = _compare(capsys, base, cand, "--json", tmp_path / "c.json.out")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "history: 4 runs; minimum detectable change" in out.stdout
    changes = json.loads((tmp_path / "c.json.out").read_text())
    # nothing flagged; a 12% move against runs that wander 10% is not shown either way
    assert {c["verdict"] for c in changes} == {"inconclusive"}
    assert "0 regression, 0 improvement, 0 worse, 0 better, 6 inconclusive" in out.stdout
    alone = _compare(capsys, base, cand, "--no-history")
    assert "the spread between runs is unknown" in alone.stdout


def test_compare_history_reads_only_this_machines_runs_from_the_folder_it_names(tmp_path,
                                                                                 capsys):
    """`compare --history DIR`: the runs of the candidate's machine and profile, read past the
    files there that are no run and the runs of other machines; a folder without one, or no
    folder, is one line and exit 2."""
    from harness import cli

    rng = np.random.default_rng(10)
    hist = tmp_path / "hist"
    for i, lv in enumerate([1.0, 1.02, 0.99]):
        _write(hist, f"2026010{i}T000000Z-quick.json", _run([_metric("t", _samples(rng, lv))]))
    (hist / "fingerprint.json").write_text('{"not": "a run"}')
    elsewhere = copy.deepcopy(MACHINE) | {"name": "another-machine"}
    _write(tmp_path / "others", "20260101T000000Z-quick.json",
           _run([_metric("t", _samples(rng, 1.0))], machine=elsewhere))
    base = _write(tmp_path, "a.json", _run([_metric("t", _samples(rng, 1.0))]))
    cand = _write(tmp_path, "b.json", _run([_metric("t", _samples(rng, 1.0))]))
    common = [str(base), str(cand), "--calibration", "none", "--history"]
    assert cli.main(["compare", *common, str(hist)]) == 0
    assert "history: 3 runs; minimum detectable change" in capsys.readouterr().out
    for folder, says in ((tmp_path / "others", "no runs of machine"),
                         (tmp_path / "nowhere", "not a folder of runs")):
        assert cli.main(["compare", *common, str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


def test_the_history_leaves_out_runs_of_the_same_name_on_other_hardware(tmp_path, capsys):
    """A VM keeps its name on a new host CPU: the old host's steady runs must not make a
    figure that differs on this one look like a regression (an A/A here flagged Gloo's
    27x over the floor so, against three runs of a CPU without avx_vnni)."""
    rng = np.random.default_rng(9)
    old = copy.deepcopy(MACHINE)
    old["cpu"]["flags"]["amx_tile"] = False
    hist = tmp_path / "hist"
    for i in range(3):
        _write(hist, f"2026010{i}T000000Z-quick.json",
               _run([_metric("t", _samples(rng, 1.0, spread=0.01))], machine=old))
    base = _write(hist, "20260105T000000Z-quick.json", _run([_metric("t", _samples(rng, 1.0))]))
    cand = _write(tmp_path, "c.json", _run([_metric("t", _samples(rng, 1.5))]))
    out = _compare(capsys, base, cand, "--json", tmp_path / "c.json.out")
    assert "history: 3 run(s) of" in out.stdout and "amx_tile" in out.stdout, out.stdout
    (c,) = json.loads((tmp_path / "c.json.out").read_text())
    assert c["verdict"] == "unverified" and "spread between runs is unknown" in c["why"]


def test_ab_takes_the_history_of_this_machines_hardware(tmp_path):
    """`ab --history DIR` keeps the runs of this machine's hardware: it compares them with
    this machine's whole fingerprint, not its name alone (with the name alone every run
    differed in CPU model, and ab refused the folder)."""
    import argparse

    from harness.commands import ab as ab_command
    from harness.running import machine

    here = _run([_metric("t", [1.0, 1.1, 1.2])], machine=machine.fingerprint())
    elsewhere = _run([_metric("t", [1.0, 1.1, 1.2])],
                     machine={**MACHINE, "name": machine.machine_name()})
    _write(tmp_path, "20260101T000000Z-quick.json", here)
    _write(tmp_path, "20260102T000000Z-quick.json", elsewhere)
    args = argparse.Namespace(no_history=False, history=str(tmp_path), profile="quick")
    (kept,) = ab_command.history_floor(args)
    assert kept.machine == here.machine


def test_in_ab_the_history_keeps_a_flipping_metric_from_looking_steady():
    """ab's two rounds a side agree by chance on a metric that flips between two levels from
    process to process; the machine's history has seen it flip, so no verdict."""
    rng = np.random.default_rng(11)
    quiet = [_metric("t", _samples(rng, 1.0, spread=0.01), labels={"i": i}) for i in range(6)]

    def run(flip: float) -> records.Run:
        return _run([*quiet, _metric("t", _samples(rng, flip, spread=0.01),
                                     labels={"i": "flips"})])

    a_rounds, b_rounds = [run(1.0), run(1.0)], [run(1.5), run(1.5)]
    from harness.comparing import campaign

    reps = campaign.round_values(a_rounds, b_rounds)
    a, b = campaign.merge_runs(a_rounds, "ab"), campaign.merge_runs(b_rounds, "ab")
    bare = _calibration()  # a calibration without floors: two rounds may then decide
    alone = {c.labels["i"]: c for c in compare.compare_runs(a, b, replicates=reps, cal=bare)}
    assert alone["flips"].verdict == "regression"  # the rounds alone cry wolf
    history = [run(lv) for lv in (1.0, 1.5, 1.0, 1.5, 1.5, 1.0)]
    judged = {c.labels["i"]: c for c in compare.compare_runs(a, b, replicates=reps,
                                                             history=history, cal=bare)}
    assert judged["flips"].verdict == "inconclusive", judged["flips"].why
    # without a calibration, two rounds decide nothing at all: not judged, and open to more
    uncalibrated = {c.labels["i"]: c for c in compare.compare_runs(a, b, replicates=reps)}
    assert uncalibrated["flips"].verdict == "unverified"
    assert "2 paired rounds decide nothing" in uncalibrated["flips"].why
    assert uncalibrated["flips"].undecided and uncalibrated["flips"].rounds_to_decide >= 5


def test_without_a_calibration_a_level_drawn_per_process_needs_five_rounds_to_decide():
    """The profiler step of a 3-round A/A here: every A process drew the slow level (99, 101,
    102 ms), every B the fast one (78, 77, 80 ms). A t-test on two degrees of freedom calls
    that an improvement; without this machine's calibration fewer than 5 rounds decide
    nothing. With 5 rounds of a real 22% change, the verdict is given."""
    from harness.comparing import campaign

    rng = np.random.default_rng(5)

    def runs(levels: list[float]) -> list[records.Run]:
        return [_run([_metric("step", _samples(rng, lv, spread=0.01), labels={"mode": m})
                      for m in ("on", "off", "memory")]) for lv in levels]

    a3, b3 = runs([0.099, 0.101, 0.102]), runs([0.078, 0.077, 0.080])
    changes = compare.compare_runs(campaign.merge_runs(a3, "ab"), campaign.merge_runs(b3, "ab"),
                                   compare.AB_THRESHOLDS,
                                   replicates=campaign.round_values(a3, b3))
    assert {c.verdict for c in changes} == {"unverified"}
    assert all("would be improvement" in c.why for c in changes), [c.why for c in changes]
    a5, b5 = runs([0.099, 0.101, 0.102, 0.100, 0.098]), runs([0.078, 0.077, 0.080, 0.079, 0.078])
    changes = compare.compare_runs(campaign.merge_runs(a5, "ab"), campaign.merge_runs(b5, "ab"),
                                   compare.AB_THRESHOLDS,
                                   replicates=campaign.round_values(a5, b5))
    assert {c.verdict for c in changes} == {"improvement"}


def _rounds(levels: list[float], rng, change: float = 1.0,
            members: int = 6) -> list[records.Run]:
    """One side's rounds of a family of figures (a GEMM at six sizes): each round's level is
    the machine's state then, shared by both sides of the round."""
    return [_run([_metric("t", _samples(rng, lv * change, n=20, spread=0.005), labels={"i": i})
                  for i in range(members)]) for lv in levels]


def test_ab_judges_each_round_by_its_own_ratio():
    """The machine's state moves both sides of a round alike (here by up to 25% from round to
    round), so a true 10% slowdown hides in the spread of each side's values but not in the
    rounds' B/A ratios."""
    from harness.comparing import campaign

    levels = [1.0, 1.25, 0.9, 1.15, 0.95]
    rng = np.random.default_rng(12)
    a_rounds, b_rounds = _rounds(levels, rng), _rounds(levels, rng, change=1.1)
    reps = campaign.round_values(a_rounds, b_rounds)
    assert all(r.paired for r in reps.values())
    a, b = campaign.merge_runs(a_rounds, "ab"), campaign.merge_runs(b_rounds, "ab")
    paired = compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps)
    assert {c.verdict for c in paired} == {"regression"}
    for c in paired:
        lo, hi = c.interval
        assert lo > 1.05 and lo < c.judged_factor < hi
    unpaired = {k: compare.RoundValues(r.baseline, r.candidate) for k, r in reps.items()}
    assert {c.verdict for c in compare.compare_runs(a, b, compare.AB_THRESHOLDS,
                                                    replicates=unpaired)} == {"inconclusive"}


def _two_case_rounds(rng, small: list[float], spread: float = 0.1) -> list[records.Run]:
    """One side's rounds (one per item of `small`) of two cases: "c", six independent figures
    whose level is drawn per process (log spread `spread`, like GEMMs at six sizes), and
    "small", three figures of one loop at that round's level (the telemetry sampler's times)."""
    rounds = []
    for level in small:
        run = _run([_metric("t", _samples(rng, rng.lognormal(0, spread), n=20, spread=0.005),
                            labels={"i": i}) for i in range(6)])
        small = tuple(_metric("t", _samples(rng, level, n=20, spread=0.005), labels={"j": j})
                      for j in range(3))
        rounds.append(run.with_result(dataclasses.replace(run.results[0], case="small",
                                                          metrics=small)))
    return rounds


def _two_case_ab(seed: int, small_b: list[float]):
    """The ab of those two cases, A's small case at 1.0 and B's at `small_b` round by round;
    returns a function that judges it (when called) and gives one case's verdicts."""
    from harness.comparing import campaign

    rng = np.random.default_rng(seed)
    a_rounds = _two_case_rounds(rng, [1.0] * len(small_b))
    b_rounds = _two_case_rounds(rng, small_b)
    reps = campaign.round_values(a_rounds, b_rounds)
    a, b = campaign.merge_runs(a_rounds, "ab"), campaign.merge_runs(b_rounds, "ab")

    def verdicts(case: str, cal: calibration.Calibration | None = None) -> set[str]:
        changes = compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps, cal=cal)
        return {c.verdict for c in changes if c.case.case_id == f"s/{case}"}
    return verdicts


def _calibration(figures: dict | None = None, families: dict | None = None,
                 factors: dict | None = None) -> calibration.Calibration:
    """A calibration of MACHINE: figures' and families' spreads as given (none: each family
    stands on its own spread, no floors)."""
    return calibration.Calibration(MACHINE, figures or {}, families or {}, factors or {})


def test_a_small_family_of_alike_figures_is_held_to_what_this_machine_was_calibrated_at():
    """An A/A: every figure's level is drawn per process (about +-10%). The small case's three
    figures move together, and its five B processes all drew slow (B/A 1.07-1.16, as the
    telemetry sampler's times did in a whole-profile A/A). Its own family's spread is as small
    as each one's. Without a calibration a family is held at least as wide as its whole kind;
    with one, at least at what this machine's A/A measured for it; on its own spread alone
    (a calibration that knows nothing of it) it cries wolf."""
    verdicts = _two_case_ab(14, [1.07, 1.14, 1.1, 1.07, 1.16])
    assert verdicts("small") == {"inconclusive"}
    assert verdicts("small", _calibration()) == {"regression"}
    calibrated = _calibration(families={("s/small", "time"): calibration.Spread(0.02, 40)})
    assert verdicts("small", calibrated) == {"inconclusive"}


def test_a_small_family_still_flags_a_change_past_its_kinds_spread():
    verdicts = _two_case_ab(15, [1.5, 1.45, 1.55, 1.5, 1.52])
    assert verdicts("small") == {"regression"}
    assert verdicts("c") == {"inconclusive"}  # +-10% per process: 5 rounds cannot show 5%


def test_ab_pairs_rounds_by_round_when_one_is_left_out():
    """A contended round on one side is left out; the others keep their partners (a shift by
    one would pair the states of different rounds)."""
    from harness.comparing import campaign

    rng = np.random.default_rng(13)
    levels = [1.0, 1.3, 0.8, 1.2]
    a_rounds, b_rounds = _rounds(levels, rng), _rounds(levels, rng)
    a_rounds[1] = dataclasses.replace(a_rounds[1], results=tuple(
        dataclasses.replace(e, telemetry={"valid": False, "invalid_reasons": ["host busy"]})
        for e in a_rounds[1].results))
    reps = campaign.round_values(a_rounds, b_rounds)
    for r in reps.values():
        assert r.paired and len(r.baseline) == 3
        assert np.allclose(r.baseline, r.candidate, rtol=0.02)  # rounds 0, 2, 3 with theirs
    changes = compare.compare_runs(campaign.merge_runs(a_rounds, "ab"),
                                   campaign.merge_runs(b_rounds, "ab"),
                                   compare.AB_THRESHOLDS, replicates=reps)
    assert compare.counts(changes)["regression"] == compare.counts(changes)["improvement"] == 0


@pytest.mark.parametrize("rounds, order", [(1, "AB"), (2, "ABBA"), (3, "ABBAAB")])
def test_ab_schedule_alternates_who_goes_first(rounds, order):
    from harness.comparing import ab

    assert ab.schedule(rounds) == order


def test_ab_runs_each_benchmark_case_in_a_process_of_its_own():
    # a benchmark measured a process start apart on the two sides, not a suite apart
    from harness.comparing import campaign

    units = campaign.units(["amp", "telemetry"], skip=["clean_exit"])
    assert [(g.name, g.cases) for g in units] == [
        ("amp", ("autocast_op_lists", "grad_scaler", "accuracy_parity")),
        ("amp.train_step", ("train_step",)), ("amp.gemm_ladder", ("gemm_ladder",)),
        ("telemetry", ("host_readings", "nvml_readings")),
        ("telemetry.sampling_overhead", ("sampling_overhead",))]
    assert units[1].selection() == ["--suite", "amp", "--only", "train_step"]
    # a selection of benchmarks alone has no group of conformance cases
    assert [g.name for g in campaign.units(["amp"], case_filter="gemm")] == ["amp.gemm_ladder"]


def test_a_benchmark_whose_level_is_drawn_per_process_gets_more_rounds():
    # this machine's calibration says which (its rounds factors): ab and matrix run its
    # further rounds after the others' rounds, in the same alternation, and the record says
    # how many it had; without a calibration every benchmark has the comparison's rounds
    from harness.comparing import ab, campaign

    cal = _calibration(factors={"rpc.round_trip": 4, "ddp_rpc.step_time": 3})
    factors = {g.name: g.rounds_factor for g in campaign.units(["rpc", "ddp_rpc"], "t", cal=cal)}
    assert factors["rpc.round_trip"] == 4 and factors["ddp_rpc.step_time"] == 3
    assert factors["rpc.batched_update"] == 1 and factors["rpc"] == 1
    assert {g.rounds_factor for g in campaign.units(["rpc", "ddp_rpc"], "t")} == {1}
    more = campaign.Unit("rpc", ("round_trip",), True, 2)
    once = campaign.Unit("amp", ("gemm_ladder",), True)
    plan = campaign.plan([more, once], 2, campaign.rounds_wanted([more, once], 2))
    assert [(u.name, "AB"[i]) for u, _, i in plan] == [
        ("rpc.round_trip", "A"), ("rpc.round_trip", "B"), ("amp.gemm_ladder", "A"),
        ("amp.gemm_ladder", "B"), ("rpc.round_trip", "B"), ("rpc.round_trip", "A"),
        ("amp.gemm_ladder", "B"), ("amp.gemm_ladder", "A"),
        ("rpc.round_trip", "A"), ("rpc.round_trip", "B"), ("rpc.round_trip", "B"),
        ("rpc.round_trip", "A")]
    assert "".join("AB"[i] for u, _, i in plan if u == more) == ab.schedule(4)
    assert campaign.more_rounds([more, once], 2) == {"rpc.round_trip": 4}
    # a matrix of three sides: each round rotates the sides, the further rounds included
    sides = campaign.plan([more, once], 3, campaign.rounds_wanted([more, once], 1))
    assert [(r, u.name, i) for u, r, i in sides] == [
        (0, "rpc.round_trip", 0), (0, "rpc.round_trip", 1), (0, "rpc.round_trip", 2),
        (0, "amp.gemm_ladder", 0), (0, "amp.gemm_ladder", 1), (0, "amp.gemm_ladder", 2),
        (1, "rpc.round_trip", 1), (1, "rpc.round_trip", 2), (1, "rpc.round_trip", 0)]


def _judged(case: str, to_decide: list[int | None], verdict: str = "inconclusive"
            ) -> list[compare.Change]:
    """A benchmark's judged figures, each needing these rounds in all to be decided (None: no
    number of rounds decides it)."""
    suite, name = case.split("/")
    return [compare.Change(records.CaseKey(suite, name, "cpu"), "t", {"i": i}, "s", "time",
                           compare.Verdict(verdict), 1.0, 1.0, 1.0, None, 0.5, adjusted=0.5,
                           rounds_to_decide=n, se_log=0.1,
                           undecided=compare.open_question(compare.Verdict(verdict), 0.5))
            for i, n in enumerate(to_decide)]


def test_the_further_rounds_go_to_the_benchmarks_with_inconclusive_figures():
    from harness.comparing import campaign

    unit = campaign.Unit
    units = [unit("amp", ("grad_scaler",)), unit("amp", ("gemm_ladder",), True),
             unit("amp", ("train_step",), True), unit("rpc", ("round_trip",), True, 4),
             unit("telemetry", ("sampling_overhead",), True)]
    changes = [*_judged("amp/gemm_ladder", [7, 8, 6]),
               *_judged("amp/train_step", [12, None]),  # one no number of rounds decides
               *_judged("rpc/round_trip", [30, 70]),
               *_judged("telemetry/sampling_overhead", [9, 40], verdict="unchanged")]
    done = {u.name: u.rounds_of(5) for u in units}
    # the most any of its inconclusive figures needs, at most the cap (times its factor)
    assert campaign.rounds_to_decide(changes, units, done, 10) == {
        "amp.gemm_ladder": 8, "amp.train_step": 10, "rpc.round_trip": 40}
    # nothing further where the cap is what the comparison already had, or all are decided
    assert campaign.rounds_to_decide(changes, units, done, 5) == {}
    decided = [*_judged("amp/gemm_ladder", [7], verdict="regression")]
    assert campaign.rounds_to_decide(decided, units, done, 10) == {}
    # a change shown inside the tolerance whose interval reaches past it is still open
    reaching = [*_judged("amp/gemm_ladder", [9], verdict="worse")]
    assert campaign.rounds_to_decide(reaching, units, done, 10) == {"amp.gemm_ladder": 9}


def _fake_campaign(monkeypatch, rng) -> list:
    """A campaign's processes faked: two benchmarks whose level is drawn per process, "noisy"
    by +-15% (a GEMM in a noisy hour) and "quiet" by +-0.5%, every side the same build (an
    A/A); returns the two units."""
    from harness.comparing import campaign

    spread = {"noisy": 0.15, "quiet": 0.005}

    def fake_round(python, selection, args, out, log):
        case = selection[-1]
        run = _run([_metric("t", _samples(rng, rng.lognormal(0, spread[case]), n=20,
                                          spread=0.005), labels={"i": i}) for i in range(6)],
                   case=case)
        records.write_run(out / "m" / "run.json", run)
        return out / "m" / "run.json"

    monkeypatch.setattr(campaign, "run_round", fake_round)
    monkeypatch.setattr(campaign, "python_of", Path)
    monkeypatch.setattr(campaign, "torch_version", lambda python: "2.x")
    return [campaign.Unit("s", ("noisy",), True), campaign.Unit("s", ("quiet",), True)]


def test_ab_runs_the_further_rounds_an_inconclusive_benchmark_needs_in_the_same_alternation(
        tmp_path, monkeypatch):
    """A fake A/A of two benchmarks whose level is drawn per process: "noisy" by +-15% (a
    GEMM in a noisy hour), "quiet" by +-0.5%. The quiet one is shown unchanged in its 5
    rounds; the noisy one is inconclusive and gets further rounds, after everyone's first
    rounds, continuing its A B B A schedule, up to the cap; its verdicts use them all."""
    from harness.comparing import ab

    units = _fake_campaign(monkeypatch, np.random.default_rng(21))
    said = []
    res = ab.ab("a", "b", units, [], 5, tmp_path, said.append, max_rounds=10,
                cal=_calibration())
    meta = json.loads((res["dir"] / "ab.json").read_text())
    assert meta["more_rounds"] == {"s.noisy": 10}
    assert meta["max_rounds"]["cap"] == 10 and meta["max_rounds"]["stages"] == [{"s.noisy": 10}]
    # the verdicts before the further rounds and after them, with the rounds each had
    first, last = meta["max_rounds"]["judged"]
    assert first["rounds"]["s.noisy"] < last["rounds"]["s.noisy"] == 10
    assert first["counts"]["inconclusive"] >= 1 and sum(last["counts"].values()) == sum(
        first["counts"].values())
    assert "further rounds for the undecided figures: s.noisy 10" in said
    folders = sorted(f.name for f in (res["dir"] / "rounds").iterdir())
    assert len([f for f in folders if f.startswith("s.quiet-")]) == 10
    noisy = sorted(f.split("-")[1:] for f in folders if f.startswith("s.noisy-"))
    assert noisy == [[f"{r:02d}", side] for r in range(10) for side in "AB"]
    # the further rounds kept the alternation: each round's first side, from the log
    firsts = [line.split()[1] for line in said if "s.noisy (round" in line]
    assert "".join(firsts[::2]) == ab.schedule(10)[::2]
    assert {e.case: e.details["rounds"] for e in res["B"].results} == {
        "noisy": 10, "quiet": 5}
    verdicts = {c.case.case_id: set() for c in res["changes"]}
    for c in res["changes"]:
        verdicts[c.case.case_id].add(c.verdict)
    assert verdicts == {"s/quiet": {"unchanged"}, "s/noisy": {"inconclusive"}}  # an A/A
    # without --max-rounds, nothing further
    again = ab.ab("a", "b", units, [], 5, tmp_path / "plain", said.append)
    assert json.loads((again["dir"] / "ab.json").read_text())["more_rounds"] == {}


def test_the_matrix_runs_further_rounds_on_every_side_through_the_same_engine(
        tmp_path, monkeypatch):
    """The A/A of the test above as a matrix of three sides (one environment thrice): the
    noisy benchmark, inconclusive in some step, gets its further rounds on all three sides,
    each round in its rotation; the record keeps each stage's verdicts."""
    from harness.releases import matrix

    units = _fake_campaign(monkeypatch, np.random.default_rng(22))
    said: list[str] = []
    res = matrix.matrix(["a", "b", "c"], units, [], 4, tmp_path, said.append,
                        cal=_calibration(), max_rounds=8)
    record = json.loads((res["dir"] / "matrix.json").read_text())
    assert record["more_rounds"] == {"s.noisy": 8}
    assert record["max_rounds"]["cap"] == 8 and record["max_rounds"]["stages"] == [
        {"s.noisy": 8}]
    first, last = record["max_rounds"]["judged"]
    assert first["rounds"]["s.noisy"] == 4 and last["rounds"]["s.noisy"] == 8
    assert first["counts"]["inconclusive"] >= 1
    folders = [f.name for f in (res["dir"] / "rounds").iterdir()]
    assert sorted(f.split("-", 1)[1] for f in folders if f.startswith("s.noisy-")) == [
        f"{r:02d}-{i}" for r in range(8) for i in range(3)]
    assert len([f for f in folders if f.startswith("s.quiet-")]) == 4 * 3
    # each round's sides in its rotation, the further rounds included
    order = [line.split()[1] for line in said if "s.noisy (round" in line]
    assert order == [label for r in range(8) for label in (["a", "b", "c"] * 2)[r % 3:][:3]]
    assert [len(s["counts"]) > 0 for s in record["steps"]] == [True, True]
    # judged again from the stored rounds: the same steps
    assert matrix.judge_again(res["dir"], cal=_calibration())["steps"] == record["steps"]


def test_ab_loads_a_units_rounds_in_the_order_of_their_index_past_99(tmp_path):
    # 52 rounds (13 a side times a rounds_factor of 4) name folders -00- to -103-; read as
    # text, -100- would come before -11- and pair round 50 of A with round 5 of B
    from harness.comparing import ab, campaign

    for i, side in enumerate(ab.schedule(52)):
        records.write_run(tmp_path / "rounds" / f"rpc.round_trip-{i:02d}-{side}" / "m"
                          / "run.json", _run([], index=i))
    loaded = campaign.load_rounds(tmp_path)
    for side in ("A", "B"):
        assert [r.results[0].extra["index"] for r in loaded[side]] == [
            i for i, s in enumerate(ab.schedule(52)) if s == side]
    # the folders of the campaign engine are named by round, both sides of a round alike
    for r in range(52):
        for side in "AB":
            records.write_run(tmp_path / "by-round" / "rounds" / f"u-{r:02d}-{side}"
                              / "m" / "run.json", _run([], index=r))
    loaded = campaign.load_rounds(tmp_path / "by-round")
    assert [r.results[0].extra["index"] for r in loaded["B"]] == list(range(52))


def test_ab_pairs_a_cases_rounds_by_its_own_runs_whatever_else_a_process_ran():
    # A side's rounds of a case sit among other processes' runs of its suite (its suite's
    # conformance cases, its other benchmarks), in whatever order the side's runs come: the
    # k-th run holding the case is its k-th round, a contended one counted too
    from harness.comparing import campaign

    def side(values: list[float | None], other_first: bool) -> list[records.Run]:
        other = _run([{"name": "t", "value": 1.0, "kind": "time"}], case="other")
        runs = []
        for v in values:
            # None: a contended round
            busy = {"valid": False, "invalid_reasons": ["busy"]} if v is None else None
            e = _run([{"name": "t", "value": v or 1.0, "kind": "time"}], telemetry=busy)
            runs += [other, e] if other_first else [e, other]
        return runs

    reps = campaign.round_values(side([1.0, None, 1.2], True), side([1.1, 1.5, 1.3], False))
    (rep,) = [r for k, r in reps.items() if "other" not in k[0].case]
    assert rep.paired and rep.baseline == [1.0, 1.2] and rep.candidate == [1.1, 1.3]


def test_ab_goes_round_by_round_so_one_sides_rounds_of_a_suite_are_never_back_to_back():
    from harness.comparing import ab, campaign

    units = [campaign.Unit("amp", ("a",)), campaign.Unit("rpc", ("b",))]
    plan = campaign.plan(units, 2, campaign.rounds_wanted(units, 3))
    assert [(u.name, "AB"[i]) for u, _, i in plan] == [
        ("amp", "A"), ("amp", "B"), ("rpc", "A"), ("rpc", "B"),
        ("amp", "B"), ("amp", "A"), ("rpc", "B"), ("rpc", "A"),
        ("amp", "A"), ("amp", "B"), ("rpc", "A"), ("rpc", "B")]
    for unit in units:  # each suite's sides follow its A B B A A B schedule
        assert "".join("AB"[i] for u, _, i in plan if u == unit) == ab.schedule(3)


def _rate_run(aborted: int, trials: int) -> records.Run:
    from harness.running import clean_exit

    ctx = Context("cpu", "quick", {})
    ends = [[clean_exit.End(0, None, "SIGABRT", False, True, 0, "terminate called")]] * aborted
    ends += [[clean_exit.End(0, 0, None, False, False, 0, "")]] * (trials - aborted)
    clean_exit.record(ctx, "p", ends)
    return _run([m.record() for m in ctx.metrics], kind="conformance",
                outcome="fail" if aborted else "pass")


def test_a_case_failing_on_a_rate_is_judged_by_the_rate_not_the_outcome_flip():
    # 1 abort in 20 against none: a flip of the outcome, not a change anyone can tell (nor
    # one anyone can rule out: a rate's tolerance is 0)
    (c,) = compare.compare_runs(_rate_run(0, 20), _rate_run(1, 20))
    assert c.kind == "rate" and c.verdict == "inconclusive", c.why
    # 12 in 20 against none: a regression, with no history needed (one trial, one process)
    (c,) = compare.compare_runs(_rate_run(0, 20), _rate_run(12, 20))
    assert c.verdict == "regression" and c.adjusted < 0.05, c.why
    # a failure that is not a rate stays a regression of the outcome
    failed = _run([], kind="conformance", outcome="fail", reason="check x failed")
    (c,) = compare.compare_runs(_run([], kind="conformance"), failed)
    assert c.metric == "(outcome)" and c.verdict == "regression"


def test_ab_merges_rounds_pooling_samples_and_leaving_contended_ones_out():
    from harness.comparing import campaign

    rng = np.random.default_rng(9)
    good = [_run([_metric("t", _samples(rng, 1.0, n=20))]) for _ in range(2)]
    busy = _run([_metric("t", _samples(rng, 5.0, n=20))],
                telemetry={"valid": False, "invalid_reasons": ["host busy"]})
    merged = campaign.merge_runs([*good, busy], "ab")
    (e,) = merged.results
    (m,) = e.metrics
    assert m.count == 40 and m.value < 1.2
    assert any("1 of 3 rounds measured contended" in n for n in e.notes)


def test_ab_rejects_an_environment_that_cannot_run_the_suites(tmp_path, capsys):
    out = release_bench(capsys, "ab", str(tmp_path), sys.executable)
    assert out.returncode == 2 and "not a virtual environment" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def _latency_rounds(rng, rounds: int, change: float = 1.0, session_sd: float = 0.05,
                    process_sd: float = 0.0) -> list[records.Run]:
    """One side's rounds of a latency family like rpc/round_trip's: "steady" is measured in six
    sessions per process whose levels scatter by `session_sd` (and by `process_sd` from one
    process to the next); four raw-socket floors, without sessions, jump 40% between rounds."""
    out = []
    for _ in range(rounds):
        level = change * rng.lognormal(0.0, process_sd)
        sessions = list(level * rng.lognormal(0.0, session_sd, 6))
        ctx = Context("cpu", "quick", {})
        ctx.metric("p50", float(np.exp(np.log(sessions).mean())), "s", kind="latency",
                   better="lower", labels={"path": "steady"},
                   samples=[x for s in sessions for x in _samples(rng, s, n=20, spread=0.01)],
                   sessions=sessions)
        for i in range(4):
            ctx.metric("p50", float(rng.lognormal(0.0, 0.4)), "s", kind="latency",
                       better="lower", labels={"path": f"floor{i}"},
                       samples=_samples(rng, rng.lognormal(0.0, 0.4), n=60, spread=0.01))
        out.append(_run([m.record() for m in ctx.metrics]))
    return out


STEADY = (KEY, records.MetricKey.of("p50", {"path": "steady"}))


def _trusting_steady() -> calibration.Calibration:
    """A calibration whose A/A found the steady figure's rounds as its sessions predict (its
    level not drawn per process), with no floor to speak of."""
    return _calibration(figures={STEADY: calibration.Spread(1e-6, 100, per_process=False)})


def _steady(a_rounds: list[dict], b_rounds: list[dict], keep_sessions: bool = True,
            cal: calibration.Calibration | None = None):
    from harness.comparing import campaign

    reps = campaign.round_values(a_rounds, b_rounds)
    if not keep_sessions:
        reps = {k: r._replace(within=None) for k, r in reps.items()}
    changes = compare.compare_runs(campaign.merge_runs(a_rounds, "ab"),
                                   campaign.merge_runs(b_rounds, "ab"),
                                   compare.AB_THRESHOLDS, replicates=reps,
                                   cal=_trusting_steady() if cal is None else cal)
    return next(c for c in changes if c.labels["path"] == "steady"), changes


def test_a_figure_measured_in_sessions_is_judged_by_its_own_spread_not_its_familys():
    """Five rounds a side: a 15% slowdown of a figure whose sessions scatter 5% is caught by
    its sessions' spread; judged by its family's (noisy raw-socket floors beside it), as
    before sessions, it is not."""
    rng = np.random.default_rng(21)
    a_rounds, b_rounds = _latency_rounds(rng, 5), _latency_rounds(rng, 5, change=1.15)
    steady, changes = _steady(a_rounds, b_rounds)
    assert steady.verdict == "regression" and steady.interval[0] > 1.05
    # judged on its sessions' geometric means: the interval is of that change, and says so
    judged = steady.judged_factor
    assert steady.interval[0] < judged < steady.interval[1]
    assert f"judged on its sessions' geometric mean, {judged:.3g}x" in steady.why
    assert compare.counts(changes)["regression"] == 1  # the floors stay unflagged
    assert _steady(a_rounds, b_rounds, keep_sessions=False)[0].verdict == "inconclusive"


def test_a_figure_judged_on_its_sessions_is_held_to_its_tolerance_on_them_too():
    """A 3% change on the sessions' geometric means, tight enough to be significant, whose
    pooled figure moved 8% (a level flipping by session moves a pooled quantile): within the
    5% tolerance, so unchanged; the verdict rests on one statistic, not the test on one and
    the tolerance on another."""
    from harness.comparing import campaign

    rng = np.random.default_rng(23)
    a_rounds = _latency_rounds(rng, 5, session_sd=0.01)
    b_rounds = _latency_rounds(rng, 5, change=1.03, session_sd=0.01)
    a, b = campaign.merge_runs(a_rounds, "ab"), campaign.merge_runs(b_rounds, "ab")
    (pa,) = [m for m in a.results[0].metrics if m.labels["path"] == "steady"]
    (e,) = b.results
    b = dataclasses.replace(b, results=(dataclasses.replace(e, metrics=tuple(
        dataclasses.replace(m, value=pa.value * 1.08) if m.labels["path"] == "steady" else m
        for m in e.metrics)),))
    changes = compare.compare_runs(a, b, compare.AB_THRESHOLDS,
                                   replicates=campaign.round_values(a_rounds, b_rounds),
                                   cal=_trusting_steady())
    steady = next(c for c in changes if c.labels["path"] == "steady")
    assert steady.factor > 1.07 and 1.01 < steady.judged_factor < 1.05
    assert steady.adjusted < 0.05  # significant on its sessions
    assert steady.verdict == "worse" and steady.beyond == 0, steady.why
    assert "significant" in steady.why and "inside the 5% tolerance" in steady.why
    # a change past the tolerance on its sessions is flagged: the check is not a no-op
    b_rounds = _latency_rounds(rng, 5, change=1.12, session_sd=0.01)
    changes = compare.compare_runs(a, campaign.merge_runs(b_rounds, "ab"), compare.AB_THRESHOLDS,
                                   replicates=campaign.round_values(a_rounds, b_rounds),
                                   cal=_trusting_steady())
    assert next(c for c in changes if c.labels["path"] == "steady").verdict == "regression"


def test_sessions_that_understate_the_spread_between_processes_are_not_trusted():
    """A figure whose level is drawn per process (30%) while its sessions agree to 1%: its
    rounds vary more than its sessions predict, so it falls back on its family's spread and
    an A/A check flags nothing."""
    rng = np.random.default_rng(22)
    a_rounds = _latency_rounds(rng, 5, session_sd=0.01, process_sd=0.3)
    b_rounds = _latency_rounds(rng, 5, session_sd=0.01, process_sd=0.3)
    from harness.comparing import campaign

    reps = campaign.round_values(a_rounds, b_rounds)
    rep = next(r for k, r in reps.items() if "steady" in str(k[1]))
    assert rep.within is not None and compare._rounds_exceed(*rep[:2], rep.within)
    steady, changes = _steady(a_rounds, b_rounds)
    assert compare.counts(changes)["regression"] == compare.counts(changes)["improvement"] == 0


def test_without_a_calibration_a_figures_sessions_are_not_trusted_alone():
    """Whether a figure's sessions predict its rounds is this machine's to say (a level drawn
    per process that the sessions miss shows in a long A/A, not in three rounds): without a
    calibration that found so, the figure is judged by its family, held at least at its
    sessions' spread, whatever its sessions say alone."""
    from harness.comparing import campaign

    rng = np.random.default_rng(21)
    a_rounds, b_rounds = _latency_rounds(rng, 3), _latency_rounds(rng, 3, change=1.15)
    rep = next(r for k, r in campaign.round_values(a_rounds, b_rounds).items()
               if "steady" in str(k[1]))
    assert rep.within is not None and not compare._rounds_exceed(*rep[:2], rep.within)
    trusted = _steady(a_rounds, b_rounds)[0]
    conservative = _steady(a_rounds, b_rounds, cal=_calibration())[0]
    assert conservative.se_log > 2 * trusted.se_log
    assert trusted.verdict == "regression" and conservative.verdict == "inconclusive"


def _session_metric(rng, sessions: list[float], q: float = 0.9, calls: int = 40,
                    labels: dict | None = None) -> records.Metric:
    """A p90 measured in sessions, as rpc/round_trip's: `calls` per session around its level,
    the value the pooled calls' quantile."""
    pooled = [x for s in sessions for x in _samples(rng, s, n=calls, spread=0.05)]
    ctx = Context("cpu", "quick", {})
    return ctx.metric("p90", float(np.quantile(pooled, q)), "s", kind="latency",
                      better="lower", samples=pooled, q=q, sessions=sessions,
                      labels=labels or {"path": "gloo"}).record()


# Gloo's 64 KiB round trip here: each RPC session sits near 0.1 ms or 4 ms, drawn per session
FLIPPING = [3.8e-3, 0.1e-3, 2.4e-3, 0.1e-3, 3.8e-3, 0.1e-3]


def test_a_figure_measured_in_sessions_is_tested_on_its_sessions_not_its_pooled_calls():
    """240 calls a side in 6 sessions: the calls of a session share its level, so the test is
    on the sessions. A run whose sessions flip between two levels against one that stayed at
    the slow one differs beyond doubt call by call, not session by session; a shift of every
    session is caught."""
    rng = np.random.default_rng(30)
    slow = list(4e-3 * rng.lognormal(0, 0.02, 6))
    base = _session_metric(rng, slow)
    flipped = _session_metric(rng, FLIPPING)
    assert stats.shift_pvalue(base.samples, flipped.samples, 0.9) < 1e-6
    c = compare.compare_metric(KEY, base, flipped, compare.DEFAULT_THRESHOLDS)
    assert c.pvalue > 0.01
    lo, hi = c.interval
    assert lo < c.factor < hi
    shifted = _session_metric(rng, [1.3 * x for x in slow])
    c = compare.compare_metric(KEY, base, shifted, compare.DEFAULT_THRESHOLDS)
    assert c.pvalue < 1e-4 and c.interval[0] > 1.2


def _gloo_p90(rng, slow_shares: list[float], calls: int = 40) -> records.Metric:
    """Gloo's 64 KiB p90 as measured here: each session's calls take 0.1 ms, or 4 ms for a
    share of them that is drawn per session (none, or one in six, or half)."""
    per_session = [[4e-3 if i < share * calls else 1e-4 for i in range(calls)]
                   for share in slow_shares]
    per_session = [list(np.asarray(c) * rng.lognormal(0, 0.02, calls)) for c in per_session]
    pooled = [x for c in per_session for x in c]
    ctx = Context("cpu", "quick", {})
    return ctx.metric("p90", float(np.quantile(pooled, 0.9)), "s", kind="latency",
                      better="lower", samples=pooled, q=0.9, labels={"path": "gloo"},
                      sessions=[float(np.quantile(c, 0.9)) for c in per_session]).record()


def test_the_history_of_a_figure_measured_in_sessions_spreads_at_least_as_its_sessions():
    """Two runs whose pooled p90 both came out at 4 ms, one of them with sessions that flipped:
    a third run whose sessions flip too, and whose pooled p90 is 0.1 ms, is not an improvement.
    Between runs a figure measured in sessions is judged on its sessions' geometric mean,
    whose spread is at least what its sessions predict. Judged on the pooled values alone (no
    sessions) it would be one; steady figures beside it keep their power."""
    rng = np.random.default_rng(31)

    def run(gloo: list[float], level: float = 1.0) -> records.Run:
        steady = [_session_metric(rng, list(level * 2e-4 * rng.lognormal(0, 0.03, 6)),
                                  labels={"path": f"tp{i}"}) for i in range(4)]
        return _run([_gloo_p90(rng, gloo), *steady])

    history = [run([0.5, 0.5, 0.05, 0.5, 0.05, 0.5]), run([0.5] * 6)]
    cand = run([0.15, 0, 0, 0, 0, 0.15], level=1.5)
    changes = {c.labels["path"]: c for c in compare.compare_runs(history[-1], cand,
                                                                 history=history)}
    gloo = changes["gloo"]
    assert gloo.factor < 0.1 and gloo.verdict == "inconclusive"
    assert all(changes[f"tp{i}"].verdict == "regression" for i in range(4))

    def without_sessions(r: records.Run) -> records.Run:
        (e,) = r.results
        return dataclasses.replace(r, results=(dataclasses.replace(e, metrics=tuple(
            dataclasses.replace(m, sessions=None) for m in e.metrics)),))

    bare = [without_sessions(r) for r in history]
    (gloo_bare, *_) = compare.compare_runs(bare[-1], without_sessions(cand), history=bare)
    assert gloo_bare.verdict == "improvement"


def _paired_family(rng, change: float, sd: float, rounds: int, members: int = 6):
    """ab's merged sides and rounds of a family of figures whose round-to-round B/A ratio
    wanders by `sd` (log), B slower by `change`."""
    from harness.comparing import campaign

    levels = list(rng.lognormal(0, 0.1, rounds))
    a_rounds = _rounds(levels, rng, members=members)
    b_rounds = [_run([_metric("t", _samples(rng, lv * change * rng.lognormal(0, sd), n=20,
                                            spread=0.005), labels={"i": i})
                      for i in range(members)]) for lv in levels]
    return (campaign.merge_runs(a_rounds, "ab"), campaign.merge_runs(b_rounds, "ab"),
            campaign.round_values(a_rounds, b_rounds))


def test_unchanged_only_where_the_interval_lies_inside_the_tolerance():
    """The four verdicts are read off one 95% interval: a slowdown of about 10% whose interval
    reaches from no change to 24% is inconclusive, never unchanged, and says what would decide
    it; the same family measured tightly is a regression; no change measured tightly is
    unchanged; every verdict agrees with its interval."""
    rng = np.random.default_rng(40)
    cal = _calibration()
    a, b, reps = _paired_family(rng, 1.10, 0.09, 5)
    noisy = compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps, cal=cal)
    assert "unchanged" not in {c.verdict for c in noisy}
    for c in noisy:
        if c.verdict == "inconclusive":
            assert "detectable change" in c.why and c.rounds_to_decide > 5, c.why
            assert f"about {c.rounds_to_decide} rounds would decide it" in c.why
    a, b, reps = _paired_family(rng, 1.10, 0.01, 5)
    tight = compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps, cal=cal)
    assert {c.verdict for c in tight} == {"regression"}
    a, b, reps = _paired_family(rng, 1.0, 0.01, 5)
    same = compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps, cal=cal)
    assert {c.verdict for c in same} == {"unchanged"}
    for c in [*noisy, *tight, *same]:
        lo, hi = c.interval
        if c.verdict == "unchanged":
            # inside the band, and no change shown (an interval that excludes 1 is then one
            # the correction over the figures holds back)
            assert 0.95 < lo and hi < 1.05 and c.adjusted >= 0.05, c
        if c.verdict == "regression":
            assert lo > 1.0 and c.judged_factor > 1.05, c


@pytest.mark.parametrize(("change", "word"), [(1.02, "worse"), (1 / 1.02, "better")])
def test_a_small_significant_change_inside_the_tolerance_is_no_unchanged(change, word):
    """A time 2% longer (shorter), measured tightly: significant, its interval inside the 5%
    tolerance: `worse` (`better`), never `unchanged`, and the row says why."""
    rng = np.random.default_rng(41)
    a, b, reps = _paired_family(rng, change, 0.005, 6)
    changes = compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps,
                                   cal=_calibration())
    assert len(changes) == 6
    for c in changes:
        assert c.verdict == word and 0.95 < c.interval[0] and c.interval[1] < 1.05, c.why
        assert (c.interval[0] > 1.0) == (word == "worse") and c.adjusted < 0.05
        assert c.why.startswith("significant (adjusted p") and "inside the 5% tolerance" in c.why
    assert compare.counts(changes)[word] == 6 and compare.counts(changes)["unchanged"] == 0


def _judge(factor: float, p: float, q: float, better: str = "lower",
           interval: tuple[float, float] | None = None, known: bool = True,
           tested: int = 6) -> compare.Change:
    """A time's verdict from its adjusted p-values (`p` of a change, `q` of its equivalence),
    its judged factor and interval (`known`: judged on a spread between runs)."""
    a, b = (records.Metric("t", v, "s", "time", better) for v in (1.0, factor))
    m = compare.Measured(KEY, a, b, factor, None, p, 0.05)
    lo, hi = interval or (factor * 0.99, factor * 1.01)
    judging = compare._Judging([lo, hi], factor, compare._beyond(better, 0.05, 1.0, factor),
                               None, None, None) if known else None
    return m.change(*compare._verdict(m, judging, p, q, 0.05, tested))


def test_the_correction_can_only_hold_a_verdict_back_and_the_row_says_so():
    """One figure of many: alone its interval would show it inside the tolerance; corrected
    for 40 figures whose equivalence nobody showed, it is inconclusive, and the row says
    that the correction is why."""
    c = _judge(1.0, p=0.8, q=0.2, interval=(0.97, 1.03), tested=40)
    assert c.verdict == "inconclusive"
    assert "inside the 5% tolerance, but not after the correction over 40" in c.why
    assert _judge(1.0, p=0.8, q=0.01, interval=(0.97, 1.03), tested=40).verdict == "unchanged"


def test_a_shown_change_whose_interval_reaches_past_the_tolerance_counts_in_its_direction():
    """A significant change, its estimate inside the tolerance, its interval reaching past it
    (amp's training step 1.044x [1.030, 1.069], adjusted p 0.0012, in a duet of a held-out
    slowdown): `worse`, never `inconclusive`, and the row says that its interval reaches past
    the tolerance; it stays open to further rounds. Past the tolerance, the same is a
    regression; inside it with equivalence shown, a closed `worse`."""
    c = _judge(1.044, p=0.0012, q=0.3, interval=(1.030, 1.069))
    assert c.verdict == "worse" and c.undecided is False  # `decide` opens it (below)
    assert "its estimate inside the 5% tolerance, but its interval reaches past it" in c.why
    assert compare.open_question(c.verdict, 0.3) and not compare.open_question(c.verdict, 0.01)
    assert _judge(1 / 1.044, p=0.0012, q=0.3, interval=(1 / 1.069, 1 / 1.03)).verdict == "better"
    assert _judge(1.07, p=0.0012, q=0.9, interval=(1.04, 1.10)).verdict == "regression"
    rng = np.random.default_rng(42)
    a, b, reps = _paired_family(rng, 1.044, 0.02, 5)
    judged = compare.compare_runs(a, b, compare.AB_THRESHOLDS, replicates=reps,
                                  cal=_calibration())
    shown = [c for c in judged if c.adjusted < 0.05 and c.beyond == 0]
    assert shown, [(c.verdict, c.adjusted, c.interval) for c in judged]
    for c in shown:
        assert c.verdict == "worse", c.why
        if c.interval[1] > 1.05:  # open: further rounds may yet show it past the tolerance
            assert c.undecided and c.rounds_to_decide > 5 and "rounds would tell" in c.why


@pytest.mark.parametrize("p", [0.0001, 0.01, 0.049])
@pytest.mark.parametrize("q", [0.001, 0.2, 1.0])
@pytest.mark.parametrize("factor", [0.9, 0.97, 1.0, 1.03, 1.1])
def test_a_significant_change_is_never_inconclusive_or_unchanged(p, q, factor):
    """Whatever its interval and equivalence test, a figure whose change is shown (adjusted p
    below 0.05) is counted in its direction: regression or improvement past the tolerance,
    worse or better inside it."""
    for better in ("lower", "higher"):
        c = _judge(factor, p, q, better=better, interval=(factor * 0.9, factor * 1.1))
        bad = (factor > 1) == (better == "lower")
        if factor == 1.0:
            assert c.verdict in ("worse", "better"), c.why
        elif abs(math.log(factor)) > math.log(1.05):
            assert c.verdict == ("regression" if bad else "improvement"), c.why
        else:
            assert c.verdict == ("worse" if bad else "better"), c.why


def test_an_inconclusive_figure_says_which_test_held_it_back():
    """Neither a change nor its absence shown: an interval that excludes 1 where the
    corrected test does not call the change significant says so (not a generic 'reaches
    past')."""
    c = _judge(1.03, p=0.2, q=0.3, interval=(1.01, 1.06), tested=40)
    assert c.verdict == "inconclusive"
    assert c.why.startswith("its interval excludes 1, but over 40 figures the change is not "
                            "significant (adjusted p 0.2), and it reaches past the 5%")
    assert _judge(1.0, p=0.5, q=0.3, interval=(0.93, 1.07)).why.startswith(
        "its interval reaches past the 5% tolerance")


def test_rounds_exceed_their_sessions_when_sessions_agree_exactly_never_with_one_round():
    """Sessions that agree exactly predict no spread: any spread of the rounds exceeds it;
    one round has no spread to hold against theirs. A figure without a tolerance has no band."""
    assert compare._rounds_exceed([1.0, 1.0], [1.0, 1.1], (0.0, 4.0))
    assert not compare._rounds_exceed([1.0], [1.5], (1e-6, 4.0))
    assert compare._band(None, 1.0) is None and compare._band(0.05, 0.0) is None


def test_the_equivalence_test_agrees_with_the_interval():
    band = (math.log(0.95), math.log(1.05))
    t = stats.t_quantile(0.975, 8)
    for centre, se in [(0.0, 0.01), (0.03, 0.01), (0.0, 0.03), (0.04, 0.005), (-0.02, 0.02)]:
        inside = band[0] < centre - t * se and centre + t * se < band[1]
        assert (compare._equivalence_p(centre, se, 8, band) < 0.05) == inside


def test_counts_count_every_verdict_the_judge_gives():
    """Each verdict `_verdict` can give, once, and the counts (every summary line's, and
    comparison.json's) count each once."""
    given = [_judge(1.3, 0.01, 1.0), _judge(0.7, 0.01, 1.0),  # regression, improvement
             _judge(1.02, 0.01, 0.01), _judge(1.02, 0.01, 0.01, better="higher"),  # worse, better
             _judge(1.0, 0.5, 0.01), _judge(1.0, 0.5, 0.5),  # unchanged, inconclusive
             _judge(1.0, 0.5, 0.5, known=False)]  # unverified: no spread between runs
    assert [c.verdict for c in given] == ["regression", "improvement", "worse", "better",
                                          "unchanged", "inconclusive", "unverified"]
    assert compare.counts(given) == {v: int(v not in ("new", "gone")) for v in compare.VERDICTS}


def test_a_merged_fail_keeps_the_failing_checks_and_failures_of_every_round():
    from harness.comparing import campaign

    def rnd(outcome, checks, failures=None, reason=""):
        entry = records.Result("s", "c", outcome, reason, kind="conformance", device="cpu",
                               checks=tuple(records.Check(n, ok, d) for n, ok, d in checks),
                               details={"failures": failures} if failures else {})
        return dataclasses.replace(records.new_run({"name": "m"}, "quick"), results=(entry,))

    ok = [("a", True, ""), ("b", True, "")]
    runs = [rnd("pass", ok), rnd("fail", [("a", True, ""), ("b", False, "b off by 4 B")],
                                 ["b: off by 4 B"], "check b failed"),
            rnd("fail", [("a", False, "a raised"), ("b", True, "")], ["a: raised"], "a raised"),
            rnd("pass", ok)]
    (e,) = campaign.merge_runs(runs, "history").results
    assert e.outcome == "fail" and e.reason == "check b failed"
    assert [(c.name, c.passed, c.detail) for c in e.checks] == [
        ("a", False, "a raised"), ("b", False, "b off by 4 B")]
    assert e.details["failures"] == ["b: off by 4 B", "a: raised"]
    assert e.details["rounds"] == 4
    # every round passed: its checks are the passes, with no failures listed
    (e,) = campaign.merge_runs([runs[0], runs[3]], "history").results
    assert e.outcome == "pass" and all(c.passed for c in e.checks) and len(e.checks) == 2
    assert "failures" not in e.details
    # a failure kept as a record (a worker's rank, how it ended) is listed once too: one round
    # of a history is merged as well, and a record cannot be a key
    died = {"rank": 1, "kind": "exit", "message": "was killed by signal SIGKILL"}
    rounds = [rnd("fail", [("b", False, "")], [died]), rnd("fail", [("b", False, "")], [died])]
    assert campaign.merge_runs(rounds, "history").results[0].details["failures"] == [died]


def test_a_change_inside_the_tolerance_fails_no_exit_status():
    from harness.commands import judging

    counts = dict.fromkeys(compare.VERDICTS, 0) | {"worse": 3, "better": 1, "inconclusive": 2}
    assert judging.exit_status(counts) == 0
    assert judging.exit_status(counts | {"regression": 1}) == 1


def test_a_case_on_one_side_only_is_new_or_gone():
    """A case the candidate adds (a suite grew) or drops (a case no longer runs): one verdict
    on the whole case each, not silence."""
    rng = np.random.default_rng(5)
    base = _run([_metric("t", _samples(rng, 1.0))], case="kept")
    base = base.with_result(_run([_metric("t", _samples(rng, 1.0))], case="dropped").results[0])
    cand = _run([_metric("t", _samples(rng, 1.0))], case="kept")
    cand = cand.with_result(_run([_metric("t", _samples(rng, 1.0))], case="added").results[0])
    whole = {(c.case.case, c.verdict) for c in compare.compare_runs(base, cand)
             if c.metric == "(case)"}
    assert whole == {("added", compare.Verdict.NEW), ("dropped", compare.Verdict.GONE)}


def test_an_environment_that_cannot_run_the_suites_is_one_line(tmp_path):
    """What `ab`, `matrix` and the nightly say of an environment before any round runs."""
    import os

    from harness.comparing.campaign import CampaignError, python_of, torch_version

    (tmp_path / "venv").mkdir()
    with pytest.raises(CampaignError, match="venv: not a virtual environment \\(no bin/python\\)"):
        python_of(str(tmp_path / "venv"))
    (tmp_path / "notes.txt").write_text("not a program")
    with pytest.raises(CampaignError, match="notes.txt: neither a venv folder nor a Python"):
        python_of(str(tmp_path / "notes.txt"))
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\n"
                      "exit 1\n")
    os.chmod(broken, 0o755)
    assert python_of(str(broken)) == broken
    with pytest.raises(CampaignError, match="python: cannot run the suites \\("
                                            "ModuleNotFoundError: No module named torch\\)$"):
        torch_version(broken)
    broken.write_text("#!/bin/sh\nexit 3\n")
    with pytest.raises(CampaignError, match="cannot run the suites \\(exit status 3\\)$"):
        torch_version(broken)
    broken.write_text("#!/no/such/interpreter\n")
    with pytest.raises(CampaignError, match="cannot run the suites \\(No such file or "
                                            "directory\\)$"):
        torch_version(broken)


def test_merging_the_rounds_of_a_side_that_ran_nothing_is_one_clear_error():
    from harness.comparing import campaign

    with pytest.raises(campaign.CampaignError, match="ab: no rounds to merge"):
        campaign.merge_runs([], "ab")


def test_a_figure_whose_rounds_hold_a_zero_or_that_the_rounds_lack_is_unverified():
    """ab's rounds give a spread between runs only to figures they hold and whose values are
    all above zero (log ratios): a figure read as zero in one round, or one the rounds did not
    record, is unverified rather than judged against a spread of the others."""
    rng = np.random.default_rng(11)
    a_rounds, b_rounds = [1.0, 1.01, 0.99, 1.0], [1.3, 1.31, 1.29, 1.3]
    a = _run([_metric("t", _samples(rng, 1.0)), _metric("z", _samples(rng, 1.0)),
              _metric("gone", _samples(rng, 1.0))])
    b = _run([_metric("t", _samples(rng, 1.3)), _metric("z", _samples(rng, 1.3)),
              _metric("gone", _samples(rng, 1.3))])
    key = a.results[0].case_key
    reps = {(key, records.MetricKey.of("t")): compare.RoundValues(a_rounds, b_rounds),
            (key, records.MetricKey.of("z")): compare.RoundValues([0.0, *a_rounds[1:]],
                                                                  b_rounds)}
    got = {c.metric: c for c in compare.compare_runs(a, b, compare.AB_THRESHOLDS,
                                                     replicates=reps)}
    assert got["t"].verdict == "regression", got["t"].why
    for name in ("z", "gone"):
        assert got[name].verdict == "unverified", (name, got[name].why)
        assert "spread between runs is unknown" in got[name].why


def test_a_kind_no_tolerance_covers_or_a_figure_without_a_baseline_has_no_allowed_band():
    assert compare._allowed("time", 2.0, {"time": 0.05}) == pytest.approx(0.1)
    assert compare._allowed("no-such-kind", 2.0, {"time": 0.05}) is None
    assert compare._allowed("time", None, {"time": 0.05}) is None
