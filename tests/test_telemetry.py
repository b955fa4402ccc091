"""Telemetry: NVML through a fake pynvml (errors, throttling, selection), the host for real."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from fake_pynvml import (
    FakeGpu,
    FakeMig,
    FakeNvml,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
)

from harness.running.telemetry import (
    Telemetry,
    decode_clocks_event_reasons,
    gpu_processes,
    limit_change,
)
from harness.running.telemetry.host import HostReader, Rapl
from harness.running.telemetry.nvml import NvmlReader, find_device, visible_selectors
from harness.running.telemetry.sampler import Sampler


def gpu_flags(summary):
    # the host-busy flag depends on what else this machine runs; these tests are about GPUs
    return [r for r in summary["invalid_reasons"] if r.startswith("gpu")]


def sampled(fake: FakeNvml, seconds: float = 0.35, iterations: int | None = None, env=None):
    reader = NvmlReader.open(fake, env=env or {})
    with Sampler(HostReader(), reader, interval_s=0.05) as s:
        time.sleep(seconds)
    return reader, s.summary(iterations=iterations)


def test_decode_clocks_event_reasons():
    assert decode_clocks_event_reasons(0) == []
    assert decode_clocks_event_reasons(0x1 | 0x4 | 0x40) == [
        "gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert decode_clocks_event_reasons(0x8 | 0x1000) == ["hw_slowdown", "unknown_0x1000"]


def test_healthy_gpu_summary_and_energy_per_iteration():
    reader, s = sampled(FakeNvml([FakeGpu()]), iterations=10)
    (gpu,) = s["gpus"]
    assert gpu["power_w_mean"] == pytest.approx(300.0)
    assert gpu["energy_method"] == "energy counter"
    readings = s["samples"]
    assert gpu["energy_j"] == pytest.approx((readings - 1) * 30.0)
    assert gpu["energy_per_iteration_j"] == pytest.approx(gpu["energy_j"] / 10)
    assert (gpu["sm_clock_mhz_min"], gpu["temperature_max_c"]) == (1980, 45)
    assert gpu_flags(s) == []
    assert len(s["series"]["gpu0.power_w"]) == readings
    info = reader.static_info()
    assert info["gpus"][0]["uuid"].startswith("GPU-1111")
    assert info["driver_version"] == "570.86.15" and info["gpus"][0]["power_limit_w"] == 700


@pytest.mark.parametrize(("mask", "flag"), [
    (0x8, "gpu0 throttled: hw_slowdown"),
    (0x20, "gpu0 throttled: sw_thermal_slowdown"),
    (0x40, "gpu0 throttled: hw_thermal_slowdown"),
    (0x80, "gpu0 throttled: hw_power_brake_slowdown"),
    (0x4 | 0x40, "gpu0 throttled: hw_thermal_slowdown"),  # heat on top of the power cap
])
def test_a_thermal_or_hardware_slowdown_makes_the_case_invalid(mask, flag):
    _, s = sampled(FakeNvml([FakeGpu(clocks_event_mask=mask)]))
    assert not s["valid"] and gpu_flags(s) == [flag]


@pytest.mark.parametrize("mask", [0x4, 0x200, 0x4 | 0x200 | 0x400])
def test_a_power_cap_under_load_is_recorded_as_context_not_contention(mask):
    """A datacenter GPU running a heavy kernel sits at its power cap (sw_power_cap): the
    figures stay valid, and the case records the limit, how often it was set, the clocks and
    the power."""
    _, s = sampled(FakeNvml([FakeGpu(clocks_event_mask=mask, power_mw=699_000, sm_clock=1755)]))
    assert gpu_flags(s) == []
    (gpu,) = s["gpus"]
    names = decode_clocks_event_reasons(mask)
    assert gpu["clocks_event_reasons_seen"] == sorted(names)
    assert gpu["clocks_event_share"] == {n: 1.0 for n in names}
    (note,) = s["context"]
    assert note.startswith(f"gpu0 at a clock limit ({sorted(names)[0]} in 100%")
    assert "SM clock 1755-1755 MHz, power up to 699 W" in note


def test_idle_reason_alone_is_not_throttling():
    _, s = sampled(FakeNvml([FakeGpu(clocks_event_mask=0x1)]))
    assert gpu_flags(s) == [] and s["gpus"][0]["clocks_event_reasons_seen"] == ["gpu_idle"]
    assert s["context"] == []


class OldBindingsNvml(FakeNvml):
    """An older nvidia-ml-py: the clocks-event call under its deprecated name only."""

    nvmlDeviceGetCurrentClocksEventReasons = None

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return FakeNvml.nvmlDeviceGetCurrentClocksEventReasons(self, h)


def test_older_bindings_read_the_clocks_event_reasons_by_their_deprecated_name():
    _, s = sampled(OldBindingsNvml([FakeGpu(clocks_event_mask=0x40)]))
    assert gpu_flags(s) == ["gpu0 throttled: hw_thermal_slowdown"]


def test_a_change_of_clock_limits_between_two_sides_is_said():
    """A power cap on one side of a comparison only: its figures were measured at other
    clocks. The same limit on both sides, or none, says nothing."""
    def tel(*reasons, label="gpu0"):
        return {"gpus": [{"label": label, "clocks_event_reasons_seen": list(reasons)}]}

    assert limit_change(tel("sw_power_cap"), tel("sw_power_cap")) is None
    assert limit_change(tel(), tel("gpu_idle")) is None
    assert limit_change(tel("sw_power_cap"), tel("gpu1", label="gpu1")) is None
    assert limit_change(None, tel("sw_power_cap")) is None
    assert limit_change(tel(), tel("sw_power_cap", "gpu_idle")) == (
        "GPU clock limits differ between the sides: gpu0 sw_power_cap in the candidate only")
    assert limit_change(tel("board_limit"), tel("unknown_0x1000")) == (
        "GPU clock limits differ between the sides: gpu0 board_limit in the baseline only; "
        "gpu0 unknown_0x1000 in the candidate only")


# ---- another process on the GPU, inside a container too --------------------------------

@pytest.fixture
def gpu_device(tmp_path, monkeypatch):
    """A file that stands for the GPU's device file: a process that holds it open holds the
    GPU, as a CUDA process holds /dev/nvidia0."""
    device = tmp_path / "nvidia0"
    device.touch()
    monkeypatch.setattr(gpu_processes, "DEVICE_FILE", re.compile(f"^{re.escape(str(device))}$"))
    return device


def absent_pid(k: int = 0) -> int:
    """A pid no process has here (past the kernel's pid_max): a host pid seen from a
    container."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1000 + k


def holding(device: Path, detached: bool = False) -> subprocess.Popen | int:
    """A process that holds `device` open until killed: a child of this process, or with
    `detached` one outside this process's tree (its parent exits at once), whose pid is
    returned."""
    hold = f"f = open({str(device)!r}); print(1, flush=True); import time; time.sleep(120)"
    if not detached:
        p = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "1\n"
        return p
    spawn = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
             "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, "
             "text=True, start_new_session=True); p.stdout.readline(); print(p.pid)")
    out = subprocess.run([sys.executable, "-c", spawn, hold], capture_output=True, text=True,
                         timeout=60, check=True)
    return int(out.stdout)


