"""The run record: one versioned JSON document per run, written atomically, and its typed
form (`Run`, `Result`, `Metric`, `MetricKey`, `Check`), the only code that knows its keys.

Layout (field names are a contract other tools read; add, never rename):

    {"schema_version": 2, "machine": {...fingerprint...}, "profile": "quick",
     "started": ISO-8601, "finished": ISO-8601 or null while running,
     "command": [...], "notes": [...], "interrupted": true/false,
     "measured": {"design": "sequential" or "duet", "cpus": [...], "threads": N},
     "results": [{"suite", "case", "kind", "device", "params", "outcome", "reason",
                  "metrics": [{"name", "labels"?, "value", "unit", "kind", "better",
                               "stats"?, "samples"?, "sessions"?}],
                  "checks": [{"name", "passed", "detail", "performance"?}], "notes": [...],
                  "tables": {name: [row, ...]}, "details": {...},
                  "telemetry": {...}, "started", "elapsed_s"}]}

Runs live under results/runs/<machine name>/<started>-<profile>.json.

Everything that reads runs works on the frozen dataclasses below: `Run.from_json` /
`read_run` build them, `to_json` writes the same layout back (keys this version does not know
are kept in `extra` and written back unchanged, so a newer record survives a round trip).
"""

from __future__ import annotations

import enum
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema

# 2: metrics carry `labels` (their identity is name + labels), their `samples` (at most 256)
# and one set of statistics (harness.stats.summarize). Version 1 records are still read:
# their metrics have no samples, so `compare` calls them unverified.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


class Outcome(enum.StrEnum):
    """What running a case once came to (its values are the record's strings)."""

    PASS = "pass"
    FAIL = "fail"  # a check failed: the feature does not do what the release documents
    # a check judged with its interval could not tell pass from fail, even after its further
    # measurements: listed, never a failure (see Context.check_within)
    INCONCLUSIVE = "inconclusive"
    SKIP = "skip"  # it cannot run here (no CUDA, no torchvision)
    ERROR = "error"  # it broke before it could judge (a bug, a worker that died)
    # only performance checks failed, on a machine telemetry found contended (the measurement
    # is void, not the feature broken; see runner.execute)
    INVALID = "invalid"
    NA = "n/a"  # the release predates what it exercises (`harness.cases.Since`)


OUTCOMES = tuple(o.value for o in Outcome)


class MetricKind(enum.StrEnum):
    """What kind of figure a metric is: `compare` picks its tolerance by kind, and judges
    kinds that sit near zero or change sign (error, overhead, count, value) by no relative
    spread."""

    TIME = "time"
    LATENCY = "latency"
    THROUGHPUT = "throughput"
    RATIO = "ratio"
    BYTES = "bytes"
    ERROR = "error"
    OVERHEAD = "overhead"
    RATE = "rate"  # a share of trials (fresh processes that ended badly)
    COUNT = "count"
    VALUE = "value"  # a figure for context


class Better(enum.StrEnum):
    """Which way a figure is good (a metric without a direction has None)."""

    HIGHER = "higher"
    LOWER = "lower"


class Design(enum.StrEnum):
    """How a run's figures were measured (`Run.measured["design"]`)."""

    SEQUENTIAL = "sequential"
    DUET = "duet"  # both sides of a round at once, on swapped halves (harness.running.duet)
    BURSTS = "bursts"  # both sides of a round alive at once, in turns (harness.running.turns)

_METRIC = {
    "type": "object",
    "required": ["name", "value", "unit"],
    "properties": {
        "name": {"type": "string"},
        "labels": {"type": "object"},
        "samples": {"type": "array", "items": {"type": "number"}, "maxItems": 256},
        "value": {"type": ["number", "null"]},
        "unit": {"type": "string"},
        "kind": {"type": "string"},
        "better": {"enum": [*Better, None]},
        "stats": {"type": ["object", "null"]},
        # the figure in each independent session of its case (added in schema 2, optional)
        "sessions": {"type": "array", "items": {"type": "number"}},
    },
}

_RESULT = {
    "type": "object",
    "required": ["suite", "case", "params", "outcome", "reason", "metrics"],
    "properties": {
        "suite": {"type": "string"},
        "case": {"type": "string"},
        "kind": {"enum": ["conformance", "benchmark"]},
        "device": {"type": "string"},
        "params": {"type": "object"},
        "outcome": {"enum": list(OUTCOMES)},
        "reason": {"type": "string"},
        "metrics": {"type": "array", "items": _METRIC},
        "checks": {"type": "array"},
        "notes": {"type": "array", "items": {"type": "string"}},
        "tables": {"type": "object"},
        "telemetry": {"type": ["object", "null"]},
        "elapsed_s": {"type": "number"},
        # the version of the case's checks (absent in records before results carried it)
        "check_version": {"type": "integer", "minimum": 1},
    },
}

