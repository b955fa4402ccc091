"""`release-bench list`: the suites, their cases, and what each needs."""

from __future__ import annotations

import argparse

from harness.cases import PROFILES
from harness.commands import common
from harness.commands.common import EXIT_OK


def main(args) -> int:
    from harness import registry

    for suite in registry.all_suites():
        print(f"{suite.name}: {suite.feature} (1.6 status: {suite.status})")
        print(f"  {suite.summary}")
        for c in suite.cases:
            needs = ", ".join([f"devices: {'/'.join(c.devices)}", *c.needs])
            sets = {p: len(c.param_sets(p, c.devices[0])) for p in PROFILES}
            print(f"  {c.kind:<11} {c.name:<34} [{needs}; param sets quick {sets['quick']}, "
                  f"full {sets['full']}]")
            if c.doc:
                print(f"  {'':<11} {c.doc}")
        for w in suite.workloads:
            print(f"  {'workload':<11} {w.name:<34} [devices: {'/'.join(w.devices)}] {w.doc}")
    return EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


COMMANDS = (common.Command("list", "the suites, their cases, and what each needs",
                           add_arguments, main),)
