"""The oldest numpy and scipy this code runs on, checked before anything else runs.

The lent GPU machine's image brings its own numpy and scipy, of versions nobody chose for
this project (docs/guide.md, "GPU"). So harness/ and suites/ keep to what these releases
have, pyproject.toml states the same minimums, and every entry point checks them first
(`release-bench`, pytest through conftest.py, scripts/gpu-check.sh and its dry run, which
run `python -m harness.dependencies`): an older one is refused in one line that names the
package, the version found and the one needed, not met later as an AttributeError mid-run.

    python -m harness.dependencies    # exit 0, or 2 with that one line
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from collections.abc import Callable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Minimum:
    package: str
    version: str
    why: str  # the newest API the code uses, that sets the minimum


MINIMUMS = (
    # np.trapezoid is 2.0's; sampler.py falls back to np.trapz before it. 1.26 is the oldest
    # release with wheels for the image's Python 3.12, and the oldest this code was run with.
    Minimum("numpy", "1.26", "the oldest numpy this code was run with"),
    # scipy.stats.quantile_test (every figure's interval) is 1.12's; bootstrap's `rng` is
    # 1.15's, and stats.py passes `random_state` to an older one.
    Minimum("scipy", "1.12", "scipy.stats.quantile_test"),
)


def problems(version_of: Callable[[str], str] | None = None) -> list[str]:
    """One line per package of MINIMUMS that is missing or older than its minimum
    (`version_of`: how a package's version is read; importlib.metadata's by default)."""
    version_of = version_of or metadata.version
    out = []
    for m in MINIMUMS:
        try:
            found = version_of(m.package)
        except metadata.PackageNotFoundError:
            out.append(f"{m.package} is not installed; this project needs {m.package} >= "
                       f"{m.version} ({m.why})")
            continue
        try:
            old = Version(found) < Version(m.version)
        except InvalidVersion:
            old = False  # a local build's version string: let it run
        if old:
            out.append(f"{m.package} {found} is older than this project needs: {m.package} "
                       f">= {m.version} ({m.why})")
    return out


def check(program: str) -> int | None:
    """At an entry point: None when every minimum is met, else 2 after printing each
    problem as one line, `program: <line>`, on stderr."""
    if found := problems():
        for line in found:
            print(f"{program}: {line}", file=sys.stderr)
        return 2
    return None


if __name__ == "__main__":
    sys.exit(check("dependencies") or 0)
