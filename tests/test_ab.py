"""`release-bench ab`: two environments interleaved in fresh processes.

The first test runs a small live ab and checks what it writes and that `--judge` gives the same
verdicts again; the verdicts on real rounds are checked against stored ones in
test_stored_comparisons.py. The two `validation` tests (`pytest -m validation`, 10 minutes
here) judge live comparisons by their verdicts: the same environment twice flags nothing; one
with matmul planted twice as slow is flagged where matmul is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import records

sys.path.insert(0, str(Path(__file__).resolve().parent / "planted"))
from wrap import planted_python  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.distributed]
BIN = Path(sys.executable).parent


# The small autocast-bfloat16 GEMMs run at one of two speeds, drawn per process (n=512 here:
# 0.7 or 0.9 ms). With 3 rounds a side, an A/A comparison finds one side all slow and the
# other all fast once in 32 for each such figure, and a fresh clone's run here did (0.82x,
# adjusted p 0.04): 4 rounds make that once in 128.
AA_ROUNDS = 4
# The planted test checks that ab's verdicts catch a real slowdown, and only as a regression;
# how small a slowdown they catch is measured, not tested (docs/validation.md gives the
# figures), because that depends on how noisy the machine is at the time. With a 25%
# plant, 6 rounds a side flagged 7 to 9 of the 9 GEMM times in five planted abs here, but a
# noisier CI run found them 1.12-1.28x and none significant (minimum detectable change 48%),
# as did a run here under a load busy 0.3 s in every 0.9 s (minimum detectable change 99%).
# Under that same load a plant that doubles each matmul (matmul=1.0) was flagged on all 9
# GEMM times, their 9 TFLOP/s and the 3 measured peaks (times 1.4-3.0x); in three more runs
# under it, on 9, 8 and 9 of the times (minimum detectable change 66-79%).
PLANTED = "matmul=1.0"
PLANTED_ROUNDS = 6


def _ab(a, b, out: Path, rounds: int) -> tuple[subprocess.CompletedProcess, dict]:
    # sequential rounds, as these experiments were sized (the ladder's best design is a duet)
    proc = subprocess.run([BIN / "release-bench", "ab", str(a), str(b), "--suite", "amp",
                           "--case", "gemm", "--rounds", str(rounds), "--out", str(out),
                           "--sequential",
                           "--calibration", "none"],  # rounds and floors fixed, not measured
                          capture_output=True, text=True, timeout=900)
    (where,) = list(out.glob("ab-*"))
    return proc, json.loads((where / "comparison.json").read_text())


def _flagged(comparison: dict, verdict: str) -> set[tuple]:
    return {(c["metric"], tuple(sorted(c["labels"].items()))) for c in comparison["changes"]
            if c["verdict"] == verdict}


@pytest.mark.validation
def test_ab_of_one_environment_against_itself_flags_nothing(tmp_path):
    proc, cmp = _ab(sys.executable, sys.executable, tmp_path, AA_ROUNDS)  # no history floor
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert cmp["counts"]["regression"] == 0 and cmp["counts"]["improvement"] == 0, proc.stdout
    judged = [c for c in cmp["changes"] if c["adjusted"] is not None]
    assert len(judged) >= 10  # the GEMM times and TFLOP/s were tested, not waved through
    where = next(tmp_path.glob("ab-*"))
    again = subprocess.run([BIN / "release-bench", "ab", "--judge", str(where),
                            "--calibration", "none"],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads((where / "comparison.json").read_text())["counts"] == cmp["counts"]
    for side in ("A", "B"):  # both sides' merged runs are kept and readable
        run = records.read_run(where / f"side-{side}.json")
        assert run.ab["schedule"] == "ABBAABBA"
        assert all(e.details["rounds"] == AA_ROUNDS for e in run.results)


@pytest.mark.validation
def test_ab_flags_a_planted_matmul_slowdown_as_regressions(tmp_path):
    slow = planted_python(tmp_path / "slow-python", PLANTED, sys.executable)
    proc, cmp = _ab(sys.executable, slow, tmp_path / "out", PLANTED_ROUNDS)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    regressions = _flagged(cmp, "regression")
    # two thirds of the 9 GEMM times and of their 9 TFLOP/s at the least, and none of the
    # figures the plant slows (times, TFLOP/s, measured peaks) as an improvement
    assert len({k for k in regressions if k[0] == "time"}) >= 6, proc.stdout
    assert len({k for k in regressions if k[0] == "tflops"}) >= 6, proc.stdout
    slowed = {"time", "tflops", "measured_peak_tflops"}
    assert not {k for k in _flagged(cmp, "improvement") if k[0] in slowed}, proc.stdout
    # The speedup ratios (bf16 over fp32) are not asserted, either way: the plant's busy-wait
    # competes with OpenMP's spinning threads for the two cores, which slows the dtypes and
    # sizes unequally (a fresh-clone run here: bf16 2.4x, fp32 2.1x at n=1024), so a ratio
    # can move for real (doubled, under load here: autocast-bfloat16 n=256 1.18-1.59x, once
    # flagged as an improvement; n=512 0.68-0.88x, once as a regression). False alarms are
    # the A/A test's to catch (above).


def test_judge_of_a_folder_that_is_no_ab_is_one_line(tmp_path, capsys):
    """`ab --judge DIR`: a folder without ab.json, or whose sides have no stored rounds, is
    one line and exit 2 (an unknown design in ab.json reads as sequential, and still has no
    rounds to judge)."""
    from harness import cli

    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "ab.json").write_text('{"design": {"kind": "sideways"}}')
    for folder, says in ((tmp_path / "none", "not an ab folder"),
                         (odd, "no rounds of side A or B in rounds/")):
        assert cli.main(["ab", "--judge", str(folder), "--calibration", "none"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


def test_a_param_goes_to_the_units_whose_cases_take_it_and_one_none_takes_is_refused(capsys):
    """`ab --param`: each round's run gets the parameters its own cases have (the RPC round
    trip's payload sizes, not its conformance cases nor its batched update, whose runs would
    refuse them), with the value `run` reads back; a parameter no selected case has is one
    line and exit 2 before anything runs."""
    from harness import cli
    from harness.commands import run
    from harness.comparing import campaign

    units = campaign.with_params(campaign.units(["rpc"]), [("sizes", [4]),
                                                           ("min_samples", 5)], "quick")
    given = {u.name: run.parse(u.selection()).param for u in units}
    assert given.pop("rpc.round_trip") == [("sizes", [4]), ("min_samples", 5)], given
    assert {"rpc", "rpc.batched_update"} <= set(given), given
    assert all(v == [] for v in given.values()), given
    for args in (["--param", "nope=1"], ["--judge", ".", "--param", "sizes=[4]"]):
        assert cli.main(["ab", ".venv", ".venv", "--suite", "rpc", "--calibration", "none",
                         *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("nope" in err or "--judge" in err), err


def test_a_side_whose_round_writes_no_run_is_one_line_naming_its_log(tmp_path):
    """A side's Python that answers for its torch but whose `run` dies before writing its
    record: ab stops at that round, exit 2, with one line naming the side and its log."""
    dies = tmp_path / "dies"
    dies.write_text("#!/bin/sh\n"
                    'case "$*" in *harness.cli\\ run*) echo "planted: no run" >&2; exit 3;; '
                    "esac\n"
                    f'exec {sys.executable} "$@"\n')
    dies.chmod(0o755)
    out = subprocess.run([BIN / "release-bench", "ab", sys.executable, str(dies), "--suite",
                          "fork_wait", "--case", "eager_fork_is_serial", "--rounds", "1",
                          "--calibration", "none", "--out", str(tmp_path / "ab")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr[-2000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("release-bench: error:")]
    assert len(errors) == 1 and "B (torch " in errors[0], out.stderr
    assert "wrote no run for fork_wait; see " in errors[0]
    assert "planted: no run" in Path(errors[0].rsplit("see ", 1)[1]).read_text()

