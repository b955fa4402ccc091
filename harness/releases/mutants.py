"""Mutation analysis of a feature's Python layer in torch: how the conformance checks fare
against defects nobody chose (`release-bench mutants`).

cosmic-ray lists a module's mutants (its `init`: every place where each of its operators
applies) and makes each one (`mutate_code`: the module's source with that one change). This
module does the rest, in an environment of its own, so that nothing shared is ever written:

- **The environment** (`.mutants/env/`): a venv that takes every package from the Python that
  runs the command, except torch, whose Python files are copies (new inodes; its shared
  libraries are hard links, which nothing writes). A mutant replaces the copy of its module
  (a new file renamed over it, never a write in place), and the module is put back from the
  original, its hash checked, however the command ends (Ctrl-C and SIGTERM included). A
  command killed outright leaves a note naming the module it was mutating
  (`mutating.json`), and the next command puts the module back before anything else.
- **Reached lines**: coverage.py over a clean run of each conformance case of the suite,
  worker processes included, and the calls TensorPipe makes on threads of its own
  (`trace_rpc_threads`), restricted to the module. A case uses the module when it runs a line
  inside one of its functions (importing torch runs the module-level lines, for every case).
  Only mutants on lines some case runs are sampled; the others are counted by the function
  they are in.
- **Judging**: each sampled mutant by the using cases that run its lines, in one
  `release-bench run` in the environment, with a time limit. Its fate: killed by a check (a
  check failed that passes on the clean run: named), killed by an error (a case errored, or
  ended otherwise than on the clean run, or the process died), killed by the time limit, or
  survived. With `torch_tests`, PyTorch's own tests as the wheel ships them
  (`harness.releases.torch_tests`) judge the same mutants, each mutant by the sampled tests
  that run its lines, stopping at the first that fails.
- **The record** (`<out>/<name>.json`), rewritten atomically after each mutant: a command
  stopped at any point resumes where it stopped.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import records

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / ".mutants"
SCHEMA = "release-bench-mutants/1"
TOOL = "cosmic-ray"
# cosmic-ray's operators that take arguments (which variable to replace by which) make no
# mutants unless configured with them: the set used is every other core operator
CONFIGURED_ONLY = ("core/VariableReplacer", "core/VariableInserter")
# the environment variable that makes the environment's Python trace TensorPipe's threads
TRACE_ENV = "RELEASE_BENCH_TRACE_RPC_THREADS"
MUTATING = "mutating.json"
MARKER = "release-bench-mutants-env.json"


class MutantsError(Exception):
    """Bad input, or an environment that cannot be used (the message is one line)."""


class Fate(enum.StrEnum):
    """What judging one mutant came to."""

    # killed: a check failed on a value, one that passes on the clean run (named)
    CHECK = "check"
    # killed: torch raised in a case (in a check's block or not), a case errored or ended
    # otherwise than clean, or its process died
    ERROR = "error"
    TIMEOUT = "timeout"  # killed: the judge ran past its time limit
    SURVIVED = "survived"

    @property
    def killed(self) -> bool:
        return self is not Fate.SURVIVED


@dataclass(frozen=True)
class Mutant:
    """One change cosmic-ray makes: its operator's `occurrence`-th application in the module."""

    operator: str  # cosmic-ray's name, e.g. core/ReplaceComparisonOperator_Eq_NotEq
    occurrence: int
    first_line: int
    last_line: int
    function: str = ""  # the qualified name of the function (or class) it is in; "" at top
    # the first lines of the statements it changes: where coverage counts them as run
    statements: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """Its identity within the module: operator#occurrence."""
        return f"{self.operator.partition('/')[2]}#{self.occurrence}"

    @property
    def lines(self) -> tuple[int, ...]:
        """The lines that, run, run the mutant: its statements' first lines."""
        return self.statements or tuple(range(self.first_line, self.last_line + 1))


@dataclass(frozen=True)
class Judgement:
    """One judge's verdict on one mutant: its fate, what killed it (the failed checks, or
    what broke), who judged (cases or tests), how long it took, and on which commit."""

    fate: Fate
    by: tuple[str, ...] = ()
    judges: tuple[str, ...] = ()
    seconds: float = 0.0
    commit: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Judgement:
        return cls(**{**d, "fate": Fate(d["fate"]), "by": tuple(d.get("by", ())),
                      "judges": tuple(d.get("judges", ()))})

    def merged(self, later: Judgement) -> Judgement:
        """This verdict and a later one by other judges of the same mutant (none of this
        one's), as one verdict of them all, in judge_by_suite's order: a kill by a check,
        then by the time limit, then by a crash, then surviving (only if every judge let
        it). Its seconds and commit are the later judging's (the earlier verdict is kept
        beside it in the record, under "earlier")."""
        rank = {Fate.CHECK: 0, Fate.TIMEOUT: 1, Fate.ERROR: 2, Fate.SURVIVED: 3}
        best = later if rank[later.fate] < rank[self.fate] else self
        return replace(best, judges=tuple(dict.fromkeys(self.judges + later.judges)),
                       seconds=later.seconds, commit=later.commit)


# ---------------------------------------------------------------- the module and its mutants

@dataclass(frozen=True)
class Target:
    """A module of torch, by its path in the package, optionally only the functions named in
    `within` (qualified names, e.g. DistributedDataParallel.forward)."""

    path: str  # e.g. amp/grad_scaler.py
    within: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, within: Sequence[str] = ()) -> Target:
        path = text.strip().removeprefix("torch/")
        if not path.endswith(".py") or path.startswith("/") or ".." in Path(path).parts:
            raise MutantsError(f"{text!r}: not a Python module of torch (e.g. "
                               "torch/amp/grad_scaler.py)")
        return cls(path, tuple(within))

    @property
    def name(self) -> str:
        """The record's file name (without .json)."""
        return self.path.removesuffix(".py").replace("/", ".") + (
            "-" + "-".join(w.rsplit(".", 1)[-1] for w in self.within) if self.within else "")


