"""What the commands share: bad input as one line (`UsageError`), the exit statuses, option
types, the selection, calibration and expectations options and their reading."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.cases import PROFILES
from harness.records import Design

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input: reported as one line with exit status 2."""


class Parser(argparse.ArgumentParser):
    # argparse prints the whole usage block on error; one line says it better.
    def error(self, message: str):
        raise UsageError(message)


@dataclass(frozen=True)
class Command:
    """One `release-bench` command: its name and one-line help, the options it takes, and
    what it does (its exit status)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]


def _number(text: str) -> float:
    """The number `text` spells, or NaN, which fails every range check below."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def param(text: str) -> tuple[str, object]:
    import json

    key, sep, raw = text.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw  # a bare word: a string


def threshold(text: str) -> tuple[str, float]:
    kind, _, tol = text.partition("=")
    value = _number(tol)
    if not kind or not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"expected KIND=TOLERANCE such as latency=0.2, "
                                         f"got {text!r}")
    return kind, value


def add_selection(parser: argparse.ArgumentParser) -> None:
    """--suite, --case, --skip and --profile: what `run`, `ab` and `matrix` measure."""
    parser.add_argument("--suite", action="append", metavar="S",
                        help="a suite to run (repeatable; default: all)")
    parser.add_argument("--case", metavar="TEXT", help="only cases whose name contains TEXT")
    parser.add_argument("--skip", action="append", default=[], metavar="TEXT",
                        help="leave out cases whose name contains TEXT (repeatable), e.g. "
                             "clean_exit: its 20 fresh processes per suite are most of a "
                             "quick run's time")
    parser.add_argument("--profile", default="quick", choices=PROFILES)


def add_param(parser: argparse.ArgumentParser, passed_on: bool = False) -> None:
    """--param KEY=VALUE: `run`'s, and a campaign's, which each round's `run` is given."""
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        type=param,
                        help="set a parameter of every case that has it, e.g. --param "
                             "batch=256 --param tf32=true (values are JSON: numbers, "
                             "true/false, strings)" + (
                                 "; passed on to each round's run of the cases that have "
                                 "it, both sides alike"
                                 if passed_on else ""))


BEST = "best"  # each benchmark in the most precise design it declares


