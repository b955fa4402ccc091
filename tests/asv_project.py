"""A throwaway asv project in a git repository of its own, for tests of how asv behaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()


def make(root: Path, name: str, files: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """`root/proj`: asv.conf.json (environment "existing"), benchmarks/ holding `files`, a
    git repository and an asv machine called `name`; returns it and the environment (HOME
    in `root`, so that asv's machine file stays there)."""
    repo = root / "proj"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": name, "repo": ".", "branches": ["main"],
        "environment_type": "existing", "benchmark_dir": "benchmarks",
        "results_dir": "results", "html_dir": "html"}))
    (repo / "benchmarks" / "__init__.py").write_text("")
    for file, text in files.items():
        (repo / "benchmarks" / file).write_text(text)
    env = {**os.environ, "HOME": str(root)}
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    out = asv(repo, env, "machine", "--yes", "--machine", name)
    assert out.returncode == 0, out.stderr
    return repo, env


def asv(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BIN / "asv", *args], cwd=repo, capture_output=True, text=True,
                          env=env, timeout=900)
