"""`make test` runs two test processes (pytest-xdist); a test that must not share the machine
runs alone (conftest.py). Here a real `pytest -n 2` of tests that log when they start and end:
the `alone` and `slow` tests overlap no other test, and the others do run side by side."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LOGGING = '''
import os, time
import pytest

def span(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.environ["SPANS"], "a") as f:
        f.write(f"{name} {start} {time.monotonic()}\\n")
'''


@pytest.mark.slow
def test_an_alone_test_overlaps_no_other_and_the_others_run_side_by_side(tmp_path):
    (tmp_path / "spans.py").write_text(LOGGING)
    (tmp_path / "test_first.py").write_text(
        "import pytest\nfrom spans import span\n"
        "def test_shared_1(): span('shared_1', 1.0)\n"
        "@pytest.mark.alone\ndef test_alone(): span('alone', 1.5)\n"
        "def test_shared_2(): span('shared_2', 1.0)\n")
    (tmp_path / "test_second.py").write_text(
        "import pytest\nfrom spans import span\n"
        + "".join(f"def test_beside_{i}(): span('beside_{i}', 0.5)\n" for i in range(6))
        + "@pytest.mark.slow\ndef test_slow(): span('slow', 1.0)\n")
    spans_file, temp = tmp_path / "spans.txt", tmp_path / "temp"
    temp.mkdir()
    path = os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = os.environ | {"SPANS": str(spans_file), "TMPDIR": str(temp), "PYTHONPATH": path}
    # the project's conftest as a plugin: these files lie outside the project
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-n", "2",
                          "--dist", "loadfile", "-q", "-p", "no:cacheprovider",
                          "-W", "ignore::pytest.PytestUnknownMarkWarning",
                          "test_first.py", "test_second.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    spans = {name: (float(a), float(b)) for name, a, b in
             (line.split() for line in spans_file.read_text().splitlines())}
    assert len(spans) == 10, spans

    def overlap(x: str, y: str) -> bool:
        return spans[x][0] < spans[y][1] and spans[y][0] < spans[x][1]

    for alone in ("alone", "slow"):
        assert not [name for name in spans if name != alone and overlap(alone, name)], spans
    # two processes did share the machine: a test of one file ran beside one of the other
    assert any(overlap(a, b) for a in spans if a.startswith("shared")
               for b in spans if b.startswith("beside")), spans
    # the locks' folder goes with the run
    assert not list(temp.glob("release-bench-test-turns-*"))