def test_host_pids_of_our_own_processes_in_a_container_are_ours(gpu_device):
    """In a container NVML lists our processes by the host's pids, which no process has here:
    as many of them as our processes holding the GPU are ours, and the figures stay valid."""
    mine = open(gpu_device)  # this process holds the GPU, and so does a child
    child = holding(gpu_device)
    try:
        _, s = sampled(FakeNvml([FakeGpu(pids=[absent_pid(0), absent_pid(1)])]))
        assert gpu_flags(s) == [] and s["gpus"][0]["other_processes"] == []
        # one more host pid than we have processes holding the GPU: someone else's
        _, s = sampled(FakeNvml([FakeGpu(pids=[absent_pid(k) for k in range(3)])]))
    finally:
        child.kill()
        child.wait()
        mine.close()
    (flag,) = gpu_flags(s)
    assert flag.startswith("gpu0 in use by another process (3 listed by pids of another "
                           f"namespace ({absent_pid(0)}, 1024 MiB, ")
    assert flag.endswith("against 2 of this run's processes holding the GPU unnamed: "
                         "1 another's)")


def test_a_process_outside_our_tree_that_holds_the_gpu_is_another(gpu_device):
    """A real process of this machine, not of this run, holding the GPU: the case is
    invalid, whatever else NVML lists."""
    mine = open(gpu_device)
    stranger = holding(gpu_device, detached=True)
    try:
        assert stranger not in {p.pid for p in psutil.Process().children(recursive=True)}
        _, s = sampled(FakeNvml([FakeGpu(pids=[os.getpid(), stranger])]))
    finally:
        os.kill(stranger, signal.SIGKILL)
        mine.close()
    assert s["gpus"][0]["other_processes"] == [
        f"pid {stranger}: outside this run's processes, holds the GPU, 1024 MiB"]
    assert gpu_flags(s) == [f"gpu0 in use by another process (pid {stranger}: outside this "
                            "run's processes, holds the GPU, 1024 MiB)"]


