"""One Python environment per torch release, `.envs/torch-<version>/`, for `ab` and `matrix`.

`create` builds a venv from the package registry: the base requirements, this project
(editable), the requested torch and a torchvision that pins it. pip's resolver picks that
torchvision: each torchvision release requires one exact torch, so `torch==V torchvision`
resolves to the one built against V, or fails when the registry has none. The environment
counts as built only once `release-bench-env.json` is written in it, after torch, torchvision
and the harness import there. A failed build removes its folder; a folder without that file
(a build killed half-way) is never listed or used, and the next `create` starts it afresh.

`reuse=VENV` builds an environment that takes torch, torchvision and every other package from
VENV's site-packages (a .pth file) instead of the registry: how the tests exercise this
machinery without downloading a torch build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import records

ROOT = Path(__file__).resolve().parent.parent
# where the environments go: .envs/ in the checkout (RELEASE_BENCH_ENVS moves it, for tests)
ENVS = Path(os.environ.get("RELEASE_BENCH_ENVS", ROOT / ".envs"))
MARKER = "release-bench-env.json"
VERSION = re.compile(r"\d+\.\d+\.\d+(?:\+[a-z0-9]+)?")
PIP_TIMEOUT_S = 3600


class EnvError(Exception):
    """A version that cannot be built or used here; the message is one line."""


@dataclass
class TorchEnv:
    version: str  # as asked for, e.g. "2.13.0"
    path: str  # the environment's folder
    torch: str  # as installed, e.g. "2.13.0+cpu"
    torchvision: str | None  # None: built without it
    cuda: str | None  # the CUDA torch was built with, None for a CPU-only build
    python: str
    built_s: float
    disk_bytes: int
    reuses: str | None = None

    @property
    def python_path(self) -> Path:
        return Path(self.path) / "bin" / "python"


def env_dir(version: str) -> Path:
    return ENVS / f"torch-{version}"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _check_version(version: str) -> None:
    if not VERSION.fullmatch(version):
        raise EnvError(f"{version!r} is not a torch release version (e.g. 2.13.0)")


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _last_line(text: str) -> str:
    """pip's first ERROR line (what went wrong; later ones point to its docs), else the last."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return errors[0] if errors else (lines or ["no output"])[-1]


def registry_versions(package: str = "torch") -> list[str]:
    """The versions of `package` the package registry serves, newest first."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package,
                          "--disable-pip-version-check"], capture_output=True, text=True,
                         timeout=300)
    for line in out.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",")]
    raise EnvError(f"the package registry did not list {package}: "
                   f"{_last_line(out.stderr or out.stdout)}")


def _pip(python: Path, args: list[str], what: str) -> None:
    out = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          *args], capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    if out.returncode != 0:
        raise EnvError(f"{what}: {_last_line(out.stderr or out.stdout)}")


def _import_path(python: Path) -> list[str]:
    """The folders of sys.path in that Python beyond its standard library."""
    out = subprocess.run([str(python), "-c", "import json, sys, sysconfig; std = {sysconfig."
                          "get_paths()[k] for k in ('stdlib', 'platstdlib')}; print(json.dumps("
                          "[p for p in sys.path if p and p not in std and 'lib-dynload' not in p"
                          " and not p.endswith('.zip')]))"],
                         capture_output=True, text=True, timeout=60, check=True, cwd="/")
    return json.loads(out.stdout)


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, timeout=60, check=True)
    return Path(out.stdout.strip())


def probe(python: Path, torchvision: bool = True) -> dict[str, str | None]:
    """torch's, torchvision's and CUDA's versions in that environment, with the harness
    imported beside them; EnvError with the import's last line when they do not import."""
    vision = "import torchvision; " if torchvision else ""
    code = (f"import harness.cli, torch, json, platform; {vision}"
            "print(json.dumps({'torch': torch.__version__, 'torchvision': "
            + ("torchvision.__version__" if torchvision else "None")
            + ", 'cuda': torch.version.cuda, 'python': platform.python_version()}))")
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    if out.returncode != 0:
        raise EnvError(f"torch {'and torchvision ' if torchvision else ''}do not import there: "
                       f"{_last_line(out.stderr)}"
                       + (" (--without-torchvision builds it without torchvision; the cases "
                          "that need it are then skipped)" if torchvision else ""))
    return json.loads(out.stdout.strip().splitlines()[-1])


