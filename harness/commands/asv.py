"""`release-bench asv-machine`, `asv-publish` and `asv-vendor`: asv's machine file and its
dashboard."""

from __future__ import annotations

import argparse
import sys

from harness.commands import common
from harness.commands.common import EXIT_FAILED, EXIT_OK


def machine_main(args) -> int:
    from harness.adapters.asv_adapter import register_machine

    print(register_machine())
    return EXIT_OK


def publish_main(args) -> int:
    from harness.presenting.asv_dashboard import publish

    html_dir = publish(args.config)
    print(f"asv dashboard in {html_dir}; view it with: asv preview (or any static web server)")
    return EXIT_OK


def vendor_main(args) -> int:
    from harness.presenting.asv_dashboard import fetch, vendor_cache

    if problems := fetch():
        for line in problems:
            print(f"release-bench: asv-vendor: {line}", file=sys.stderr)
        return EXIT_FAILED
    print(f"asv dashboard scripts: in {vendor_cache()}")
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
    common.Command("asv-vendor", "download the dashboard's scripts into the cache asv-publish "
                   "serves them from (.asv/vendor)", no_arguments, vendor_main),
)
