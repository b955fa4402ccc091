"""`release-bench multihost`: the suites that span hosts, across several hosts through
torchrun (the same command on every host)."""

from __future__ import annotations

import argparse
import os

from harness.commands import common, run
from harness.commands.common import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nnodes", type=int, metavar="N",
                        help="how many hosts (default under srun: SLURM_NNODES)")
    parser.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                        help="the rendezvous, hosted by the host that has this address "
                             "(default under srun: $MASTER_ADDR:$MASTER_PORT)")
    parser.add_argument("--iface", default="lo", metavar="NAME",
                        help="the network interface every listener binds to (default: lo)")
    parser.add_argument("--join-timeout", type=common.positive_float, default=120.0,
                        metavar="S",
                        help="how long to wait for every host to join (default: 120 s)")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, metavar="-- RUN OPTIONS",
                        help="options of `run` for node 0: --suite, --case, --profile, "
                             "--out, ...")


def main(args) -> int:
    from harness.running import nodes

    run_argv = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    # bad run options fail here, on every host, before any rendezvous
    run_options = run.parse(run_argv)
    spanning = run.suites_spanning_hosts()
    run_options.suite = run_options.suite or spanning
    if bad := [s for s in common.selected_suites(run_options) if s not in spanning]:
        raise UsageError(f"suite {bad[0]!r} has no multi-process cases to spread over hosts "
                         f"(multihost runs: {', '.join(spanning)})")
    try:
        plan = nodes.plan_from(args, dict(os.environ))
        return nodes.multihost(plan, run_argv)
    except nodes.NodeError as e:
        raise UsageError(str(e)) from e


COMMANDS = (common.Command("multihost", "run the suites that span hosts across several hosts "
                           "through torchrun (the same command on every host)",
                           add_arguments, main),)
