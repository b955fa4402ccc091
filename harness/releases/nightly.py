"""A night of the nightly: tonight's torch build, judged on this machine against last night's.

A night has three parts, each written down in the night's record:

- conformance: the selected suites' conformance cases in fresh processes, and the 1.6 API
  record, as `history` records a release (`history.record_release`), judged by
  expectations.toml; the events between last night's build and tonight's are what
  `history.changes` finds between the two records (a warning that appeared or went, an
  example that now warns or is removed, a build that changed);
- the gate: `ab` of last night's environment (A) against tonight's (B) on the headline
  benchmarks, as duets where a case allows it: two builds on one machine, side by side,
  which detects changes of a few percent where two separate runs detect tens of percent;
- asv: the same benchmarks in tonight's environment, filed under tonight's commit of the
  builds ledger (`ledger`), so that asv draws each figure over builds, its step detection
  names the build a change came with, and `asv compare` runs between last night's build and
  tonight's.

The night is red only for news: a result the expectations do not expect, a regression the
gate shows, or a part that could not run. Inconclusive figures, asv's marks and the events
are listed, not failures: a single asv run per build cannot tell a change from this
machine's noise, and the gate is there to tell.
"""

from __future__ import annotations

import enum
import itertools
import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import records
from harness.comparing import ab, campaign, expectations
from harness.comparing.calibration import Calibration
from harness.comparing.campaign import CampaignError, Unit
from harness.comparing.compare import Change, Verdict
from harness.releases import history
from harness.releases.ledger import Build, Ledger

SCHEMA = "release-bench-nightly/1"
ASV_TIMEOUT_S = 3600
# the gate's verdicts that are not a figure that moved: counted, and the inconclusive and
# unverified ones (not judged: a contended measurement) listed apart from those that moved;
# worse and better moved (significantly, inside the tolerance): listed, never red
QUIET = (Verdict.UNCHANGED, Verdict.INCONCLUSIVE, Verdict.UNVERIFIED)
# asv compare's first column: worse, better, failed now, fixed now
ASV_MARKS = {"+": "slower", "-": "faster", "!": "failed", "x": "no longer fails"}


class Light(enum.Enum):
    """A night's colour; its value is the nightly's exit status."""

    GREEN = 0
    RED = 1


@dataclass(frozen=True)
class Tonight:
    """The build a night runs: `label` names it (a release, or an environment's folder)."""

    label: str
    python: Path
    env: Any = None  # its `envs.TorchEnv` where `env create` built it


@dataclass(frozen=True)
class Plan:
    """What each night runs."""

    suites: tuple[str, ...]  # whose conformance cases (and release-notes examples) run
    skip: tuple[str, ...]  # cases left out by name
    gate: tuple[Unit, ...]  # the headline benchmark units `ab` compares
    rounds: int  # ab's rounds (swapped pairs, for duets)
    asv_bench: str | None  # asv's --bench: the benchmarks asv tracks over builds

    @property
    def run_args(self) -> list[str]:
        return ["--profile", "quick", *(a for s in self.skip for a in ("--skip", s))]


