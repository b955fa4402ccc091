"""`release-bench matrix`: the release checklist and headline figures across torch
versions (`harness.releases.matrix`); exit 1 on an unexpected result or a regression."""

from __future__ import annotations

import argparse
import sys

from harness.commands import common, judging
from harness.commands.common import EXIT_FAILED, EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sides", metavar="ENV", nargs="*",
                        help="a torch version with an environment in .envs/ (release-bench "
                             "env create), or a venv folder or Python executable; oldest first")
    parser.add_argument("--judge", metavar="MATRIX_DIR",
                        help="give the verdicts again from an earlier matrix's stored rounds")
    parser.add_argument("--stale", action="store_true",
                        help="with --judge: first run again the units with results judged by "
                             "checks that have changed since (a conformance unit on the sides "
                             "where it is stale, a benchmark on every side), in their rounds")
    common.add_selection(parser)
    parser.add_argument("--rounds", type=int, default=2, metavar="K",
                        help="fresh processes per environment and suite (default 2), the order "
                             "of the environments rotated each round")
    parser.add_argument("--max-rounds", type=int, metavar="N",
                        help="give a benchmark with undecided figures in any step the "
                             "further rounds they need to be decided, on every environment, up "
                             "to N in all (times its rounds factor); default: no further rounds")
    parser.add_argument("--out", default="results/scratch/matrix", metavar="DIR",
                        help="where the matrix record, the merged runs and the rounds go")
    judging.add_threshold(parser)
    common.add_expectations(parser)
    common.add_calibration(parser)


def main(args) -> int:
    from pathlib import Path

    from harness.comparing import campaign
    from harness.releases import matrix

    suites = common.selected_suites(args)
    judging.check_rounds(args)
    run_args = common.run_args(args)
    expected = common.read_expectations(args)
    if not args.judge and len(args.sides) < 2:
        raise UsageError("matrix needs at least two environments (or --judge MATRIX_DIR)")
    if args.stale and not args.judge:
        raise UsageError("matrix --stale runs again what an earlier matrix holds: give it "
                         "with --judge MATRIX_DIR")
    cal, cal_line = common.read_calibration(args)
    try:
        if args.judge:
            if args.stale:
                again = matrix.run_stale_again(
                    Path(args.judge), lambda s: print(s, file=sys.stderr, flush=True))
                print("stale: " + ("; ".join(f"{unit} run again on {', '.join(sides)}"
                                            for unit, sides in again.items())
                                   or "nothing judged by older checks"))
            res = matrix.judge_again(Path(args.judge), dict(args.threshold), expected, cal)
        else:
            res = matrix.matrix(args.sides, judging.units(suites, args, cal), run_args, args.rounds,
                                Path(args.out), lambda s: print(s, file=sys.stderr, flush=True),
                                dict(args.threshold), expected, cal, args.max_rounds)
    except campaign.CampaignError as e:
        raise UsageError(f"matrix: {e}") from e
    unexpected = 0
    for v in res["versions"]:
        side = res["sides"][v["label"]]
        cases = side["cases"].values()
        outcomes = {o: sum(c["outcome"] == o for c in cases) for o in campaign.OUTCOME_ORDER}
        warned = sum(1 for c in cases if c["warnings"])
        print(f"torch {v['torch']}: " + ", ".join(f"{n} {o}" for o, n in outcomes.items() if n)
              + f"; {warned} cases warned")
        for cid, c in side["cases"].items():
            status = (c.get("expected") or {}).get("status")
            if status in ("expected-fail", "unexpected-fail", "unexpected-pass"):
                unexpected += status != "expected-fail"
                why = c["expected"].get("why") or c["expected"].get("issue") or ""
                print(f"  {status}: {cid}" + (f": {why}" if why else ""))
        if expected is None:  # raw outcomes: any failure counts
            unexpected += outcomes["fail"] + outcomes["error"]
    print(cal_line)
    changed = False
    for step in res["steps"]:
        print(f"\n{step['from']} -> {step['to']}: "
              + ", ".join(f"{n} {v}" for v, n in step["counts"].items()))
        for c in step["changes"]:  # reported; the expectations judge the outcomes
            what = (f"{c['from']} -> {c['to']}" if c["what"] in ("outcome", "case")
                    else c["warning"])
            print(f"  {c['case']}: {c['what']}: {what}"
                  + (f" (FLAG: {c['flag']})" if c.get("flag") else ""))
            unexpected += bool(c.get("flag"))
        for v in step["headline_verdicts"]:
            lo, hi = v["interval"] or (None, None)
            ci = f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else ""
            factor = f"{v['factor']:.3g}x" if v["factor"] is not None else "n/a"
            print(f"  headline {v['case']} {v['metric']} {v['labels'] or ''}: {factor}{ci} "
                  f"{v['verdict']}")
        changed |= bool(step["counts"].get("regression"))
    judging.print_stages((res.get("max_rounds") or {}).get("judged", []))
    print(f"\nthe matrix record, the merged runs and the rounds are in {res['dir']}")
    # green exactly when nothing is unexpected: no result the expectations do not excuse, no
    # regression; a warning that appeared or went, and an outcome the expectations account
    # for, are findings, not failures
    return EXIT_FAILED if changed or unexpected else EXIT_OK


COMMANDS = (common.Command("matrix", "the release checklist and headline figures across torch "
                           "versions, interleaved; exit 1 on an unexpected result or a "
                           "regression", add_arguments, main),)
