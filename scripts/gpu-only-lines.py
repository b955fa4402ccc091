#!/usr/bin/env python3
"""The lines of harness/ and suites/ whose result only a GPU shows, and the lines no test runs.

Runs coverage.py over a pytest selection (default: the CI suite, plain `pytest`; pass a
narrower one after `--`), worker processes included, then prints two lists of statements of
harness/ and suites/ (tests excluded: their `test_*.py`):

- marked: every line whose source carries `# gpu-only: <why>`, a call whose answer only a GPU
  gives (kernel times, the caching allocator, CUPTI, TensorPipe's CUDA channels, NVML on the
  device). CI runs them in the CUDA rehearsal against stand-ins, which show that the code
  around them works, not what the device answers; each is listed with whether a test ran it
  (one no test ran has not even met a stand-in);
- unmarked: the statements no test executed: behaviour no test looks at, to be judged one by
  one (would a user meet it, and would a test of it fail on a defect?); a count to read, not
  to drive to zero: a test that only executes a line catches nothing (scripts/power.py
  measures what the tests catch).

Exit status 0; 2 on bad input.

    scripts/gpu-only-lines.py                       # the CI suite (long: tens of minutes)
    scripts/gpu-only-lines.py -- tests/test_cuda_rehearsal.py -m "not slow"
    scripts/gpu-only-lines.py --only suites/amp -- tests/test_cuda_rehearsal.py
    scripts/gpu-only-lines.py --data D --append -- tests/test_new.py   # D: a whole run's data

--append adds a selection's lines to an earlier run's data (--data), as one run of both
would: new tests are listed against the whole suite without running it again, as long as
harness/ and suites/ are unchanged since that run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRAGMA = re.compile(r"#\s*gpu-only:\s*\S")
PACKAGES = ("harness", "suites")


def is_listed(path: Path) -> bool:
    """Library and suite code: not the tests kept beside the suites."""
    return not path.name.startswith("test_") and path.name != "conftest.py"


def run_coverage(pytest_args: list[str], data: Path, tmp: Path, append: bool = False) -> int:
    rc = tmp / "coveragerc"
    rc.write_text(f"[run]\nsource = {', '.join(PACKAGES)}\nparallel = true\n"
                  # workers: launch's spawned processes, and programs run as subprocesses
                  f"concurrency = multiprocessing, thread\npatch = subprocess\n"
                  f"data_file = {data}\n")
    # run inside a process coverage.py already measures (this script's own test, under this
    # script), the outer run's settings must not reach these processes: `combine` would then
    # merge the outer run's data, and the outer run's last combine replace it
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["COVERAGE_RCFILE"] = str(rc)
    status = subprocess.call([sys.executable, "-m", "coverage", "run", "-m", "pytest",
                              "-p", "no:cacheprovider", *pytest_args], cwd=ROOT, env=env)
    subprocess.check_call([sys.executable, "-m", "coverage", "combine", "-q",
                           *(["--append"] if append else [])], cwd=ROOT, env=env)
    return status


def listed(data: Path, only: list[str]) -> dict[str, list[tuple[int, str, bool, bool]]]:
    """Per file, the statements to list: (line, source, marked gpu-only, executed), every
    marked one and every unexecuted one."""
    import coverage

    cov = coverage.Coverage(data_file=str(data))
    cov.load()
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not is_listed(path) or (only and not rel.startswith(tuple(only))):
                continue
            _, statements, _, missing, _ = cov.analysis2(str(path))
            source = path.read_text().splitlines()
            missed = set(missing)
            rows = [(n, source[n - 1].strip(), bool(PRAGMA.search(source[n - 1])),
                     n not in missed) for n in statements
                    if n in missed or PRAGMA.search(source[n - 1])]
            if rows:
                out[rel] = rows
    return out


def report(rows: dict[str, list[tuple[int, str, bool, bool]]]) -> dict[str, int]:
    counts = {"gpu_only": 0, "gpu_only_unexecuted": 0, "unmarked": 0}
    print("== only a GPU shows what these answer (marked gpu-only; 'ran': a test ran it against"
          " the rehearsal's stand-ins, 'NOT RUN': no test did)")
    for rel, lines in rows.items():
        for line, text, marked, executed in lines:
            if marked:
                print(f"{rel}:{line}: [{'ran' if executed else 'NOT RUN'}] {text}")
                counts["gpu_only"] += 1
                counts["gpu_only_unexecuted"] += not executed
    print(f"-- {counts['gpu_only']} lines, {counts['gpu_only_unexecuted']} not run\n")
    print("== no test executed, not marked: behaviour no test looks at")
    for rel, lines in rows.items():
        for line, text, marked, executed in lines:
            if not marked and not executed:
                print(f"{rel}:{line}: {text}")
                counts["unmarked"] += 1
    print(f"-- {counts['unmarked']} lines\n")
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=[], metavar="PATH",
                   help="list only files under these paths (e.g. suites/amp)")
    p.add_argument("--data", help="where the coverage data goes (default: a temporary file)")
    p.add_argument("--reuse", action="store_true",
                   help="read the data of an earlier run (--data) instead of running pytest")
    p.add_argument("--append", action="store_true",
                   help="add this selection's lines to the data of an earlier run (--data)")
    p.add_argument("--json", help="write the counts to this file")
    p.add_argument("pytest_args", nargs="*", help="after --: the pytest selection")
    args = p.parse_args(argv)
    if importlib.util.find_spec("coverage") is None:
        print(f"gpu-only-lines: coverage.py is not installed for {sys.executable} (run it with "
              "the project's environment: .venv/bin/python scripts/gpu-only-lines.py)",
              file=sys.stderr)
        return 2
    for path in args.only:
        if not (ROOT / path).exists():
            print(f"gpu-only-lines: no such path {path!r}", file=sys.stderr)
            return 2
    if (args.reuse or args.append) and not args.data:
        print("gpu-only-lines: --reuse and --append read an earlier run's --data",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(args.data).resolve() if args.data else Path(tmp) / ".coverage"
        if args.reuse or args.append:
            if not data.exists():
                print(f"gpu-only-lines: no coverage data at {data}", file=sys.stderr)
                return 2
        if not args.reuse:
            status = run_coverage(args.pytest_args, data, Path(tmp), args.append)
            print(f"== pytest {' '.join(args.pytest_args)} exited {status}\n")
        counts = report(listed(data, args.only))
    print(json.dumps(counts))
    if args.json:
        tmp_json = Path(args.json).with_suffix(".tmp")
        tmp_json.write_text(json.dumps(counts, indent=1) + "\n")
        tmp_json.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