class Folder:
    """The nightly's own folder (not committed): the ledger, asv's results and pages, the
    scratch of each part, the pages, and last night's build."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.ledger = Ledger(self.path / "ledger")
        self.scratch = self.path / "scratch"
        self.html = self.path / "html"
        self.asv_html = self.path / "asv" / "html"
        self.state = self.path / "state.json"
        # asv names an existing environment by its Python's path: one path for every night
        # keeps tonight's results and last night's in one environment, which asv compare
        # and its graphs need
        self.python = self.path / "python"

    def last_night(self) -> dict | None:
        try:
            return json.loads(self.state.read_text())
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise CampaignError(f"{self.state}: not the nightly's state ({e})") from e

    def point_python_at(self, python: Path) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        target = shlex.quote(str(Path(python).absolute()))
        records.write_text_atomic(self.python, f'#!/bin/sh\nexec {target} "$@"\n')
        self.python.chmod(0o755)
        return self.python


def conformance(tonight: Tonight, plan: Plan, scratch: Path,
                expected: tuple[list, str] | None, progress: Callable[[str], None]) -> dict:
    """Tonight's conformance cases and release-notes examples, as `history` records a
    release."""
    units = [u for u in campaign.units(list(plan.suites), skip=plan.skip) if not u.benchmark]
    return history.record_release(tonight.label, tonight.python, tonight.env, units,
                                  plan.run_args, list(plan.suites), scratch, expected, progress)


def unexpected(rec: dict) -> list[dict]:
    """The cases of a conformance record whose status the expectations do not expect."""
    return [{"case": key, "status": c["expected"]["status"],
             "why": c["expected"].get("why") or c.get("reason", "")}
            for key, c in rec["cases"].items()
            if (c.get("expected") or {}).get("status") in expectations.UNEXPECTED]


def gate(a: Path, b: Path, plan: Plan, out: Path, progress: Callable[[str], None],
         cal: Calibration | None, thresholds: dict[str, float]) -> dict:
    """`ab` of last night's environment against tonight's on the gate's benchmarks."""
    res = ab.ab(str(a), str(b), list(plan.gate), plan.run_args, plan.rounds, out, progress,
                thresholds, None, None, cal)
    return {"A": res["versions"]["A"], "B": res["versions"]["B"], "rounds": res["rounds"],
            "design": res["design"].get("kind", "sequential"),
            "duets": res["design"].get("duet_units", []),
            # each benchmark's design and why (its best declared, by default)
            "designs": res["design"].get("units", {}),
            "calibration": cal.source if cal else None,
            "counts": _counts(res["changes"]),
            "moved": [_change(c) for c in res["changes"] if c.verdict not in QUIET],
            "inconclusive": [_change(c) for c in res["changes"] if c.verdict == "inconclusive"],
            "unverified": [_change(c) for c in res["changes"] if c.verdict == "unverified"]}


def _counts(changes: list[Change]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in changes:
        out[c.verdict] = out.get(c.verdict, 0) + 1
    return out


def _change(c: Change) -> dict:
    return {"case": c.case, "figure": c.name, "unit": c.unit, "verdict": c.verdict,
            "better": c.better, "baseline": c.baseline, "candidate": c.candidate,
            "factor": c.factor, "interval": c.interval, "adjusted": c.adjusted,
            "detectable": c.detectable, "rounds_to_decide": c.rounds_to_decide,
            "undecided": c.undecided, "why": c.why}


# ------------------------------------------------------------------------------------- asv

def asv_bin() -> str:
    asv = Path(sys.executable).with_name("asv")
    return str(asv) if asv.exists() else "asv"


def asv_run(conf: Path, machine: str, python: Path, commit: str, bench: str | None,
            log: Path) -> int:
    """asv in tonight's environment, its results filed under tonight's ledger commit."""
    # asv finds an existing environment's Python by an absolute path only
    cmd = [asv_bin(), "run", "--config", str(conf), "--machine", machine,
           "-E", f"existing:{Path(python).absolute()}", "--set-commit-hash", commit,
           "--launch-method",
           "spawn", "--show-stderr", *(["--bench", bench] if bench else [])]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=ASV_TIMEOUT_S,
                              env=campaign.checkout_env(), cwd=campaign.ROOT).returncode


def asv_compare(conf: Path, machine: str, a: str, b: str) -> list[dict]:
    """asv compare of two ledger commits (factor 1.1, its default): the rows it marks."""
    out = subprocess.run([asv_bin(), "compare", "--config", str(conf), "--machine", machine,
                          "--factor", "1.1", "--split", a, b], capture_output=True, text=True,
                         timeout=600, cwd=campaign.ROOT)
    if out.returncode != 0:  # asv says why on stdout ("· Config file ... not found.")
        said = (out.stderr.strip() or out.stdout.strip() or "failed").splitlines()[-1]
        raise CampaignError(f"asv compare: {said.lstrip('· ')}")
    return compare_rows(out.stdout)


