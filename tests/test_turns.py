"""Rounds in bursts (harness.running.turns, campaign's bursts rounds): the order of the turns,
a turn only while the other side waits, a partner that dies or never comes back, and a live
`ab --bursts` whose turns never overlap."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from inprocess import release_bench

from harness.comparing import campaign
from harness.running import turns

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_the_sides_alternate_a_b_then_b_a():
    # side 0 (A) first in even pairs, B in odd ones
    order, taken = [], [0, 0]
    while sum(taken) < 8:
        side = next(s for s in (0, 1) if turns.may_go(s, taken[s], taken[1 - s]))
        order.append("AB"[side])
        taken[side] += 1
    assert "".join(order) == "ABBAABBA"
    # a side never runs two pairs ahead, nor takes the other's place in a pair
    assert not turns.may_go(0, 1, 0) and not turns.may_go(1, 0, 0)
    assert turns.may_go(1, 1, 1) and not turns.may_go(0, 1, 1)  # B first in pair 1


def _side(referee: turns.Referee, side: int, n: int, work_s: float, between_s: float,
          log: list, errors: list) -> None:
    t = referee.turns(side)
    try:
        for _ in range(n):
            with t.turn():
                start = time.monotonic()
                time.sleep(work_s)
                log.append(("turn", side, start, time.monotonic()))
            start = time.monotonic()
            time.sleep(between_s)  # work between turns (a new session's set-up, say)
            log.append(("between", side, start, time.monotonic()))
    except turns.TurnsError as e:
        errors.append(str(e))
    referee.ended(side, 0)


def _overlap(a: tuple, b: tuple) -> bool:
    return a[2] < b[3] and b[2] < a[3]


def test_a_turn_runs_only_while_the_other_side_waits():
    """Two sides taking 6 turns each, with work between their turns: no turn of one side
    overlaps the other's turn or its work between turns; the log's times say the same."""
    log: list = []
    errors: list = []
    with turns.Referee(timeout_s=10) as referee:
        threads = [threading.Thread(target=_side, args=(referee, s, 6, 0.01, 0.005, log,
                                                        errors)) for s in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        summary = referee.summary()
    assert not errors
    assert summary["taken"] == {"A": 6, "B": 6}
    assert [t["side"] for t in summary["turns"]][:8] == list("ABBAABBA")
    assert turns.overlaps(summary["turns"]) == []
    # nothing the other side does, in its turns or between them, overlaps a turn
    for x in (x for x in log if x[0] == "turn"):
        assert [y for y in log if y[1] != x[1] and _overlap(x, y)] == []
    assert summary["alone"] <= 1


def test_overlapping_turns_are_found():
    log = [{"side": "A", "start": 0.0, "end": 1.0}, {"side": "B", "start": 0.5, "end": 2.0},
           {"side": "A", "start": 2.0, "end": 3.0}]
    assert turns.overlaps(log) == [(log[0], log[1])]


def _die_in_third_turn(address: str) -> None:
    t = turns.Turns(address, 0, timeout_s=10)
    for i in range(3):
        with t.turn():
            if i == 2:
                os._exit(3)  # a worker killed in the middle of a burst


def test_a_partner_that_dies_in_a_turn_ends_the_other_side_with_an_error():
    with turns.Referee(timeout_s=60) as referee:
        child = multiprocessing.get_context("fork").Process(
            target=_die_in_third_turn, args=(referee.address,))
        child.start()
        t = referee.turns(1)
        t0 = time.monotonic()
        with pytest.raises(turns.TurnsError, match="side A died .*left during turn 3"):
            for _ in range(10):
                with t.turn():
                    time.sleep(0.005)
        assert time.monotonic() - t0 < 10  # at once, not after the 60 s wait
        child.join(10)
        assert referee.summary()["died"] == {"A": "its measuring process left during turn 3"}


def test_a_partner_that_failed_or_never_came_ends_the_round():
    with turns.Referee(timeout_s=0.5) as referee:
        with pytest.raises(turns.TurnsError, match="did not come back .* within 0 s"):
            with referee.turns(1).turn():
                pass
    with turns.Referee(timeout_s=30) as referee:
        threading.Timer(0.2, referee.ended, args=(0, 1)).start()
        with pytest.raises(turns.TurnsError, match="side A died \\(exited with status 1\\)"):
            with referee.turns(1).turn():
                pass


def test_a_side_without_a_referee_or_declared_dead_gets_no_turn(tmp_path):
    with pytest.raises(turns.TurnsError, match="side B: no referee at .*/none \\(\\[Errno 2\\]"):
        with turns.Turns(str(tmp_path / "none"), 1).turn():
            pass
    # the campaign saw side B's process fail; a process of B's still asking (a child it
    # left behind) is not given the turns of a side that no longer counts
    with turns.Referee(timeout_s=30) as referee:
        referee.ended(1, 1)
        with pytest.raises(turns.TurnsError, match="^this side was declared dead$"):
            with referee.turns(1).turn():
                pass
        assert referee.summary()["died"] == {"B": "exited with status 1"}


def test_a_partner_that_ended_leaves_the_other_side_alone():
    with turns.Referee(timeout_s=30) as referee:
        referee.ended(0, 0)
        for _ in range(2):
            with referee.turns(1).turn():
                pass
        assert referee.summary()["alone"] == 2


FAKE_SIDE = """#!{python}
# a side's `release-bench run` stand-in: takes turns; side B exits 3 after its second
import sys
sys.path.insert(0, {root!r})
from harness.running import turns
side, _, address = sys.argv[sys.argv.index("--turns") + 1].partition("@")
t = turns.Turns(address, turns.SIDES.index(side), timeout_s=60)
for i in range(20):
    if {failing!r} == side and i == 2:
        sys.exit(3)
    with t.turn():
        pass
