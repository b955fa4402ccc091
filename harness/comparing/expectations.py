"""Expected results: the known upstream defects a run is expected to catch, kept in one file
outside the cases (`expectations.toml` at the repository root), in the manner of
web-platform-tests' metadata and Chromium's TestExpectations.

An entry names a case (`suite/case`, a glob), the conditions under which it applies (torch
version as a PEP 440 specifier, device, platform, Python), the outcome(s) it is expected to
have, a signature (a regular expression every failure message of the case must match, so
that a different failure is not excused), for a check judged on a rate the expected range of
that rate, and the issue that tracks the defect (required: no expectation without a ticket):

    [[expect]]
    case = "fork_wait/clean_exit"
    outcome = ["fail"]
    signature = "terminate called without an active exception"
    issue = "https://github.com/pytorch/pytorch/issues/38228"
    summary = "a thread that takes the GIL during interpreter shutdown aborts the process"
    when = { torch = ">=2.12.1", device = "cpu" }
    rate = { release_notes = [0.2, 1.0], chains = [0.02, 0.8] }

Each result of a run then gets a status:

- `pass`, `skip`, `invalid`, `inconclusive`: as the outcome, where no entry applies or the
  entry allows a pass;
- `expected-fail`: it failed (or erred) as an applicable entry says, every failure message
  matching a signature, every rate inside its range: green, shown with the issue link; also a
  pass of a case judged on rates whose every interval still reaches its expected range (a
  defect seen in 10% of trials shows in none of 20 one time in eight: too few trials to say
  it is gone);
- `unexpected-fail`: a failure no entry excuses, a failure message no signature matches, or a
  rate above its range: red;
- `unexpected-pass`: it passed where the entry expects a failure only (and no rate of it is
  judged), or a rate's interval fell below its range: red, since the defect may be fixed and
  the entry should go.

An entry whose case pattern names no case of the suites is `stale` (a warning). A run is
green exactly when nothing is unexpected. `update` proposes the edit that makes a set of runs
green: a new entry per new failure (its issue a placeholder that fails `load`, so that the
file cannot be used until a ticket is named), an entry's removal where its case now passes.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.formats import fmt_percent, fmt_rate
from harness.records import CaseKey, Metric, Outcome, Result, Run

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILE = ROOT / "expectations.toml"
# the outcomes an entry may expect (records.Outcome), and those that are failures
OUTCOMES = (Outcome.PASS, Outcome.FAIL, Outcome.ERROR, Outcome.SKIP)
FAILED = (Outcome.FAIL, Outcome.ERROR)
CONDITIONS = ("torch", "device", "platform", "python")
KEYS = {"case", "outcome", "signature", "issue", "summary", "when", "rate"}
# what `update` writes where a ticket is still to be named; `load` refuses it
PLACEHOLDER_ISSUE = "FILL IN: the URL of the issue tracking this defect"
ISSUE_URL = re.compile(r"^https?://\S+/\S+$")
STATUSES = ("pass", "skip", "n/a", "invalid", "inconclusive", "expected-fail",
            "unexpected-fail", "unexpected-pass")
UNEXPECTED = ("unexpected-fail", "unexpected-pass")


class ExpectationsError(Exception):
    """An expectations file that cannot be used (the message is one line)."""


@dataclass(frozen=True)
class Expectation:
    """One entry of the file: a case (glob), when it applies, what it is expected to do."""

    case: str
    outcomes: tuple[str, ...]
    issue: str
    summary: str = ""
    signature: str | None = None
    when: tuple[tuple[str, str], ...] = ()
    # expected range of each rate metric: by a label's value ("release_notes"), or "*" for all
    rates: tuple[tuple[str, float, float], ...] = ()
    index: int = 0  # its place in the file (0-based), for messages and `update`

    @property
    def name(self) -> str:
        return f"entry {self.index + 1} ({self.case})"

    def matches_case(self, suite: str, case: str) -> bool:
        return fnmatch.fnmatchcase(f"{suite}/{case}", self.case)

    def applies(self, machine: dict, device: str | None) -> bool:
        """Whether its conditions hold for a result of `device` on `machine` (a run's
        fingerprint: the torch, platform and Python the result was measured with)."""
        for key, want in self.when:
            if key == "device" and device != want:
                return False
            if key == "platform" and platform_of(machine) != want.lower():
                return False
            if key in ("torch", "python"):
                have = ((machine.get("torch") or {}).get("version") if key == "torch"
                        else machine.get("python"))
                try:
                    if have is None or not SpecifierSet(want).contains(Version(str(have)),
                                                                        prereleases=True):
                        return False
                except InvalidVersion:
                    return False
        return True

    def rate_range(self, labels: dict[str, Any]) -> tuple[float, float] | None:
        values = {str(v) for v in (labels or {}).values()}
        for key, lo, hi in self.rates:
            if key in values:
                return lo, hi
        return next(((lo, hi) for key, lo, hi in self.rates if key == "*"), None)


def platform_of(machine: dict) -> str:
    """`linux`, `darwin`, `windows`: the fingerprint's `os` (platform.platform()) lower-cased
    up to its first dash."""
    return str(machine.get("os") or "").split("-", 1)[0].lower()


def _fail(source: str, where: str, what: str) -> ExpectationsError:
    return ExpectationsError(f"{source}: {where}: {what}")


def _entry(raw: Any, index: int, source: str) -> Expectation:
    where = f"entry {index + 1}"
    if not isinstance(raw, dict):
        raise _fail(source, where, "not a table")
    if unknown := sorted(set(raw) - KEYS):
        raise _fail(source, where, f"unknown key {unknown[0]!r} (keys: {', '.join(sorted(KEYS))})")
    case = raw.get("case")
    if not isinstance(case, str) or "/" not in case:
        raise _fail(source, where, "`case` must be 'suite/case' (a glob may stand for either)")
    where = f"entry {index + 1} ({case})"
    outcome = raw.get("outcome")
    outcomes = (outcome,) if isinstance(outcome, str) else tuple(outcome or ())
    if not outcomes or any(o not in OUTCOMES for o in outcomes):
        raise _fail(source, where, f"`outcome` must be one or a list of {', '.join(OUTCOMES)}")
    if not any(o in FAILED for o in outcomes):
        raise _fail(source, where, "`outcome` expects no failure: an entry is for a defect")
    issue = raw.get("issue")
    if not isinstance(issue, str) or not ISSUE_URL.match(issue):
        raise _fail(source, where, f"`issue` must be the URL of the issue tracking the defect, "
                                   f"got {issue!r}")
    signature = raw.get("signature")
    if signature is not None:
        try:
            re.compile(signature)
        except (re.error, TypeError) as e:
            raise _fail(source, where, f"`signature` is not a regular expression ({e})") from e
    when = raw.get("when", {})
    if not isinstance(when, dict) or (bad := sorted(set(when) - set(CONDITIONS))):
        raise _fail(source, where, f"`when` takes {', '.join(CONDITIONS)}"
                    + (f"; got {bad[0]!r}" if isinstance(when, dict) else ""))
    for key in ("torch", "python"):
        if key in when:
            try:
                SpecifierSet(str(when[key]))
            except InvalidSpecifier as e:
                raise _fail(source, where, f"`when.{key}` is not a PEP 440 specifier "
                                           f"({when[key]!r})") from e
    rate = raw.get("rate")
    rates = []
    if rate is not None:
        items = rate.items() if isinstance(rate, dict) else [("*", rate)]
        for key, bounds in items:
            ok = (isinstance(bounds, list) and len(bounds) == 2
                  and all(isinstance(b, int | float) for b in bounds)
                  and 0 <= bounds[0] <= bounds[1] <= 1)
            if not ok:
                raise _fail(source, where, f"`rate` range {key!r} must be [low, high] within "
                                           f"[0, 1], got {bounds!r}")
            rates.append((str(key), float(bounds[0]), float(bounds[1])))
    return Expectation(case, outcomes, issue, str(raw.get("summary", "")), signature,
                       tuple(sorted((k, str(v)) for k, v in when.items())), tuple(rates), index)


def parse(text: str, source: str = "expectations") -> list[Expectation]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ExpectationsError(f"{source}: not valid TOML ({e})") from e
    if unknown := sorted(set(doc) - {"expect"}):
        raise ExpectationsError(f"{source}: unknown table {unknown[0]!r} (entries are "
                                "[[expect]] tables)")
    return [_entry(raw, i, source) for i, raw in enumerate(doc.get("expect", []))]


def load(path: str | Path | None = None) -> list[Expectation]:
    """The entries of `path` (default: `expectations.toml` at the repository root; none when
    that file does not exist). Any problem is one line, as ExpectationsError."""
    p = Path(path) if path is not None else DEFAULT_FILE
    if path is None and not p.exists():
        return []
    try:
        text = p.read_text()
    except OSError as e:
        raise ExpectationsError(f"{p}: cannot read ({e.strerror or e})") from e
    return parse(text, str(path) if path is not None else p.name)


# --- judging a run --------------------------------------------------------------------------


@dataclass
class Judged:
    """A result's status under the expectations, and why."""

    key: CaseKey  # the result's
    outcome: str  # the case's own outcome
    status: str
    why: str = ""
    issue: str | None = None
    rates: list[str] = field(default_factory=list)  # "release_notes 17/20 [62%, 97%]"

    @property
    def unexpected(self) -> bool:
        return self.status in UNEXPECTED

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        for k in ("why", "issue"):
            if getattr(self, k):
                out[k] = getattr(self, k)
        if self.rates:
            out["rates"] = self.rates
        return out