def functions(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of every function and class, outer first."""
    out: list[tuple[str, int, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                out.append((name, first, child.end_lineno or child.lineno))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return out


def body_lines(source: str) -> set[int]:
    """The lines inside function bodies: what runs when a function is called, not when the
    module is imported."""
    lines: set[int] = set()
    text = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0]
            start = first.lineno
            # a body on the header's own line (`def f(x) -> int: ...`, an overload's stub)
            # is run by the definition, not by a call
            if text[start - 1][:first.col_offset].strip():
                start += 1
            lines.update(range(start, (node.end_lineno or node.lineno) + 1))
    return lines


def statement_starts(source: str) -> dict[int, int]:
    """Each line of a statement, mapped to the statement's first line, which is where
    coverage counts a statement that ran: a call's arguments on the lines after it, a `def`'s
    parameters and annotations on the lines after `def`, an `if`'s condition over several
    lines (a compound statement's header, not its body)."""
    out: dict[int, int] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.stmt, ast.ExceptHandler)):
            continue
        inner = [b[0].lineno for f in ("body", "orelse", "finalbody", "handlers")
                 if (b := getattr(node, f, None))]
        last = min(inner) - 1 if inner else (node.end_lineno or node.lineno)
        for n in range(node.lineno, max(node.lineno, last) + 1):
            out.setdefault(n, node.lineno)
    return out


def innermost(spans: list[tuple[str, int, int]], line: int) -> str:
    inside = [s for s in spans if s[1] <= line <= s[2]]
    return max(inside, key=lambda s: s[1])[0] if inside else ""


def within_lines(source: str, names: Sequence[str]) -> set[int]:
    """The lines of the named functions; MutantsError for a name the module lacks."""
    spans = {name: (a, b) for name, a, b in functions(source)}
    missing = [n for n in names if n not in spans]
    if missing:
        raise MutantsError(f"no function {missing[0]!r} in the module (it has "
                           f"{', '.join(sorted(spans)[:12])}, ...)")
    return {n for name in names for n in range(spans[name][0], spans[name][1] + 1)}


def list_mutants(path: Path, within: Sequence[str] = ()) -> list[Mutant]:
    """Every mutant cosmic-ray's `init` lists for the module, with every core operator that
    needs no configuration; only those inside `within`'s functions when it names any."""
    from cosmic_ray.commands.init import init
    from cosmic_ray.work_db import use_db

    source = path.read_text()
    spans = functions(source)
    keep = within_lines(source, within) if within else None
    with tempfile.TemporaryDirectory() as tmp, use_db(str(Path(tmp) / "work.sqlite")) as db:
        init([path], db, {})
        specs = [m for item in db.work_items for m in item.mutations]
    starts = statement_starts(source)
    out = [Mutant(m.operator_name, m.occurrence, m.start_pos[0], m.end_pos[0],
                  innermost(spans, m.start_pos[0]),
                  tuple(sorted({starts.get(n, n)
                                for n in range(m.start_pos[0], m.end_pos[0] + 1)})))
           for m in specs]
    if keep is not None:
        out = [m for m in out if m.first_line in keep and m.last_line in keep]
    return sorted(out, key=lambda m: (m.first_line, m.operator, m.occurrence))


def operator_names() -> list[str]:
    """The operators `list_mutants` applies: cosmic-ray's core set, but those that make no
    mutant without configuration."""
    import cosmic_ray.plugins

    return [n for n in cosmic_ray.plugins.operator_names() if n not in CONFIGURED_ONLY]


def tool_version() -> str:
    from importlib.metadata import version

    return f"{TOOL} {version('cosmic-ray')}"


