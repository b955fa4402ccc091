"""`release-bench env create|list|remove`: one Python environment per torch release, in
.envs/ (`harness.releases.envs`)."""

from __future__ import annotations

import argparse
import sys

from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="env_command", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="build .envs/torch-VERSION from the registry")
    create.add_argument("version", metavar="VERSION",
                        help="a torch release, e.g. 2.13.0, or a range of them, FIRST..LAST "
                             "(every release the registry serves between them, both included)")
    create.add_argument("--reuse", metavar="VENV",
                        help="take torch and every other package from VENV instead of the "
                             "registry (no download; for tests)")
    create.add_argument("--without-torchvision", action="store_true",
                        help="leave torchvision out (a torch whose registry torchvision does "
                             "not import beside it); the cases that need it skip")
    create.add_argument("--registry-builds", action="store_true",
                        help="take torch from the package indexes only, not from pip's "
                             "find-links folders: a local file of a release (a CPU-only build "
                             "beside CUDA builds, say) then does not stand in for the "
                             "registry's own build, and neighbouring releases compare like "
                             "with like")
    actions.add_parser("list", help="the environments built, with their size")
    remove = actions.add_parser("remove", help="remove .envs/torch-VERSION")
    remove.add_argument("version", metavar="VERSION")


def main(args) -> int:
    from pathlib import Path

    from harness.releases import envs

    try:
        if args.env_command == "create":
            versions = ([args.version] if args.reuse
                        else envs.release_range(args.version))
            added = 0
            for version in versions:
                if len(versions) > 1 and (envs.env_dir(version) / envs.MARKER).exists():
                    print(f"torch-{version}: built already")
                    continue
                e = envs.create(version, reuse=Path(args.reuse) if args.reuse else None,
                                torchvision=not args.without_torchvision,
                                local_files=not args.registry_builds,
                                log=lambda s: print(s, file=sys.stderr, flush=True))
                added += e.added_bytes or 0
                print(f"torch-{e.version}: torch {e.torch}, torchvision "
                      f"{e.torchvision or 'none'}, CUDA {e.cuda or 'none (CPU-only build)'}, "
                      f"Python {e.python}; built in {e.built_s:.0f} s, "
                      f"{e.disk_bytes / 2**30:.2f} GiB of files"
                      + (f", {e.added_bytes / 2**30:.2f} GiB added to the disk"
                         if e.added_bytes is not None and not e.reuses else ""), flush=True)
            if len(versions) > 1:
                print(f"{len(versions)} releases; {added / 2**30:.2f} GiB added to the disk in "
                      "all (files shared between environments counted once)")
        elif args.env_command == "list":
            for e in envs.built():
                print(f"{e.version:10s} torch {e.torch:14s} torchvision "
                      f"{e.torchvision or 'none':10s} {e.disk_bytes / 2**30:5.2f} GiB"
                      + (f"  (reuses {e.reuses})" if e.reuses else ""))
            if every := envs.built():
                print(f"on disk: {envs.disk_in_use(envs.ENVS) / 2**30:.2f} GiB for "
                      f"{len(every)} environments (files shared between them counted once)")
        else:
            envs.remove(args.version)
            print(f"removed torch-{args.version}")
    except envs.EnvError as e:
        raise UsageError(f"env {args.env_command}: {e}") from e
    return EXIT_OK


COMMANDS = (common.Command("env", "one Python environment per torch release, in .envs/",
                           add_arguments, main),)
