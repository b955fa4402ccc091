"""`release-bench expectations check|update`: judge runs by the expected results
(expectations.toml), or propose the edit that runs call for."""

from __future__ import annotations

import argparse

from harness import records
from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="exp_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="judge run records by the expectations; exit 1 "
                                             "when anything is unexpected")
    check.add_argument("runs", nargs="+", metavar="RUN", help="run files or folders")
    check.add_argument("--file", metavar="FILE", help="default: expectations.toml")
    upd = actions.add_parser("update", help="print the edit of the expectations that RUNs call "
                                            "for (new failures, cases that now pass, stale "
                                            "entries); --write applies it")
    upd.add_argument("runs", nargs="+", metavar="RUN", help="run files or folders")
    upd.add_argument("--file", metavar="FILE", help="default: expectations.toml")
    upd.add_argument("--write", action="store_true", help="write the edit into the file")


def main(args) -> int:
    from pathlib import Path

    from harness.comparing import expectations

    runs = [records.read_run(records.resolve_run(r)) for r in args.runs]
    if args.exp_command == "check":
        args.expectations = args.file
        loaded, source = common.read_expectations(args)
        status = EXIT_OK
        for spec, run in zip(args.runs, runs, strict=True):
            print(f"{spec}: torch {run.torch_version}")
            judged = expectations.judge_run(run, loaded, source, expectations.known_cases())
            status = max(status, common.expectations_exit(judged))
        return status
    path = Path(args.file) if args.file else expectations.DEFAULT_FILE
    try:
        text = path.read_text() if path.exists() else ""
        upd = expectations.update(text, runs, expectations.known_cases(), str(path))
    except expectations.ExpectationsError as e:
        raise UsageError(str(e)) from e
    for line in upd.changes:
        print(line)
    if upd.new == upd.old:
        print(f"{path.name}: nothing to change")
        return EXIT_OK
    print(upd.diff(path.name), end="")
    if args.write:
        records.write_text_atomic(path, upd.new)
        print(f"written to {path}" + (
            "; name the issue of each new entry before the file can be used"
            if expectations.PLACEHOLDER_ISSUE in upd.new else ""))
    return EXIT_OK


COMMANDS = (common.Command("expectations", "the expected results (expectations.toml): judge "
                           "runs by them, or update them from runs", add_arguments, main),)