def keep_tracked(results_dir: Path) -> list[str]:
    """Leave in asv's list of benchmarks (benchmarks.json, which `asv run --bench` writes
    with every benchmark it discovered) only those with results over builds: asv's pages
    otherwise ask for a graph of each of the others and find none. Returns those left out."""
    listed = results_dir / "benchmarks.json"
    try:
        doc = json.loads(listed.read_text())
    except (OSError, ValueError) as e:
        raise CampaignError(f"{listed}: asv's benchmarks not readable ({e})") from e
    tracked = set()
    for path in results_dir.glob("*/*.json"):
        if path.name != "machine.json":
            tracked |= set(json.loads(path.read_text()).get("results", {}))
    left_out = sorted(k for k in doc if k != "version" and k not in tracked)
    records.write_json_atomic(listed, {k: v for k, v in doc.items() if k not in left_out})
    return left_out


def compare_rows(text: str) -> list[dict]:
    """The marked rows of asv compare's table: | mark | before | after | ratio | name |."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in ASV_MARKS:
            rows.append({"mark": ASV_MARKS[cells[0]], "before": cells[1], "after": cells[2],
                         "ratio": cells[3], "benchmark": cells[4]})
    return rows


def asv_regressions(html_dir: Path, builds: dict[str, Build]) -> list[dict]:
    """What asv's step detection flags (`asv publish`'s regressions.json), each step named by
    the two builds it lies between (the ledger's commits)."""
    try:
        found = json.loads((html_dir / "regressions.json").read_text())["regressions"]
        index = json.loads((html_dir / "index.json").read_text())
    except (OSError, ValueError, KeyError) as e:
        raise CampaignError(f"{html_dir}: asv's regressions not readable ({e})") from e
    to_hash = {int(k): v for k, v in index.get("revision_to_hash", {}).items()}
    order = {h: r for r, h in to_hash.items()}
    by_revision = sorted(order.values())

    def label(revision: int | None) -> str | None:
        b = builds.get(to_hash.get(revision, "")) if revision is not None else None
        return b.label if b else None

    out = []
    for name, _graph, _params, idx, last_v, best_v, jumps in found:
        bench = name.split("(", 1)[0]
        params = index.get("benchmarks", {}).get(bench, {})
        shown = name
        if idx is not None and params.get("params"):
            values = next(itertools.islice(itertools.product(*params["params"]), idx, None))
            shown = f"{bench}({', '.join(map(str, values))})"
        for rev_a, rev_b, before, after in jumps:
            if rev_a is None:  # one commit apart: the step is at rev_b, from the one before
                earlier = [r for r in by_revision if r < rev_b]
                rev_a = earlier[-1] if earlier else None
            out.append({"benchmark": shown, "from": label(rev_a), "to": label(rev_b),
                        "before": before, "after": after,
                        "factor": after / before if before else None,
                        "last": last_v, "best": best_v})
    return out


# --------------------------------------------------------------------------------- verdict

def judge(unexpected_cases: list[dict], gate_part: dict | None, failures: list[str]
          ) -> tuple[Light, list[str]]:
    """Red only for news: an unexpected result, a regression the gate shows, a part that
    could not run; with the reasons, one line each."""
    why = [f"{u['case']}: {u['status']}" + (f" ({u['why']})" if u["why"] else "")
           for u in unexpected_cases]
    if gate_part:
        # a figure's regression has its factor; a case that passed and now fails has none
        why += [f"gate: {m['case']} {m['figure']} regression"
                + (f" x{m['factor']:.3f}" if m["factor"] is not None else "")
                for m in gate_part["moved"] if m["verdict"] == Verdict.REGRESSION]
    why += failures
    return (Light.RED if why else Light.GREEN), why


def night_name(number: int, build: Build) -> str:
    return f"{number:03d}-{build.tag}"


def next_number(record_dir: Path) -> int:
    numbers = [int(m[1]) for p in record_dir.glob("*.json")
               if (m := re.match(r"(\d{3})-.*(?<!\.conformance)\.json$", p.name))]
    return max(numbers, default=0) + 1


def read_nights(record_dir: Path) -> list[dict]:
    """The night records in a record folder, in their order."""
    return [history.read_document(p, SCHEMA, "night record")
            for p in sorted(record_dir.glob("[0-9][0-9][0-9]-*.json"))
            if not p.name.endswith(".conformance.json")]


def elapsed(t0: float) -> float:
    return round(time.monotonic() - t0, 1)