def failure_messages(entry: Result) -> list[str]:
    """What went wrong in a failed or erred result, one message per distinct failure: those
    its case listed (`details["failures"]`: e.g. each way a process of `clean_exit` ended),
    else each failed check, else its reason."""
    listed = entry.details.get("failures")
    if listed:
        return list(listed)
    failed = [c for c in entry.checks if c.failed]
    if failed and entry.outcome == "fail":
        return [f"{c.name}: {c.detail}" for c in failed]
    return [entry.reason]


def _rate_of(m: Metric) -> tuple[int, int, float, float] | None:
    """(k, n, low, high) of a rate metric: k of n trials, with its exact interval."""
    n, value = m.count, m.value
    if not n or value is None:
        return None
    k = round(value * n)
    lo, hi = m.interval
    if lo is None or hi is None:
        from scipy.stats import binomtest

        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        lo, hi = float(ci.low), float(ci.high)
    return k, n, lo, hi


def _label(m: Metric) -> str:
    return ",".join(str(v) for v in m.labels.values()) or m.name


def judge_result(entry: Result, machine: dict, expectations: Sequence[Expectation]) -> Judged:
    """One result entry's status (see the module's docstring)."""
    key = entry.case_key
    outcome = entry.outcome
    applicable = [x for x in expectations
                  if x.matches_case(entry.suite, entry.case) and x.applies(machine, entry.device)]
    if not applicable:
        if outcome in FAILED:
            return Judged(key, outcome, "unexpected-fail", "no expectation covers it")
        return Judged(key, outcome, outcome)
    issue = applicable[0].issue
    allowed = {o for x in applicable for o in x.outcomes}
    rates, low, high, unranged = [], [], [], 0
    for m in entry.metrics:
        if m.kind != "rate" or (r := _rate_of(m)) is None:
            continue
        k, n, lo, hi = r
        want = next((rng for x in applicable if (rng := x.rate_range(m.labels))), None)
        text = f"{_label(m)} {fmt_rate(k, n, lo, hi)}"
        unranged += want is None
        if want is not None:
            text += f" (expected {fmt_percent(want[0])}-{fmt_percent(want[1])})"
            if lo > want[1]:
                high.append(text)
            elif hi < want[0]:
                low.append(text)
        rates.append(text)
    if high:
        return Judged(key, outcome, "unexpected-fail",
                      "rate above its expected range: " + "; ".join(high), issue, rates)
    if outcome in FAILED:
        if outcome not in allowed:
            return Judged(key, outcome, "unexpected-fail",
                          f"{outcome}, where the entry expects {'/'.join(sorted(allowed))}",
                          issue, rates)
        signatures = [x.signature for x in applicable if x.signature]
        unexcused = [msg for msg in failure_messages(entry)
                     if signatures and not any(re.search(s, msg) for s in signatures)]
        if unexcused:
            return Judged(key, outcome, "unexpected-fail",
                          "a failure the entry's signature does not match: "
                          + unexcused[0][:200], issue, rates)
    if low:  # the defect shows less than the entry says, failing or not
        return Judged(key, outcome, "unexpected-pass", "rate below its expected range (the "
                      "defect may be fixed, or rarer): " + "; ".join(low), issue, rates)
    if outcome in FAILED:
        return Judged(key, outcome, "expected-fail", applicable[0].summary, issue, rates)
    if outcome == "pass" and "pass" not in allowed:
        if rates and not unranged:
            # a defect seen in a share of trials need not show in a few: where every rate's
            # interval still reaches its expected range, these trials are too few to say the
            # defect is gone (enough clean trials put the interval below it: `low`, above)
            return Judged(key, outcome, "expected-fail",
                          f"{applicable[0].summary}; not seen in these trials, too few to rule "
                          "it out (each rate's interval reaches its expected range)", issue,
                          rates)
        return Judged(key, outcome, "unexpected-pass",
                      "passed where the entry expects a failure: is the defect fixed? remove "
                      "the entry", issue, rates)
    return Judged(key, outcome, outcome, "", issue, rates)


