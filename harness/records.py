"""The run record: one versioned JSON document per run, written atomically.

Layout (field names are a contract other tools read; add, never rename):

    {"schema_version": 2, "machine": {...fingerprint...}, "profile": "quick",
     "started": ISO-8601, "finished": ISO-8601 or null while running,
     "command": [...], "notes": [...], "interrupted": true/false,
     "results": [{"suite", "case", "kind", "device", "params", "outcome", "reason",
                  "metrics": [{"name", "labels"?, "value", "unit", "kind", "better",
                               "stats"?, "samples"?, "sessions"?}],
                  "checks": [{"name", "passed", "detail", "performance"?}], "notes": [...],
                  "tables": {name: [row, ...]}, "details": {...},
                  "telemetry": {...}, "started", "elapsed_s"}]}

Runs live under results/runs/<machine name>/<started>-<profile>.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema

# 2: metrics carry `labels` (their identity is name + labels), their `samples` (at most 256)
# and one set of statistics (harness.stats.summarize). Version 1 records are still read:
# their metrics have no samples, so `compare` calls them unverified.
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
# invalid: only performance checks failed, on a machine telemetry found contended (the
# measurement is void, not the feature broken; see runner.execute).
OUTCOMES = ("pass", "fail", "skip", "error", "invalid")

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
        "better": {"enum": ["higher", "lower", None]},
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
            obj = obj.replace(path, alias)
        return obj
    if isinstance(obj, dict):
        return {k: scrub_paths(v, aliases) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub_paths(v, aliases) for v in obj]
    return obj


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run(machine: dict[str, Any], profile: str, command: list[str] | None = None) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "machine": machine,
        "profile": profile,
        "started": now(),
        "finished": None,
        "interrupted": False,
        "command": command or [],
        "notes": [],
        "results": [],
    }


def run_path(out_dir: str | Path, run: dict) -> Path:
    stamp = datetime.fromisoformat(run["started"]).strftime("%Y%m%dT%H%M%SZ")
    return Path(out_dir) / run["machine"]["name"] / f"{stamp}-{run['profile']}.json"


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


def read_run(path: str | Path) -> dict:
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
    return validate(doc, str(path))


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