def test_a_pid_here_that_does_not_hold_the_gpu_is_a_host_pid(gpu_device):
    """A listed pid that happens to number a process here that holds no GPU (pid 1, say) is
    a pid of another namespace: counted against our processes holding the GPU."""
    with open(gpu_device):
        _, s = sampled(FakeNvml([FakeGpu(pids=[1])]))
    assert gpu_flags(s) == []
    _, s = sampled(FakeNvml([FakeGpu(pids=[1])]))  # now nothing of ours holds it
    assert gpu_flags(s) == ["gpu0 in use by another process (1 listed by pids of another "
                            "namespace (1, 1024 MiB) against 0 of this run's processes holding "
                            "the GPU unnamed: 1 another's)"]


def test_the_cuda_driver_library_mapped_holds_the_gpu(tmp_path):
    """Where a sandbox shows no device file, the CUDA driver library in a process's memory
    map marks it as holding the GPU."""
    proc = tmp_path / "proc"
    for pid, maps in ((10, "7f00-7f10 r-xp 0 00:00 0 /usr/lib/libcuda.so.580.1\n"),
                      (11, "7f00-7f10 r-xp 0 00:00 0 /usr/lib/libc.so.6\n")):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "maps").write_text(maps)
    assert gpu_processes.holds_gpu(10, proc) and not gpu_processes.holds_gpu(11, proc)
    assert not gpu_processes.holds_gpu(12, proc)  # no such process
    assert gpu_processes.others([(absent_pid(), None)], {10}, proc) == []
    assert gpu_processes.others([(absent_pid(), None)], {11}, proc) == [
        f"1 listed by pids of another namespace ({absent_pid()}) against 0 of this run's "
        "processes holding the GPU unnamed: 1 another's"]


def test_a_process_list_nvml_refuses_is_a_reason_not_a_flag():
    gpu = FakeGpu(pids=[absent_pid()], fail={"processes": NVMLError_NoPermission()})
    _, s = sampled(FakeNvml([gpu]))
    assert gpu_flags(s) == []
    assert s["unavailable"]["gpu0.processes"] == "unavailable: Insufficient Permissions"


def test_no_library_no_driver_no_permission_are_reasons_not_crashes():
    for err, text in [(NVMLError_LibraryNotFound(), "NVML Shared Library Not Found"),
                      (NVMLError_NoPermission(), "Insufficient Permissions")]:
        reader, s = sampled(FakeNvml([FakeGpu()], init_error=err), seconds=0.1)
        assert s["gpus"] == [] and s["unavailable"]["nvml"] == f"unavailable: {text}"
        assert reader.static_info() == {"available": False, "reason": f"unavailable: {text}"}


def test_a_gpu_without_utilisation_and_energy():
    gpu = FakeGpu(fail={"utilization": NVMLError_NotSupported(),
                        "energy": NVMLError_NotSupported()})
    _, s = sampled(FakeNvml([gpu]))
    g = s["gpus"][0]
    assert g["utilization_mean_pct"] is None
    assert s["unavailable"]["gpu0.utilization"] == "unavailable: Not Supported"
    # without the counter, energy is integrated from the power samples instead
    assert g["energy_method"] == "integrated power samples" and g["energy_j"] > 0


def test_energy_is_integrated_with_the_trapezoid_rule_numpy_has():
    """NumPy 2.0 named the trapezoidal rule np.trapezoid; before, np.trapz: either serves."""
    from types import SimpleNamespace

    from harness.running.telemetry import sampler

    def rule(y, x):
        return sum((x[i + 1] - x[i]) * (y[i] + y[i + 1]) / 2 for i in range(len(x) - 1))

    assert sampler.trapezoid_rule(SimpleNamespace(trapz=rule)) is rule  # NumPy 1.x
    assert sampler.trapezoid_rule(SimpleNamespace(trapezoid=rule, trapz=None)) is rule
    assert sampler.trapezoid_rule(np)([1.0, 3.0], [0.0, 2.0]) == 4.0