def mutated_source(source: str, mutant: Mutant) -> str:
    """The module's source with the one change (cosmic-ray's `mutate_code`)."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    code = mutate_code(source, cosmic_ray.plugins.get_operator(mutant.operator)(),
                       mutant.occurrence)
    if code is None:
        raise MutantsError(f"{mutant.name}: cosmic-ray made no mutant (is this the module "
                           "it was listed from?)")
    return code


def diff(source: str, mutated: str) -> str:
    """The changed lines, as `-old` / `+new`."""
    import difflib

    return "\n".join(ln for ln in difflib.unified_diff(source.splitlines(),
                                                        mutated.splitlines(), n=0, lineterm="")
                     if ln[:1] in "+-" and not ln.startswith(("---", "+++")))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- the environment

@dataclass(frozen=True)
class Env:
    """The command's own environment under `home`: a venv whose torch is a private copy of
    the torch in `source` (that package's folder)."""

    home: Path
    source: Path  # the torch package the copy was made from

    @property
    def root(self) -> Path:
        return self.home / "env"

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def torch_dir(self) -> Path:
        return self.root / "site" / "torch"

    def file(self, target: Target) -> Path:
        """The environment's copy of the target (what mutants replace)."""
        return self.torch_dir / target.path

    def original(self, target: Target) -> Path:
        """The module the copy came from (read, never written)."""
        return self.source / target.path

    def put_back(self, target: Target) -> None:
        """Replace the copy by the original and check its hash; MutantsError if it differs."""
        _replace(self.file(target), self.original(target).read_bytes())
        if sha256(self.file(target)) != sha256(self.original(target)):
            raise MutantsError(f"{self.file(target)}: not restored (its hash differs from "
                               f"{self.original(target)})")

    def write_mutant(self, target: Target, code: str) -> None:
        """Replace the copy by a mutant, having first noted which module it mutates, so that
        a command killed before putting it back leaves the next one a way to do it."""
        records.write_json_atomic(self.home / MUTATING, {"target": target.path})
        _replace(self.file(target), code.encode())

    def restore_leftover(self) -> str | None:
        """Put back a module that a command killed while judging left mutated; which one, or
        None when there was none."""
        note = self.home / MUTATING
        if not note.exists():
            return None
        target = Target(json.loads(note.read_text())["target"])
        if self.file(target).exists():
            self.put_back(target)
        note.unlink()
        return target.path

    def done_mutating(self) -> None:
        (self.home / MUTATING).unlink(missing_ok=True)


def _replace(path: Path, data: bytes) -> None:
    """A new file renamed over `path` (a new inode: a hard link elsewhere keeps the old
    contents), and its cached bytecode removed: a mutant of the same size written within the
    second of the last write would otherwise run the stale bytecode."""
    records.write_bytes_atomic(path, data)
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def _copy_package(src: Path, dest: Path) -> None:
    """Python files and bytecode copied (their times kept, so the bytecode stays valid); the
    rest (shared libraries, headers) hard-linked where the file system allows, else copied."""
    for dirpath, _dirs, files in os.walk(src):
        here = dest / Path(dirpath).relative_to(src)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            s, d = Path(dirpath) / name, here / name
            if name.endswith((".py", ".pyc", ".pyi")):
                shutil.copy2(s, d)
                continue
            try:
                os.link(s, d)
            except OSError:
                shutil.copy2(s, d)


def _source_torch(python: Path) -> tuple[Path, str]:
    out = subprocess.run([str(python), "-c", "import torch, os; print(os.path.dirname("
                          "torch.__file__)); print(torch.__version__)"],
                         capture_output=True, text=True, timeout=300, cwd="/")
    if out.returncode != 0:
        raise MutantsError(f"{python}: torch does not import "
                           f"({(out.stderr.strip().splitlines() or ['?'])[-1]})")
    folder, version = out.stdout.split()[-2:]
    return Path(folder), version


def prepare(home: Path = HOME, python: Path | None = None,
            log: Callable[[str], None] = lambda s: None) -> Env:
    """The environment under `home`, built from the torch of `python` (this Python by
    default) where there is none or it was made from another torch; a module a killed
    command left mutated is put back first."""
    from harness.releases import envs

    python = python or Path(sys.executable)
    source, version = _source_torch(python)
    env = Env(home, source)
    marker = env.root / MARKER
    if marker.exists():
        made = json.loads(marker.read_text())
        if made.get("source") == str(source) and made.get("torch") == version:
            if left := env.restore_leftover():
                log(f"put back torch/{left}, left mutated by a command that was killed")
            return env
    log(f"building {records.shown_path(env.root)}: a venv with a private copy of torch "
        f"{version}'s Python files")
    (home / MUTATING).unlink(missing_ok=True)  # what it named goes with the old copy
    shutil.rmtree(env.root, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env.root)],
                       check=True, capture_output=True, timeout=300)
        site = env.root / "site"
        _copy_package(source, site / "torch")
        for info in source.parent.glob("torch-*.dist-info"):
            shutil.copytree(info, site / info.name)
        # the private copy first, then the source Python's import path for everything else
        site_packages = Path(subprocess.run(
            [str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60).stdout.strip())
        (site_packages / "00_release_bench_mutants.pth").write_text(
            f"{site}\n" + "".join(f"{p}\n" for p in envs._import_path(python))
            # the tracing of TensorPipe's threads, only where coverage asks for it
            + f"import os; os.environ.get('{TRACE_ENV}') and "
              "__import__('harness.releases.mutants', fromlist=['_']).trace_rpc_threads()\n")
        got, _ = _source_torch(env.python)
        if got != site / "torch":
            raise MutantsError(f"the environment imports torch from {got}, not its copy")
        records.write_json_atomic(marker, {"source": str(source), "torch": version,
                                           "python": str(python)})
    except BaseException:
        shutil.rmtree(env.root, ignore_errors=True)
        raise
    return env


def trace_rpc_threads() -> None:
    """Make coverage see the Python that TensorPipe runs on threads of its own (a remote
    call's function, serialisation, a remote error): Python 3.11's tracer reaches only
    threads Python started. Each entry point TensorPipe calls is wrapped, once
    `torch.distributed.rpc.internal` is imported, so as to hand the thread coverage's tracer
    first (what `threading` does for the threads it starts). Used only in coverage's runs."""
    import importlib.abc
    import importlib.util
    import threading

    entry_points = ("_run_function", "serialize", "deserialize", "_handle_exception")
    wanted = "torch.distributed.rpc.internal"

    def traced(fn):
        def call(*args, **kwargs):
            hook = threading.gettrace()
            if hook is not None and sys.gettrace() is None:
                sys.settrace(hook)
            return fn(*args, **kwargs)
        return call

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != wanted:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                for fn in entry_points:
                    setattr(module, fn, traced(getattr(module, fn)))
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())


# ---------------------------------------------------------------- running in the environment

@dataclass(frozen=True)
class Ran:
    """A command run in the environment: its exit status (None: killed at its time limit),
    its output's last lines and its wall time."""

    status: int | None
    tail: tuple[str, ...]
    seconds: float


