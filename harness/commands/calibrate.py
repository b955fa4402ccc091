"""`release-bench calibrate`: an A/A campaign of this machine's benchmarks, and the
calibration it gives (`harness.comparing.calibrate`)."""

from __future__ import annotations

import argparse
import sys

from harness import records
from harness.commands import ab as ab_command
from harness.commands import common, judging
from harness.commands.common import EXIT_OK, UsageError
from harness.records import Design


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_selection(parser)
    parser.add_argument("--rounds", type=int, default=8, metavar="K",
                        help="rounds a side (default 8: each figure's spread on 7 degrees of "
                             "freedom, its family's on many more)")
    parser.add_argument("--python", metavar="PY", default=sys.executable,
                        help="the environment to calibrate with (default: this Python)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="where the calibration goes (default: results/calibration)")
    parser.add_argument("--replace", action="store_true",
                        help="write over a calibration of other hardware that has this "
                             "machine's name (machines of one name can differ in CPU flags)")
    parser.add_argument("--work", default="results/scratch/calibrate", metavar="DIR",
                        help="where the A/A's rounds go")
    # the designs `ab` runs its benchmarks in: each calibrated file holds one design's units
    # (<machine>.json sequential, <machine>.duet.json, <machine>.bursts.json)
    common.add_design(parser)


def main(args) -> int:
    from pathlib import Path

    from harness.comparing import ab, calibrate, calibration, campaign, compare
    from harness.presenting import summary
    from harness.running import machine

    suites = common.selected_suites(args)
    if args.rounds < 3:
        raise UsageError(f"--rounds must be at least 3 to measure a spread, got {args.rounds}")
    wanted = common.design(args)
    # a design asked for by name calibrates the benchmarks that declare it; by default each
    # benchmark is calibrated in the design `ab` runs it in, each design in a file of its own
    units = [u for u in judging.units(suites, args) if u.benchmark
             and (wanted is None or u.design == wanted)]
    if not units:
        raise UsageError("nothing to calibrate: no benchmark case matches the selection")
    designs = sorted({u.design for u in units})
    root = Path(args.out) if args.out else calibration.CALIBRATIONS
    here = machine.fingerprint()
    for design in designs:
        _keep_other_hardwares(calibration.path_for(here["name"], root, design), here,
                              args.replace)
    started = records.now()
    try:
        res = ab.ab(args.python, args.python, units, common.run_args(args), args.rounds,
                    Path(args.work), lambda s: print(s, file=sys.stderr, flush=True))
    except campaign.CampaignError as e:
        raise UsageError(f"calibrate: {e}") from e
    fingerprint = res["A"].machine
    by_side = campaign.load_rounds(res["dir"])
    for design in designs:
        mine = [u for u in units if u.design == design]

        def of_design(runs, mine=mine):
            # a round's run holds one unit's cases: those of this design's units
            return [r for r in runs if r.results and any(u.covers(r.results[0].case_key)
                                                          for u in mine)]

        measured = {"started": started, "finished": records.now(), "rounds": args.rounds,
                    "design": design, "profile": args.profile,
                    "torch": (fingerprint.get("torch") or {}).get("version"),
                    "commit": (fingerprint.get("project") or {}).get("commit"),
                    "command": ["release-bench", *(records.shown_path(a) if a.startswith("/")
                                                   else a for a in sys.argv[1:])]
                    if sys.argv[1:2] == ["calibrate"] else ["release-bench", "calibrate"],
                    "ab": records.shown_path(res["dir"]),
                    "aa_counts": compare.counts([c for c in res["changes"]
                                                 if any(u.covers(c.case) for u in mine)])}
        cal = calibrate.measure(of_design(by_side["A"]), of_design(by_side["B"]), here,
                                [u.name for u in mine], ab_command.DEFAULT_ROUNDS, measured)
        path = calibration.write(cal, root)
        doc = cal.to_json()
        rounds = "pairs" if design == Design.DUET else "rounds"  # a duet: per swapped pair
        print(f"{design}: {', '.join(u.name for u in mine)}")
        print(summary.table_text([
            {"family": f"{f['case']} {f['kind']}",
             "sd of log B/A": f"{100 * f['sd_log_ratio']:.1f}%",
             f"detectable at 5 {rounds}": f"{100 * f['detectable_at']['5']:.1f}%",
             f"{rounds} for 10%": f["rounds_for"]["0.1"],
             f"{rounds} for 5%": f["rounds_for"]["0.05"],
             "level per process": f["per_process"]} for f in doc["families"]], limit=200))
        print("rounds factors: " + ", ".join(f"{u} {n}"
                                             for u, n in doc["rounds_factor"].items()))
        print("A/A verdicts: " + ", ".join(f"{n} {v}"
                                           for v, n in measured["aa_counts"].items()))
        print(f"calibration of {design} rounds written to {path}")
    return EXIT_OK


def _keep_other_hardwares(path, here: dict, replace: bool) -> None:
    """Refuse, before an hour of rounds, to write over the calibration of other hardware that
    bears this machine's name (two EPYC VMs of 2 cores, one with AVX-512 and one without)."""
    from harness.comparing import calibration
    from harness.running import machine

    if replace or not path.exists():
        return
    try:
        theirs = calibration.read(path).machine
    except (OSError, ValueError, KeyError, TypeError):
        return  # unreadable: nothing a reader could use is lost
    if differ := machine.differences(theirs, here):
        raise UsageError(f"{records.shown_path(path)} is the calibration of other hardware of "
                         f"this name ({differ[0]}); --replace writes this machine's over it, "
                         "--out DIR writes it elsewhere")


COMMANDS = (common.Command("calibrate", "an A/A comparison of this machine's benchmarks: how "
                           "much each figure wanders from round to round, which compare and "
                           "ab then use", add_arguments, main),)
