"""The project's documents keep up with its code: docs/architecture.md names every module of
the harness and every suite; the README stays short and speaks of the project, not of how it
was made."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from harness import registry

ROOT = Path(__file__).resolve().parent.parent
HISTORY = re.compile(r"stop [0-9]+|closing note|this session", re.IGNORECASE)
# A harness module's global that functions rebind is an input nobody passes: set in one
# module, read in another, it reaches code that never asked for it (the hosts of a run across
# hosts and a test's hook for workers travel in the case's Context instead). One that must
# stay is named here, "module: name", with the reason.
GLOBALS_ALLOWED: dict[str, str] = {}


def harness_modules(root: Path = ROOT / "harness", prefix: str = "") -> list[str]:
    """Every module and package of the harness, as architecture.md names them: `cases`,
    `running/` (a package), `running/timing` (named as `timing`), `running/telemetry/`."""
    out = []
    for path in sorted(root.iterdir()):
        if path.suffix == ".py" and not (prefix and path.stem == "__init__"):
            out.append(prefix + path.stem)
        elif path.is_dir() and (path / "__init__.py").exists():
            out.append(f"{prefix}{path.name}/")
            out += harness_modules(path, f"{prefix}{path.name}/")
    return out


def missing_from_map(text: str, modules: list[str], suites: list[str]) -> list[str]:
    """The modules and suites the map does not name in backquotes (a package's modules may
    be named by their own name, as `sampler`, within their package's line)."""
    named = set(re.findall(r"`([\w/]+)`", text))
    out = []
    for m in modules:
        leaf = m.rstrip("/").rsplit("/", 1)[-1] + ("/" if m.endswith("/") else "")
        if m not in named and leaf not in named:
            out.append(m)
    return out + [s for s in suites if s not in named]


def test_the_architecture_map_names_every_module_and_suite():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert missing_from_map(text, harness_modules(), registry.suite_names()) == []


def test_the_check_fails_when_a_module_has_no_line(tmp_path):
    (tmp_path / "cases.py").write_text("")
    (tmp_path / "newcomer.py").write_text("")
    text = "| `cases` | how a suite defines what it measures |\n| `amp` | ... |"
    assert missing_from_map(text, harness_modules(tmp_path), ["amp", "rpc"]) == [
        "newcomer", "rpc"]


def test_the_check_reaches_into_folders(tmp_path):
    (tmp_path / "running" / "telemetry").mkdir(parents=True)
    for f in ("running/__init__.py", "running/runner.py", "running/telemetry/__init__.py",
              "running/telemetry/host.py", "running/telemetry/nvml.py"):
        (tmp_path / f).write_text("")
    text = "| **`running/`** | |\n| `runner` | |\n| `telemetry/` | `host` (CPU use) |"
    assert missing_from_map(text, harness_modules(tmp_path), []) == ["running/telemetry/nvml"]


# The folders of harness/, each a job, in the order they build on each other: a module
# imports from its own folder and from those before it in this list, never from a later one
# ("top" is the modules directly in harness/: the vocabulary every folder shares).
LAYERS = ("top", "running", "comparing", "releases", "presenting", "adapters", "commands")
# An import of a later folder that must stay, "file -> module", with the reason.
UPWARD_ALLOWED = {
    "harness/cases.py -> harness.running.launch":
        "a case's Context starts its workers through launch (the runner, above, runs cases)",
    "harness/cases.py -> harness.running.timing":
        "a case's Context times its statements with timing",
    "harness/cases.py -> harness.running.turns":
        "a case's Context carries the turns of a round in bursts to its workers (a type only)",
    "harness/running/nodes.py -> harness.commands.run":
        "the node agent torchrun starts is an entry point: node 0's agent runs the run command",
}


def _layer(module: str) -> str:
    parts = module.split(".")
    if module == "harness.cli":
        return "commands"
    return parts[1] if len(parts) > 2 and parts[1] in LAYERS else "top"


def upward_imports(root: Path = ROOT / "harness") -> list[str]:
    """"file -> module" for every import of a later folder than the importing file's."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        here = _layer(".".join(rel.with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
                # `from harness import x` and `from harness.running import x` name modules
                parts = node.module.split(".")
                package = len(parts) == 1 or (len(parts) == 2 and parts[1] in LAYERS)
                names = [f"{node.module}.{a.name}" for a in node.names] if package \
                    else [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("harness.")]
            else:
                continue
            out += [f"{rel.as_posix()} -> {name}" for name in names
                    if LAYERS.index(_layer(name)) > LAYERS.index(here)]
    return sorted(set(out))


def test_each_folder_imports_only_from_the_folders_before_it():
    assert [i for i in upward_imports() if i not in UPWARD_ALLOWED] == []


def test_the_layer_check_finds_an_import_of_a_later_folder(tmp_path):
    for folder in ("running", "presenting"):
        (tmp_path / "harness" / folder).mkdir(parents=True)
    (tmp_path / "harness" / "running" / "runner.py").write_text(
        "from harness.presenting import summary\nfrom harness import records\n")
    (tmp_path / "harness" / "presenting" / "summary.py").write_text(
        "from harness.running import runner\n")
    assert upward_imports(tmp_path / "harness") == [
        "harness/running/runner.py -> harness.presenting.summary"]


def rebound_globals(root: Path = ROOT / "harness") -> list[str]:
    """"module: name" for every `global name` statement in the modules under `root`."""
    out = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).with_suffix("").as_posix()
        out += [f"{module}: {name}" for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Global) for name in node.names]
    return out


def test_no_harness_module_keeps_state_in_a_global():
    assert [g for g in rebound_globals() if g not in GLOBALS_ALLOWED] == []


def test_the_globals_check_finds_a_global_statement(tmp_path):
    (tmp_path / "state.py").write_text("_hosts = None\n\n\ndef set_hosts(h):\n"
                                       "    global _hosts\n    _hosts = h\n")
    (tmp_path / "clean.py").write_text("LIMIT = 3\n")
    assert rebound_globals(tmp_path) == ["state: _hosts"]


def test_the_readme_is_short_and_the_docs_tell_no_development_history():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for target in ("docs/guide.md", "docs/method.md", "docs/validation.md",
                   "docs/architecture.md"):
        assert target in readme, target
    places = [ROOT / "README.md", *(ROOT / d for d in ("docs", "harness", "suites", "scripts"))]
    files = [p for place in places
             for p in ([place] if place.is_file() else place.rglob("*"))
             if p.is_file() and p.suffix in (".md", ".py", ".sh", ".j2", ".toml")]
    told = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files
            for m in HISTORY.finditer(p.read_text())]
    assert told == []


def test_the_validation_page_is_what_its_rows_render():
    """docs/validation.md is generated from results/validation/ (scripts/validation.py): a
    new experiment is a new row, and the page cannot say what the rows do not."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import validation

    rows = validation.load_rows()
    assert len(rows) >= 17 and all({"date", "commit", "machine", "experiment", "command"}
                                   <= set(r) for r in rows)
    findings = validation.load_findings()
    assert all({"date", "commit", "machine", "title", "text", "command"} <= set(f)
               for f in findings)
    assert (ROOT / "docs" / "validation.md").read_text() == validation.render(rows, findings)


# Keys that only a run record has: outside harness/records.py a run, a result, a metric or a
# check is read through its typed fields (records.Run, Result, Metric, Check), never by key.
RECORD_KEYS = frozenset({
    "results", "metrics", "samples", "sessions", "stats", "checks", "params", "outcome",
    "labels", "shown_tables", "elapsed_s", "placement", "schema_version", "interrupted",
    "headline", "passed", "expected", "telemetry"})
# Other documents that share a key name with the run record, each with why it is not one.
NOT_RECORDS = {
    ("harness/running/nodes.py", "results"): "a worker's report to node 0: its ranks' values",
    ("harness/releases/matrix.py", "outcome"): "matrix.json's summary of a case on one side",
    ("harness/releases/matrix.py", "labels"): "matrix.json's headline figures",
    ("harness/commands/matrix.py", "outcome"): "matrix.json's summary of a case on one side",
    ("harness/commands/matrix.py", "expected"): "matrix.json's summary of a case on one side",
    ("harness/commands/matrix.py", "labels"): "matrix.json's verdicts (compare.Change)",
    ("harness/comparing/expectations.py", "outcome"): "an entry of the expectations file",
    ("harness/comparing/calibration.py", "labels"): "a calibration file's figures",
    ("harness/presenting/report.py", "labels"): "matrix.json's headline figures and their verdicts",
    ("harness/presenting/report.py", "outcome"): "a history record's summary of a case",
    ("harness/commands/history.py", "outcome"): "a history record's summary of a case",
    ("harness/releases/bisect.py", "outcome"): "matrix.summarize_side's summary of a case",
    ("harness/commands/bisect.py", "outcome"): "bisect.json's state of a case in one release",
    ("harness/releases/nightly.py", "expected"): "a history record's summary of a case",
    ("harness/releases/history.py", "expected"): "a history record's summary of a case",
    ("harness/releases/nightly.py", "params"): "asv's index.json: a benchmark's parameters",
    ("harness/releases/nightly.py", "results"): "an asv result file's benchmarks",
    ("harness/presenting/nightly_page.py", "outcome"): "a history record's summary of a case",
    ("harness/presenting/nightly_page.py", "expected"): "a history record's summary of a case",
}


def raw_record_reads(root: Path = ROOT / "harness") -> list[str]:
    """`x["key"]` and `x.get("key")` reads of run-record keys outside the records module."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel == "harness/records.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                    isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "get" and node.args and \
                    isinstance(node.args[0], ast.Constant):
                key = node.args[0].value
            if key in RECORD_KEYS and (rel, key) not in NOT_RECORDS:
                out.append(f"{rel}:{node.lineno}: {key!r}")
    return out


def test_only_the_records_module_reads_run_records_by_key():
    assert raw_record_reads() == []


def test_the_record_keys_check_finds_a_raw_read(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "bad.py").write_text(
        "def f(entry):\n    return entry['outcome'], entry.get('metrics')\n")
    assert raw_record_reads(tmp_path / "harness") == ["harness/bad.py:2: 'outcome'",
                                                      "harness/bad.py:2: 'metrics'"]
