"""`release-bench run`: run suites and write a run record; node 0's part of a run across hosts."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness import records
from harness.cases import DEVICES, MIN_RUN_TIME, param_id
from harness.commands import common
from harness.commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError
from harness.running import duet

if TYPE_CHECKING:
    from harness.running.launch import Cluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_selection(parser)
    parser.add_argument("--device", action="append", choices=DEVICES,
                        help="cpu or cuda (repeatable; default: every device present)")
    parser.add_argument("--out", default="results/runs", metavar="DIR",
                        help="where runs go, one folder per machine (default: results/runs)")
    parser.add_argument("--no-telemetry", action="store_true",
                        help="do not sample the hardware while cases run")
    parser.add_argument("--telemetry-interval", type=common.positive_float, default=0.1,
                        metavar="S",
                        help="seconds between telemetry samples (default: 0.1, i.e. 10 Hz)")
    common.add_param(parser)
    parser.add_argument("--only", action="append", metavar="CASE",
                        help="only the case named CASE exactly (repeatable); `ab` runs each "
                             "benchmark case in a process of its own with it")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would run (any device, present or not) and stop")
    parser.add_argument("--cpus", metavar="LIST",
                        help="pin the run (and its workers) to these CPUs, e.g. 0 or 0-3, with "
                             "as many intra-op threads; how `ab --duet` gives each side its half")
    parser.add_argument("--barrier", metavar="DIR",
                        help="start each case together with the other process given the same "
                             "folder (a side of `ab --duet`)")
    parser.add_argument("--turns", metavar="SIDE@SOCKET",
                        help="measure the bursts cases in the turns the referee at SOCKET "
                             "grants side SIDE (A or B): a side of `ab --bursts`")
    common.add_expectations(parser)


def parse(argv: list[str]) -> argparse.Namespace:
    """`run`'s options on their own: what `multihost` passes on to node 0."""
    parser = common.Parser(prog="release-bench run")
    add_arguments(parser)
    return parser.parse_args(argv)


def main(args, cluster: Cluster | None = None) -> int:
    """`run`; with `cluster` (node 0 of a run across hosts) the cases' workers are spread
    over its hosts, the cases that need one host are left out, and the record lists every
    host."""
    from harness import registry
    from harness.presenting import summary
    from harness.running import runner, telemetry

    suites = [registry.load(n) for n in common.selected_suites(args)]
    devices = _devices(args.device, args.dry_run)
    overrides = dict(args.param)
    planned = runner.plan(suites, args.profile, devices, args.case, overrides, args.skip,
                          args.only)
    notes = []
    if cluster is not None:
        one_host = [p for p in planned if "one_host" in p.case.needs]
        planned = [p for p in planned if "one_host" not in p.case.needs]
        nhosts = len(cluster.nodes)
        notes = [f"across {nhosts} hosts: left out {p.label}, which runs on one host only "
                 f"(it kills workers by pid, or runs its own processes)" for p in one_host]
        for line in notes:
            print(line, file=sys.stderr)
    if not planned:
        raise UsageError("nothing to run: no case matches the given suite, case, skip and device")
    known = {k for p in planned for k in (*p.params, *p.case.options)}
    if unknown_params := sorted(set(overrides) - known):
        raise UsageError(f"no case to run takes parameter {unknown_params[0]!r} "
                         f"(parameters: {', '.join(sorted(known)) or 'none'})")
    expected = common.read_expectations(args)  # a bad file fails here, before anything runs
    if args.dry_run:
        _print_plan(planned, args.profile, devices)
        return EXIT_OK
    barrier = _place(args)
    turns = _turns(args.turns) if args.turns else None
    # a side of a round in bursts: its partner, started by the same campaign, is no neighbour
    # (it waits while this side measures), so the campaign's whole tree is our own work
    tree_of = os.getppid() if turns is not None else None
    tel = None if args.no_telemetry else telemetry.Telemetry(args.telemetry_interval,
                                                             tree_of=tree_of)
    try:
        path, run = runner.run(planned, args.profile, args.out, telemetry=tel,
                               notes=notes, cluster=cluster, barrier=barrier,
                               turns=turns)
    except runner.Interrupted as e:
        # SIGINT or SIGTERM: the workers are reaped and the record is marked; say where it is
        kept = f"the run record is in {e.path}" if e.path else "no run record was written yet"
        print(f"release-bench: run {e}; {kept}", file=sys.stderr)
        return e.exit_status
    finally:
        if tel is not None:
            tel.close()
    run, judged = _judge_run(run, path, expected)
    print(summary.run_summary(run))
    print(f"\nrun written to {path}")
    # An invalid case (a performance check missed on a contended machine) is reported but does
    # not fail the run: the measurement is void, the feature is not known to be broken.
    reported = [e for e in run.results if e.outcome in ("fail", "error", "invalid")]
    for e in reported:
        print(f"{e.outcome}: {e.case_id} [{e.device} {param_id(e.params)}]: {e.reason}",
              file=sys.stderr)
    if judged is None:  # --expectations none: the raw outcomes decide
        return EXIT_FAILED if any(e.outcome != "invalid" for e in reported) else EXIT_OK
    return common.expectations_exit(judged)


