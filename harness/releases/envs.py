"""One Python environment per torch release, `.envs/torch-<version>/`, for `ab`, `matrix`,
`history` and `bisect`.

`create` builds a venv from the package registry with uv: the base requirements, this project
(editable), the requested torch and a torchvision that pins it, in one resolution. Each
torchvision release requires one exact torch, so `torch==V torchvision` resolves to the one
built against V; where the registry has none for this Python (torch 1.13 on Python 3.11), the
environment is built without it and says so. A torch older than 2.3 was built against NumPy 1,
so its environment gets `numpy<2` in place of the base requirements' pin.

uv rather than pip: uv's cache hardlinks each file into every environment that uses it, so the
CUDA libraries shared by neighbouring releases are on disk once (pip copies them: 13 GB for
three releases). uv does not read pip's configuration, so `pip_options` passes it on: the
constraints (a cap on torch is honoured), the indexes and the find-links folders.

The environment counts as built only once `release-bench-env.json` is written in it, after
torch (and torchvision) and the harness import there. A failed build removes its folder; a
folder without that file (a build killed half-way) is never listed or used, and the next
`create` starts it afresh.

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
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from harness import records

ROOT = Path(__file__).resolve().parents[2]
# where the environments go: .envs/ in the checkout (RELEASE_BENCH_ENVS moves it, for tests)
ENVS = Path(os.environ.get("RELEASE_BENCH_ENVS", ROOT / ".envs"))
MARKER = "release-bench-env.json"
VERSION = re.compile(r"\d+\.\d+\.\d+(?:\+[a-z0-9]+)?")
INSTALL_TIMEOUT_S = 3600
# torch releases before this one were built against NumPy 1 and fail on NumPy 2's arrays
NUMPY_2_FROM = Version("2.3.0")
# torch's C++-extension module, which the harness imports, imports setuptools, which torch
# declares a requirement of only on Python 3.12 and later; before this release it also takes
# `packaging` from setuptools' pkg_resources, which setuptools 70 dropped (and recent releases
# of torch require a newer setuptools, so the cap is only for the old ones)
PKG_RESOURCES_UNTIL = Version("2.2.0")


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
    disk_bytes: int  # the files in the folder, each counted whole (shared or not)
    reuses: str | None = None
    # the disk the build added: blocks of files new to the environments and uv's cache
    added_bytes: int | None = None
    # what the build is, beyond its version (`build_of`): two builds of one release differ
    build: dict = field(default_factory=dict)
    without_torchvision_why: str | None = None

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


def disk_in_use(*folders: Path) -> int:
    """Bytes on disk under these folders, a file hardlinked in several places counted once."""
    seen, total = set(), 0
    for folder in folders:
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def _last_line(text: str) -> str:
    """The installer's first error line (what went wrong; later ones explain), else the
    last."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "error:", "  × ", "× "))]
    return errors[0] if errors else (lines or ["no output"])[-1]


# ---------------------------------------------------------------- pip's configuration, for uv

def pip_config() -> dict[str, list[str]]:
    """pip's settings that choose packages (constraints, indexes, find-links), from its
    configuration files and PIP_* variables, as `pip config list` shows them."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                         text=True, timeout=60)
    found: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in ("constraint", "index-url", "extra-index-url", "find-links", "no-index"):
            values = value.strip().strip("'\"").split()
            found[name] = list(dict.fromkeys(found.get(name, []) + values))
    return found


def uv_options(local_files: bool = True) -> list[str]:
    """pip's configuration as uv's options. uv prefers the first index that has a package;
    pip takes the best version from all of them, and so does this. `local_files=False` leaves
    out the find-links folders: a local file of a release (a CPU-only build, say) is then
    not preferred to the registry's own build."""
    cfg, out = pip_config(), ["--index-strategy", "unsafe-best-match"]
    for c in cfg.get("constraint", []):
        out += ["--constraint", c]
    for url in cfg.get("index-url", [])[:1]:
        out += ["--index-url", url]
    for url in cfg.get("extra-index-url", []):
        out += ["--extra-index-url", url]
    if local_files:
        for link in cfg.get("find-links", []):
            out += ["--find-links", link]
    return out


def _constraint_on(package: str) -> Requirement | None:
    """The constraint pip's configuration puts on `package` (combined), or None."""
    specs = []
    for path in pip_config().get("constraint", []):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                req = Requirement(line.split("#", 1)[0].strip())
            except InvalidRequirement:
                continue
            if req.name.lower() == package:
                specs.append(str(req.specifier))
    return Requirement(f"{package}{','.join(s for s in specs if s)}") if specs else None


