"""`release-bench bisect GOOD BAD --case SUITE/CASE [--metric M]`: the first torch release
between two that differ, by binary search over the releases between them
(`harness.releases.bisect`); exit 0 when it names one, 1 when it stops undecided or finds no
difference."""

from __future__ import annotations

import argparse
import sys

from harness.commands import common, judging
from harness.commands.common import EXIT_FAILED, EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("good", metavar="GOOD", help="the older torch release, e.g. 2.9.0")
    parser.add_argument("bad", metavar="BAD", help="the newer torch release, e.g. 2.14.1")
    parser.add_argument("--case", required=True, metavar="SUITE/CASE",
                        help="the case that differs, e.g. amp/gemm_ladder")
    parser.add_argument("--metric", metavar="M",
                        help="a figure of that benchmark case, as the output writes it, e.g. "
                             "'time[dtype=autocast-bfloat16, n=256]'; without it the search "
                             "follows the case's outcome and warnings")
    parser.add_argument("--rounds", type=int, default=5, metavar="K",
                        help="fresh processes per release and step for a figure (default 5)")
    parser.add_argument("--max-rounds", type=int, metavar="N",
                        help="give a step whose halves are inconclusive further rounds, up to "
                             "N in all")
    parser.add_argument("--no-build", action="store_true",
                        help="search only the releases whose environment is built")
    parser.add_argument("--local-builds", action="store_true",
                        help="let pip's find-links folders provide torch when building (by "
                             "default the registry's own builds)")
    parser.add_argument("--out", default="results/scratch/bisect", metavar="DIR",
                        help="where the bisect record and each step's campaign go")
    judging.add_threshold(parser)
    common.add_calibration(parser)


def main(args) -> int:
    from pathlib import Path

    from harness import records, registry
    from harness.commands.history import versions_of
    from harness.comparing import campaign
    from harness.releases import bisect, envs
    from harness.running import machine

    suite_name, _, case_name = args.case.partition("/")
    try:
        case = registry.load(suite_name).case(case_name)
    except KeyError:
        raise UsageError(f"bisect: no case {args.case!r} (release-bench list names them)") \
            from None
    if args.metric and case.kind != "benchmark":
        raise UsageError(f"bisect: {args.case} is a conformance case; --metric needs a "
                         "benchmark case")
    if not args.metric and case.kind == "benchmark":
        raise UsageError(f"bisect: {args.case} is a benchmark case: name a figure with "
                         "--metric")
    try:
        metric = bisect.parse_metric(args.metric) if args.metric else None
    except ValueError as e:
        raise UsageError(f"bisect: --metric {e}") from e
    judging.check_rounds(args)
    releases = versions_of([f"{args.good}..{args.bad}"], args.no_build, "bisect")
    if len(releases) < 2:
        raise UsageError(f"bisect: {args.good}..{args.bad} holds fewer than two releases")
    cal, cal_line = common.read_calibration(args) if metric else (None, "")
    factor = cal.rounds_factor.get(f"{suite_name}.{case_name}", 1) if cal else 1
    unit = campaign.Unit(suite_name, (case_name,), benchmark=metric is not None,
                         rounds_factor=factor)
    out = campaign.new_folder(Path(args.out), "bisect")
    # what the record's figures belong to: when, on which machine, at which commit
    identity = {"started": records.now(), "machine": machine.machine_name(),
                "project": machine.project_commit()}

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    progress(f"bisecting {len(releases)} releases: {' '.join(releases)}")
    try:
        if metric is None:
            res = bisect.bisect_outcome(releases, unit, args.case, out / "steps", progress,
                                        build=not args.no_build,
                                        local_files=args.local_builds)
        else:
            res = bisect.bisect_metric(releases, unit, args.case, metric, args.rounds,
                                       args.max_rounds, out / "steps", progress,
                                       dict(args.threshold), cal, build=not args.no_build,
                                       local_files=args.local_builds)
    except (campaign.CampaignError, envs.EnvError) as e:
        raise UsageError(f"bisect: {e}") from e
    path = bisect.write(out, {"case": args.case, "releases": releases, **identity, **res})
    if cal_line:
        print(cal_line)
    for i, step in enumerate(res["steps"], 1):
        if "halves" in step:
            a, m, b = step["releases"]
            print(f"step {i} ({step['minutes']:.1f} min): {a} -> {m}: "
                  f"{bisect._said(step['halves'][0])}; {m} -> {b}: "
                  f"{bisect._said(step['halves'][1])}")
        else:
            print(f"step {i}: torch {step['release']}: " + "; ".join(
                f"{k}: {s['outcome']}" + (f", {len(s['warnings'])} warnings"
                                          if s["warnings"] else "")
                for k, s in step["state"].items()))
    steps = len(res["steps"])
    if res["found"]:
        said = (f": {bisect._said(res)}" if res.get("verdict") else "")
        print(f"first release that differs: torch {res['found']}{said} ({res['why']}); "
              f"{steps} steps, {res['minutes']:.1f} min, {len(res['built'])} environments "
              "built")
    else:
        print(f"no release named: {res['why']}; {steps} steps, {res['minutes']:.1f} min")
    print(f"the record is {path}")
    return EXIT_OK if res["found"] else EXIT_FAILED


COMMANDS = (common.Command("bisect", "the first torch release between GOOD and BAD where a "
                           "case's outcome, warnings or a figure changes, by binary search "
                           "over the releases", add_arguments, main),)