RUN_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "machine", "profile", "started", "finished", "results"],
    "properties": {
        "schema_version": {"enum": list(READABLE_VERSIONS)},
        "machine": {"type": "object", "required": ["name"]},
        "profile": {"type": "string"},
        "started": {"type": "string"},
        "finished": {"type": ["string", "null"]},
        # true when SIGINT/SIGTERM ended the run early (runner.run); absent in older runs
        "interrupted": {"type": "boolean"},
        "results": {"type": "array", "items": _RESULT},
    },
}


class RecordError(Exception):
    """A run file that cannot be read as a run record (the message is one line)."""


def param_id(params: Mapping[str, Any]) -> str:
    """A parameter set as people read it: n=1-device=cpu ("default" when empty)."""
    return "-".join(f"{k}={v}" for k, v in params.items()) or "default"


@dataclass(frozen=True, order=True)
class CaseKey:
    """A result's identity within a run: its suite, case, device and parameters (each
    parameter's value as `param_id` writes it, in the case's order). Written
    `suite/case[device params]` (`str`), as comparison.json and calibration files keep it;
    `parse` is the one reader of that text."""

    suite: str
    case: str
    device: str = ""
    params: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, suite: str, case: str, device: str = "",
           params: Mapping[str, Any] | None = None) -> CaseKey:
        return cls(suite, case, device, tuple((k, str(v)) for k, v in (params or {}).items()))

    @classmethod
    def parse(cls, text: str) -> CaseKey:
        """The key that `str` wrote as `text` (a stored comparison's or calibration's);
        ValueError on text that is not one."""
        m = _CASE_KEY.fullmatch(text)
        if m is None:
            raise ValueError(f"not a case key (suite/case[device params]): {text!r}")
        suite, case, device, params = m.groups()
        pairs = () if params == "default" else tuple(
            tuple(p.split("=", 1)) for p in re.split(r"-(?=[A-Za-z_]\w*=)", params))
        if any(len(p) != 2 for p in pairs):
            raise ValueError(f"not a case key's parameters (k=v-k=v): {text!r}")
        return cls(suite, case, device, pairs)

    @property
    def case_id(self) -> str:
        """suite/case: the case, whatever its device and parameters."""
        return f"{self.suite}/{self.case}"

    @property
    def unit(self) -> str:
        """suite.case: the name of the campaign unit that runs it alone (a benchmark)."""
        return f"{self.suite}.{self.case}"

    def __str__(self) -> str:
        return f"{self.case_id}[{self.device} {param_id(dict(self.params))}]"


_CASE_KEY = re.compile(r"([^/\[\]]+)/([^/\[\]]+)\[(\S*) (.+)\]")


def result_key(suite: str, case: str, device: str, params: Mapping[str, Any]) -> str:
    """A result's identity within a run, as text: suite/case[device params]."""
    return str(CaseKey.of(suite, case, device, params))


def _extra(doc: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in known}


@dataclass(frozen=True)
class MetricKey:
    """A metric's identity within its result: its name and its labels (sorted, hashable)."""

    name: str
    labels: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, name: str, labels: Mapping[str, Any] | None = None) -> MetricKey:
        return cls(name, tuple(sorted((labels or {}).items())))

    def __str__(self) -> str:
        """As people read it: p50[bytes=4, path=gloo]."""
        if not self.labels:
            return self.name
        return f"{self.name}[{', '.join(f'{k}={v}' for k, v in self.labels)}]"