MIG_GPU = FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa0000-1111-2222-3333-444444444444",
                  mig_mode=1, mem_total=80 * 2**30, power_mw=500_000, clocks_event_mask=0x4,
                  mig=[FakeMig(uuid="MIG-bbbb0000-1111-2222-3333-444444444444"), None,
                       FakeMig(name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", mem_total=40 * 2**30,
                               uuid="MIG-cccc0000-1111-2222-3333-444444444444")])


def test_a_mig_slice_is_found_and_read_through_its_gpu():
    """A GPU in MIG mode: each slice is a device of its own (its name, UUID, memory and
    processes); power, energy, clocks, temperature and the clocks-event reasons are read from
    the whole GPU, which alone reports them; utilisation is not reported on a slice."""
    reader, s = sampled(FakeNvml([MIG_GPU]))
    assert [d.label for d in reader.devices] == ["gpu0-mig0", "gpu0-mig2"]
    info = reader.static_info()
    first, second = info["gpus"]
    assert (first["name"], first["uuid"], first["mig"]) == (
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "MIG-bbbb0000-1111-2222-3333-444444444444", 0)
    assert (second["memory_total_bytes"], second["power_limit_w"]) == (40 * 2**30, 700)
    assert (first["gpu_name"], first["gpu_uuid"]) == ("NVIDIA H100 80GB HBM3", MIG_GPU.uuid)
    g = s["gpus"][0]
    assert (g["label"], g["index"], g["power_w_mean"]) == ("gpu0-mig0", 0, 500)
    assert g["energy_method"] == "energy counter" and g["sm_clock_mhz_max"] == 1980
    assert g["clocks_event_reasons_seen"] == ["sw_power_cap"] and gpu_flags(s) == []
    assert g["memory_used_max_bytes"] == 2**30 and g["utilization_mean_pct"] is None
    assert s["unavailable"]["gpu0-mig0.utilization"] == "unavailable: Not Supported"
    assert "gpu0-mig2.power_w" in s["series"]
    # torch reports a slice's UUID bare (or with its MIG- prefix): either finds it
    assert find_device(info, "cccc0000-1111-2222-3333-444444444444")["label"] == "gpu0-mig2"
    assert find_device(info, "MIG-bbbb0000-1111-2222-3333-444444444444")["mig"] == 0
    assert find_device(info, "aaaa0000-1111-2222-3333-444444444444") is None  # the GPU's


def test_mig_slices_are_selected_by_their_uuid_or_their_gpus():
    def picked(value):
        r = NvmlReader.open(FakeNvml([MIG_GPU, FakeGpu(uuid="GPU-dddd")]),
                            env={"CUDA_VISIBLE_DEVICES": value})
        return [d.label for d in r.devices]

    assert picked("MIG-cccc") == ["gpu0-mig2"]
    assert picked("GPU-aaaa") == ["gpu0-mig0", "gpu0-mig2"]
    assert picked("MIG-bbbb,GPU-dddd") == ["gpu0-mig0", "gpu1"]
    assert picked("2") == ["gpu1"]  # CUDA's order: the slices, then the next GPU


def test_a_gpu_in_mig_mode_without_slices_is_read_whole():
    reader = NvmlReader.open(FakeNvml([FakeGpu(mig_mode=1, mig=[None, None])]), env={})
    assert [d.label for d in reader.devices] == ["gpu0"]
    assert reader.static_info()["gpus"][0]["mig_mode"] == 1


def test_a_gpu_without_energy_counter_or_power_readings_has_no_energy_figure():
    """Neither the energy counter nor the power (fields or usage) can be read: the energy is
    said to be unavailable, with each reading's reason, and no figure per iteration is made
    up."""
    unsupported = NVMLError_NotSupported()
    gpu = FakeGpu(fail={"energy": unsupported, "fields": unsupported, "power": unsupported})
    _, s = sampled(FakeNvml([gpu]), iterations=10)
    g = s["gpus"][0]
    assert (g["energy_j"], g["energy_method"], g["energy_per_iteration_j"]) == (
        None, "unavailable", None)
    assert g["power_w_mean"] is None
    for reading in ("energy", "power_fields", "power_usage"):
        assert s["unavailable"][f"gpu0.{reading}"] == "unavailable: Not Supported"