def create(version: str, *, reuse: Path | None = None, torchvision: bool = True,
           log: Callable[[str], None] = lambda s: None) -> TorchEnv:
    """Build `.envs/torch-<version>/`; its record, or EnvError (nothing is left behind).
    `torchvision=False` leaves torchvision out (for a torch whose registry torchvision does
    not import beside it); the cases that need it then skip."""
    _check_version(version)
    dest = env_dir(version)
    if (dest / MARKER).exists():
        raise EnvError(f"{_shown(dest)} exists already (release-bench env remove "
                       f"{version} first)")
    if reuse is None and version not in (served := registry_versions()):
        raise EnvError(f"torch {version} is not on the package registry (it serves "
                       f"{', '.join(served[:8])}, ...)")
    if dest.exists():  # half-built by a command that was killed: never used, start afresh
        shutil.rmtree(dest)
    t0 = time.perf_counter()
    try:
        log(f"creating {_shown(dest)}")
        subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True,
                       capture_output=True, timeout=300)
        python = dest / "bin" / "python"
        if reuse is not None:
            # the other environment's import path, in its order (its own .pth files included)
            (_site_packages(python) / "release_bench_reuse.pth").write_text(
                "".join(f"{p}\n" for p in _import_path(_reused_python(reuse))))
        else:
            log(f"installing torch=={version}"
                + (" and the torchvision that pins it" if torchvision else ""))
            _pip(python, [f"torch=={version}"] + (["torchvision"] if torchvision else []),
                 f"torch {version}" + (" and a matching torchvision" if torchvision else "")
                 + " cannot be installed")
            log("installing the base requirements")
            _pip(python, ["-r", str(ROOT / "requirements-base.txt")],
                 "the base requirements cannot be installed")
        _pip(python, ["--no-deps", "-e", str(ROOT)],
             "the project cannot be installed")
        found = probe(python, torchvision)
        if found["torch"].split("+")[0] != version.split("+")[0]:
            raise EnvError(f"asked for torch {version}, the environment has {found['torch']}")
        env = TorchEnv(version=version, path=str(dest), torch=found["torch"],
                       torchvision=found["torchvision"], cuda=found["cuda"],
                       python=found["python"], built_s=round(time.perf_counter() - t0, 1),
                       disk_bytes=_disk_bytes(dest),
                       reuses=None if reuse is None else str(reuse))
        records.write_json_atomic(dest / MARKER, asdict(env))
        return env
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _reused_python(spec: Path) -> Path:
    from harness.campaign import CampaignError, python_of

    try:
        return python_of(str(spec))
    except CampaignError as e:
        raise EnvError(str(e)) from e


def _read(marker: Path) -> TorchEnv:
    return TorchEnv(**json.loads(marker.read_text()))


def built() -> list[TorchEnv]:
    """The environments built completely, oldest torch first."""
    found = [_read(m) for m in ENVS.glob(f"torch-*/{MARKER}")] if ENVS.exists() else []
    return sorted(found, key=lambda e: release_key(e.version))


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("+")[0].split("."))


def get(version: str) -> TorchEnv:
    _check_version(version)
    marker = env_dir(version) / MARKER
    if not marker.exists():
        raise EnvError(f"no environment for torch {version} (release-bench env create "
                       f"{version})")
    return _read(marker)


def remove(version: str) -> None:
    """Remove the environment, built or half-built."""
    _check_version(version)
    dest = env_dir(version)
    if not dest.exists():
        raise EnvError(f"no environment for torch {version}")
    shutil.rmtree(dest)