@dataclass(frozen=True)
class Metric:
    """One recorded figure (see harness.cases.Metric, which a case fills in)."""

    name: str
    value: float | None
    unit: str
    kind: str = "value"
    better: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] | None = None
    samples: list[float] | None = None
    headline: bool = False
    sessions: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("name", "labels", "value", "unit", "kind", "better", "stats", "samples",
             "headline", "sessions")

    @property
    def key(self) -> MetricKey:
        return MetricKey.of(self.name, self.labels)

    def has_labels(self, labels: Mapping[str, Any]) -> bool:
        """Whether its labels include `labels` (the ones it has beyond them do not matter)."""
        return all(self.labels.get(k) == v for k, v in labels.items())

    @property
    def quantile(self) -> float:
        """The quantile its value is (a median unless the case said otherwise)."""
        return float((self.stats or {}).get("q", 0.5))

    @property
    def interval(self) -> tuple[float | None, float | None]:
        """Its recorded interval, (None, None) when it has none."""
        ci = (self.stats or {}).get("ci") or (None, None)
        return ci[0], ci[1]

    @property
    def count(self) -> int:
        """How many observations its statistics came from (0 when it has none)."""
        return int((self.stats or {}).get("n", 0))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Metric:
        return cls(d["name"], d.get("value"), d.get("unit", ""), d.get("kind", "value"),
                   d.get("better"), dict(d.get("labels") or {}), d.get("stats"),
                   d.get("samples"), bool(d.get("headline", False)), d.get("sessions"),
                   _extra(d, cls._KEYS))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name}
        if self.labels:
            d["labels"] = self.labels
        d.update(value=self.value, unit=self.unit, kind=self.kind, better=self.better)
        if self.stats is not None:
            d["stats"] = self.stats
        if self.samples is not None:
            d["samples"] = self.samples
        if self.headline:
            d["headline"] = True
        if self.sessions is not None:
            d["sessions"] = self.sessions
        return d | self.extra


@dataclass(frozen=True)
class Check:
    """One documented behaviour, passed or failed. A performance check (a speedup floor, a
    latency bound) judges a timing, which a busy or throttled machine can fail without the
    feature being broken; see runner.execute."""

    name: str
    passed: bool
    detail: str = ""
    performance: bool = False
    # judged with an interval that reached across its limit: neither passed nor failed
    inconclusive: bool = False
    # failed because torch raised while the case exercised the behaviour (Context.exercising,
    # or a case that caught torch's exception itself: Context.check(raised=True)), not on a
    # value the case read: the check names what broke, the exception says how
    raised: bool = False

    def __post_init__(self) -> None:
        if self.passed and self.inconclusive:
            raise ValueError(f"check {self.name!r}: passed and inconclusive at once")
        if self.raised and (self.passed or self.inconclusive):
            raise ValueError(f"check {self.name!r}: raised, yet not failed")

    @property
    def failed(self) -> bool:
        return not self.passed and not self.inconclusive

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Check:
        return cls(d["name"], bool(d["passed"]), d.get("detail", ""),
                   bool(d.get("performance", False)), bool(d.get("inconclusive", False)),
                   bool(d.get("raised", False)))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "passed": self.passed, "detail": self.detail}
        return (d | ({"performance": True} if self.performance else {})
                | ({"inconclusive": True} if self.inconclusive else {})
                | ({"raised": True} if self.raised else {}))


@dataclass(frozen=True)
class Result:
    """One case run once on one device with one set of parameters."""

    suite: str
    case: str
    outcome: Outcome
    reason: str = ""
    kind: str = "benchmark"
    device: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    started: str | None = None
    elapsed_s: float = 0.0
    metrics: tuple[Metric, ...] = ()
    checks: tuple[Check, ...] = ()
    notes: tuple[str, ...] = ()
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    shown_tables: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    telemetry: dict[str, Any] | None = None
    # where each rank ran, in a run across hosts (harness.running.nodes)
    placement: Any = None
    # its status under the expectations file (harness.comparing.expectations.Judged.to_json)
    expected: dict[str, Any] | None = None
    # the version of the case's checks that judged it (harness.cases.CheckVersion); None in a
    # record made before results carried it
    check_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("suite", "case", "kind", "device", "params", "started", "outcome", "reason",
             "elapsed_s", "metrics", "checks", "notes", "tables", "shown_tables", "details",
             "telemetry", "placement", "expected", "check_version")

    def __post_init__(self) -> None:
        # validated where it is made: an outcome that is none of Outcome's never reaches a
        # record (ValueError, in one line)
        if not isinstance(self.outcome, Outcome):
            try:
                object.__setattr__(self, "outcome", Outcome(self.outcome))
            except ValueError:
                raise ValueError(f"{self.suite}/{self.case}: outcome {self.outcome!r} is not "
                                 f"one of {', '.join(Outcome)}") from None

    @property
    def case_key(self) -> CaseKey:
        """Its identity within a run."""
        return CaseKey.of(self.suite, self.case, self.device, self.params)

    @property
    def key(self) -> str:
        """Its identity within a run, as text: suite/case[device params]."""
        return str(self.case_key)

    @property
    def case_id(self) -> str:
        return f"{self.suite}/{self.case}"

    def contended(self) -> str | None:
        """Why its figures must not be judged (measured on a contended machine), or None."""
        if self.outcome == "invalid":
            return "measured contended (outcome invalid)"
        if (self.telemetry or {}).get("valid") is False:
            return "measured contended: " + "; ".join(self.telemetry.get("invalid_reasons", []))
        if (self.details.get("duet") or {}).get("partner") is False:
            # a duet's side measured without its partner: not under the round's conditions
            return "measured alone: its duet partner did not reach the barrier"
        return None

    @property
    def valid(self) -> bool:
        """Whether its figures may be judged (telemetry did not find the machine contended)."""
        return self.contended() is None

    @property
    def status(self) -> str:
        """Its outcome as the expectations file reads it (an expected failure, say), else
        its outcome."""
        return (self.expected or {}).get("status", self.outcome)

    def metric(self, key: MetricKey) -> Metric | None:
        return next((m for m in self.metrics if m.key == key), None)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Result:
        return cls(
            d["suite"], d["case"], d["outcome"], d.get("reason", ""), d.get("kind", "benchmark"),
            d.get("device", ""), dict(d.get("params") or {}), d.get("started"),
            d.get("elapsed_s", 0.0), tuple(Metric.from_json(m) for m in d.get("metrics", [])),
            tuple(Check.from_json(c) for c in d.get("checks", [])),
            tuple(d.get("notes", [])), dict(d.get("tables") or {}),
            tuple(d.get("shown_tables", [])), dict(d.get("details") or {}), d.get("telemetry"),
            d.get("placement"), d.get("expected"), d.get("check_version"),
            _extra(d, cls._KEYS))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "suite": self.suite, "case": self.case, "kind": self.kind, "device": self.device,
            "params": self.params}
        if self.check_version is not None:
            d["check_version"] = self.check_version
        if self.started is not None:
            d["started"] = self.started
        d.update(outcome=self.outcome, reason=self.reason, elapsed_s=self.elapsed_s,
                 metrics=[m.to_json() for m in self.metrics],
                 checks=[c.to_json() for c in self.checks], notes=list(self.notes),
                 tables=self.tables, shown_tables=list(self.shown_tables),
                 details=self.details, telemetry=self.telemetry)
        if self.placement is not None:
            d["placement"] = self.placement
        if self.expected is not None:
            d["expected"] = self.expected
        return d | self.extra


