"""`release-bench report`: one self-contained HTML page from run records, or the
release-matrix page."""

from __future__ import annotations

import argparse
import json

from harness import records
from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="run files (default: the newest run of each machine in "
                             "--runs-dir)")
    parser.add_argument("--runs-dir", default="results/runs", metavar="DIR")
    parser.add_argument("--out", metavar="FILE",
                        help="default results/html/report.html (matrix.html with --matrix, "
                             "history.html with --history)")
    parser.add_argument("--matrix", metavar="MATRIX",
                        help="the release-matrix page of a `release-bench matrix` record (its "
                             "matrix.json, or the folder holding it) instead of runs")
    parser.add_argument("--history", metavar="DIR",
                        help="the release-history page of the records `release-bench history` "
                             "wrote in DIR instead of runs")


def main(args) -> int:
    from pathlib import Path

    from harness.presenting import report
    from harness.releases import matrix

    if args.history:
        from harness.comparing import campaign
        from harness.releases import history

        try:
            recs = history.read(Path(args.history))
        except campaign.CampaignError as e:
            raise UsageError(f"{args.history}: {e}") from e
        if not recs:
            raise UsageError(f"{args.history}: no history records (release-bench history)")
        out = records.write_text_atomic(args.out or "results/html/history.html",
                                        report.build_history(recs))
        print(f"release history of {len(recs)} releases written to {out}")
        return EXIT_OK
    if args.matrix:
        path = Path(args.matrix)
        path = path / "matrix.json" if path.is_dir() else path
        try:
            record = json.loads(path.read_text())
            if record.get("schema") != matrix.SCHEMA:
                raise ValueError("not a release-bench matrix record")
        except (OSError, ValueError) as e:
            raise UsageError(f"{args.matrix}: {e}") from e
        out = records.write_text_atomic(args.out or "results/html/matrix.html",
                                        report.build_matrix(record))
        print(f"release matrix of {len(record['versions'])} versions written to {out}")
        return EXIT_OK
    paths = [records.resolve_run(r) for r in args.runs] or report.latest_runs(args.runs_dir)
    if not paths:
        raise UsageError(f"no runs under {args.runs_dir}; run `release-bench run` first")
    out = report.write(paths, args.out or "results/html/report.html")
    print(f"report of {len(paths)} run(s) written to {out}")
    print(f"open it with: xdg-open {Path(out)}  (or any browser; it needs no server)")
    return EXIT_OK


COMMANDS = (common.Command("report", "one self-contained HTML page from run records",
                           add_arguments, main),)
