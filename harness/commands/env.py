"""`release-bench env create|list|remove`: one Python environment per torch release, in
.envs/ (`harness.envs`)."""

from __future__ import annotations

import argparse
import sys

from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="env_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="build .envs/torch-VERSION from the registry")
    create.add_argument("version", metavar="VERSION", help="a torch release, e.g. 2.13.0")
    create.add_argument("--reuse", metavar="VENV",
                        help="take torch and every other package from VENV instead of the "
                             "registry (no download; for tests)")
    create.add_argument("--without-torchvision", action="store_true",
                        help="leave torchvision out (a torch whose registry torchvision does "
                             "not import beside it); the cases that need it skip")
    actions.add_parser("list", help="the environments built, with their size")
    remove = actions.add_parser("remove", help="remove .envs/torch-VERSION")
    remove.add_argument("version", metavar="VERSION")


def main(args) -> int:
    from pathlib import Path

    from harness import envs

    try:
        if args.env_command == "create":
            e = envs.create(args.version, reuse=Path(args.reuse) if args.reuse else None,
                            torchvision=not args.without_torchvision,
                            log=lambda s: print(s, file=sys.stderr, flush=True))
            print(f"torch-{e.version}: torch {e.torch}, torchvision {e.torchvision or 'none'}, "
                  f"CUDA {e.cuda or 'none (CPU-only build)'}, Python {e.python}; built in "
                  f"{e.built_s:.0f} s, {e.disk_bytes / 2**30:.2f} GiB")
        elif args.env_command == "list":
            for e in envs.built():
                print(f"{e.version:10s} torch {e.torch:14s} torchvision "
                      f"{e.torchvision or 'none':10s} {e.disk_bytes / 2**30:5.2f} GiB"
                      + (f"  (reuses {e.reuses})" if e.reuses else ""))
        else:
            envs.remove(args.version)
            print(f"removed torch-{args.version}")
    except envs.EnvError as e:
        raise UsageError(f"env {args.env_command}: {e}") from e
    return EXIT_OK


COMMANDS = (common.Command("env", "one Python environment per torch release, in .envs/",
                           add_arguments, main),)
