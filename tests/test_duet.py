"""Duets (harness.running.duet, campaign's duet rounds): the halves of the machine, the barrier, the
record of how a figure was measured, judging per swapped pair, and a live `ab --duet`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from inprocess import release_bench

from harness import records
from harness.comparing import campaign, compare
from harness.running import duet
from harness.running.telemetry.host import HostReader
from tests.test_compare import _metric, _run, _samples

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_cpu_lists_read_as_linux_writes_them():
    assert duet.parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert duet.cpu_list_text([3, 1]) == "1,3"
    for bad in ("", "a", "1-b", ","):
        with pytest.raises(duet.DuetError, match="not a CPU list"):
            duet.parse_cpu_list(bad)


def _sysfs(tmp_path: Path, siblings: dict[int, str], nodes: dict[int, str]) -> Path:
    for cpu, listed in siblings.items():
        topo = tmp_path / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "thread_siblings_list").write_text(listed + "\n")
    for node, listed in nodes.items():
        (tmp_path / "node" / f"node{node}").mkdir(parents=True)
        (tmp_path / "node" / f"node{node}" / "cpulist").write_text(listed + "\n")
    return tmp_path


def test_the_halves_keep_physical_cores_and_numa_nodes_whole(tmp_path):
    # this VM: two vCPUs, one node, no siblings
    two = _sysfs(tmp_path / "two", {0: "0", 1: "1"}, {0: "0-1"})
    assert duet.halves([0, 1], two) == ((0,), (1,))
    # four cores with SMT siblings numbered apart (0 and 4 share a core)
    smt = _sysfs(tmp_path / "smt", {c: f"{c % 4},{c % 4 + 4}" for c in range(8)}, {0: "0-7"})
    assert duet.halves(range(8), smt) == ((0, 4, 1, 5), (2, 6, 3, 7))
    # two NUMA nodes with interleaved numbering: one node each
    numa = _sysfs(tmp_path / "numa", {c: str(c) for c in range(4)}, {0: "0,2", 1: "1,3"})
    assert duet.halves(range(4), numa) == ((0, 2), (1, 3))
    # an odd count leaves a core out rather than give one side more
    assert duet.halves([0, 1, 2], tmp_path / "nothing") == ((0,), (1,))
    with pytest.raises(duet.DuetError, match="needs two cores"):
        duet.halves([0], tmp_path / "nothing")


def test_the_barrier_lets_both_sides_start_together_and_one_alone_after_its_timeout(tmp_path):
    got = {}

    def side(me: str, delay: float) -> None:
        time.sleep(delay)
        got[me] = (duet.Barrier(tmp_path / "b", me=me).wait("case-1"), time.monotonic())

    threads = [threading.Thread(target=side, args=(me, d)) for me, d in (("a", 0), ("b", 0.3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (met_a, waited_a), left_a = got["a"]
    (met_b, _), left_b = got["b"]
    assert met_a and met_b and waited_a >= 0.25
    assert abs(left_a - left_b) < 0.05  # they leave together
    alone = duet.Barrier(tmp_path / "c", timeout_s=0.2, me="a").wait("case-1")
    assert alone[0] is False and alone[1] >= 0.2


def test_a_side_measured_without_its_partner_is_not_judged():
    entry = _run([_metric("t", [1.0, 1.1, 1.2])]).results[0]
    assert entry.valid
    alone = dataclasses.replace(entry, details={"duet": {"partner": False, "waited_s": 120}})
    assert not alone.valid and "partner did not reach the barrier" in alone.contended()


def test_a_pinned_process_counts_only_its_own_cpus_as_contended(monkeypatch):
    """A side of a duet is pinned to one CPU; its partner keeps the other busy, and is no
    neighbour of its own. A third process on its own CPU is."""
    reader = HostReader()
    monkeypatch.setattr(reader, "_tree_cpu_percent", lambda: 95.0)
    monkeypatch.setattr("psutil.cpu_percent", lambda percpu=False: [97.0, 100.0])
    monkeypatch.setattr(reader, "_cpus", lambda count: [0])
    assert reader.sample()["other_cpu_pct"] == pytest.approx(2.0)
    monkeypatch.setattr(reader, "_cpus", lambda count: list(range(count)))
    assert reader.sample()["other_cpu_pct"] == pytest.approx(102.0)  # unpinned: the machine


def _duet_rounds(levels: list[tuple[float, float]], rng, duet_design: bool = True,
                 contended: int | None = None) -> tuple[list[records.Run], list[records.Run]]:
    """Each side's runs of one figure, round by round: (A's level, B's level) per round."""
    measured = {"design": "duet" if duet_design else "sequential", "cpus": [0], "threads": 1}
    sides = ([], [])
    for r, pair in enumerate(levels):
        for side, level in zip(sides, pair, strict=True):
            run = dataclasses.replace(_run([_metric("t", _samples(rng, level, spread=0.005))]),
                                      measured=measured)
            if r == contended and side is sides[1]:
                run = dataclasses.replace(run, results=(dataclasses.replace(
                    run.results[0], telemetry={"valid": False, "invalid_reasons": ["busy"]}),))
            side.append(run)
    return sides


