"""Bursts: both sides of a round alive at once, taking turns, so that they see the same minutes
of the machine while never sharing it.

A latency between processes (an RPC round trip, a DDP+RPC step) cannot be measured as a duet:
a caller and its callee on one CPU time context switches, not the transport. Measured in
sequential rounds, its level wanders with the host's scheduling of the vCPUs from one launch to
the next (an sd of 23-29% per round on a 2-vCPU VM). Here both sides' processes live through
the whole round and measure in short bursts, turn about in the order A B, B A, A B, ... A
round's figure pools a side's bursts, and the round's B/A ratio then compares bursts taken
seconds apart, which a slow spell of the machine hits alike.

The `Referee` (in the campaign's process) grants the turns over a Unix socket; a side's
measuring process asks for each through its `Turns` (`with turns.turn(): ...`). The rule that
keeps the pairing honest: a side gets a turn only while the other side is parked, blocked in
its own request. So at any moment at most one side is doing anything at all, in a turn or
between turns (setting up its next session, say); the parked one waits in a blocking read,
costing no CPU. What a side does between launches, when it has no process asking, keeps the
other side waiting too. Only at the start (both starting up) and after one side has ended do
the sides run unrefereed, and no turn starts then unless the other side has ended (a turn
measured alone, marked so).

A side whose process dies, or whose measuring process leaves mid-turn, ends the other side's
next request with `TurnsError` (the case then errors, and the round with it); so does a
partner that does not come back within `WAIT_TIMEOUT_S`. Each turn's start and end (the
measuring process's CLOCK_MONOTONIC, shared by every process of the host) go into the
referee's log, which the campaign keeps beside the round.
"""

from __future__ import annotations

import contextlib
import enum
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIDES = ("A", "B")
# How long a side waits for its partner to come back to the referee (between two launches
# of a case, say): longer than any launch's start here.
WAIT_TIMEOUT_S = 300.0


class TurnsError(Exception):
    """The round cannot go on: the partner died, left mid-turn or never came back (one
    line)."""


def first_in_pair(side: int, n: int) -> bool:
    """Whether side `side` (0 for A) goes first in its `n`-th pair of turns: A in even pairs,
    B in odd ones (A B, B A, A B, ...), so that each side goes first as often as the other."""
    return n % 2 == side


def may_go(side: int, taken: int, partner_taken: int) -> bool:
    """Whether a side that has had `taken` turns may have its next while its partner, parked,
    has had `partner_taken`: its next turn is in pair `taken`, after the partner's turn of that
    pair when the partner goes first in it, else after the partner's turn of the pair before."""
    need = taken if first_in_pair(side, taken) else taken + 1
    return partner_taken >= need


class State(enum.Enum):
    """Where a side stands with the referee."""

    AWAY = "away"  # not asking (starting up, between turns or launches): the other side waits
    PARKED = "parked"  # blocked in its request for a turn
    IN_TURN = "in turn"
    ENDED = "ended"  # its process exited; the other side's further turns run alone
    DIED = "died"  # left mid-turn, or its process failed: the other side's requests fail


