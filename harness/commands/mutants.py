"""`release-bench mutants FILE --suite S`: mutation analysis of one of torch's modules, judged
by a suite's conformance cases, and by PyTorch's own tests beside them
(`harness.releases.mutants`)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help="a module of torch, by its path in the package, e.g. "
                             "torch/amp/grad_scaler.py")
    parser.add_argument("--suite", required=True, metavar="S",
                        help="the suite whose conformance cases judge the mutants")
    parser.add_argument("--case", action="append", default=[], metavar="TEXT",
                        help="only cases whose name contains TEXT (repeatable; default: every "
                             "conformance case that runs a line of the module's functions)")
    parser.add_argument("--skip", action="append", metavar="TEXT",
                        help="leave out cases whose name contains TEXT (repeatable; default: "
                             "clean_exit, whose 20 fresh processes per mutant would dominate)")
    parser.add_argument("--within", action="append", default=[], metavar="QUALNAME",
                        help="only mutants inside this function or class (repeatable), e.g. "
                             "DistributedDataParallel.forward")
    parser.add_argument("--sample", type=_positive_int, metavar="N",
                        help="mutants to sample from those on reached lines (default: 25); "
                             "a larger N than an existing record's grows its sample into "
                             "the one a new campaign with N would draw")
    parser.add_argument("--seed", type=int, default=58, metavar="K",
                        help="the sample's seed (default: 58)")
    parser.add_argument("--mutant", action="append", default=[], metavar="NAME",
                        help="judge this mutant (operator#occurrence, as the record names "
                             "it) instead of a sample (repeatable)")
    parser.add_argument("--torch-tests", action="append", default=[], metavar="GROUP",
                        choices=("rpc", "dist_autograd", "dist_optimizer", "ddp", "autocast"),
                        help="PyTorch's shipped tests of this group judge the same mutants "
                             "(repeatable): rpc, dist_autograd, dist_optimizer, ddp, autocast")
    parser.add_argument("--tests-sample", type=_positive_int, default=8, metavar="N",
                        help="PyTorch's tests sampled per group with the same seed, before "
                             "those that do not run here are dropped (default: 8)")
    parser.add_argument("--timeout", type=common.positive_float, default=300.0, metavar="S",
                        help="time limit of one case's, or one test's, run on one mutant "
                             "(default: 300 s)")
    parser.add_argument("--max-minutes", type=common.positive_float, metavar="M",
                        help="stop after the mutant being judged once M minutes have passed; "
                             "the same command goes on from there")
    parser.add_argument("--again", action="append", default=[], metavar="FATE",
                        choices=("survived", "error", "timeout", "check"),
                        help="judge again the mutants the suite gave this fate (repeatable): "
                             "after adding a check, say. Cases the suite has gained since the "
                             "record was made are surveyed first; with --case naming cases "
                             "that did not judge it before, only those judge, their verdict "
                             "merged with the earlier one")
    parser.add_argument("--out", default="results/validation/mutation", metavar="DIR",
                        help="where the record goes, one file per module (default: "
                             "results/validation/mutation)")
    parser.add_argument("--name", metavar="NAME",
                        help="the record's file name in --out, without .json (default: from "
                             "the module's path and --within)")
    parser.add_argument("--home", metavar="DIR",
                        help="the command's own environment and scratch (default: .mutants)")


# options that change where or in how many chunks a campaign runs, not what it finds
UNRECORDED = ("--max-minutes", "--home")


def _command(argv: list[str]) -> str:
    """The command as the record keeps it: what reproduces the campaign, without the
    options that only split it into chunks or say where its environment lives."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in UNRECORDED:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in UNRECORDED)):
            kept.append(a)
    return "release-bench mutants " + shlex.join(kept)


def main(args) -> int:
    from harness import registry
    from harness.releases import mutants
    from harness.running import runner

    if args.suite not in registry.suite_names():
        raise UsageError(f"unknown suite {args.suite!r} (suites: "
                         f"{', '.join(registry.suite_names())})")
    try:
        target = mutants.Target.parse(args.file, args.within)
        plan = mutants.Plan(
            target=target, suite=args.suite, cases=tuple(args.case),
            skip=tuple(args.skip if args.skip is not None else ("clean_exit",)),
            size=args.sample, seed=args.seed, names=tuple(args.mutant),
            test_groups=tuple(dict.fromkeys(args.torch_tests)), tests_sample=args.tests_sample,
            timeout_s=args.timeout, max_minutes=args.max_minutes,
            again=tuple(mutants.Fate(a) for a in args.again), out=Path(args.out),
            command=_command(sys.argv[2:]), name=args.name or "")
        home = Path(args.home) if args.home else mutants.HOME
        # SIGINT and SIGTERM end the command through the module's restoration, as a typed
        # Interrupted (later signals ignored, so that the restoration is not cut short)
        guard = runner.SignalGuard()
        guard.install()
        try:
            env = mutants.prepare(home, log=lambda s: print(s, file=sys.stderr, flush=True))
            record = mutants.campaign(plan, env, log=lambda s: print(s, flush=True))
        finally:
            guard.restore()
    except mutants.MutantsError as e:
        raise UsageError(f"mutants: {e}") from e
    except KeyboardInterrupt as e:
        stop = e if isinstance(e, runner.Interrupted) else runner.Interrupted(signal.SIGINT)
        print(f"release-bench: mutants interrupted ({stop.signame}); the module is restored "
              "and the record keeps every mutant judged so far", file=sys.stderr)
        return stop.exit_status
    for judge in ("suite", "torch_tests"):
        counted = mutants.counts(record, judge)
        if sum(counted.values()):
            print(f"{judge.replace('_', ' ')}: " + ", ".join(f"{n} {fate}"
                                                             for fate, n in counted.items()))
    return EXIT_OK


COMMANDS = (common.Command(
    "mutants", "mutation analysis of one of torch's modules, judged by a suite (and by "
               "PyTorch's own tests)", add_arguments, main),)