def stale(expectations: Sequence[Expectation], known_cases: Iterable[str]) -> list[Expectation]:
    """Entries whose case pattern names no case of the suites (`suite/case` names)."""
    known = list(known_cases)
    return [x for x in expectations if not fnmatch.filter(known, x.case)]


def known_cases() -> list[str]:
    from harness import registry

    return [c.id for s in registry.all_suites() for c in s.cases]


@dataclass
class RunJudgement:
    """A run's results judged against the expectations."""

    results: list[Judged]
    stale: list[Expectation]
    source: str

    @property
    def unexpected(self) -> list[Judged]:
        return [j for j in self.results if j.unexpected]

    def counts(self) -> dict[str, int]:
        return {s: sum(j.status == s for j in self.results) for s in STATUSES}

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "counts": self.counts(),
                "stale": [x.name for x in self.stale]}


def judge_run(run: Run, expectations: Sequence[Expectation], source: str,
              cases: Iterable[str] | None = None) -> RunJudgement:
    """Every result of `run` judged; `cases` (the suites' case names) finds stale entries."""
    results = [judge_result(e, run.machine, expectations) for e in run.results]
    return RunJudgement(results, stale(expectations, cases) if cases is not None else [], source)


def annotate(run: Run, judgement: RunJudgement) -> Run:
    """The run with each result's status (`expected`) and the judgement's summary
    (`expectations`) written into it; the outcomes stay the cases' own."""
    results = tuple(replace(e, expected=j.to_json())
                    for e, j in zip(run.results, judgement.results, strict=True))
    return replace(run, results=results, expectations=judgement.to_json())


