"""What the commands share: bad input as one line (`UsageError`), the exit statuses, option
types, the selection, calibration and expectations options and their reading."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

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


def add_duet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duet", action="store_true",
                        help="run each duet-capable benchmark as a duet: both sides at once, "
                             "each on half of the CPUs (swapped every other round), judged per "
                             "swapped pair; --rounds then counts pairs (harness.running.duet)")
    parser.add_argument("--bursts", action="store_true",
                        help="run each bursts-capable benchmark (RPC round trips and batched "
                             "updates, the DDP+RPC step) in bursts: both sides' processes "
                             "alive through a round, measuring in turns A B, B A, ..., each "
                             "only while the other waits (harness.running.turns)")


def design(args) -> Design:
    """The design `--duet` or `--bursts` asks for (sequential without either); both at once
    are refused in one line: a comparison is judged with one design's calibration."""
    duet, bursts = getattr(args, "duet", False), getattr(args, "bursts", False)
    if duet and bursts:
        raise UsageError("--duet and --bursts: choose one design (each is judged with its own "
                         "calibration)")
    return Design.DUET if duet else Design.BURSTS if bursts else Design.SEQUENTIAL


def add_calibration(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibration", metavar="FILE",
                        help="this machine's calibration (default: results/calibration/"
                             "<machine>.json, made by `release-bench calibrate`); 'none' uses "
                             "the conservative defaults")


def read_calibration(args, fingerprint: dict | None = None):
    """The calibration `--calibration` names (None: the conservative defaults) and one line
    saying which, for the command to print with its verdicts (not before: bad input stays
    one line)."""
    from harness.comparing import calibration
    from harness.running import machine

    spec = getattr(args, "calibration", None)
    if spec == "none":
        return None, "calibration: none (--calibration none): conservative defaults"
    # a duet's rounds wander less than sequential ones: each design has its own calibration
    wanted = design(args)
    fingerprint = fingerprint or machine.fingerprint()
    if spec is None:
        return calibration.for_machine(fingerprint, design=wanted)
    try:
        cal = calibration.read(spec)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--calibration {spec}: not a calibration ({e})") from e
    if differ := machine.differences(cal.machine, fingerprint):
        raise UsageError(f"--calibration {spec}: of other hardware ({differ[0]})")
    if cal.design != wanted:
        option = "" if wanted == Design.SEQUENTIAL else f" --{wanted}"
        raise UsageError(f"--calibration {spec}: calibrates {cal.design} rounds, and these are "
                         f"{wanted} (release-bench calibrate{option})")
    return cal, f"calibration: {spec}"


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
