"""The AMP suite's GPU bookkeeping, with the names real devices report and real figures."""

from __future__ import annotations

import pytest

from suites.amp import gpus, memory, training
from suites.profiler import truth


@pytest.mark.parametrize(("name", "family"), [
    ("NVIDIA H200", "H200"),  # torch.cuda.get_device_name on the lent H200
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-PCIE-40GB", "A100"),
    ("NVIDIA A10", None),  # not an A100
    ("NVIDIA GH200 480GB", None),  # not a plain H200 part
    ("Tesla V100-SXM2-16GB", None),
    ("NVIDIA L4", None),
    ("", None),  # the CPU's "GPU name"
])
def test_datasheet_is_found_from_the_device_name(name, family):
    sheet = gpus.datasheet_for(name)
    assert (sheet.family if sheet else None) == family


def test_datasheet_figures():
    h200 = gpus.datasheet_for("NVIDIA H200")
    assert h200.tflops == {"float32": 67, "tf32": 495, "float16": 989, "bfloat16": 989}
    assert "H200" in gpus.datasheet_note("NVIDIA H200", h200)
    assert gpus.datasheet_for("NVIDIA A100-SXM4-80GB").tflops["tf32"] == 156


@pytest.mark.parametrize(("capability", "bf16"), [
    ((7, 0), False), ((7, 5), False),  # V100, T4
    ((8, 0), True), ((8, 6), True), ((9, 0), True), ((10, 0), True),  # A100, A10, H100, B200
])
def test_bfloat16_from_the_compute_capability(capability, bf16):
    assert gpus.has_bfloat16(capability) is bf16


def test_no_bfloat16_note_names_the_capability():
    assert gpus.no_bfloat16_note("Tesla V100-SXM2-16GB", (7, 0)) == (
        "Tesla V100-SXM2-16GB has no bfloat16 (compute capability 7.0; bfloat16 from 8.0)")


def test_tflops_of_the_h200_bf16_matmul():
    # an 8192^3 bf16 matmul in 1.40 ms: 785 TFLOP/s, 79% of the 989 datasheet peak
    assert gpus.matmul_flops(8192) == 1_099_511_627_776
    assert gpus.tflops(8192, 1.40e-3) == pytest.approx(785.37, abs=0.01)


def test_ladder_rows_against_measured_and_datasheet_peaks():
    # medians seen on an H200-class GPU: seconds per n^3 matmul
    seconds = {4096: {"float32": 2.60e-3, "bfloat16": 0.21e-3},
               8192: {"float32": 18.0e-3, "bfloat16": 1.40e-3}}
    rows = gpus.ladder_rows(seconds, gpus.datasheet_for("NVIDIA H200"))
    assert [(r["n"], r["dtype"]) for r in rows] == [(8192, "float32"), (8192, "bfloat16"),
                                                   (4096, "float32"), (4096, "bfloat16")]
    big_bf16 = rows[1]
    assert big_bf16["tflops"] == pytest.approx(785.37, abs=0.01)
    assert big_bf16["vs_float32"] == pytest.approx(18.0 / 1.40)
    assert big_bf16["of_measured_peak"] == 1.0  # the peak was reached at 8192
    assert big_bf16["datasheet_tflops"] == 989
    assert big_bf16["of_datasheet"] == pytest.approx(785.37 / 989, abs=1e-4)
    # float32: 52.9 TFLOP/s at 4096, 61.1 at 8192
    peaks = gpus.ladder_peaks(seconds)
    assert peaks["float32"].n == 8192 and peaks["bfloat16"].n == 8192
    small_bf16 = rows[3]
    assert small_bf16["of_measured_peak"] == pytest.approx(
        gpus.tflops(4096, 0.21e-3) / gpus.tflops(8192, 1.40e-3))


def test_ladder_peak_is_the_best_size_not_the_largest():
    seconds = {1024: {"float32": 1e-3}, 2048: {"float32": 20e-3}}
    assert gpus.ladder_peaks(seconds)["float32"] == gpus.LadderPeak(
        1024, gpus.tflops(1024, 1e-3))


def test_ladder_rows_without_a_datasheet_have_no_datasheet_columns():
    rows = gpus.ladder_rows({1024: {"float32": 1e-3, "float16": 0.1e-3}},
                            gpus.datasheet_for("NVIDIA L4"))
    assert all("of_datasheet" not in r and "datasheet_tflops" not in r for r in rows)
    # a datasheet without a figure for a precision leaves that precision's columns out
    sheet = gpus.Datasheet("X", "test", {"float32": 10})
    rows = gpus.ladder_rows({1024: {"float32": 1e-3, "float16": 0.1e-3}}, sheet)
    assert [("of_datasheet" in r) for r in rows] == [True, False]


def test_step_row_speedup_and_memory_saving():
    # resnet50 batch 64 on an A100-class GPU: fp32 180 ms, fp16 70 ms; 9.0 GiB against 5.4
    row = gpus.step_row("fp16", 64, 0.070, 0.002, 0.180, int(5.4 * 2**30), 2**30,
                        int(9.0 * 2**30))
    assert row["speedup"] == pytest.approx(180 / 70)
    assert row["samples_per_s"] == pytest.approx(64 / 0.070)
    assert row["memory_ratio"] == pytest.approx(0.6, abs=1e-9)
    assert row["memory_saving"] == pytest.approx(0.4, abs=1e-9)
    assert row["step_ms"] == pytest.approx(70) and row["iqr_ms"] == pytest.approx(2)
    assert row["peak_MiB"] == pytest.approx(5.4 * 1024, abs=1e-3)


def test_scale_fall_counts_skipped_steps():
    assert gpus.scale_fall_note("fp16", 65536.0, 65536.0) is None
    assert gpus.scale_fall_note("fp16", 65536.0, 131072.0) is None  # grew
    assert "at least 3 steps skipped" in gpus.scale_fall_note("fp16", 65536.0, 8192.0)


def test_tf32_settings_as_recorded():
    assert training.CudaSettings().record() == {
        "tf32": False, "cudnn_benchmark": True, "channels_last": False,
        "baseline": "strict FP32"}
    assert training.CudaSettings(tf32=True).record()["baseline"] == "TF32"


def test_cuda_step_memory_from_allocator_readings():
    # an encoder step: 40 MiB allocated before, 44.5 MiB after (the new gradients, each
    # in 512 B blocks), 120 MiB at the highest point
    MiB = 2**20
    m = memory.cuda_step_memory(resident=38 * MiB, before=40 * MiB, after=44 * MiB + 512 * 1024,
                                peak=120 * MiB)
    assert (m.transient, m.net, m.peak) == (80 * MiB, 4 * MiB + 512 * 1024, 118 * MiB)
    with pytest.raises(ValueError, match="below memory_allocated"):
        memory.cuda_step_memory(resident=0, before=10, after=20, peak=15)


@pytest.mark.parametrize(("nbytes", "block"), [(1, 512), (3 * 4, 512), (768 * 4, 3072),
                                               (768 * 3072 * 4, 768 * 3072 * 4)])
def test_allocator_blocks_of_encoder_gradients(nbytes, block):
    """The block rule the CUDA memory figures rest on, for an encoder layer's parameters
    (bias of 768 floats, weight of 768 x 3072)."""
    assert truth.cuda_block_size(nbytes, expandable=False) == block