def lines(judgement: RunJudgement) -> list[str]:
    """What a terminal shows: each expected or unexpected result, and stale entries."""
    out = []
    for j in judgement.results:
        if j.status in ("expected-fail", *UNEXPECTED):
            text = f"{j.status}: {j.key}"
            if j.issue:
                text += f" ({j.issue})"
            if j.why:
                text += f": {j.why}"
            if j.rates and "rate" not in j.why:
                text += "; rates " + "; ".join(j.rates)
            out.append(text)
    out += [f"stale: {x.name} names no case of the suites; remove it" for x in judgement.stale]
    return out


# --- update ---------------------------------------------------------------------------------


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _signature_of(messages: list[str]) -> str:
    """A regular expression matching the messages' common failure: the part after the last
    ': ' of the first (the process's last words, say), escaped."""
    msg = messages[0].rsplit(": ", 1)[-1].strip() if messages else ""
    return re.escape(msg[:120]) if msg else ".*"


def _new_entry(case: str, results: list[tuple[Result, dict]]) -> str:
    """The TOML of a new entry for `case`'s failures in `results` ((result, machine) pairs)."""
    outcomes = sorted({e.outcome for e, _ in results})
    messages = [m for e, _ in results if e.outcome in FAILED for m in failure_messages(e)]
    torch_versions = sorted({str((m.get("torch") or {}).get("version", "")).split("+")[0]
                             for _, m in results})
    devices = sorted({e.device for e, _ in results})
    when = []
    if len(torch_versions) == 1 and torch_versions[0]:
        when.append(f"torch = {_toml_str('==' + torch_versions[0])}")
    if len(devices) == 1 and devices[0]:
        when.append(f"device = {_toml_str(devices[0])}")
    rates: dict[str, list[float]] = {}
    for e, _ in results:
        for m in e.metrics:
            if m.kind == "rate" and (r := _rate_of(m)) is not None:
                lo, hi = rates.setdefault(_label(m), [1.0, 0.0])
                rates[_label(m)] = [min(lo, r[2]), max(hi, r[3])]
    text = ["", "[[expect]]", f"case = {_toml_str(case)}",
            f"outcome = [{', '.join(_toml_str(o) for o in outcomes)}]",
            f"signature = {_toml_str(_signature_of(messages))}",
            f"issue = {_toml_str(PLACEHOLDER_ISSUE)}",
            f"summary = {_toml_str('seen in ' + str(len(results)) + ' run(s)')}"]
    if when:
        text.append("when = { " + ", ".join(when) + " }")
    if rates:
        text.append("rate = { " + ", ".join(
            f"{_toml_str(k)} = [{math.floor(lo * 100) / 100:g}, {math.ceil(hi * 100) / 100:g}]"
            for k, (lo, hi) in sorted(rates.items())) + " }")
    return "\n".join(text) + "\n"