"""


def test_a_bursts_round_whose_side_fails_ends_with_an_error_not_a_wait(tmp_path):
    """Campaign's bursts round with stand-in sides: the side that exits 3 after two turns
    ends its partner's round at once (its next request fails), the round raises and the turns'
    log says who died."""
    python = tmp_path / "python"
    python.write_text(FAKE_SIDE.format(python=sys.executable, root=str(ROOT), failing="B"))
    python.chmod(0o755)
    sides = [campaign.Side(k, k, python, "x") for k in ("A", "B")]
    unit = campaign.Unit("rpc", ("round_trip",), benchmark=True,
                         design=campaign.Design.BURSTS)
    run = campaign.Campaign(tmp_path / "ab", sides, [unit], [], lambda s: None)
    t0 = time.monotonic()
    with pytest.raises(campaign.CampaignError, match="wrote no run"):
        run.run(campaign.plan([unit], 2, {unit.name: 1}))
    assert time.monotonic() - t0 < 30
    log = json.loads((tmp_path / "ab" / "turns" / "rpc.round_trip-00.json").read_text())
    assert log["died"]["B"] == "exited with status 3" and log["taken"]["B"] == 2
    # A's next request failed, and its stand-in exited with the error
    assert log["died"]["A"] == "exited with status 1"


@pytest.mark.slow
@pytest.mark.distributed
def test_round_trips_in_bursts_run_the_caller_and_the_callee_on_cpus_of_their_own(tmp_path):
    """A live A/A of the RPC round trip in bursts, one round (the one live bursts campaign of
    the test suite): both sides' processes alive at once, every turn of one side clear of the
    other's (the referee's log, with the measuring processes' own clock); on each side the
    caller and the callee ran pinned to the two halves of the CPUs (one CPU each on a 2-vCPU
    VM), as the processes themselves read their affinity; unpinned, where the scheduler put
    the two drew each session's level. A sequential run leaves them unpinned."""
    from harness.running import duet

    caller_cpus, callee_cpus = (list(h) for h in duet.halves())
    # one payload of the three: the turns are the same (each session's rounds), in a third
    # of the time; `--param` reaches each round's run
    out = subprocess.run([BIN / "release-bench", "ab", ".venv", ".venv", "--bursts", "--suite",
                          "rpc", "--case", "round_trip", "--param", "sizes=[4]", "--rounds", "1",
                          "--calibration", "none", "--out", str(tmp_path / "bursts")],
                         capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    assert "bursts (1 round, both sides alive through each" in out.stdout
    where = next((tmp_path / "bursts").glob("ab-*"))
    assert json.loads((where / "ab.json").read_text())["design"]["kind"] == "bursts"
    log = json.loads((where / "turns" / "rpc.round_trip-00.json").read_text())
    assert log["died"] == {} and log["taken"]["A"] == log["taken"]["B"] > 6, log["taken"]
    assert turns.overlaps(log["turns"]) == []
    assert all("start" in t for t in log["turns"])
    for side, runs in campaign.load_rounds(where).items():
        result = runs[0].results[0]
        assert result.outcome == "pass", (side, result.reason)
        assert result.params["sizes"] == [4], result.params
        assert result.details["cpus"] == {"caller": caller_cpus, "callee": callee_cpus,
                                          "pinned": True}, side
        assert any("the caller ran on CPU" in n for n in result.notes), result.notes
    seq = subprocess.run([BIN / "release-bench", "run", "--suite", "rpc", "--case", "round_trip",
                          "--param", "sizes=[4]", "--param", "min_samples=5",
                          "--out", str(tmp_path / "seq")],
                         capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert seq.returncode == 0, seq.stderr[-3000:]
    record = json.loads(next((tmp_path / "seq").rglob("*.json")).read_text())
    cpus = record["results"][0]["details"]["cpus"]
    assert cpus["pinned"] is False and cpus["caller"] == cpus["callee"] == sorted(
        os.sched_getaffinity(0))


def test_bad_bursts_options_are_one_line_and_exit_2(capsys, monkeypatch):

    monkeypatch.chdir(ROOT)
    for args, said in (
            (["ab", ".venv", ".venv", "--duet", "--bursts"],
             "argument --bursts: not allowed with argument --duet"),
            (["ab", ".venv", ".venv", "--bursts", "--suite", "fork_wait"],
             "none of the selected benchmarks can run in bursts"),
            (["run", "--suite", "rpc", "--turns", "C@/nowhere"], "expected SIDE@SOCKET")):
        out = release_bench(capsys, *args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.strip().count("\n") == 0 and said in out.stderr, out.stderr


def test_the_cases_of_several_processes_declare_bursts_and_list_says_so():
    from harness import registry

    declared = {c.id for s in registry.all_suites() for c in s.cases if c.bursts}
    assert declared == {"rpc/round_trip", "rpc/batched_update", "ddp_rpc/step_time"}
    out = subprocess.run([BIN / "release-bench", "list"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.count("bursts: yes") == 3, out.stdout


def test_a_side_that_gets_no_answer_or_whose_referee_is_gone_gets_one_clear_error():
    """A side waits for its turn on a blocking read: an answer that never comes ends in a
    TurnsError after the timeout, never a hang; a line sent to a referee that is gone is a
    TurnsError, never a SIGPIPE."""
    import socket

    ours, referees = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours:
        with pytest.raises(turns.TurnsError, match="side A: no answer in 1 s"):
            turns._read_line(ours, 1.0, "side A")
        referees.close()
        assert turns._read_line(ours, 1.0, "side A") == ""  # the referee left: the end
        with pytest.raises(turns.TurnsError, match="the referee is gone"):
            turns._send(ours, "done 0")


def test_a_connection_reset_is_a_lost_connection_and_a_stranger_is_turned_away():
    """A side whose referee vanished with a line unread gets 'connection lost'; the referee
    reads a side that vanished with its answer unread as a side that left (during its turn:
    dead), and closes a connection that does not say hello as a side."""
    import socket
    import time

    ours, referees = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours:
        ours.sendall(b"want\n")
        referees.close()  # with our line unread: Linux resets the connection
        with pytest.raises(turns.TurnsError, match=r"side A: connection lost \("):
            turns._read_line(ours, 1.0, "side A")

    with turns.Referee(timeout_s=10) as referee:
        stranger = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stranger.connect(referee.address)
        stranger.sendall(b"GET / HTTP/1.0\n")
        assert stranger.recv(1) == b""  # closed by the referee
        stranger.close()
        referee.ended(1, 0)  # B has ended: A's turns run alone, granted at once
        side = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        side.connect(referee.address)
        side.sendall(b"hello 0\nwant\n")
        deadline = time.monotonic() + 10
        while referee.state[0] != turns.State.IN_TURN:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)  # the grant is on its way to the side, which never reads it
        side.close()
        while referee.why[0] is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert referee.why[0] == "its measuring process left during turn 1"