def test_power_falls_back_when_fields_are_unsupported():
    _, s = sampled(FakeNvml([FakeGpu()], instant_power=False))
    assert s["gpus"][0]["power_w_mean"] == pytest.approx(300.0)
    assert s["gpus"][0]["power_instant_w_max"] is None


def test_gpu_lost_mid_run_stops_sampling_it_and_the_run_goes_on():
    fake = FakeNvml([FakeGpu(lost_after=2), FakeGpu(uuid="GPU-2")])
    reader, s = sampled(fake)
    assert reader.lost == {"gpu0"}
    assert s["unavailable"]["gpu0"] == "unavailable: GPU lost during the case"
    assert [g["index"] for g in s["gpus"]] == [0, 1]
    g0, g1 = s["gpus"]
    assert len(s["series"]["gpu1.power_w"]) == s["samples"] > len(s["series"]["gpu0.power_w"])


def test_cuda_visible_devices_by_index_uuid_prefix_and_invalid_entry():
    gpus = [FakeGpu(uuid=f"GPU-{i}aaa-0000") for i in range(4)]
    assert visible_selectors({}) is None
    assert visible_selectors({"CUDA_VISIBLE_DEVICES": "2,0"}) == ["2", "0"]
    assert visible_selectors({"CUDA_VISIBLE_DEVICES": "1,x,3"}) == ["1"]
    assert visible_selectors({"CUDA_VISIBLE_DEVICES": ""}) == []

    def picked(value):
        r = NvmlReader.open(FakeNvml(gpus), env={"CUDA_VISIBLE_DEVICES": value})
        return [d.index for d in r.devices]

    assert picked("2,0") == [2, 0]
    assert picked("GPU-3aaa,GPU-1") == [3, 1]
    assert picked("1,7,2") == [1]  # CUDA stops at the first device that does not exist
    assert picked("GPU-2,GPU-9,GPU-1") == [2]  # ... or that no UUID starts with
    assert picked("GPU-3,GPU-,GPU-1") == [3]  # ... or that more than one does
    assert picked("") == []


def test_nvml_failing_after_init_is_a_reason_and_its_shutdown_error_is_not_a_crash():
    class CountFails(FakeNvml):
        def nvmlDeviceGetCount(self):
            raise NVMLError_NoPermission()

    reader = NvmlReader.open(CountFails([FakeGpu()]))
    assert reader.devices == [] and reader.error == "unavailable: Insufficient Permissions"

    class ShutdownFails(FakeNvml):
        def nvmlShutdown(self):
            raise NVMLError_LibraryNotFound()

    reader = NvmlReader.open(ShutdownFails([FakeGpu()]))
    assert reader.error is None and len(reader.devices) == 1
    reader.close()  # the run's telemetry ends without an error of its own


def test_host_sampler_for_real():
    host = HostReader()
    x = torch.randn(512, 512)
    with Sampler(host, None, interval_s=0.05) as s:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:
            x @ x
    summ = s.summary(iterations=3)
    h = summ["host"]
    assert summ["samples"] >= 8
    assert h["rss_max_bytes"] >= 512 * 512 * 4
    assert 0 < h["cpu_util_mean_pct"] <= 100
    assert h["load1_max"] >= 0
    assert summ["gpus"] == [] and summ["iterations"] == 3
    assert len(summ["series"]["cpu_util_pct"]) == summ["samples"]


def test_series_are_downsampled_for_the_record():
    with Sampler(HostReader(), None, interval_s=0.01) as s:
        time.sleep(0.4)
    summ = s.summary(max_points=10)
    assert summ["samples"] > 10 and len(summ["series"]["t_s"]) == 10


def _rapl_zone(root, energy_uj: str = "1000\n", range_uj: str = "262143328850\n"):
    zone = root / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "max_energy_range_uj").write_text(range_uj)
    (zone / "energy_uj").write_text(energy_uj)
    return zone


def test_rapl_unreadable_or_absent(tmp_path):
    assert Rapl(tmp_path / "none").error.startswith("unavailable: no RAPL")
    _rapl_zone(tmp_path, "999000\n", "1000000\n")
    r = Rapl(tmp_path)
    assert r.error is None
    assert r.delta_j([999_000], [1_000]) == pytest.approx(0.002)  # wrapped around


