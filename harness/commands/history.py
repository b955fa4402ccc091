"""`release-bench history [FIRST..LAST]`: the conformance checks, their warnings and the 1.6
API record across torch releases, one record per release (`harness.releases.history`), and
the changes between neighbours; the page is `release-bench report --history DIR`."""

from __future__ import annotations

import argparse
import sys

from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError

DEFAULT_DIR = "results/history"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("releases", metavar="RELEASES", nargs="*",
                        help="torch releases: a version, or FIRST..LAST for every release the "
                             "registry serves between them (both included); default: every "
                             "environment built in .envs/")
    parser.add_argument("--out", metavar="DIR",
                        help=f"where the records go (default: {DEFAULT_DIR}/<machine>/); a "
                             "release recorded there already is kept")
    parser.add_argument("--again", action="store_true",
                        help="record the releases afresh, recorded or not")
    parser.add_argument("--stale", action="store_true",
                        help="also record again, in a release recorded already, the suites "
                             "with a case judged by an older version of its checks (the rest "
                             "of its record is kept)")
    parser.add_argument("--no-build", action="store_true",
                        help="only the releases whose environment is built; build none")
    parser.add_argument("--discard", action="store_true",
                        help="remove each environment the history built once its release is "
                             "recorded, and its torch from uv's cache (29 releases do not fit "
                             "on a small disk at once)")
    parser.add_argument("--local-builds", action="store_true",
                        help="let pip's find-links folders provide torch when building (by "
                             "default the registry's own builds, so that neighbours compare "
                             "like with like)")
    parser.add_argument("--suite", action="append", metavar="S",
                        help="a suite to record (repeatable; default: all)")
    parser.add_argument("--skip", action="append", default=["clean_exit"], metavar="TEXT",
                        help="leave out cases whose name contains TEXT (repeatable; default: "
                             "clean_exit, whose 20 fresh processes per suite would triple the "
                             "time; --skip '' keeps it)")
    parser.add_argument("--scratch", default="results/scratch/history", metavar="DIR",
                        help="where each release's rounds and logs go")
    common.add_expectations(parser)


def versions_of(specs: list[str], built_only: bool, command: str = "history") -> list[str]:
    """The releases the arguments name, oldest first, each once; with `built_only`, those
    with an environment (a range's ends must have one)."""
    from harness.releases import envs

    built = [e.version for e in envs.built()]
    if not specs:
        if not built:
            raise UsageError(f"{command}: no environment is built (release-bench env create "
                             "FIRST..LAST), and no release was named")
        return built
    out: list[str] = []
    for spec in specs:
        if built_only and (missing := [v for v in spec.split("..") if v not in built]):
            raise UsageError(f"{command}: no environment for torch {missing[0]} (--no-build)")
        try:
            named = envs.release_range(spec, available=built if built_only else None)
        except envs.EnvError as e:
            raise UsageError(f"{command}: {e}") from e
        out += [v for v in named if v not in out]
    return sorted(out, key=envs.release_key)


def main(args) -> int:
    from pathlib import Path

    from harness.comparing import campaign
    from harness.releases import envs, history
    from harness.running import machine

    suites = common.selected_suites(args)
    skip = [s for s in args.skip if s]
    expected = common.read_expectations(args)
    versions = versions_of(args.releases, args.no_build)
    folder = Path(args.out or f"{DEFAULT_DIR}/{machine.machine_name()}")
    units = [u for u in campaign.units(suites, skip=skip) if not u.benchmark]
    if not units:
        raise UsageError("history: no conformance case is selected")
    run_args = ["--profile", "quick",
                *(a for text in skip for a in ("--skip", text))]

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        done = history.history(versions, folder, units, run_args, suites, Path(args.scratch),
                               expected, progress, again=args.again, build=not args.no_build,
                               discard=args.discard, local_files=args.local_builds,
                               stale=args.stale)
        recs = history.read(folder)
    except (campaign.CampaignError, envs.EnvError) as e:
        raise UsageError(f"history: {e}") from e
    print(f"{len(done['recorded'])} releases recorded, {len(done['kept'])} kept, "
          f"{len(done['built'])} environments built "
          f"({done['added_bytes'] / 2**30:.1f} GiB added to the disk), in "
          f"{done['wall_s'] / 60:.1f} min")
    for rec in recs:
        counts: dict[str, int] = {}
        for c in rec["cases"].values():
            counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
        api: dict[str, int] = {}
        for a in rec["api"]:
            api[a["status"]] = api.get(a["status"], 0) + 1
        stale = history.stale_cases(rec)
        print(f"torch {rec['release']:8s} ({rec['torch']}): "
              + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
              + "; examples " + ", ".join(f"{n} {s}" for s, n in sorted(api.items()))
              + (f"; STALE: {len(stale)} cases judged by older checks (--stale records them "
                 "again)" if stale else ""))
    for c in history.changes(recs):
        step = " -> ".join(c["versions"])
        what = (f"{c['from']} -> {c['to']}" if "from" in c
                else c.get("warning") or c.get("detail", ""))
        print(f"{step}: {c['case']}: {c['what']}: {what}"
              + (f" (FLAG: {c['flag']})" if c.get("flag") else "")
              + (f" (stale: {c['stale']})" if c.get("stale") else ""))
    cost = history.totals(recs)
    print(f"{len(recs)} releases recorded in {folder}: "
          f"{sum(r['wall_s'] for r in recs) / 60:.1f} min of recording; their "
          f"{cost['envs_measured']} environments took {cost['built_min']} min to build and "
          f"{cost['added_gib']} GiB of disk together")
    print(f"the page: release-bench report --history {folder}")
    return EXIT_OK


COMMANDS = (common.Command("history", "the conformance checks, their warnings and the 1.6 API "
                           "record across torch releases, each change at the first release "
                           "that shows it", add_arguments, main),)