def _blocks(text: str) -> tuple[str, list[str]]:
    """The file's text before its first entry, and each entry's text (with the comment lines
    just above its `[[expect]]`), in order."""
    lines_ = text.splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines_) if ln.strip() == "[[expect]]"]
    heads = []
    for s in starts:
        while s > 0 and lines_[s - 1].lstrip().startswith("#") and s - 1 not in heads:
            s -= 1
        heads.append(s)
    if not heads:
        return text, []
    bounds = [*heads, len(lines_)]
    return ("".join(lines_[:heads[0]]),
            ["".join(lines_[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)])


@dataclass
class Update:
    """What `update` would change: the new text, and a line per change."""

    old: str
    new: str
    changes: list[str]

    def diff(self, name: str) -> str:
        return "".join(difflib.unified_diff(self.old.splitlines(keepends=True),
                                            self.new.splitlines(keepends=True),
                                            f"a/{name}", f"b/{name}"))


def update(text: str, runs: Sequence[Run], cases: Iterable[str] | None = None,
           source: str = "expectations") -> Update:
    """The edit of the expectations `text` that `runs` call for:

    - a case that failed with no entry covering it: a new entry (outcomes as seen, a
      signature from its failure message, the torch version and device it failed on, the
      ranges of its rates), whose issue is a placeholder `load` refuses;
    - an entry whose case passed in every run it applied to: removed; one whose case passed
      in some and failed in others: `pass` added to its outcomes (a pass in too few trials to
      rule the defect out counts neither way);
    - a failure an entry's signature or rate range does not excuse: reported, left to a
      person (a new defect, or the same one changed?);
    - a stale entry: removed."""
    expectations = parse(text, source) if text.strip() else []
    head, blocks = _blocks(text)
    judged = [(e, run.machine, judge_result(e, run.machine, expectations))
              for run in runs for e in run.results]
    changes: list[str] = []
    new_failures: dict[str, None] = {}  # in the runs' order
    for e, _, j in judged:
        if j.status == "unexpected-fail" and j.issue is None:
            new_failures[e.case_id] = None
        elif j.status == "unexpected-fail":
            changes.append(f"{j.key}: {j.why} (left as it is: a new defect, or a changed one?)")
    for case in new_failures:
        # every run of that case, passes included, decides its outcomes
        seen = [(e, m) for e, m, _ in judged if e.case_id == case]
        blocks.append(_new_entry(case, seen))
        changes.append(f"{case}: new entry (name its issue before the file can be used)")
    drop: set[int] = set()
    for x in expectations:
        # a pass in too few trials to tell from the defect unseen (judged expected-fail) says
        # nothing of the entry either way
        mine = [(e, j) for e, m, j in judged
                if x.matches_case(e.suite, e.case) and x.applies(m, e.device)
                and not (e.outcome == "pass" and j.status == "expected-fail")]
        outcomes = {e.outcome for e, _ in mine}
        if mine and outcomes <= {"pass", "skip"} and any(o == "pass" for o in outcomes):
            drop.add(x.index)
            changes.append(f"{x.name}: passed in every run it applies to: removed")
        elif mine and "pass" in outcomes and "pass" not in x.outcomes:
            blocks[x.index] = re.sub(r"(?m)^outcome\s*=.*$", "outcome = " + "[" + ", ".join(
                _toml_str(o) for o in sorted({*x.outcomes, "pass"})) + "]", blocks[x.index],
                count=1)
            changes.append(f"{x.name}: passed in some runs, failed in others: 'pass' added")
    for x in stale(expectations, cases) if cases is not None else []:
        if x.index not in drop:
            drop.add(x.index)
            changes.append(f"{x.name}: names no case of the suites: removed")
    new = head + "".join(b for i, b in enumerate(blocks) if i not in drop)
    return Update(text, new, changes)