def run_in(env: Env, argv: Sequence[str], timeout_s: float,
           extra_env: dict[str, str] | None = None) -> Ran:
    """Run `python argv...` in the environment, from the checkout, in a process group of its
    own; at its time limit, or when this command is interrupted, the whole group is killed."""
    from harness.comparing.campaign import checkout_env
    from harness.running.nodes import _end_with_parent, _kill_group

    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([str(env.python), *argv], stdout=out, stderr=subprocess.STDOUT,
                                cwd=ROOT, env=checkout_env() | (extra_env or {}),
                                # SIGTERM when this command dies, even by SIGKILL: no judge
                                # outlives it to run a module that the next command restores
                                start_new_session=True, preexec_fn=_end_with_parent)
        try:
            status: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            _kill_group(proc)
        out.seek(0)
        tail = tuple(out.read().splitlines()[-200:])
    return Ran(status, tail, time.monotonic() - t0)


def _last_line(tail: Iterable[str]) -> str:
    lines = [ln.strip() for ln in tail if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^\w+(Error|Exception)\b", ln)]
    return (errors or lines or ["no output"])[-1][:300]


# ---------------------------------------------------------------- the suite as judge

@dataclass(frozen=True)
class CaseRun:
    """A case (one parameter set) on the clean torch: the lines of the module it runs, how it
    ended and the checks that failed there (a mutant is not blamed for those)."""

    status: str
    failing: tuple[str, ...] = ()
    lines: tuple[int, ...] = ()
    seconds: float = 0.0  # the clean run's, under coverage: which case to run first


def run_cases_argv(suite: str, cases: Iterable[str], out: Path) -> list[str]:
    only = [a for c in sorted(set(cases)) for a in ("--only", c)]
    return ["-m", "harness.cli", "run", "--suite", suite, *only, "--device", "cpu",
            "--no-telemetry", "--expectations", "none", "--out", str(out)]


def read_results(out: Path) -> list[records.Result] | None:
    """The results of the run written under `out`, or None when none was written."""
    found = sorted(out.rglob("*.json"))
    if not found:
        return None
    try:
        return list(records.read_run(found[-1]).results)
    except records.RecordError:
        return None


def coverage_rc(folder: Path, include: Path) -> Path:
    rc = folder / "coveragerc"
    rc.write_text(f"[run]\ninclude = {include}\nparallel = true\n"
                  "concurrency = multiprocessing, thread\npatch = subprocess\n"
                  f"data_file = {folder / '.coverage'}\n")
    return rc


def covered_lines(env: Env, argv: Sequence[str], target: Target, timeout_s: float,
                  folder: Path) -> tuple[Ran, set[int]]:
    """Run `argv` in the environment under coverage: how it ran, and the module's lines it
    ran (worker processes and TensorPipe's threads included)."""
    import coverage

    folder.mkdir(parents=True, exist_ok=True)
    rc = coverage_rc(folder, env.file(target))
    extra = {"COVERAGE_RCFILE": str(rc), TRACE_ENV: "1"}
    ran = run_in(env, ["-m", "coverage", "run", *argv], timeout_s, extra)
    run_in(env, ["-m", "coverage", "combine", "-q"], 300, extra)
    data = coverage.CoverageData(basename=str(folder / ".coverage"))
    data.read()
    return ran, set(data.lines(str(env.file(target))) or ())


def suite_cases(suite: str, select: Sequence[str], skip: Sequence[str]) -> list[str]:
    """The suite's conformance cases on the CPU, by name: those whose name contains one of
    `select` (all by default) and none of `skip`."""
    from harness import registry

    loaded = registry.load(suite)
    names = [c.name for c in loaded.cases if c.kind == "conformance" and "cpu" in c.devices]
    return [n for n in names if (not select or any(s in n for s in select))
            and not any(s in n for s in skip)]


def survey_cases(env: Env, target: Target, suite: str, cases: Sequence[str], timeout_s: float,
                 scratch: Path, log: Callable[[str], None]) -> dict[str, CaseRun]:
    """Each case's clean run under coverage: per result (case and parameters), how it ended,
    which checks failed, and which of the module's lines it ran."""
    found: dict[str, CaseRun] = {}
    for case in cases:
        folder = Path(tempfile.mkdtemp(prefix=f"cover-{case}-", dir=scratch))
        ran, lines = covered_lines(env, run_cases_argv(suite, [case], folder / "runs"), target,
                                   timeout_s, folder)
        results = read_results(folder / "runs")
        if results is None:
            raise MutantsError(f"{suite}/{case} did not run on the clean torch: "
                               f"{_last_line(ran.tail)}")
        for r in results:
            found[r.key] = CaseRun(str(r.outcome), tuple(c.name for c in r.checks if c.failed),
                                   tuple(sorted(lines)), round(r.elapsed_s, 1))
        log(f"  {suite}/{case}: {len(lines)} lines of torch/{target.path}, "
            f"{', '.join(sorted({str(r.outcome) for r in results}))}, {ran.seconds:.0f} s")
        shutil.rmtree(folder, ignore_errors=True)
    return found


# a case's time limit on a mutant: this many times its clean run (under coverage, which is
# slower), at least LIMIT_FLOOR_S, at most the command's --timeout
LIMIT_FACTOR, LIMIT_FLOOR_S = 10, 60.0


def case_limit(clean: Iterable[CaseRun], timeout_s: float) -> float:
    return min(timeout_s, max(LIMIT_FLOOR_S, LIMIT_FACTOR * sum(r.seconds for r in clean)))


def judge_by_suite(env: Env, suite: str, cases: dict[str, CaseRun], timeout_s: float,
                   scratch: Path) -> Judgement:
    """Run the cases (by result key) on the mutant, one case (all its parameter sets) per
    process, the quickest first, and compare each with its clean run; stop at the first case
    where a check fails on a value that passes on the clean run (the mutant's fate is then
    known; an error, or a check failed because torch raised, goes on to the next case, whose
    check may yet say what broke)."""
    by_case: dict[str, dict[str, CaseRun]] = {}
    for key, run in cases.items():
        by_case.setdefault(records.CaseKey.parse(key).case, {})[key] = run
    order = sorted(by_case, key=lambda c: sum(r.seconds for r in by_case[c].values()))
    failed: list[str] = []
    broke: list[str] = []
    judges: list[str] = []
    timed_out, seconds = False, 0.0
    for name in order:
        judges.append(f"{suite}/{name}")
        limit = case_limit(by_case[name].values(), timeout_s)
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            ran = run_in(env, run_cases_argv(suite, [name], Path(tmp)), limit)
            results = read_results(Path(tmp))
        seconds += ran.seconds
        if ran.status is None:  # a hang: the next case would most likely hang as well
            timed_out = True
            broke.append(f"{suite}/{name}: ran past {limit:g} s")
            break
        if results is None:
            broke.append(f"{suite}/{name}: no run record: {_last_line(ran.tail)}")
            continue
        seen = {r.key for r in results}
        for r in results:
            clean = by_case[name].get(r.key)
            if clean is None:
                continue
            new = [c for c in r.checks if c.failed and c.name not in clean.failing]
            # a check failed on a value says what broke; one that failed because torch raised
            # in its block (Context.exercising) is the crash PyTorch's tests count as an error
            failed += [f"{r.case_id}: {c.name}" for c in new if not c.raised]
            broke += [f"{r.case_id}: {c.name}: {c.detail}"[:300] for c in new if c.raised]
            if str(r.outcome) != clean.status:
                broke.append(f"{r.case_id}: {r.outcome}: {r.reason}"[:300])
        broke += [f"{k}: did not run" for k in by_case[name] if k not in seen]
        if failed:
            break
    fate = (Fate.CHECK if failed else Fate.TIMEOUT if timed_out else
            Fate.ERROR if broke else Fate.SURVIVED)
    return Judgement(fate, tuple(dict.fromkeys(failed or broke)), tuple(judges), seconds)


# ---------------------------------------------------------------- PyTorch's tests as judge

TESTS_MODULE = "harness.releases.torch_tests"


@dataclass(frozen=True)
class TestRun:
    """One of PyTorch's tests on the clean torch: the module's lines it ran, and its wall
    time (under coverage)."""

    lines: tuple[int, ...] = ()
    seconds: float = 0.0


def list_tests(env: Env, groups: Sequence[str]) -> list[str]:
    """The names of PyTorch's tests in these groups (harness.releases.torch_tests)."""
    with tempfile.NamedTemporaryFile("r") as out:
        ran = run_in(env, ["-m", TESTS_MODULE, "--list", *groups, "--to", out.name], 600)
        if ran.status != 0:
            raise MutantsError(f"PyTorch's tests do not load here: {_last_line(ran.tail)}")
        return [ln.strip() for ln in Path(out.name).read_text().splitlines() if ln.strip()]


def test_argv(test: str) -> list[str]:
    return ["-m", TESTS_MODULE, "--run", test]


# where a test's own assertion is raised: the test's code (torch/testing/_internal, this
# project's driver of it) or unittest's assert methods; an AssertionError raised anywhere else
# is torch's own assert in the library, which stops the test as any exception would
TEST_CODE = re.compile(r"/torch/testing/_internal/|/unittest/|/harness/releases/torch_tests\.py")
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+')


def test_verdict(ran: Ran) -> Fate | None:
    """A test's run: None when it passed; CHECK when one of the test's own assertions failed
    (in the test or in one of its worker processes: the frame that raised the AssertionError
    is the test's), ERROR for anything else it raised, or a crash."""
    if ran.status is None:
        return Fate.TIMEOUT
    if ran.status == 0:
        return None
    last_frame = ""
    for line in ran.tail:
        if m := FRAME.match(line):
            last_frame = m["file"]
        elif line.lstrip().startswith("AssertionError") and TEST_CODE.search(last_frame):
            return Fate.CHECK
    return Fate.ERROR


def survey_tests(env: Env, target: Target, tests: Sequence[str], timeout_s: float,
                 scratch: Path, log: Callable[[str], None]) -> tuple[dict[str, TestRun],
                                                                      dict[str, str]]:
    """Each test's clean run under coverage: the module's lines it ran; and the tests
    dropped, with why (skipped here, or failing on the clean torch)."""
    kept, dropped = {}, {}
    for test in tests:
        folder = Path(tempfile.mkdtemp(prefix="cover-test-", dir=scratch))
        ran, lines = covered_lines(env, test_argv(test), target, timeout_s, folder)
        shutil.rmtree(folder, ignore_errors=True)
        skipped = any(ln.startswith("SKIPPED") for ln in ran.tail)
        if ran.status != 0 or skipped:
            dropped[test] = ("skipped here: " if skipped else "fails on the clean torch: ") \
                + _last_line(ran.tail)
            log(f"  {test}: dropped ({dropped[test]})")
            continue
        kept[test] = TestRun(tuple(sorted(lines)), round(ran.seconds, 1))
        log(f"  {test}: {len(lines)} lines, {ran.seconds:.0f} s")
    return kept, dropped


def judge_by_tests(env: Env, tests: dict[str, TestRun], timeout_s: float) -> Judgement:
    """Run the tests on the mutant one by one, stopping at the first that fails (each within
    the limit a case has, from its clean run)."""
    t0, done = time.monotonic(), []
    for test, clean in tests.items():
        limit = min(timeout_s, max(LIMIT_FLOOR_S, LIMIT_FACTOR * clean.seconds))
        ran = run_in(env, test_argv(test), limit)
        done.append(test)
        fate = test_verdict(ran)
        if fate is not None:
            why = f"ran past {limit:g} s" if fate is Fate.TIMEOUT else _last_line(ran.tail)
            return Judgement(fate, (f"{test}: {why}",), tuple(done), time.monotonic() - t0)
    return Judgement(Fate.SURVIVED, (), tuple(done), time.monotonic() - t0)


# ---------------------------------------------------------------- the record

@dataclass
class Record:
    """A campaign over one module: what was found before judging (mutants, reached lines,
    the judges and their clean runs, the sample) and each mutant's judgements."""

    target: Target
    suite: str
    torch: str
    sha256: str
    tool: str
    operators: int
    machine: dict[str, str]
    mutants: int  # in the module (inside `within`'s functions, when it names any)
    cases: dict[str, CaseRun]  # by result key: the cases that run a line of the module
    unreached: dict[str, int]  # mutants on lines no case runs, by their function
    reached: list[str]  # the names of the mutants on lines some case runs
    seed: int
    sample: list[str]  # the names of the sampled mutants, in the order they are judged
    tests: dict[str, TestRun] = field(default_factory=dict)
    tests_dropped: dict[str, str] = field(default_factory=dict)
    test_groups: tuple[str, ...] = ()
    tests_sample: int = 0
    # mutants in the module that the sampled tests reach but no case does
    reached_by_tests_only: int = 0
    judged: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: str = ""
    updated: str = ""
    setup_s: float = 0.0
    command: str = ""
    # the cases surveyed that run none of the module's lines, by name (not run again)
    cases_not_running: list[str] = field(default_factory=list)
    # the --again commands run on the record since, in order
    again_commands: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["schema"] = SCHEMA
        return records.scrub_paths(d)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Record:
        d = dict(d)
        if d.pop("schema", None) != SCHEMA:
            raise MutantsError("not a mutants record")
        t = d.pop("target")
        return cls(target=Target(t["path"], tuple(t["within"])),
                   cases={k: CaseRun(**{**v, "failing": tuple(v["failing"]),
                                           "lines": tuple(v["lines"])})
                          for k, v in d.pop("cases").items()},
                   tests={k: TestRun(**{**v, "lines": tuple(v["lines"])})
                          for k, v in d.pop("tests").items()},
                   test_groups=tuple(d.pop("test_groups")), **d)

    def judgement(self, name: str, judge: str) -> Judgement | None:
        entry = self.judged.get(name, {}).get(judge)
        return Judgement.from_json(entry) if entry else None


def read_record(path: Path) -> Record:
    try:
        return Record.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise MutantsError(f"{path}: not a mutants record ({e})") from e


def sample(names: Sequence[str], size: int, seed: int) -> list[str]:
    """`size` of `names` drawn with `seed` (all of them when there are fewer), in the
    module's order."""
    picked = set(random.Random(seed).sample(list(names), min(size, len(names))))
    return [n for n in names if n in picked]


def grown_sample(names: Sequence[str], old: Sequence[str], size: int, seed: int) -> list[str]:
    """The sample of `size` that `sample` draws from `names` with `seed`, when it holds the
    `old` sample (drawn with the same seed): a record's sample grows into the very sample a
    campaign started with `size` would judge. random.sample draws its first k the same way
    whatever the size asked, except where a larger size makes it switch method: then the
    larger sample is not a superset, and growing is refused rather than drawing another."""
    grown = sample(names, size, seed)
    if not set(old) <= set(grown):
        raise MutantsError(f"a sample of {size} drawn with seed {seed} does not hold the "
                           f"record's {len(old)}: start a new record (another --out) to "
                           f"sample {size}")
    return grown


def judges_of(mutant: Mutant, runs: dict[str, Any], everyone: Iterable[str]) -> list[str]:
    """The judges (cases, tests) that run one of the mutant's lines."""
    lines = set(mutant.lines)
    return [k for k in everyone if lines & set(runs[k].lines)]


# ---------------------------------------------------------------- the campaign

DEFAULT_SAMPLE = 25  # mutants sampled for a new record when --sample is not given


@dataclass(frozen=True)
class Plan:
    """What `campaign` is asked to do."""

    target: Target
    suite: str
    cases: tuple[str, ...] = ()  # --case: names containing one of these (all by default)
    skip: tuple[str, ...] = ("clean_exit",)
    size: int | None = None  # --sample (25 for a new record); a larger one grows a record's
    seed: int = 58
    names: tuple[str, ...] = ()  # --mutant: these mutants instead of a sample
    test_groups: tuple[str, ...] = ()
    tests_sample: int = 8  # tests per group
    timeout_s: float = 300.0
    max_minutes: float | None = None
    again: tuple[Fate, ...] = ()  # judge the mutants of these fates again
    out: Path = ROOT / "results" / "validation" / "mutation"
    command: str = ""
    name: str = ""  # the record's file name (without .json); default: the target's

    @property
    def path(self) -> Path:
        return self.out / f"{self.name or self.target.name}.json"


def campaign(plan: Plan, env: Env, log: Callable[[str], None] = print) -> Record:
    """Survey (once), sample, and judge each sampled mutant not yet judged; returns the
    record, which is rewritten after every mutant. The module is put back, its hash checked,
    however this ends."""
    scratch = env.home / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    path = plan.path
    original_file = env.original(plan.target)
    if not original_file.is_file():
        raise MutantsError(f"torch/{plan.target.path}: no such module in torch ({env.source})")
    source = original_file.read_text()
    all_mutants = list_mutants(original_file, plan.target.within)
    by_name = {m.name: m for m in all_mutants}
    record = read_record(path) if path.exists() else None
    if record is not None and record.sha256 != sha256(original_file):
        raise MutantsError(f"{records.shown_path(path)} judged another version of "
                           f"torch/{plan.target.path} (remove it, or pass another --out)")
    if unknown := [n for n in plan.names if n not in by_name]:
        raise MutantsError(f"no mutant {unknown[0]!r} in torch/{plan.target.path}")
    if record is None:
        record = _survey(plan, env, all_mutants, source, scratch, log)
        if plan.names:  # the mutants named instead of a sample
            record.sample = list(plan.names)
        records.write_json_atomic(path, record.to_json())
    elif plan.names:
        record.sample = list(dict.fromkeys([*record.sample, *plan.names]))
    elif plan.size is not None and plan.size > len(record.sample):
        if plan.seed != record.seed:
            raise MutantsError(f"the record's sample was drawn with seed {record.seed}, "
                               f"not {plan.seed}: it grows with its own seed")
        before = len(record.sample)
        record.sample = grown_sample(record.reached, record.sample, plan.size, record.seed)
        record.command = plan.command
        records.write_json_atomic(path, record.to_json())
        log(f"the sample grows from {before} to {len(record.sample)} mutants (seed "
            f"{record.seed}: the sample --sample {plan.size} draws)")
    if plan.again:
        _survey_new_cases(plan, env, record, source, scratch, log)
        if plan.command and plan.command not in record.again_commands:
            record.again_commands.append(plan.command)
        records.write_json_atomic(path, record.to_json())
    wanted = list(plan.names) or record.sample
    todo = [n for n in wanted if _needs_judging(record, n, plan)]
    log(f"torch/{plan.target.path}: {record.mutants} mutants, {len(record.reached)} on reached "
        f"lines, {len(wanted)} to judge, {len(todo)} not judged yet")
    commit = project_commit(plan.out)
    t0, done = time.monotonic(), 0
    for i, name in enumerate(todo, 1):
        if plan.max_minutes is not None and time.monotonic() - t0 > 60 * plan.max_minutes:
            log(f"stopped after {plan.max_minutes:g} minutes: {len(todo) - i + 1} left; the "
                "same command goes on from here")
            break
        mutant = by_name[name]
        entry = _judge(plan, env, record, mutant, source, scratch, commit)
        if name in record.judged:  # judged again (--again): the earlier verdicts are kept
            before = record.judged[name]
            entry["earlier"] = [*before.get("earlier", []), before["suite"]]
            if "torch_tests" in before and "torch_tests" not in entry:
                entry["torch_tests"] = before["torch_tests"]
        record.judged[name] = entry
        record.updated = records.now()
        records.write_json_atomic(path, record.to_json())
        done += 1
        elapsed = time.monotonic() - t0
        left = (len(todo) - i) * elapsed / done
        log(f"[{i}/{len(todo)}] {mutant.name} line {mutant.first_line}: "
            + "; ".join(_short(judge, Judgement.from_json(j))
                        for judge, j in entry.items() if judge in ("suite", "torch_tests"))
            + f"  ({60 * done / elapsed:.1f}/min, about {left / 60:.0f} min left)")
    return record


def project_commit(out: Path) -> str:
    """The checkout's commit, short, with "+" when its tracked files differ from it outside
    the records' folder `out` (the checks that judged are then not exactly the commit's)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip()

    folder = out.resolve()
    exclude = [f":!{folder.relative_to(ROOT)}"] if folder.is_relative_to(ROOT) else []
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", *exclude)
    return git("rev-parse", "--short=7", "HEAD") + ("+" if changed else "")


def _survey_new_cases(plan: Plan, env: Env, record: Record, source: str, scratch: Path,
                      log: Callable[[str], None]) -> bool:
    """Before judging again: the suite's cases that the record's survey did not run (a case
    added since, to hold a contract a survivor broke) are surveyed, and those that run the
    module join the record's cases. Their new lines widen no sample: the mutants on lines
    only they run stay unreached. Returns whether any joined."""
    known = {records.CaseKey.parse(k).case for k in record.cases} | set(
        record.cases_not_running)
    new = [c for c in suite_cases(plan.suite, plan.cases, plan.skip) if c not in known]
    if not new:
        return False
    log(f"coverage of the clean run of the cases the record has not surveyed: {', '.join(new)}")
    runs = survey_cases(env, plan.target, plan.suite, new, plan.timeout_s, scratch, log)
    inside = _inside(source, plan.target)
    added = {k: r for k, r in runs.items() if set(r.lines) & inside}
    running = {records.CaseKey.parse(k).case for k in added}
    if idle := [c for c in new if c not in running]:
        log(f"  run none of its lines: {', '.join(idle)}")
    earlier = {n for r in record.cases.values() for n in r.lines}
    only_new = {n for r in added.values() for n in r.lines} & inside - earlier
    if only_new:
        log(f"  {len(only_new)} lines only the new cases run; their mutants stay unreached")
    record.cases.update(added)
    record.cases_not_running = sorted({*record.cases_not_running, *idle})
    return True


def _inside(source: str, target: Target) -> set[int]:
    """The lines whose mutants a campaign can reach: the module's bodies, or `within`'s."""
    return body_lines(source) | (within_lines(source, target.within) if target.within
                                 else set())


def _needs_judging(record: Record, name: str, plan: Plan) -> bool:
    if name not in record.judged:
        return True
    suite = record.judgement(name, "suite")
    return suite is not None and suite.fate in plan.again


def _short(judge: str, j: Judgement) -> str:
    who = "suite" if judge == "suite" else "PyTorch's tests"
    what = {Fate.CHECK: "killed by a check", Fate.ERROR: "killed by an error",
            Fate.TIMEOUT: "killed by the time limit", Fate.SURVIVED: "survived"}[j.fate]
    return f"{who}: {what}" + (f" ({j.by[0][:120]})" if j.by else "") + f" {j.seconds:.0f} s"


def _survey(plan: Plan, env: Env, all_mutants: list[Mutant], source: str, scratch: Path,
            log: Callable[[str], None]) -> Record:
    from harness.running import machine

    t0 = time.monotonic()
    cases = suite_cases(plan.suite, plan.cases, plan.skip)
    if not cases:
        raise MutantsError(f"no conformance case of {plan.suite} matches --case/--skip")
    log(f"coverage of the clean run, case by case ({len(cases)} cases of {plan.suite})")
    runs = survey_cases(env, plan.target, plan.suite, cases, plan.timeout_s, scratch, log)
    inside = _inside(source, plan.target)
    using = {k: r for k, r in runs.items() if set(r.lines) & inside}
    running = {records.CaseKey.parse(k).case for k in using}
    reached_lines = {n for r in using.values() for n in r.lines}
    reached = [m.name for m in all_mutants if set(m.lines) & reached_lines]
    unreached: dict[str, int] = {}
    for m in all_mutants:
        if m.name not in reached:
            unreached[m.function or "(module level)"] = unreached.get(
                m.function or "(module level)", 0) + 1
    tests, dropped, by_tests_only = {}, {}, 0
    if plan.test_groups:
        listed = list_tests(env, plan.test_groups)
        chosen = [t for g in plan.test_groups
                  for t in sample([t for t in listed if t.split(":")[0] == g],
                                  plan.tests_sample, plan.seed)]
        log(f"coverage of PyTorch's tests, {len(chosen)} sampled with seed {plan.seed} "
            f"({plan.tests_sample} per group of {', '.join(plan.test_groups)})")
        tests, dropped = survey_tests(env, plan.target, chosen, plan.timeout_s, scratch, log)
        test_lines = {n for t in tests.values() for n in t.lines}
        by_tests_only = sum(1 for m in all_mutants
                            if m.name not in reached and set(m.lines) & test_lines)
    fp = machine.fingerprint()
    return Record(
        target=plan.target, suite=plan.suite, torch=_env_torch(env),
        sha256=sha256(env.original(plan.target)), tool=tool_version(),
        operators=len(operator_names()),
        machine={"name": fp["name"], "cpu": fp["cpu"]["model"]},
        mutants=len(all_mutants), cases=using, unreached=unreached, reached=reached,
        seed=plan.seed, sample=sample(reached, plan.size or DEFAULT_SAMPLE, plan.seed),
        tests=tests,
        tests_dropped=dropped, test_groups=plan.test_groups, tests_sample=plan.tests_sample,
        reached_by_tests_only=by_tests_only, started=records.now(),
        setup_s=round(time.monotonic() - t0, 1), command=plan.command,
        cases_not_running=[c for c in cases if c not in running])


def _env_torch(env: Env) -> str:
    return json.loads((env.root / MARKER).read_text())["torch"]


def _judge(plan: Plan, env: Env, record: Record, mutant: Mutant, source: str,
           scratch: Path, commit: str) -> dict[str, Any]:
    """Judge one mutant by the suite (and PyTorch's tests), the module put back after,
    whatever happens."""
    code = mutated_source(source, mutant)
    entry: dict[str, Any] = {"line": mutant.first_line, "last_line": mutant.last_line,
                             "function": mutant.function, "diff": diff(source, code)}
    # judged again (--again, after a check was added): by every case that uses the module,
    # since the survey's coverage predates the new check, which may read the mutant's lines;
    # with --case, by those cases only (a case added since), merged with the earlier verdict
    # of the others
    earlier = record.judgement(mutant.name, "suite")
    cases = dict(record.cases) if earlier else (
        {k: record.cases[k] for k in judges_of(mutant, record.cases, record.cases)}
        or dict(record.cases))  # module-level lines: every case that uses the module
    merge = False
    if earlier and plan.cases:
        chosen = {k: r for k, r in cases.items()
                  if any(c in records.CaseKey.parse(k).case for c in plan.cases)}
        if not chosen:
            raise MutantsError(f"no case of the record matches --case {' '.join(plan.cases)}")
        # a chosen case that judged before may judge otherwise now: then every case judges
        merge = not {f"{plan.suite}/{records.CaseKey.parse(k).case}" for k in chosen} & set(
            earlier.judges)
        cases = chosen if merge else cases
    try:
        env.write_mutant(plan.target, code)
        j = judge_by_suite(env, plan.suite, cases, plan.timeout_s, scratch)
        j = replace(j, seconds=round(j.seconds, 1), commit=commit)
        entry["suite"] = (earlier.merged(j) if merge else j).to_json()
        # PyTorch's tests are the same whatever the suite's checks: judged once
        if record.tests and "torch_tests" not in record.judged.get(mutant.name, {}):
            tests = {k: record.tests[k] for k in judges_of(mutant, record.tests, record.tests)}
            t = judge_by_tests(env, tests, plan.timeout_s) if tests else Judgement(
                Fate.SURVIVED, ("no sampled test runs its lines",))
            entry["torch_tests"] = replace(t, seconds=round(t.seconds, 1),
                                           commit=commit).to_json()
    finally:
        env.put_back(plan.target)
        env.done_mutating()
    return entry


# ---------------------------------------------------------------- summaries

def counts(record: Record, judge: str) -> dict[str, int]:
    """Each fate's count among the sampled mutants a judge has judged."""
    out = {f.value: 0 for f in Fate}
    for name in record.sample:
        if (j := record.judgement(name, judge)) is not None:
            out[j.fate.value] += 1
    return out