@dataclass(frozen=True)
class Run:
    """One run record: the machine, the profile, and a result per case run."""

    machine: dict[str, Any]
    profile: str
    started: str
    finished: str | None = None
    results: tuple[Result, ...] = ()
    interrupted: bool = False
    command: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    telemetry: dict[str, Any] | None = None  # the telemetry's sources (sampler info)
    hosts: list[dict[str, Any]] | None = None  # a run across hosts: one entry per host
    # the expectations file's verdict on it (harness.comparing.expectations.RunJudgement.to_json)
    expectations: dict[str, Any] | None = None
    # a side of a campaign merged over its rounds (harness.comparing.campaign): which side, its
    # environment and its rounds
    ab: dict[str, Any] | None = None
    # how its figures were measured: {"design": "sequential" or "duet", "cpus": [...],
    # "threads": intra-op threads} (absent in runs before duets)
    measured: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("schema_version", "machine", "profile", "started", "finished", "interrupted",
             "command", "notes", "results", "telemetry", "hosts", "expectations", "ab",
             "measured")

    @property
    def machine_name(self) -> str:
        return self.machine.get("name", "?")

    @property
    def torch_version(self) -> str | None:
        return (self.machine.get("torch") or {}).get("version")

    def with_result(self, result: Result) -> Run:
        return replace(self, results=(*self.results, result))

    def with_notes(self, *notes: str) -> Run:
        return replace(self, notes=(*self.notes, *notes))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Run:
        return cls(d["machine"], d["profile"], d["started"], d.get("finished"),
                   tuple(Result.from_json(e) for e in d.get("results", [])),
                   bool(d.get("interrupted", False)), tuple(d.get("command", [])),
                   tuple(d.get("notes", [])), d.get("telemetry"), d.get("hosts"),
                   d.get("expectations"), d.get("ab"), d.get("measured"),
                   d.get("schema_version", SCHEMA_VERSION), _extra(d, cls._KEYS))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema_version": self.schema_version, "machine": self.machine,
            "profile": self.profile, "started": self.started, "finished": self.finished,
            "interrupted": self.interrupted, "command": list(self.command),
            "notes": list(self.notes), "results": [e.to_json() for e in self.results]}
        if self.telemetry is not None:
            d["telemetry"] = self.telemetry
        if self.hosts is not None:
            d["hosts"] = self.hosts
        if self.expectations is not None:
            d["expectations"] = self.expectations
        if self.ab is not None:
            d["ab"] = self.ab
        if self.measured is not None:
            d["measured"] = self.measured
        return d | self.extra


