"""The builds ledger: asv's axis of torch builds.

asv files results under a commit of the repository its configuration names, and draws each
figure over that repository's commits. What changes from one night to the next is the torch
build, not this project, so the nightly keeps a small git repository of its own: one commit
per torch build, dated by the build, its message the build's name, torch's version and
`torch.version.git_version`, its one file the build as JSON. asv's results of a night are
filed under its build's commit (`--set-commit-hash` with the environment "existing"), so
`asv publish` draws each figure over builds, its step detection names the build a change
came with, and `asv compare` runs between two builds. The same build on a later night finds
its commit again (its results are filed there again); a build is never committed twice.

A build's date, in order of preference: the date a nightly build's version carries
(`2.15.0.dev20261205`); the time the registry received the wheel (its simple index's
`upload-time`, PEP 700), asked once per build; else the night the ledger first saw it,
which the build's record says.
"""

from __future__ import annotations

import enum
import json
import os
import re
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import records
from harness.releases import envs

BRANCH = "main"
BUILD_FILE = "build.json"
INDEX_TIMEOUT_S = 30
DEFAULT_INDEX = "https://pypi.org/simple"
_DEV_DATE = re.compile(r"\.dev(\d{4})(\d{2})(\d{2})")


class LedgerError(Exception):
    """A ledger that cannot be read or written, or a build that cannot be named; one line."""


class DateSource(enum.Enum):
    VERSION = "the date in the build's version"
    REGISTRY = "the wheel's upload to the package registry"
    FIRST_SEEN = "the night the ledger first saw the build"


@dataclass(frozen=True)
class Build:
    """A torch build as the ledger knows it: `label` is the night's name for it (the release
    an environment was built for, or the environment's folder name)."""

    label: str
    torch: str  # torch.__version__, local version included (2.10.0+cu128)
    git_version: str  # torch.version.git_version
    date: str  # ISO 8601, UTC
    date_source: DateSource

    def __post_init__(self) -> None:
        if not self.label or "\n" in self.label or not self.torch:
            raise LedgerError(f"not a build: label {self.label!r}, torch {self.torch!r}")

    @property
    def subject(self) -> str:
        """The first line of its commit message: what finds the commit again."""
        return f"{self.label}: torch {self.torch} ({self.git_version})"

    @property
    def tag(self) -> str:
        """A git tag naming it (asv's graphs can mark tagged commits)."""
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.label).strip(".") or "build"

    def to_json(self) -> dict:
        return {**asdict(self), "date_source": self.date_source.name.lower()}

    @classmethod
    def from_json(cls, doc: dict) -> Build:
        return cls(doc["label"], doc["torch"], doc["git_version"], doc["date"],
                   DateSource[doc["date_source"].upper()])


def torch_identity(python: Path) -> tuple[str, str]:
    """torch's version and git_version in that environment."""
    try:
        out = subprocess.run([str(python), "-c", "import json, torch; print(json.dumps("
                              "[torch.__version__, torch.version.git_version]))"],
                             capture_output=True, text=True, timeout=300)
    except OSError as e:
        raise LedgerError(f"{python}: cannot be run ({e.strerror})") from e
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise LedgerError(f"{python}: torch does not import ({last})")
    version, git_version = json.loads(out.stdout.strip().splitlines()[-1])
    return version, git_version


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def date_in_version(version: str) -> str | None:
    m = _DEV_DATE.search(version)
    return f"{m[1]}-{m[2]}-{m[3]}T00:00:00Z" if m else None


def upload_time(version: str, index_page: dict) -> str | None:
    """When the registry received the earliest Linux x86_64 wheel of torch `version` (its
    public part: PyPI's files carry no local version), from a PEP 691 index page."""
    public = version.split("+")[0]
    times = [f["upload-time"] for f in index_page.get("files", [])
             if f.get("filename", "").startswith(f"torch-{public}-")
             and "linux" in f["filename"] and "x86_64" in f["filename"]
             and f.get("upload-time")]
    if not times:
        return None
    return min(times)[:19] + "Z"