def test_rapl_that_needs_root_or_reads_garbage_or_goes_away_is_a_reason(tmp_path, monkeypatch):
    assert Rapl(_rapl_zone(tmp_path / "garbage", "n/a\n").parent).error == (
        "unavailable: invalid literal for int() with base 10: 'n/a\\n'")
    zone = _rapl_zone(tmp_path / "gone")
    r = Rapl(zone.parent)
    assert r.read_uj() == [1000]
    (zone / "energy_uj").unlink()
    assert r.read_uj() is None and r.error.startswith("unavailable: [Errno 2]")
    # since 2020 (CVE-2020-8694) energy_uj is readable by root only; this test runs as root
    real = Path.read_text

    def root_only(path, *args, **kwargs):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", root_only)
    assert Rapl(_rapl_zone(tmp_path / "root").parent).error == (
        "unavailable: RAPL energy_uj needs root")


def test_the_energy_a_case_used_is_the_rapl_counters_difference(tmp_path):
    zone = _rapl_zone(tmp_path, "5000000\n")
    host = HostReader()
    host.rapl = Rapl(tmp_path)
    with Sampler(host, None, interval_s=0.05) as s:
        (zone / "energy_uj").write_text("7500000\n")  # 2.5 J while the case ran
    assert s.summary()["host"]["energy_j"] == pytest.approx(2.5)


def test_a_sample_that_raises_is_recorded_and_sampling_goes_on():
    host = HostReader()
    real, calls = host.sample, []

    def sample():
        calls.append(1)
        if len(calls) == 2:
            raise OSError(24, "Too many open files")
        return real()

    host.sample = sample
    with Sampler(host, None, interval_s=0.02) as s:
        time.sleep(0.3)
    summary = s.summary()
    assert summary["unavailable"]["sampler"] == "unavailable: OSError: [Errno 24] Too many " \
        "open files"
    assert summary["samples"] >= 5  # the samples before and after the one that failed


def test_telemetry_without_a_gpu_here_records_why():
    tel = Telemetry(interval_s=0.05)
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert tel.info["nvml"]["available"] is False
    assert tel.info["nvml"]["reason"].startswith("unavailable: ")


def test_a_busy_neighbour_process_is_flagged():
    # The neighbour is not our descendant (sh exits at once and it is re-parented), so its
    # CPU use counts as someone else's.
    import subprocess
    import sys

    pid = int(subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True).stdout)
    try:
        with Sampler(HostReader(), None, interval_s=0.1) as s:
            time.sleep(1.2)
        summ = s.summary()
    finally:
        os.kill(pid, 9)
    assert summ["host"]["other_cpu_mean_pct"] > 60
    assert any(r.startswith("host busy: other processes used") for r in summ["invalid_reasons"])


def scripted_host(other_cpu_pct: list[float], interval_s: float = 0.1) -> dict:
    """A summary of host samples with the given CPU use of other processes, one per
    `interval_s`."""
    s = Sampler(HostReader(), None, interval_s=interval_s)
    s.times = [i * interval_s for i in range(len(other_cpu_pct))]
    s.host_rows = [{"cpu_util_pct": 50.0, "other_cpu_pct": v, "rss_bytes": 0, "load1": 0.0}
                   for v in other_cpu_pct]
    s.gpu_rows = [{} for _ in other_cpu_pct]
    return s.summary()


def test_a_neighbour_busy_for_part_of_a_case_makes_it_invalid():
    """4 s of a neighbour at 80% of a core in a 40 s case: the mean (12%) is far below the
    limit, but what was measured in those 4 s is not to be trusted (as in an ab round here,
    whose rpc latencies came out ten times slower)."""
    summ = scripted_host([0.0] * 5 + [80.0] * 40 + [5.0] * 355)
    assert summ["host"]["other_cpu_mean_pct"] < 15
    assert summ["invalid_reasons"] == [
        "host busy: other processes used more than 50% of a core for 3.9 s in a row"]
    assert summ["host"]["other_cpu_busy_span_s"] == pytest.approx(3.9)


def test_our_own_process_starts_are_not_a_busy_neighbour():
    """A quiet case's samples from an ab round here: a worker's start and exit show as single
    samples (it is not yet, or no more, in our process tree)."""
    summ = scripted_host([0, 194, 2, 2, 0, 16, 12, 0, 12, 0, 0, 2, 2, 0, 12, 195])
    assert summ["valid"] and summ["host"]["other_cpu_mean_pct"] > 25


# --- CPU steal time (injected psutil.cpu_times readings) ---------------------------------------

