"""The AMP suite's GPU bookkeeping, with the names real devices report and real figures."""

from __future__ import annotations

import pytest

from suites.amp import gpus, memory, training
from suites.profiler import truth

GIB = 2**30
# what torch and NVML report on each part: name, SMs, total_memory, the power limit
H100_SXM = gpus.DeviceFacts("NVIDIA H100 80GB HBM3", 132, 85_045_379_072, 700)
H100_PCIE = gpus.DeviceFacts("NVIDIA H100 PCIe", 114, 85_093_187_584, 350)
H100_NVL = gpus.DeviceFacts("NVIDIA H100 NVL", 132, 100_485_038_080, 400)
H200_SXM = gpus.DeviceFacts("NVIDIA H200", 132, 150_754_820_096, 700)
H200_NVL = gpus.DeviceFacts("NVIDIA H200 NVL", 132, 150_754_820_096, 600)


@pytest.mark.parametrize(("facts", "part"), [
    (H100_SXM, "H100 SXM"),
    (H100_PCIE, "H100 PCIe"),
    (H100_NVL, "H100 NVL"),
    (H200_SXM, "H200 SXM"),
    (H200_NVL, "H200 NVL"),
    (gpus.DeviceFacts("NVIDIA A100-SXM4-80GB", 108, 85_097_971_712, 400), "A100 SXM"),
    (gpus.DeviceFacts("NVIDIA A100-PCIE-40GB", 108, 42_505_273_344, 250), "A100 PCIe"),
    (gpus.DeviceFacts("NVIDIA H200", 132, 150_754_820_096, 500), "H200 SXM"),  # capped lower
    (gpus.DeviceFacts("NVIDIA H100 80GB HBM3"), "H100 SXM"),  # nothing measured to object
    (gpus.DeviceFacts("NVIDIA A10", 72, 24 * GIB), None),  # not an A100
    (gpus.DeviceFacts("NVIDIA GH200 480GB", 132, 102 * GIB), None),  # not a plain H200 part
    (gpus.DeviceFacts("Tesla V100-SXM2-16GB", 80, 16 * GIB), None),
    (gpus.DeviceFacts("NVIDIA L4", 58, 22 * GIB), None),
])
def test_the_part_is_told_by_its_name_and_confirmed_by_its_measures(facts, part):
    told = gpus.identify(facts)
    assert (told.part.name if told.part else None) == part, told.why
    assert told.share == 1.0


@pytest.mark.parametrize(("facts", "disagrees"), [
    # a name that says SXM with a PCIe part's SM count
    (gpus.DeviceFacts("NVIDIA H100 80GB HBM3", 114, 85_093_187_584, 350), "114 SMs, not 132"),
    # an H100 SXM with 64 GB, a part this table has no peaks for
    (gpus.DeviceFacts("NVIDIA H100 80GB HBM3", 132, 68_702_699_520, 700), "64.0 GiB, not 75-82"),
    # an NVL at a 700 W limit is not an NVL
    (gpus.DeviceFacts("NVIDIA H200 NVL", 132, 150_754_820_096, 700),
     "power limit 700 W, above its 600 W"),
])
def test_a_part_whose_measures_disagree_with_its_name_is_unknown(facts, disagrees):
    """Named as one part, measured as another: no datasheet peak is claimed, and the note
    says the figures are against the measured peak only, and why."""
    told = gpus.identify(facts)
    assert told.part is None and told.peaks == {}
    assert disagrees in told.why
    assert told.note().startswith("figures are against this run's measured peak only: ")


def test_each_parts_own_peaks_from_its_datasheet():
    """Dense peaks are half the datasheet's Tensor Core figures printed with sparsity."""
    peak = {f.name: gpus.identify(f).peaks for f in (H100_SXM, H100_PCIE, H100_NVL, H200_SXM,
                                                     H200_NVL)}
    assert peak["NVIDIA H100 80GB HBM3"] == {"float32": 67, "tf32": 494.5, "float16": 989.5,
                                             "bfloat16": 989.5}
    assert peak["NVIDIA H100 PCIe"] == {"float32": 51, "tf32": 378, "float16": 756.5,
                                        "bfloat16": 756.5}
    assert peak["NVIDIA H100 NVL"]["bfloat16"] == 835.5
    assert peak["NVIDIA H200"] == peak["NVIDIA H100 80GB HBM3"]
    assert peak["NVIDIA H200 NVL"] == peak["NVIDIA H100 NVL"]
    told = gpus.identify(H100_PCIE)
    assert told.note() == (
        f"dense peaks of the H100 PCIe ({gpus.H100_SHEET}), told by its name and 114 SMs, "
        "79.2 GiB, power limit 350 W: {'float32': 51.0, 'tf32': 378.0, 'float16': 756.5, "
        "'bfloat16': 756.5}")


def test_a_mig_slice_is_held_against_its_share_of_the_gpus_peak():
    """A 1g.10gb slice of an H100 SXM computes on 16 of its 132 SMs: its peaks are the
    part's scaled by that share, never the whole GPU's."""
    slice_ = gpus.DeviceFacts("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, 10 * GIB, 700, mig=True)
    told = gpus.identify(slice_)
    assert told.part.name == "H100 SXM" and told.share == pytest.approx(16 / 132)
    assert told.peaks["bfloat16"] == pytest.approx(989.5 * 16 / 132)
    assert "a MIG slice with 16 of its 132 SMs, its peaks scaled by that share" in told.note()
    unknown = gpus.identify(gpus.DeviceFacts(slice_.name, None, 10 * GIB, 700, mig=True))
    assert unknown.part is None and "MIG slice of unknown SM count" in unknown.why


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
    rows = gpus.ladder_rows(seconds, gpus.identify(H200_SXM).peaks)
    assert [(r["n"], r["dtype"]) for r in rows] == [(8192, "float32"), (8192, "bfloat16"),
                                                   (4096, "float32"), (4096, "bfloat16")]
    big_bf16 = rows[1]
    assert big_bf16["tflops"] == pytest.approx(785.37, abs=0.01)
    assert big_bf16["vs_float32"] == pytest.approx(18.0 / 1.40)
    assert big_bf16["of_measured_peak"] == 1.0  # the peak was reached at 8192
    assert big_bf16["datasheet_tflops"] == 989.5
    assert big_bf16["of_datasheet"] == pytest.approx(785.37 / 989.5, abs=1e-4)
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
                            gpus.identify(gpus.DeviceFacts("NVIDIA L4")).peaks)
    assert all("of_datasheet" not in r and "datasheet_tflops" not in r for r in rows)
    # a datasheet without a figure for a precision leaves that precision's columns out
    rows = gpus.ladder_rows({1024: {"float32": 1e-3, "float16": 0.1e-3}}, {"float32": 10})
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