def _print_plan(planned: list, profile: str, devices: list[str]) -> None:
    """`--dry-run`: each case run, and under a case's first run on a device, the settings its
    runs there use in this profile."""
    shown = set()
    for p in planned:
        print(f"would run {p.label}")
        if (p.case.id, p.device) not in shown:
            shown.add((p.case.id, p.device))
            for line in p.case.describe_settings(profile, [p.device]):
                print(f"    {line}")
    print(f"{len(planned)} case runs planned, profile {profile} ({MIN_RUN_TIME[profile]:g} s "
          f"of measurement per timed statement by default), devices {', '.join(devices)}")


def _turns(text: str):  # -> harness.running.turns.Turns
    """`--turns A@/path/to/socket`: side A's handle on that referee."""
    from harness.running import turns

    side, _, address = text.partition("@")
    if side not in turns.SIDES or not address:
        raise UsageError(f"--turns: expected SIDE@SOCKET with SIDE A or B, got {text!r}")
    return turns.Turns(address, turns.SIDES.index(side))


def _place(args) -> duet.Barrier | None:
    """Pin the process to `--cpus`; the barrier of `--barrier`, if any."""
    from pathlib import Path

    try:
        if args.cpus:
            duet.pin(duet.parse_cpu_list(args.cpus))
    except duet.DuetError as e:
        raise UsageError(str(e)) from e
    return duet.Barrier(Path(args.barrier)) if args.barrier else None


def _devices(requested: Sequence[str] | None, dry_run: bool = False) -> list[str]:
    import torch

    if not requested:
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    if "cuda" in requested and not torch.cuda.is_available() and not dry_run:
        raise UsageError("--device cuda: CUDA is not available on this machine")
    return list(dict.fromkeys(requested))


def _judge_run(run: records.Run, path, expected: tuple[list, str] | None):
    """The run annotated by the expectations (on disk too) and their judgement; the run as it
    is and None without them."""
    from harness.comparing import expectations

    if expected is None:
        return run, None
    judged = expectations.judge_run(run, expected[0], expected[1], expectations.known_cases())
    run = expectations.annotate(run, judged)
    records.write_run(path, run)
    return run, judged


def suites_spanning_hosts() -> list[str]:
    from harness import registry

    return [n for n in registry.suite_names() if registry.load(n).spans_hosts]


def run_across_hosts(run_argv: list[str], cluster: Cluster) -> int:
    """Node 0's part of `multihost`: `run RUN_ARGV` with its ranks spread over the hosts of
    `cluster`."""
    try:
        args = parse(run_argv)
        args.suite = args.suite or suites_spanning_hosts()
        return main(args, cluster)
    except (UsageError, records.RecordError) as e:
        print(f"release-bench: error: {e}", file=sys.stderr)
        return EXIT_USAGE


COMMANDS = (common.Command("run", "run suites and write a run record", add_arguments, main),)
