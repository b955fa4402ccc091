"""The fingerprint holds what a reader needs to trust a figure later."""

from __future__ import annotations

import json
import os
import re

import pytest
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


X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480C
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm sve bf16 i8mm
CPU implementer\t: 0x41
"""


class _CpuInfo:
    text = ""

    def __init__(self, path):
        assert str(path) == "/proc/cpuinfo"

    def read_text(self):
        return self.text


@pytest.mark.parametrize("text, model, flags", [
    (X86_CPUINFO, "Intel(R) Xeon(R) Platinum 8480C", {"avx512_bf16", "amx_bf16", "amx_tile"}),
    (ARM_CPUINFO, None, {"bf16", "sve", "i8mm"}),  # ARM names its flags "Features"
])
def test_cpu_model_and_flags_are_read_from_x86_and_arm_cpuinfo(monkeypatch, text, model, flags):
    monkeypatch.setattr(_CpuInfo, "text", text)
    monkeypatch.setattr(machine, "Path", _CpuInfo)
    read_model, read_flags = machine._cpuinfo()
    assert read_model == (model or machine.platform.processor() or machine.platform.machine())
    assert flags <= read_flags and "processor" not in read_flags


def test_the_fingerprint_says_which_bfloat16_units_the_cpu_has(monkeypatch):
    # the amp suite's notes and its bf16 figures' hardware are read from these: a unit
    # reported absent, or one the CPU lacks reported present, mislabels every bf16 figure
    monkeypatch.setattr(_CpuInfo, "text", X86_CPUINFO)
    monkeypatch.setattr(machine, "Path", _CpuInfo)
    flags = machine.fingerprint.__wrapped__()["cpu"]["flags"]
    assert {f for f, on in flags.items() if on} == {"avx2", "avx512f", "avx512_bf16",
                                                     "amx_bf16", "amx_tile"}


def test_machine_name_is_a_stable_slug():
    name = machine.machine_name()
    assert re.fullmatch(r"[a-z0-9-]+", name)
    assert name == machine.machine_name()
    if not torch.cuda.is_available():
        assert name.endswith(f"-{os.cpu_count()}c")


def test_the_nvidia_driver_is_read_from_the_kernel_modules_version_line(monkeypatch):
    """/proc/driver/nvidia/version as the proprietary and the open kernel modules write it
    (what a GPU machine's fingerprint reads); no file: no driver."""
    import io

    lines = {
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Fri Jan 24 19:55:31 UTC "
        "2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n": "570.86.15",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n": "580.65.06",
        "NVRM version: something else entirely\n": None,
    }
    for text, version in lines.items():
        monkeypatch.setattr(machine, "open", lambda path, text=text: io.StringIO(text),
                            raising=False)
        assert machine._nvidia_driver() == version

    def absent(path):
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(machine, "open", absent, raising=False)
    assert machine._nvidia_driver() is None


def test_a_machine_without_cpuinfo_git_or_torch_backends_cpu_is_still_fingerprinted(
        monkeypatch):
    from pathlib import Path

    real = Path.read_text

    def no_cpuinfo(path, *args, **kwargs):
        if str(path) == "/proc/cpuinfo":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    def no_git(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory: 'git'")

    monkeypatch.setattr(Path, "read_text", no_cpuinfo)
    model, flags = machine._cpuinfo()
    assert model and flags == set()  # platform's name for the processor, no flags
    monkeypatch.setattr(machine.subprocess, "run", no_git)
    assert machine.project_commit() == {"commit": None, "dirty": None}
    # before torch 2.0 the capability was only in the build's configuration text
    monkeypatch.delattr(torch.backends, "cpu")
    assert machine.cpu_capability() == re.search(r"CPU capability usage:\s*(\S+)",
                                                 torch.__config__.show())[1]


def test_a_torch_without_torch_backends_cpu_says_its_capability_from_its_build_text(
        monkeypatch):
    """Before torch 2.0 only the build's configuration text named the vector instructions
    its kernels use; a text that does not name them is no answer."""
    from types import SimpleNamespace

    monkeypatch.setattr(machine.torch, "backends", SimpleNamespace())  # no .cpu
    monkeypatch.setattr(machine.torch.__config__, "show",
                        lambda: "  - CPU capability usage: AVX512\n  - Build settings: ...")
    assert machine.cpu_capability() == "AVX512"
    monkeypatch.setattr(machine.torch.__config__, "show", lambda: "  - Build settings: ...")
    assert machine.cpu_capability() is None