def test_a_duet_is_judged_per_swapped_pair_so_a_slow_half_cancels():
    """An A/A whose second half of the machine runs 20% slow: in even rounds B is on it, in
    odd rounds A. Round by round the ratio swings 1.2, 0.83, ...; per swapped pair it is 1,
    and the figure is shown unchanged. Sequential rounds with the same swings are not."""
    rng = np.random.default_rng(3)
    levels = [(1.0, 1.2) if r % 2 == 0 else (1.2, 1.0) for r in range(10)]
    a, b = _duet_rounds(levels, rng)
    (rep,) = campaign.round_values(a, b).values()
    assert rep.paired and len(rep.baseline) == 5
    assert np.allclose(np.array(rep.candidate) / np.array(rep.baseline), 1.0, atol=0.01)
    cal = compare_cal()
    (c,) = compare.compare_runs(campaign.merge_runs(a, "ab"), campaign.merge_runs(b, "ab"),
                                compare.AB_THRESHOLDS, replicates=campaign.round_values(a, b),
                                cal=cal)
    assert c.verdict == "unchanged", c.why
    a, b = _duet_rounds(levels, rng, duet_design=False)
    (rep,) = campaign.round_values(a, b).values()
    assert len(rep.baseline) == 10  # sequential: round by round
    (c,) = compare.compare_runs(campaign.merge_runs(a, "ab"), campaign.merge_runs(b, "ab"),
                                compare.AB_THRESHOLDS, replicates=campaign.round_values(a, b),
                                cal=cal)
    assert c.verdict == "inconclusive"


def test_a_round_contended_on_one_side_leaves_its_pair_out_for_both():
    rng = np.random.default_rng(4)
    a, b = _duet_rounds([(1.0, 1.0)] * 8, rng, contended=3)
    (rep,) = campaign.round_values(a, b).values()
    assert len(rep.baseline) == len(rep.candidate) == 3  # pairs 0, 2 and 3; pair 1 is out


def compare_cal():
    from tests.test_compare import _calibration

    return _calibration()


def test_duet_options_refuse_what_cannot_be_a_duet_in_one_line(capsys, monkeypatch):

    monkeypatch.chdir(ROOT)
    out = release_bench(capsys, "ab", ".venv", ".venv", "--duet", "--suite", "fork_wait")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "none of the selected benchmarks" in out.stderr
    out = release_bench(capsys, "run", "--suite", "amp", "--only", "gemm_ladder", "--cpus", "9999")
    assert out.returncode == 2 and "cannot pin" in out.stderr
    out = release_bench(capsys, "run", "--cpus", "x")
    assert out.returncode == 2 and "not a CPU list" in out.stderr


@pytest.mark.slow
def test_ab_duet_runs_both_sides_at_once_on_swapped_cpus(tmp_path):
    """A live duet A/A of the profiler's overhead, one swapped pair: each round's two
    processes pinned to the two halves with one thread each, A on the first half in even
    rounds and the second in odd ones, both started together at the barrier; the record says
    so, and `ab --judge` gives the same verdicts again."""
    out = subprocess.run([BIN / "release-bench", "ab", ".venv", ".venv", "--duet", "--suite",
                          "profiler", "--case", "overhead", "--rounds", "1", "--calibration",
                          "none", "--out", str(tmp_path)], capture_output=True, text=True,
                         cwd=ROOT, timeout=900)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    assert "duet (2 rounds a side, 1 swapped pair on CPUs" in out.stdout
    where = next(tmp_path.glob("ab-*"))
    meta = json.loads((where / "ab.json").read_text())
    halves = [list(h) for h in duet.halves()]
    assert meta["design"]["kind"] == "duet" and meta["design"]["halves"] == halves
    assert meta["design"]["duet_units"] == ["profiler.overhead"]
    rounds = campaign.load_rounds(where)
    for side, first in (("A", 0), ("B", 1)):
        assert len(rounds[side]) == 2
        for r, run in enumerate(rounds[side]):
            assert run.measured == {"design": "duet", "cpus": halves[(first + r) % 2],
                                    "threads": len(halves[0])}
            (entry,) = run.results
            assert entry.device == "cpu" and entry.details["duet"]["partner"] is True
            # the partner on the other half is not counted as contention
            assert entry.telemetry["host"]["other_cpu_mean_pct"] < 50
    # both sides of a round started together: within a second of each other
    for a, b in zip(rounds["A"], rounds["B"], strict=True):
        starts = [datetime.fromisoformat(x.results[0].started).timestamp() for x in (a, b)]
        assert abs(starts[0] - starts[1]) <= 1.0  # records keep whole seconds
    assert not (where / "barriers").exists()
    cmp = json.loads((where / "comparison.json").read_text())
    again = subprocess.run([BIN / "release-bench", "ab", "--judge", str(where),
                            "--calibration", "none"], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
    assert again.returncode in (0, 1), again.stderr
    assert json.loads((where / "comparison.json").read_text())["changes"] == cmp["changes"]


def test_a_duet_round_whose_side_writes_no_run_ends_with_an_error_naming_it(tmp_path):
    """Campaign's duet round with stand-in sides that exit at once, writing nothing: the round
    ends with one error naming the side and its log (no wait for a run that never comes), and
    leaves no barrier behind."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'ImportError: a broken build' >&2\nexit 3\n")
    python.chmod(0o755)
    sides = [campaign.Side(k, f"side-{k}", python, "2.13.0") for k in ("A", "B")]
    unit = campaign.Unit("profiler", ("overhead",), benchmark=True,
                         design=campaign.Design.DUET)
    run = campaign.Campaign(tmp_path / "ab", sides, [unit], [], lambda s: None)
    with pytest.raises(campaign.CampaignError,
                       match=r"^side-A \(torch 2\.13\.0\) wrote no run for profiler\.overhead; "
                             r"see .*side-A\.log$"):
        run.run(campaign.plan([unit], 2, {unit.name: 1}))
    assert "a broken build" in (tmp_path / "ab" / "logs" / "side-A.log").read_text()
    assert not (tmp_path / "ab" / "barriers").exists()
