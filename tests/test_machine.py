"""The fingerprint holds what a reader needs to trust a figure later."""

from __future__ import annotations

import json
import os
import re

import torch

from harness.running import machine


def test_fingerprint_fields():
    fp = machine.fingerprint()
    json.dumps(fp)  # it goes into JSON records as is
    assert fp["torch"]["version"] == torch.__version__
    assert fp["torch"]["git"] == torch.version.git_version
    assert "cuda" in fp["torch"] and "cudnn" in fp["torch"]
    assert fp["cpu"]["logical_cores"] == os.cpu_count()
    assert set(fp["cpu"]["flags"]) >= {"avx512_bf16", "amx_bf16", "amx_tile"}
    assert fp["memory_bytes"] > 0 and fp["python"] and fp["os"]
    assert set(fp["project"]) == {"commit", "dirty"}
    assert fp["gpus"] == [] or fp["gpus"][0]["name"]


def test_cpu_flags_match_proc_cpuinfo():
    with open("/proc/cpuinfo") as f:
        flags = set(re.search(r"^flags\s*:\s*(.+)$", f.read(), re.M).group(1).split())
    for name, present in machine.fingerprint()["cpu"]["flags"].items():
        assert present == (name in flags), name


def test_machine_name_is_a_stable_slug():
    name = machine.machine_name()
    assert re.fullmatch(r"[a-z0-9-]+", name)
    assert name == machine.machine_name()
    if not torch.cuda.is_available():
        assert name.endswith(f"-{os.cpu_count()}c")
