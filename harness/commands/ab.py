"""`release-bench ab`: the same cases in two Python environments, interleaved in fresh
processes (`harness.comparing.ab`); exit 1 on a regression."""

from __future__ import annotations

import argparse
import sys

from harness import records
from harness.commands import common, judging
from harness.commands.common import UsageError

# ab's rounds a side: A B, B A, A B, B A, A B
DEFAULT_ROUNDS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", nargs="?",
                        help="a venv folder or a Python executable (baseline)")
    parser.add_argument("b", metavar="B", nargs="?",
                        help="a venv folder or a Python executable (candidate)")
    parser.add_argument("--history", metavar="DIR",
                        help="this machine's separate runs (e.g. results/runs/<machine>): each "
                             "metric's run-to-run spread there is a floor under the rounds' "
                             "(stricter: it includes the drift between runs that ab cancels)")
    parser.add_argument("--no-history", action="store_true",
                        help="judge by the rounds' spread alone (the default)")
    parser.add_argument("--judge", metavar="AB_DIR",
                        help="give the verdicts again from an earlier ab's stored rounds")
    common.add_selection(parser)
    common.add_param(parser, passed_on=True)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="K",
                        help="fresh processes per side and group (default 5: A B, B A, A B, "
                             "B A, A B); a benchmark whose level this machine's calibration "
                             "found drawn per process gets a multiple (its rounds factor)")
    parser.add_argument("--max-rounds", type=int, metavar="N",
                        help="give a benchmark with undecided figures (inconclusive, or a "
                             "change whose interval reaches past the tolerance) the further "
                             "rounds they need, judging again after each stage, up to N "
                             "in all (times its rounds factor); default: no further rounds")
    common.add_design(parser)
    common.add_calibration(parser)
    parser.add_argument("--out", default="results/scratch/ab", metavar="DIR",
                        help="where both sides' runs and the comparison go")
    judging.add_threshold(parser)


def history_floor(args) -> list[records.Run] | None:
    """The separate runs whose spread is a floor under the rounds' (only when asked for: the
    rounds, interleaved side by side in one run, are what ab judges by)."""
    from harness.running import machine

    if args.no_history or not args.history:
        return None
    # the whole fingerprint: the history keeps to this machine's hardware (`judging.history_runs`)
    me = records.new_run(machine.fingerprint(), args.profile)
    return judging.history_runs(args.history, me, set(), required=True)


def main(args) -> int:
    from pathlib import Path

    from harness.comparing import ab, campaign

    suites = common.selected_suites(args)
    judging.check_rounds(args)
    if not args.judge and not (args.a and args.b):
        raise UsageError("ab needs two environments, A and B (or --judge AB_DIR)")
    history = history_floor(args)
    run_args = common.run_args(args)
    # the stored rounds say how each benchmark was measured, and so which calibration
    units = (ab.stored_units(Path(args.judge)) if args.judge
             else judging.units(suites, args))
    if args.judge and args.param:
        raise UsageError("ab --judge: --param sets the runs' parameters; --judge runs nothing")
    try:
        units = units if args.judge else campaign.with_params(units, args.param, args.profile)
    except campaign.CampaignError as e:
        raise UsageError(str(e)) from e
    cal, cal_line = common.read_calibration(args, units=units)
    if cal is not None:
        units = campaign.with_rounds_factors(units, cal)
    try:
        if args.judge:
            res = ab.judge(Path(args.judge), dict(args.threshold), history, cal)
        else:
            res = ab.ab(args.a, args.b, units, run_args, args.rounds, Path(args.out),
                        lambda s: print(s, file=sys.stderr, flush=True),
                        dict(args.threshold), history, args.max_rounds, cal)
    except campaign.CampaignError as e:
        raise UsageError(str(e)) from e
    print(f"A: torch {res['versions']['A']}\nB: torch {res['versions']['B']}\n"
          f"{res['rounds']} rounds per side ({res['schedule']} for each suite's conformance "
          f"cases and each benchmark case{judging.more_rounds_text(res)}); "
          f"history floor: {f'{len(history)} runs' if history else 'none'}")
    for line in judging.design_lines(res["design"], res["rounds"], res["dir"]):
        print(line)
    print(cal_line)
    counts = judging.print_changes(res["changes"], False)
    judging.print_stages(res.get("judged", []))
    print("rounds' spread: " + judging.detectable_line(res["changes"]))
    print(f"both sides' runs and the comparison are in {res['dir']}")
    return judging.exit_status(counts)


COMMANDS = (common.Command("ab", "the same cases in two Python environments, interleaved in "
                           "fresh processes; exit 1 on regression", add_arguments, main),)