def add_design(parser: argparse.ArgumentParser) -> None:
    """`--design` and its short forms: how a campaign of two sides measures its benchmarks."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--design", choices=[BEST, *Design], default=BEST,
                       help="best (the default): each benchmark in the most precise design it "
                            "declares, a duet where it declares duet=True, bursts where it "
                            "declares only bursts=True, else sequential rounds (a duet's CUDA "
                            "runs go sequentially: one GPU cannot be halved); or one design for "
                            "every benchmark that declares it, the rest sequential")
    for design, what in (
            (Design.SEQUENTIAL, "every benchmark in sequential rounds, the sides one after the "
                                "other in fresh processes"),
            (Design.DUET, "each duet-capable benchmark as a duet, both sides at once, each on "
                          "half of the CPUs (swapped every other round), judged per swapped "
                          "pair; --rounds then counts pairs (harness.running.duet); the rest "
                          "sequential"),
            (Design.BURSTS, "each bursts-capable benchmark (RPC round trips and batched "
                            "updates, the DDP+RPC step) in bursts, both sides' processes alive "
                            "through a round, measuring in turns A B, B A, ..., each only while "
                            "the other waits (harness.running.turns); the rest sequential")):
        group.add_argument(f"--{design}", dest="design", action="store_const",
                           const=design.value, help=f"--design {design}: {what}")


def design(args) -> Design | None:
    """The design the options ask for: None for each benchmark's best (`--design best`, the
    default where a command has the option); sequential for a command without it."""
    chosen = getattr(args, "design", Design.SEQUENTIAL.value)
    return None if chosen == BEST else Design(chosen)


def add_calibration(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibration", metavar="FILE", action="append",
                        help="this machine's calibration of a design (default: results/"
                             "calibration/<machine>.json for sequential rounds, "
                             "<machine>.duet.json, <machine>.bursts.json, made by `release-bench "
                             "calibrate`); once per design the benchmarks run in; 'none' uses "
                             "the conservative defaults")


def read_calibration(args, fingerprint: dict | None = None, units: list | None = None):
    """The calibration that judges `units` (campaign.Unit; default: one unit of the design the
    options ask for) and what it says, for the command to print with its verdicts (not
    before: bad input stays one line). A duet's rounds wander less than sequential ones: each
    design has its own calibration, and the figures of each unit are judged with its
    design's (`calibration.ByDesign` where the units' designs differ); `--calibration FILE`
    names one design's, the others are this machine's defaults. None: the conservative
    defaults everywhere."""
    from harness.comparing import calibration
    from harness.running import machine

    specs = getattr(args, "calibration", None) or []
    specs = [specs] if isinstance(specs, str) else specs
    if "none" in specs:
        return None, "calibration: none (--calibration none): conservative defaults"
    designs = sorted({u.design for u in units or () if u.benchmark}) or [
        design(args) or Design.SEQUENTIAL]
    fingerprint = fingerprint or machine.fingerprint()
    given: dict[Design, Any] = {}
    for spec in specs:
        try:
            cal = calibration.read(spec)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(f"--calibration {spec}: not a calibration ({e})") from e
        if differ := machine.differences(cal.machine, fingerprint):
            raise UsageError(f"--calibration {spec}: of other hardware ({differ[0]})")
        if cal.design not in designs:
            wanted = " or ".join(designs)
            option = "" if designs == [Design.SEQUENTIAL] else f" --design {designs[0]}"
            raise UsageError(f"--calibration {spec}: calibrates {cal.design} rounds, and these "
                             f"are {wanted} (release-bench calibrate{option})")
        if cal.design in given:
            raise UsageError(f"--calibration {spec}: a second calibration of {cal.design} "
                             "rounds")
        given[cal.design] = cal
    parts, lines = {}, []
    for d in designs:
        if d in given:
            cal, line = given[d], f"calibration: {given[d].source}"
        else:
            cal, line = calibration.for_machine(fingerprint, design=d)
        if cal is not None:
            parts[d] = cal
        lines.append(line if len(designs) == 1 else f"{d}: {line}")
    if len(designs) == 1:
        return parts.get(designs[0]), lines[0]
    if not parts:
        return None, "\n".join(lines)
    benchmarks = [u for u in units if u.benchmark]

    def design_of(case) -> Design:
        return next((u.design for u in benchmarks if u.covers(case)), Design.SEQUENTIAL)

    factors = {u.name: parts[u.design].rounds_factor.get(u.name, 1) for u in benchmarks
               if u.design in parts}
    return calibration.ByDesign(parts, design_of, factors, "; ".join(
        f"{d}: {c.source}" for d, c in parts.items())), "\n".join(lines)


def add_expectations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expectations", metavar="FILE",
                        help="the expected results (default: expectations.toml at the "
                             "repository root); 'none' judges the raw outcomes: any failure "
                             "fails the command")


def read_expectations(args) -> tuple[list, str] | None:
    """The expectations `--expectations` names, with their source; None for 'none'."""
    from harness.comparing import expectations

    spec = getattr(args, "expectations", None)
    if spec == "none":
        return None
    try:
        loaded = expectations.load(spec)
    except expectations.ExpectationsError as e:
        raise UsageError(str(e)) from e
    return loaded, spec or expectations.DEFAULT_FILE.name


def run_args(args) -> list[str]:
    """The selection options of `ab` and `matrix`, passed on to each round's `run`."""
    return (["--profile", args.profile] + (["--case", args.case] if args.case else [])
            + [a for text in args.skip for a in ("--skip", text)])


def selected_suites(args) -> list[str]:
    """The suites --suite names (all by default); an unknown one is bad input."""
    from harness import registry

    names = registry.suite_names()
    unknown = [s for s in args.suite or [] if s not in names]
    if unknown:
        raise UsageError(f"unknown suite {unknown[0]!r} (suites: {', '.join(names)})")
    return args.suite or names


def expectations_exit(judged) -> int:
    """Print what the expectations say of a run; 1 exactly when anything is unexpected."""
    from harness.comparing import expectations

    for line in expectations.lines(judged):
        print(line, file=sys.stderr)
    unexpected = judged.unexpected
    counts = judged.counts()
    print(f"expectations ({judged.source}): " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n) + (
        f"; {len(unexpected)} unexpected" if unexpected else "; nothing unexpected"))
    return EXIT_FAILED if unexpected else EXIT_OK
