"""`release-bench list`: the suites, their cases, what each needs, and what each profile
runs them with (their declared settings)."""

from __future__ import annotations

import argparse

from harness.cases import MIN_RUN_TIME, PROFILES
from harness.commands import common
from harness.commands.common import EXIT_OK


def main(args) -> int:
    from harness import registry
    from harness.commands.ab import DEFAULT_ROUNDS
    from harness.comparing import calibration
    from harness.comparing.campaign import best_design
    from harness.running import machine

    profiles = [args.profile] if args.profile else list(PROFILES)
    for p in profiles:
        print(f"profile {p}: {MIN_RUN_TIME[p]:g} s of measurement per timed statement by default")
    print("under each case, 'PROFILE: NAME in VALUES' is a parameter its runs take, "
          "'PROFILE: NAME = VALUE' a setting each run uses")
    # a benchmark's rounds in ab and matrix are the machine's to say, not the profile's
    cal, cal_line = calibration.for_machine(machine.fingerprint())
    print(f"campaign rounds (ab, matrix): {DEFAULT_ROUNDS} a side by default, times a "
          f"benchmark's rounds factor; {cal_line}")
    for suite in registry.all_suites():
        print(f"{suite.name}: {suite.feature} (1.6 status: {suite.status})")
        print(f"  {suite.summary}")
        for c in suite.cases:
            needs = ", ".join([f"devices: {'/'.join(c.devices)}", *c.needs])
            sets = ", ".join(f"{p} {len(c.param_sets(p, c.devices[0]))}" for p in profiles)
            print(f"  {c.kind:<11} {c.name:<34} [{needs}; param sets {sets}]")
            if c.doc:
                print(f"  {'':<11} {c.doc}")
            for p in profiles:
                for line in c.describe_params(p) + c.describe_settings(p):
                    print(f"  {'':<11} {p}: {line}")
            if c.kind == "benchmark":
                factor = cal.rounds_factor.get(f"{suite.name}.{c.name}", 1) if cal else 1
                print(f"  {'':<11} campaign rounds: {factor * DEFAULT_ROUNDS} a side by default "
                      f"(rounds factor {factor})")
                best, why = best_design(c)
                print(f"  {'':<11} ab runs it as: {best} ({why})")
                print(f"  {'':<11} " + (
                    "duet: yes (on the CPU, both sides at once)" if c.duet
                    else "duet: no (ab --duet runs it sequentially)"))
                if c.bursts:
                    print(f"  {'':<11} bursts: yes (both sides alive through a round, "
                          f"measuring in turns)")
        for w in suite.workloads:
            print(f"  {'workload':<11} {w.name:<34} [devices: {'/'.join(w.devices)}] {w.doc}")
    return EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=PROFILES,
                        help="show the parameter sets and settings of this profile only "
                             "(default: every profile)")


COMMANDS = (common.Command("list", "the suites, their cases, what each needs, and each "
                                   "profile's settings", add_arguments, main),)