def registry_versions(package: str = "torch") -> list[str]:
    """The releases of `package` the package registry serves and pip's constraints allow,
    newest first; local builds (2.13.0+cpu) and pre-releases left out."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package,
                          "--disable-pip-version-check"], capture_output=True, text=True,
                         timeout=300)
    for line in out.stdout.splitlines():
        if line.startswith("Available versions:"):
            listed = [v.strip() for v in line.split(":", 1)[1].split(",")]
            break
    else:
        raise EnvError(f"the package registry did not list {package}: "
                       f"{_last_line(out.stderr or out.stdout)}")
    cap = _constraint_on(package)
    versions = []
    for v in listed:
        try:
            parsed = Version(v)
        except InvalidVersion:
            continue
        if parsed.local or parsed.is_prerelease or (cap and parsed not in cap.specifier):
            continue
        versions.append(v)
    return versions


def release_range(spec: str, available: list[str] | None = None) -> list[str]:
    """The releases a spec names, oldest first: `2.0.0..2.14.1` (both ends included, every
    release between them the registry serves), or one version."""
    if ".." not in spec:
        _check_version(spec)
        return [spec]
    first, _, last = spec.partition("..")
    for v in (first, last):
        _check_version(v)
    if release_key(first) > release_key(last):
        raise EnvError(f"{spec}: the first release is newer than the last")
    available = registry_versions() if available is None else available
    inside = sorted((v for v in available
                     if release_key(first) <= release_key(v) <= release_key(last)),
                    key=release_key)
    for v in (first, last):
        if v not in inside:
            raise EnvError(f"torch {v} is not on the package registry (it serves "
                           f"{', '.join(available[:8])}, ...)")
    return inside


# ---------------------------------------------------------------- building

def uv_bin() -> str:
    """uv's executable: the one installed beside this Python (requirements.txt), else PATH."""
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise EnvError("uv is not installed (pip install uv)") from None
        return found


def uv_cache_dir() -> Path:
    out = subprocess.run([uv_bin(), "cache", "dir"], capture_output=True, text=True, timeout=60)
    return Path(out.stdout.strip())