LINUX_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
                "guest_nice")


def fake_cpu_times(steal_share: float, cpu_s_per_read: float = 0.2, fields=LINUX_FIELDS):
    """A psutil.cpu_times stand-in whose counters advance by `cpu_s_per_read` CPU seconds (all
    cores) per reading, `steal_share` of them stolen; half the rest busy, with guest time
    inside user time as Linux counts it."""
    from collections import namedtuple
    from itertools import count

    times, reads = namedtuple("scputimes", fields), count()

    def cpu_times():
        n = next(reads) * cpu_s_per_read
        busy = n * (1 - steal_share) / 2
        vals = {"user": busy, "idle": busy, "steal": n * steal_share, "guest": busy / 2}
        return times(**{k: vals.get(k, 0.0) for k in fields})

    return cpu_times


def steal_sampled(cpu_times, seconds: float = 0.15):
    with Sampler(HostReader(cpu_times=cpu_times), None, interval_s=0.01) as s:
        time.sleep(seconds)
    summ = s.summary()
    return summ, [r for r in summ["invalid_reasons"] if r.startswith("heavy steal")]


def test_heavy_steal_makes_the_case_invalid():
    summ, flags = steal_sampled(fake_cpu_times(0.25))
    assert summ["host"]["cpu_steal_pct"] == pytest.approx(25.0)  # guest time not counted twice
    assert flags == ["heavy steal: the hypervisor took 25% of CPU time (limit 10%)"]
    assert not summ["valid"]
    assert summ["series"]["cpu_steal_pct"][1:] == pytest.approx([25.0] * (summ["samples"] - 1))


def test_light_steal_is_recorded_not_flagged():
    summ, flags = steal_sampled(fake_cpu_times(0.02))
    assert summ["host"]["cpu_steal_pct"] == pytest.approx(2.0) and flags == []


def test_steal_over_too_little_cpu_time_is_not_judged():
    # 10 ms ticks: a share over less than a CPU second is too coarse to call
    summ, flags = steal_sampled(fake_cpu_times(0.5, cpu_s_per_read=0.01))
    assert summ["host"]["cpu_steal_pct"] == pytest.approx(50.0) and flags == []


def test_no_steal_counter_is_a_reason_not_a_crash():
    summ, flags = steal_sampled(fake_cpu_times(0.5, fields=("user", "nice", "system", "idle")))
    assert "cpu_steal_pct" not in summ["host"] and flags == []
    assert summ["unavailable"]["cpu_steal"] == "unavailable: this OS reports no CPU steal time"
    assert "cpu_steal_pct" not in summ["series"]


def test_a_kernel_without_cpu_frequency_or_affinity_is_a_reason_not_a_crash(monkeypatch):
    import psutil

    def no_affinity(self, *args):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil, "cpu_freq", lambda percpu=False: [])
    monkeypatch.setattr(psutil.Process, "cpu_affinity", no_affinity)
    host = HostReader()
    assert host.unavailable["cpu_freq"] == "unavailable: the kernel reports no CPU frequency"
    assert host._cpus(4) == [0, 1, 2, 3]  # no affinity known: every CPU counts
    with Sampler(host, None, interval_s=0.02) as s:
        time.sleep(0.1)
    summary = s.summary()
    assert "cpu_freq_mhz_min" not in summary["host"]
    assert summary["unavailable"]["cpu_freq"].startswith("unavailable: the kernel")


def test_a_process_of_the_tree_that_ends_between_two_readings_is_left_out(monkeypatch):
    """This process's tree is read while its children come and go: a child that ends
    between listing it and reading it, or a tree that cannot be listed, is left out of the
    tree's CPU and memory, never an error."""
    import psutil

    host = HostReader()

    class Gone:
        pid = 2**22 + 1  # above Linux's largest pid: no such process

        def _gone(self, *args, **kwargs):
            raise psutil.NoSuchProcess(self.pid)

        cpu_percent = memory_info = children = _gone

    host._tree = {Gone.pid: Gone()}
    host._pids = frozenset(psutil.pids())
    assert host._tree_cpu_percent() == 0.0 and Gone.pid not in host._tree
    host._tree = {Gone.pid: Gone()}
    assert host.tree_rss() == 0
    host.me, host._pids = Gone(), frozenset()  # the process list changed: list the tree anew
    assert host._tree_cpu_percent() == 0.0 and host._tree == {}
