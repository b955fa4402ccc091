"""`release-bench require-cuda`: exit 2 with one line unless torch sees a CUDA device."""

from __future__ import annotations

import argparse

from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError


def main(args) -> int:
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"no CUDA device visible to torch {torch.__version__} "
                         f"(CUDA build: {torch.version.cuda or 'none'}); run this on a GPU machine")
    print(f"CUDA {torch.version.cuda}: {torch.cuda.get_device_name(0)}")
    return EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


COMMANDS = (common.Command("require-cuda", "exit 2 with one line unless torch sees a CUDA "
                           "device", add_arguments, main),)
