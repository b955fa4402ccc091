#!/usr/bin/env python3
"""Run a Python module as the lent GPU machine's image would: whatever this project installs
that the image lacks and no wheel of .whl/ brings cannot be imported.

    scripts/gpu-image.py harness.dependencies            (what gpu-check.sh --dry-run does:
    scripts/gpu-image.py pytest -m gpu --collect-only      the versions of numpy and scipy,
    scripts/gpu-image.py harness.cli run --device cuda --dry-run     then the selection)
    scripts/gpu-image.py --blocked                        the distributions it keeps out

The image: Python 3.12 with the distributions of IMAGE (and what they require). The wheels:
requirements-gpu-check.txt (scripts/gpu-wheels.sh). Kept out: every other distribution of
requirements-base.txt and requirements.txt. An import of one of those raises
ModuleNotFoundError naming it, so a dry run here fails where the GPU run would. The image's
numpy and scipy are whatever it holds: `harness.dependencies` refuses one older than the code
needs (the dry run's first step), as the GPU run's first step does.
"""

from __future__ import annotations

import importlib.metadata as metadata
import runpy
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
# what the lent machine's image holds besides the standard library (docs/guide.md, GPU)
IMAGE = ("torch", "torchvision", "pytest", "pytest-benchmark", "nvidia-ml-py", "scipy",
         "jinja2", "psutil", "packaging")
WHEELS = ROOT / "requirements-gpu-check.txt"
INSTALLED = (ROOT / "requirements-base.txt", ROOT / "requirements.txt")


def requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            names.add(canonicalize_name(Requirement(line).name))
        except InvalidRequirement as e:
            raise SystemExit(f"gpu-image: {path.name}: {e}") from e
    return names


def with_requirements(names: set[str]) -> set[str]:
    """`names` and every distribution they require, as installed here."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def blocked_distributions() -> set[str]:
    have = with_requirements({canonicalize_name(n) for n in IMAGE} | requirement_names(WHEELS))
    return set().union(*(requirement_names(p) for p in INSTALLED)) - have


def blocked_modules(dists: set[str]) -> dict[str, str]:
    """Top-level module -> the distribution that provides it, for `dists`."""
    return {module: dist for module, owners in metadata.packages_distributions().items()
            for dist in map(canonicalize_name, owners) if dist in dists}


class NotOnTheImage:
    """A meta path finder, first in line: a blocked module is not found."""

    def __init__(self, modules: dict[str, str]):
        self.modules = modules

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in self.modules:
            raise ModuleNotFoundError(
                f"No module named {top!r}: {self.modules[top]} is not on the GPU machine's "
                f"image and no wheel of {WHEELS.name} brings it", name=top)
        return None


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: scripts/gpu-image.py MODULE [ARGS...] | --blocked", file=sys.stderr)
        return 2
    dists = blocked_distributions()
    if argv[0] == "--blocked":
        print("\n".join(sorted(dists)))
        return 0
    sys.meta_path.insert(0, NotOnTheImage(blocked_modules(dists)))
    sys.argv = argv
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
