"""`release-bench asv-machine` and `asv-publish`: asv's machine file and its dashboard."""

from __future__ import annotations

import argparse

from harness.commands import common
from harness.commands.common import EXIT_OK


def machine_main(args) -> int:
    from harness.adapters.asv_adapter import register_machine

    print(register_machine())
    return EXIT_OK


def publish_main(args) -> int:
    from harness.presenting.asv_dashboard import publish

    html_dir = publish(args.config)
    print(f"asv dashboard in {html_dir}; view it with: asv preview (or any static web server)")
    return EXIT_OK


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def publish_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="asv.conf.json")


COMMANDS = (
    common.Command("asv-machine", "register this machine with asv (GPU included) and print its "
                   "name", no_arguments, machine_main),
    common.Command("asv-publish", "asv publish, with the dashboard's scripts served locally so "
                   "it works offline", publish_arguments, publish_main),
)