@dataclass(frozen=True)
class Turns:
    """A side's handle on the referee: picklable, it travels to the worker that measures.
    `turn()` opens this process's connection on first use."""

    address: str
    side: int
    timeout_s: float = WAIT_TIMEOUT_S

    @property
    def label(self) -> str:
        return SIDES[self.side]

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Wait for this side's next turn, run the block, and hand the turn back (also when
        the block raises)."""
        conn = _connection(self)
        _send(conn, "want")
        reply = _read_line(conn, self.timeout_s + 30, f"side {self.label}")
        if not reply.startswith("go"):
            raise TurnsError(reply.partition(" ")[2] or "the referee ended the round")
        start = time.monotonic()
        try:
            yield
        finally:
            _send(conn, f"done {start!r} {time.monotonic()!r}")


_CONNECTIONS: dict[tuple[str, int, int], socket.socket] = {}


def _connection(turns: Turns) -> socket.socket:
    key = (turns.address, turns.side, os.getpid())  # a forked child opens its own
    if key not in _CONNECTIONS:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(turns.address)
        except OSError as e:
            raise TurnsError(f"side {turns.label}: no referee at {turns.address} ({e})") from e
        _send(conn, f"hello {turns.side}")
        _CONNECTIONS[key] = conn
    return _CONNECTIONS[key]


def _send(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall(line.encode() + b"\n")
    except OSError as e:
        raise TurnsError(f"the referee is gone ({e})") from e


def _read_line(conn: socket.socket, timeout_s: float | None, who: str) -> str:
    """One line from `conn`; '' at its end. A blocking read: a waiting side uses no CPU."""
    conn.settimeout(timeout_s)
    got = b""
    try:
        while not got.endswith(b"\n"):
            chunk = conn.recv(1)
            if not chunk:
                return ""
            got += chunk
    except TimeoutError:
        raise TurnsError(f"{who}: no answer in {timeout_s:.0f} s") from None
    except OSError as e:
        raise TurnsError(f"{who}: connection lost ({e})") from e
    return got.decode().strip()


class Referee:
    """Grants the turns of one round between its two sides (see the module's docstring), and
    logs them. Used as a context manager: the socket is served from entering to leaving."""

    def __init__(self, timeout_s: float = WAIT_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        # a short path: a Unix socket's name is limited to about 100 bytes
        self._dir = tempfile.mkdtemp(prefix="rb-turns-")
        self.address = str(Path(self._dir, "referee"))
        self._cond = threading.Condition()
        self.state = [State.AWAY, State.AWAY]
        self.taken = [0, 0]
        self.why: list[str | None] = [None, None]  # why a side died
        self.log: list[dict[str, Any]] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen(8)
        self._threads: list[threading.Thread] = []

    def turns(self, side: int) -> Turns:
        return Turns(self.address, side, self.timeout_s)

    def __enter__(self) -> Referee:
        t = threading.Thread(target=self._accept, daemon=True, name="turns-referee")
        t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            # wakes the accepting thread (a close alone leaves it blocked in accept)
            self._server.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.address)
            os.rmdir(self._dir)

    # ------------------------------------------------------------ what the campaign tells it

    def ended(self, side: int, status: int) -> None:
        """Side `side`'s process exited with `status`: its further turns are none; a failed
        process, or one that left in the middle of a turn, ends the other side's round."""
        with self._cond:
            # the side's last "done" may still be on its way from its measuring process
            self._cond.wait_for(lambda: self.state[side] not in (State.IN_TURN, State.PARKED),
                                timeout=2.0)
            if self.state[side] in (State.IN_TURN, State.PARKED) or status != 0:
                self._die(side, f"exited with status {status}" if status != 0 else
                          f"exited in the middle of turn {self.taken[side] + 1}")
            elif self.state[side] != State.DIED:
                self.state[side] = State.ENDED
            self._cond.notify_all()

    def summary(self) -> dict[str, Any]:
        """What the round's log says: every turn, and how many each side had (alone: while
        the other side had ended)."""
        with self._cond:
            return {"turns": list(self.log), "taken": dict(zip(SIDES, self.taken, strict=True)),
                    "alone": sum(1 for t in self.log if t["alone"]),
                    "died": {SIDES[s]: w for s, w in enumerate(self.why) if w}}

    # ------------------------------------------------------------ serving

    def _die(self, side: int, why: str) -> None:
        self.state[side] = State.DIED
        self.why[side] = self.why[side] or why

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed: the round is over
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            hello = _read_line(conn, None, "referee")
            if not hello.startswith("hello "):
                return
            side = int(hello.split()[1])
            while True:
                try:
                    line = _read_line(conn, None, "referee")
                except TurnsError:
                    line = ""
                if not line:  # the process left: normal between turns, a death in one
                    with self._cond:
                        if self.state[side] in (State.IN_TURN, State.PARKED):
                            self._die(side, f"its measuring process left during turn "
                                            f"{self.taken[side] + 1}")
                        self._cond.notify_all()
                    return
                if line == "want":
                    reply = self._grant(side)
                    with contextlib.suppress(TurnsError):
                        _send(conn, reply)
                elif line.startswith("done"):
                    _, start, end = line.split()
                    self._done(side, float(start), float(end))

    def _grant(self, side: int) -> str:
        other = 1 - side
        with self._cond:
            if self.state[side] == State.DIED:
                return "end this side was declared dead"
            self.state[side] = State.PARKED
            self._cond.notify_all()
            deadline = time.monotonic() + self.timeout_s
            while True:
                st = self.state[other]
                if st == State.DIED:
                    self.state[side] = State.AWAY
                    return (f"end side {SIDES[other]} died ({self.why[other]}); side "
                            f"{SIDES[side]} had {self.taken[side]} turns")
                if st == State.ENDED or (st == State.PARKED and may_go(
                        side, self.taken[side], self.taken[other])):
                    self.state[side] = State.IN_TURN
                    self.log.append({"side": SIDES[side], "n": self.taken[side] + 1,
                                     "alone": st == State.ENDED})
                    return "go"
                left = deadline - time.monotonic()
                if left <= 0:
                    self.state[side] = State.AWAY
                    return (f"end side {SIDES[other]} did not come back for its turn within "
                            f"{self.timeout_s:.0f} s (it is {st.value})")
                self._cond.wait(left)

    def _done(self, side: int, start: float, end: float) -> None:
        with self._cond:
            # the side's last granted turn is the last entry of its own in the log
            entry = next(t for t in reversed(self.log) if t["side"] == SIDES[side])
            entry.update(start=start, end=end)
            self.taken[side] += 1
            if self.state[side] == State.IN_TURN:
                self.state[side] = State.AWAY
            self._cond.notify_all()


def overlaps(log: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """Pairs of turns of different sides whose times overlap (none, when the pairing held)."""
    timed = sorted((t for t in log if "start" in t), key=lambda t: t["start"])
    out = []
    for i, t in enumerate(timed):
        for u in timed[i + 1:]:
            if u["start"] >= t["end"]:
                break
            if u["side"] != t["side"]:
                out.append((t, u))
    return out
