"""`release-bench compare`: the changes between two runs; exit 1 on a regression."""

from __future__ import annotations

import argparse

from harness import records
from harness.commands import common, judging
from harness.commands.common import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="a run file, or a folder (its newest run)")
    parser.add_argument("candidate", help="a run file, or a folder (its newest run)")
    parser.add_argument("--threshold", action="append", default=[], metavar="KIND=TOL",
                        type=common.threshold,
                        help="tolerated relative change for a kind of metric, e.g. "
                             "latency=0.2 (defaults: ratio/throughput 0.05, time/latency 0.15, "
                             "bytes 0.10)")
    parser.add_argument("--all", action="store_true", help="list unchanged metrics too")
    parser.add_argument("--json", metavar="FILE", help="also write the changes as JSON")
    parser.add_argument("--history", metavar="DIR",
                        help="earlier runs of this machine, for the spread between runs "
                             "(default: the baseline's folder)")
    parser.add_argument("--no-history", action="store_true",
                        help="use no history: without a spread between runs every figure "
                             "but a rate is then unverified")
    parser.add_argument("--across-machines", action="store_true",
                        help="judge runs of different hardware anyway")
    common.add_calibration(parser)


def main(args) -> int:
    from harness.comparing import compare
    from harness.running import machine

    paths = [records.resolve_run(args.baseline), records.resolve_run(args.candidate)]
    base, cand = (records.read_run(p) for p in paths)
    differ = machine.differences(base.machine, cand.machine)
    if differ and not args.across_machines:
        raise UsageError("the runs are from different hardware (" + "; ".join(differ)
                         + "): no verdicts; pass --across-machines to judge them anyway")
    exclude = {paths[1].resolve()}  # the candidate is judged against the others
    if args.no_history:
        history = None
    elif args.history:
        history = judging.history_runs(args.history, cand, exclude, required=True)
    else:
        history = sorted(judging.history_runs(paths[0].parent, cand, exclude | {paths[0].resolve()},
                                  required=False) + [base], key=lambda r: r.started)
    cal, cal_line = common.read_calibration(args, cand.machine)
    changes = compare.compare_runs(base, cand, dict(args.threshold), history=history, cal=cal)
    for label, run in (("baseline ", base), ("candidate", cand)):
        print(f"{label} {run.started} {run.machine_name} torch {run.torch_version}")
    if differ:
        print("different hardware, judged anyway: " + "; ".join(differ))
    print(judging.history_line(history, changes))
    print(cal_line)
    counts = judging.print_changes(changes, args.all)
    if args.json:
        records.write_json_atomic(args.json, [c.to_json() for c in changes])
    return judging.exit_status(counts)


COMMANDS = (common.Command("compare", "changes between two runs; exit 1 on regression",
                           add_arguments, main),)
