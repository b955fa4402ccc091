"""`release-bench`: list the suites, run them, show a run, compare runs and environments.

Each command is a module of `harness.commands` (its options and what it does); this module
only builds the command line from them and dispatches.

Exit status: 0 when every case passed, skipped or was invalid (a performance check missed on
a contended machine), 1 when any failed or errored, 130/143 when SIGINT/SIGTERM stopped a
run (its record kept and marked interrupted), 2 for bad
input (an unknown suite, profile or device, CUDA asked for but absent, an unreadable run
file), always with one line on stderr saying what was wrong.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from harness import dependencies, records
from harness.commands import (
    ab,
    asv,
    bisect,
    calibrate,
    common,
    compare,
    env,
    expectations,
    gpu,
    history,
    listing,
    matrix,
    multihost,
    mutants,
    nightly,
    report,
    run,
    show,
)
from harness.commands.common import EXIT_USAGE, UsageError

# in the order `release-bench --help` lists them
COMMANDS = {c.name: c for module in (listing, run, multihost, gpu, asv, show, report, compare,
                                     calibrate, ab, matrix, history, bisect, mutants,
                                     expectations, env, nightly)
            for c in module.COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    parser = common.Parser(prog="release-bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=common.Parser)
    for c in COMMANDS.values():
        c.add_arguments(sub.add_parser(c.name, help=c.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if (refused := dependencies.check("release-bench")) is not None:
        return refused
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command].main(args)
    except (UsageError, records.RecordError) as e:
        print(f"release-bench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as e:
        if e.name not in ("torch", "torchvision"):
            raise
        print(f"release-bench: error: {e.name} is not installed in this Python "
              f"({sys.executable})", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C outside a run (a run reports its own interruption, with its record's path)
        print("release-bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