def _path_aliases() -> list[tuple[str, str]]:
    """This machine's directories, longest first, and what records say instead."""
    root = str(Path(__file__).resolve().parent.parent)
    pairs = {sys.prefix: "<env>", root: "<project>", sys.base_prefix: "<python>",
             str(Path.home()): "~"}
    return sorted(((p, a) for p, a in pairs.items() if len(p) > 1), key=lambda pa: -len(pa[0]))


def scrub_paths(obj: Any, aliases: list[tuple[str, str]] | None = None) -> Any:
    """`obj` with this machine's directories in every string replaced by aliases
    (tracebacks in records otherwise carry them, and committed runs must not)."""
    aliases = aliases if aliases is not None else _path_aliases()
    if isinstance(obj, str):
        for path, alias in aliases:
            # a whole path only: the home folder's name inside a longer path is not the home
            obj = re.sub(rf"(?<![\w.-]){re.escape(path)}(?![\w.-])", alias, obj) \
                if path in obj else obj
        return obj
    if isinstance(obj, dict):
        return {k: scrub_paths(v, aliases) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub_paths(v, aliases) for v in obj]
    return obj


def shown_path(path: str | Path) -> str:
    """A path as a committed record may show it: relative to the project where it lies inside,
    else its alias (`scrub_paths`), else only its name (a scratch folder elsewhere, such as
    /tmp, is of this machine alone)."""
    p = Path(path)
    root = Path(__file__).resolve().parent.parent
    if not p.is_absolute():
        return str(p)
    try:
        return str(p.resolve().relative_to(root))
    except ValueError:
        scrubbed = scrub_paths(str(p))
        return scrubbed if scrubbed != str(p) else f"<elsewhere>/{p.name}"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run(machine: dict[str, Any], profile: str, command: list[str] | None = None,
            **fields: Any) -> Run:
    return Run(machine, profile, now(), command=tuple(command or ()), **fields)


def run_path(out_dir: str | Path, run: Run) -> Path:
    stamp = datetime.fromisoformat(run.started).strftime("%Y%m%dT%H%M%SZ")
    return Path(out_dir) / run.machine_name / f"{stamp}-{run.profile}.json"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` so that readers see the old file or the new one, never half of one."""
    return write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; results are for sharing
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, doc: Any) -> Path:
    """Write `doc` as JSON, atomically. Serialising first means a document that cannot be
    written (NaN, say) leaves the old file untouched."""
    # compact: run files are read by tools (`show`, `report`), and committed ones stay small
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False, default=str) + "\n"
    return write_text_atomic(path, text)


def validate(doc: Any, source: str = "run") -> dict:
    try:
        jsonschema.validate(doc, RUN_SCHEMA)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "top level"
        raise RecordError(f"{source}: not a torch-release-bench run ({where}: {e.message})") from e
    return doc


def write_run(path: str | Path, run: Run, scrub: bool = False) -> Path:
    """Write `run` atomically, once it validates as `read_run` reads it (a record `show` would
    refuse is never written: RecordError, and the file is left as it was); `scrub`: with this
    machine's directories replaced by aliases (see scrub_paths)."""
    doc = run.to_json()
    try:
        text = json.dumps(scrub_paths(doc) if scrub else doc, separators=(",", ":"),
                          allow_nan=False, default=str) + "\n"
    except ValueError as e:  # NaN or infinity, which JSON cannot hold
        raise RecordError(f"{path}: not written: {e}") from e
    # the schema judges what a reader will see (tuples as lists), before anything is written
    validate(json.loads(text), f"{path}: not written")
    return write_text_atomic(path, text)


def read_run(path: str | Path) -> Run:
    """Read and validate one run file; any problem becomes a one-line RecordError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise RecordError(f"{path}: cannot read ({e.strerror or e})") from e
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from e
    if isinstance(doc, dict) and doc.get("schema_version") not in (None, *READABLE_VERSIONS):
        raise RecordError(f"{path}: schema_version {doc.get('schema_version')!r} is not one "
                          f"this version reads ({', '.join(map(str, READABLE_VERSIONS))})")
    return Run.from_json(validate(doc, str(path)))


def resolve_run(spec: str | Path) -> Path:
    """A run file, or a directory whose newest run file (by name) is meant."""
    p = Path(spec)
    if p.is_dir():
        runs = sorted(p.rglob("*.json"), key=lambda q: q.name)
        if not runs:
            raise RecordError(f"{p}: no run files in this directory")
        return runs[-1]
    if not p.exists():
        raise RecordError(f"{p}: no such run file")
    return p