class InstallError(EnvError):
    """An install that failed; `output` is all the installer said."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output


def _uv_install(python: Path, args: list[str], what: str) -> None:
    out = subprocess.run([uv_bin(), "pip", "install", "-q", "--python", str(python), *args],
                         capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if out.returncode != 0:
        text = out.stderr or out.stdout
        raise InstallError(f"{what}: {_last_line(text)}", text)


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


# what `build_of` keeps of torch.__config__.show()'s "Build settings" line (the compiler's
# version is its own line; its path says nothing more)
BUILD_SETTINGS = ("BLAS_INFO", "CUDA_VERSION", "CUDNN_VERSION", "USE_CUDA", "USE_MKL",
                  "USE_MKLDNN", "USE_OPENMP")


def build_of(version: str, cuda: str | None, config: str) -> dict:
    """What a build is beyond its release: the local version (+cpu, +cu130), CUDA, the
    compiler, the CPU capability and the math libraries, from torch.__config__.show()."""
    build: dict = {"local": version.partition("+")[2] or None, "cuda": cuda}
    if m := re.search(r"^\s*-\s*(GCC [\d.]+|clang [\d.]+)", config, re.M | re.I):
        build["compiler"] = m.group(1)
    if m := re.search(r"CPU capability usage:\s*(\S+)", config):
        build["cpu_capability"] = m.group(1)
    if m := re.search(r"Math Kernel Library Version ([\d.]+)", config):
        build["mkl"] = m.group(1)
    if m := re.search(r"Build settings:\s*(.*)", config):
        settings = dict(kv.strip().split("=", 1) for kv in m.group(1).split(", ") if "=" in kv)
        build.update({k.lower(): settings[k] for k in BUILD_SETTINGS if k in settings})
    return build


def same_build(a: dict, b: dict) -> list[str]:
    """What differs between two builds, beyond what changes with every release (the
    compiler's and libraries' versions move too); [] when they are alike."""
    keys = ("local", "cuda", "use_cuda", "blas_info", "use_mkldnn")
    return [f"{k} {a.get(k)} -> {b.get(k)}" for k in keys
            if _cmake_value(a.get(k)) != _cmake_value(b.get(k))]


# CMake's spellings of a switch: torch 2.13 prints USE_CUDA=1 where 2.12 printed USE_CUDA=ON,
# one build setting in two spellings
_CMAKE_TRUE, _CMAKE_FALSE = {"1", "ON", "YES", "TRUE", "Y"}, {"0", "OFF", "NO", "FALSE", "N"}


def _cmake_value(value):
    if isinstance(value, str) and value.upper() in _CMAKE_TRUE:
        return True
    if isinstance(value, str) and value.upper() in _CMAKE_FALSE:
        return False
    return value


def probe(python: Path, torchvision: bool = True) -> dict:
    """torch's, torchvision's and CUDA's versions and the build in that environment, with the
    harness imported beside them; EnvError with the import's last line when they do not
    import."""
    vision = "import torchvision; " if torchvision else ""
    code = (f"import harness.cli, harness.running.timing, torch, json, platform; {vision}"
            "print(json.dumps({'torch': torch.__version__, 'torchvision': "
            + ("torchvision.__version__" if torchvision else "None")
            + ", 'cuda': torch.version.cuda, 'python': platform.python_version(), "
            "'config': torch.__config__.show()}))")
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300)
    if out.returncode != 0:
        raise EnvError(f"torch {'and torchvision ' if torchvision else ''}do not import there: "
                       f"{_last_line(out.stderr)}"
                       + (" (--without-torchvision builds it without torchvision; the cases "
                          "that need it are then skipped)" if torchvision else ""))
    return json.loads(out.stdout.strip().splitlines()[-1])


def _install_release(python: Path, version: str, torchvision: bool, local_files: bool,
                     log: Callable[[str], None]) -> str | None:
    """torch==version, a torchvision that pins it, and the base requirements, in one
    resolution; without torchvision where the registry has none for this torch and Python.
    Returns why torchvision was left out, or None."""
    options = uv_options(local_files)
    with tempfile.TemporaryDirectory() as tmp:
        release = Version(version.split("+")[0])
        if release < NUMPY_2_FROM:
            override = Path(tmp) / "overrides.txt"
            override.write_text("numpy<2\n")
            options += ["--override", str(override)]
        base = ["-r", str(ROOT / "requirements-base.txt"),
                "setuptools<70" if release < PKG_RESOURCES_UNTIL else "setuptools"]
        if torchvision:
            log(f"installing torch=={version}, the torchvision that pins it and the base "
                "requirements (uv)")
            try:
                _uv_install(python, [*options, f"torch=={version}", "torchvision", *base],
                            f"torch {version} and a matching torchvision cannot be installed")
                return None
            except InstallError as e:
                # the resolver's explanation names torchvision when it is the one missing
                if "torchvision" not in e.output:
                    raise
                why = f"the registry has no torchvision for torch {version} and this Python"
                log(why + "; building without it")
        else:
            why = "--without-torchvision"
        log(f"installing torch=={version} and the base requirements (uv)")
        _uv_install(python, [*options, f"torch=={version}", *base],
                    f"torch {version} cannot be installed")
        return why


def create(version: str, *, reuse: Path | None = None, torchvision: bool = True,
           local_files: bool = True, log: Callable[[str], None] = lambda s: None) -> TorchEnv:
    """Build `.envs/torch-<version>/`; its record, or EnvError (nothing is left behind).
    `torchvision=False` leaves torchvision out (for a torch whose registry torchvision does
    not import beside it); the cases that need it then skip. `local_files=False` takes torch
    from the indexes only (`uv_options`)."""
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
    cache = None if reuse is not None else uv_cache_dir()
    before = disk_in_use(ENVS, *([cache] if cache else []))
    t0 = time.perf_counter()
    try:
        log(f"creating {_shown(dest)}")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True,
                       capture_output=True, timeout=300)
        python = dest / "bin" / "python"
        without_why = None if torchvision else "--without-torchvision"
        if reuse is not None:
            # the other environment's import path, in its order (its own .pth files included)
            (_site_packages(python) / "release_bench_reuse.pth").write_text(
                "".join(f"{p}\n" for p in _import_path(_reused_python(reuse))))
        else:
            without_why = _install_release(python, version, torchvision, local_files, log)
            torchvision = without_why is None
        _uv_install(python, [*uv_options(), "--no-deps", "-e", str(ROOT)],
                    "the project cannot be installed")
        found = probe(python, torchvision)
        if found["torch"].split("+")[0] != version.split("+")[0]:
            raise EnvError(f"asked for torch {version}, the environment has {found['torch']}")
        env = TorchEnv(version=version, path=str(dest), torch=found["torch"],
                       torchvision=found["torchvision"], cuda=found["cuda"],
                       python=found["python"], built_s=round(time.perf_counter() - t0, 1),
                       disk_bytes=_disk_bytes(dest),
                       reuses=None if reuse is None else str(reuse),
                       added_bytes=disk_in_use(ENVS, *([cache] if cache else [])) - before,
                       build=build_of(found["torch"], found["cuda"], found["config"]),
                       without_torchvision_why=without_why)
        records.write_json_atomic(dest / MARKER, asdict(env))
        return env
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _reused_python(spec: Path) -> Path:
    from harness.comparing.campaign import CampaignError, python_of

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


def get_or_create(version: str, build: bool, local_files: bool,
                  log: Callable[[str], None]) -> tuple[TorchEnv, bool]:
    """The environment of `version`, built first where there is none and `build` allows;
    with whether it was built now."""
    try:
        return get(version), False
    except EnvError:
        if not build:
            raise
    log(f"torch {version}: building its environment")
    return create(version, local_files=local_files, log=log), True


def remove(version: str) -> None:
    """Remove the environment, built or half-built."""
    _check_version(version)
    dest = env_dir(version)
    if not dest.exists():
        raise EnvError(f"no environment for torch {version}")
    shutil.rmtree(dest)


def forget_cached(packages: tuple[str, ...]) -> None:
    """Drop `packages` from uv's cache: the disk they hold is freed once no environment
    hardlinks their files any longer (the shared libraries beside them stay cached)."""
    subprocess.run([uv_bin(), "cache", "clean", *packages], capture_output=True, timeout=600)
