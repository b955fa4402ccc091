"""The environment fingerprint: what a result was measured on.

Everything a reader needs to trust (or explain) a figure later: the torch build, the GPU and
its driver, the CPU and the flags that decide whether bfloat16 is fast here (avx512_bf16,
AMX), memory, OS, Python, and the project's own commit.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import psutil
import torch

# CPU flags that change what the suites measure: bf16/fp16 arithmetic and matrix units.
RELEVANT_CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_fp16",
    "amx_int8",
    "amx_tile",
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _cpuinfo() -> tuple[str, set[str]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return model, flags
    if m := re.search(r"^model name\s*:\s*(.+)$", text, re.M):
        model = m.group(1).strip()
    if m := re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M):
        flags = set(m.group(1).split())
    return model, flags


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def project_commit() -> dict[str, Any]:
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _gpus() -> list[dict[str, Any]]:
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append(
            {
                "index": i,
                "name": p.name,
                "capability": f"{p.major}.{p.minor}",
                "memory_bytes": p.total_memory,
                "multiprocessors": p.multi_processor_count,
            }
        )
    return gpus


def _nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version, from the kernel module (no NVML needed)."""
    try:
        text = open("/proc/driver/nvidia/version").read()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def cpu_capability() -> str | None:
    """The vector instructions torch's kernels use (AVX2, AVX512, ...). torch.backends.cpu
    says it since torch 2.0; before, only the build's configuration text does."""
    if hasattr(torch.backends, "cpu"):
        return torch.backends.cpu.get_cpu_capability()
    m = re.search(r"CPU capability usage:\s*(\S+)", torch.__config__.show())
    return m.group(1) if m else None


@cache
def fingerprint() -> dict[str, Any]:
    """The fingerprint of this machine and build (computed once per process)."""
    cpu_model, flags = _cpuinfo()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "name": machine_name(),
        "hostname": socket.gethostname(),
        "torch": {
            "version": torch.__version__,
            "git": torch.version.git_version,
            "cuda": torch.version.cuda,
            "cudnn": cudnn,
            "cuda_available": torch.cuda.is_available(),
            "cpu_capability": cpu_capability(),
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        },
        "gpus": _gpus(),
        "nvidia_driver": _nvidia_driver(),
        "cpu": {
            "model": cpu_model,
            "arch": platform.machine(),
            "logical_cores": os.cpu_count(),
            "physical_cores": psutil.cpu_count(logical=False),
            "flags": {f: f in flags for f in RELEVANT_CPU_FLAGS},
        },
        "memory_bytes": psutil.virtual_memory().total,
        "os": platform.platform(),
        "python": platform.python_version(),
        "project": project_commit(),
    }


def _slug(text: str) -> str:
    text = re.sub(r"\(r\)|\(tm\)|cpu @.*|processor", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def machine_name() -> str:
    """A stable directory name for this kind of machine (not the hostname, which CI changes).

    GPU machines are named by GPU model and count, others by CPU model and core count.
    """
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        return f"{_slug(torch.cuda.get_device_name(0))}-x{n}"
    return f"{_slug(_cpuinfo()[0])}-{os.cpu_count()}c"


# --- comparing two fingerprints ------------------------------------------------------


def hardware_identity(machine: dict) -> dict[str, Any]:
    """The fingerprint fields a verdict depends on."""
    cpu = machine.get("cpu") or {}
    gpus = machine.get("gpus") or []
    driver = str(machine.get("nvidia_driver") or "")
    return {
        "cpu model": cpu.get("model"),
        "cpu flags": sorted(f for f, on in (cpu.get("flags") or {}).items() if on),
        "logical cores": cpu.get("logical_cores"),
        "gpu models": sorted(g.get("name", "") for g in gpus),
        "driver major": driver.split(".")[0] if driver else None,
    }


def differences(a: dict, b: dict) -> list[str]:
    """The hardware fields in which two runs' machines differ, with both values."""
    ia, ib = hardware_identity(a), hardware_identity(b)
    out = []
    for k in ia:
        if ia[k] != ib[k]:
            if k == "cpu flags":
                only_a = sorted(set(ia[k]) - set(ib[k]))[:6]
                only_b = sorted(set(ib[k]) - set(ia[k]))[:6]
                out.append(f"cpu flags (only baseline: {' '.join(only_a) or '-'}; only "
                           f"candidate: {' '.join(only_b) or '-'})")
            else:
                out.append(f"{k} ({ia[k]} vs {ib[k]})")
    return out