def registry_page(index: str) -> dict:
    """torch's page of a package index, as JSON (PEP 691)."""
    req = urllib.request.Request(f"{index.rstrip('/')}/torch/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=INDEX_TIMEOUT_S) as r:
        return json.loads(r.read())


def build_date(version: str, ask_registry: bool) -> tuple[str, DateSource]:
    if found := date_in_version(version):
        return found, DateSource.VERSION
    if ask_registry:
        cfg = envs.pip_config()
        for index in [*cfg.get("index-url", [DEFAULT_INDEX])[:1], *cfg.get("extra-index-url", [])]:
            if not index.startswith("http"):
                continue  # a local folder's index carries no upload times
            try:
                if found := upload_time(version, registry_page(index)):
                    return found, DateSource.REGISTRY
            except (OSError, ValueError):
                continue  # offline, or not a JSON index: the next, or first seen
    return _iso(time.time()), DateSource.FIRST_SEEN


class Ledger:
    """The git repository at `path`: one commit per build on branch main."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def _git(self, *args: str, env: dict | None = None) -> str:
        out = subprocess.run(["git", *args], cwd=self.path, capture_output=True, text=True,
                             env=os.environ | (env or {}), timeout=60)
        if out.returncode != 0:
            raise LedgerError(f"ledger {self.path}: git {args[0]}: "
                              f"{(out.stderr.strip().splitlines() or ['failed'])[-1]}")
        return out.stdout.strip()

    def ensure(self) -> Ledger:
        if not (self.path / ".git").exists():
            self.path.mkdir(parents=True, exist_ok=True)
            self._git("init", "-q", "-b", BRANCH)
            self._git("config", "user.name", "release-bench nightly")
            self._git("config", "user.email", "nightly@release-bench.invalid")
            self._git("config", "commit.gpgsign", "false")
        return self

    def builds(self) -> list[tuple[str, Build]]:
        """Every build committed, oldest first, with its commit."""
        if not (self.path / ".git").exists():
            return []
        try:
            self._git("rev-parse", "--verify", "-q", BRANCH)
        except LedgerError:
            return []  # no commit yet
        out = []
        for commit in self._git("rev-list", "--reverse", BRANCH).splitlines():
            doc = json.loads(self._git("show", f"{commit}:{BUILD_FILE}"))
            out.append((commit, Build.from_json(doc)))
        return out

    def find(self, label: str, torch: str, git_version: str) -> tuple[str, Build] | None:
        for commit, b in self.builds():
            if (b.label, b.torch, b.git_version) == (label, torch, git_version):
                return commit, b
        return None

    def commit(self, build: Build) -> str:
        """The build's commit: found, or made (dated by the build, tagged with its label)."""
        if found := self.find(build.label, build.torch, build.git_version):
            return found[0]
        self.ensure()
        records.write_json_atomic(self.path / BUILD_FILE, build.to_json())
        self._git("add", BUILD_FILE)
        dated = {"GIT_AUTHOR_DATE": build.date, "GIT_COMMITTER_DATE": build.date}
        self._git("commit", "-q", "--allow-empty", "-m", build.subject, "-m",
                  f"torch {build.torch}\ngit_version {build.git_version}\n"
                  f"dated by {build.date_source.value}", env=dated)
        commit = self._git("rev-parse", "HEAD")
        self._git("tag", "-f", build.tag, commit)
        return commit


def identify(label: str, python: Path, ledger: Ledger, ask_registry: bool) -> tuple[str, Build]:
    """The build in that environment and its commit in the ledger (made where it has none:
    the registry is asked for its date only then)."""
    version, git_version = torch_identity(python)
    if found := ledger.find(label, version, git_version):
        return found
    date, source = build_date(version, ask_registry)
    build = Build(label, version, git_version, date, source)
    return ledger.commit(build), build


def asv_config(base: Path, ledger: Ledger, folder: Path) -> Path:
    """An asv configuration for the nightly: the project's own (`base`), with the ledger as
    its repository and the nightly's folders for results and pages (results filed under
    ledger commits must not mix with those filed under this project's commits)."""
    try:
        conf = json.loads(re.sub(r"^\s*//.*$", "", base.read_text(), flags=re.M))
    except (OSError, ValueError) as e:
        raise LedgerError(f"{base}: not an asv configuration ({e})") from e
    root = base.resolve().parent
    folder = folder.resolve()
    conf.update({
        "project": f"{conf.get('project', 'project')}: torch builds",
        "repo": str(ledger.path.resolve()), "branches": [BRANCH],
        "environment_type": "existing", "dvcs": "git",
        "benchmark_dir": str(root / conf.get("benchmark_dir", "benchmarks")),
        "env_dir": str(folder / "asv" / "env"),
        "results_dir": str(folder / "asv" / "results"),
        "html_dir": str(folder / "asv" / "html"),
    })
    return records.write_json_atomic(folder / "asv.conf.json", conf)
