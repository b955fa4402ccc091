"""`release-bench show`: the summary table of a run, or the verdicts of an ab."""

from __future__ import annotations

import argparse

from harness import records
from harness.commands import common, judging
from harness.commands.common import EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="a run file, or a folder (its newest run), or an ab folder "
                                    "(its comparison.json)")
    parser.add_argument("--no-tables", action="store_true", help="omit the per-case tables")


def main(args) -> int:
    import json
    from pathlib import Path

    from harness.comparing import compare
    from harness.presenting import summary

    path = Path(args.run)
    stored = path / "comparison.json" if path.is_dir() else path
    if stored.name == "comparison.json" and stored.is_file():  # an ab's (or calibrate's)
        try:
            doc = json.loads(stored.read_text())
            changes = [compare.Change.from_json(c) for c in doc["changes"]]
        except (ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{stored}: not a comparison ({e})") from e
        print(f"A: torch {doc.get('A')}\nB: torch {doc.get('B')}\n{doc.get('rounds')} rounds "
              f"per side; calibration: {doc.get('calibration') or 'none (conservative defaults)'}")
        try:  # how each benchmark was measured, where the folder keeps it
            design = json.loads((stored.parent / "ab.json").read_text()).get("design") or {}
        except (OSError, ValueError, AttributeError):
            design = {}
        for line in judging.design_lines(design, doc.get("rounds") or 0, stored.parent):
            print(line)
        judging.print_changes(changes, not args.no_tables)
        return EXIT_OK
    run = records.read_run(records.resolve_run(args.run))
    print(summary.run_summary(run, tables=not args.no_tables))
    return EXIT_OK


COMMANDS = (common.Command("show", "summary table of a run, or the verdicts of an ab",
                           add_arguments, main),)
