"""The CUDA rehearsal: every CUDA case of the suites runs its own code on this CPU, on each GPU
part the suites know (H200 SXM and NVL, H100 SXM, PCIe and NVL, A100), a MIG slice, one
without a datasheet entry (L4) and one without bfloat16 (V100), with the GPU's answers given
by stand-ins (the `cuda_rehearsal` fixture, tests/planted/cuda_rehearsal.py). What a first GPU
run would trip over in the bookkeeping around the device work trips here, and so do the
device's behaviours the stand-ins model: NVML in a container, a power cap, a thermal slowdown,
a MIG slice, the caching allocator's rounding and splitting. Each CUDA conformance check's
break test runs here too, and shows the check failing on the rehearsed GPU."""

from __future__ import annotations

import pytest
import torch

from harness.running.runner import execute
from suites.amp import cases as amp
from suites.amp import test_breaks as amp_breaks
from suites.amp import training
from suites.ddp_rpc import cases as ddp_rpc
from suites.ddp_rpc import test_breaks as ddp_rpc_breaks
from suites.profiler import apis as profiler_apis
from suites.profiler import cases as profiler
from suites.profiler import test_breaks as profiler_breaks
from suites.profiler import truth
from suites.rpc import cases as rpc
from suites.rpc import measure as rpc_measure
from suites.rpc import test_breaks as rpc_breaks
from suites.telemetry import cases as telemetry
from suites.telemetry import test_breaks as telemetry_breaks

pytestmark = pytest.mark.rehearsal

# each family with a datasheet: the part it is told to be, and its dense bfloat16 peak (a MIG
# slice: its GPU's, scaled by the slice's 16 of 132 SMs)
PARTS = {"H200": ("H200 SXM", 989.5), "H200 NVL": ("H200 NVL", 835.5),
         "H100": ("H100 SXM", 989.5), "H100 PCIe": ("H100 PCIe", 756.5),
         "H100 NVL": ("H100 NVL", 835.5), "H100 MIG 1g.10gb": ("H100 SXM", 989.5 * 16 / 132),
         "A100": ("A100 SXM", 312)}
FAMILIES = (*PARTS, "L4", "V100")
# the smallest work that runs every line: one matmul side, a step of two short sequences
GEMM = {"sizes": (64,)}
STEP = {"model": "encoder", "batch": 2, "side": 16}
# accuracy_parity's training, shortened where it must pass: 50 full-batch steps remove 96% of
# the loss on the CPU (the case asks 80%), and the modes still end within 0.1% of each other
# (it allows 5%); the float8 break needs the whole 200 to take fp16 past 5%
PARITY_STEPS = 50


def failed(entry) -> set[str]:
    return {c.name for c in entry.checks if not c.passed}


@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_ladder(cuda_rehearsal, family):
    """The ladder measures, then holds its figures against the datasheet of the part the
    device is, told by its name and by what torch and NVML measure of it (SMs, memory, power
    limit): the H100 PCIe and NVL and the H200 NVL their own peaks, a MIG slice its share of
    its GPU's, a GPU without a datasheet its measured peak only."""
    r = cuda_rehearsal(family)
    entry = r.run(amp.suite, "gemm_ladder", **GEMM)
    assert entry.outcome == "pass", entry.reason
    rows = entry.tables["gemm"]
    dtypes = {row["dtype"] for row in rows}
    if family == "V100":
        assert dtypes == {"float32", "tf32", "float16", "autocast-float16"}
        assert any("has no bfloat16 (compute capability 7.0" in n for n in entry.notes)
    else:
        assert dtypes == set(amp.GEMM_DTYPES["cuda"])
    part, bf16_peak = PARTS.get(family, (None, None))
    assert entry.details["part"] == part
    bf16 = next((row for row in rows if row["dtype"] == "bfloat16"), {})
    assert bf16.get("datasheet_tflops") == (pytest.approx(bf16_peak) if bf16_peak else None)
    for row in rows:  # the datasheet's columns exactly where a peak is claimed
        assert ("of_datasheet" in row) == (part is not None and row["dtype"] in
                                           ("float32", "tf32", "float16", "bfloat16"))
        if "of_datasheet" in row:
            assert row["of_datasheet"] == pytest.approx(row["tflops"] / row["datasheet_tflops"])
    assert entry.details["gpu"] == r.gpu.name
    assert any(n.startswith(f"dense peaks of the {part} ") for n in entry.notes) == bool(part)
    assert any(n.startswith("figures are against this run's measured peak only")
               for n in entry.notes) == (part is None)
    assert r.stand_in.synchronized > 0  # the timer's clock waited for the device


def test_amp_training_cases_on_the_h200(cuda_rehearsal):
    r = cuda_rehearsal("H200")
    # accuracy_parity runs on the V100 and, broken, on the H200 below
    for name, params in (("grad_scaler", {}), ("train_step", STEP)):
        entry = r.run(amp.suite, name, params)
        assert entry.outcome == "pass", (name, entry.reason)
    # train_step: both CUDA modes against strict FP32, memory from the allocator's readings
    modes = {m.labels["mode"] for m in entry.metrics if m.name == "speedup"}
    assert modes == {"fp16", "bf16"}
    assert entry.details["cuda_settings"]["baseline"] == "strict FP32"
    assert entry.details["memory_method"].startswith("CUDA: max_memory_allocated")
    for mode, mem in entry.details["memory"].items():
        assert mem["transient"] >= mem["net"] > 0, mode
    assert "grad_scale[fp16]" in entry.details


def test_amp_workloads(cuda_rehearsal):
    """The statements pytest-benchmark and asv time on CUDA."""
    import torch

    cuda_rehearsal("H200")
    step = amp.training_step("cuda", "encoder", "fp16", batch=2, side=16)
    step()
    assert step.scaler is not None and step.settings.record()["baseline"] == "strict FP32"
    computes_in = {"float32": torch.float32, "tf32": torch.float32, "float16": torch.float16,
                   "bfloat16": torch.bfloat16, "autocast-float16": torch.float16}
    with training.restored_backend_flags():
        for dtype in amp.GEMM_DTYPES["cuda"]:
            assert amp.matmul("cuda", 64, dtype)().dtype == computes_in[dtype], dtype


MIB = 2**20


def gradient_blocks(params) -> tuple[int, int]:
    """(least, most) bytes a step's new gradients take in the caching allocator's blocks:
    each its request rounded to 512 B where the block is split off, a large one up to 1 MiB
    more where a cached block is handed out whole (suites/profiler/truth.py)."""
    bounds = [truth.cuda_block_bounds(p.numel() * p.element_size()) for p in params]
    return sum(lo for lo, _ in bounds), sum(hi for _, hi in bounds)


def test_step_memory_counts_the_new_gradients_in_the_allocators_blocks(cuda_rehearsal):
    """The CUDA branch of the step memory: the gradients a step leaves behind, each in a
    block of the caching allocator (what test_measurement checks on a GPU). With cached
    blocks of 9.5 MiB left free before the step, the encoder's 9 MiB feed-forward gradients
    take them whole (what remains, 0.5 MiB, is too small to split off a large block): more
    than 512 B of rounding per gradient, within the allocator's bounds."""
    from suites.amp import memory

    r = cuda_rehearsal("H200")
    step = training.TrainStep("encoder", "cuda", "fp32", batch=2, side=16)
    step()
    params = list(step.model.parameters())
    grads = sum(p.numel() * p.element_size() for p in params)
    lo, hi = gradient_blocks(params)
    assert grads <= lo <= memory.step_memory(step, "cuda").net <= hi
    step.optimizer.zero_grad(set_to_none=True)
    segments = r.stand_in.allocator.blocks.segments
    hold = [torch.empty(b.size // 4, device="cuda") for blocks in list(segments.values())
            for b in blocks if b.free and b.size >= 9 * MIB]  # no larger block left free
    for _ in range(2):  # a 9.5 MiB block freed beside a live one: cached, not merged
        freed = torch.empty(int(9.5 * MIB) // 4, device="cuda")
        hold.append(torch.empty(int(10.5 * MIB) // 4, device="cuda"))
        del freed
    m = memory.step_memory(step, "cuda")
    assert grads + 512 * len(params) < m.net <= hi
    r.stand_in.allocator.reported = 1.25  # an allocator that reports wrong bytes
    assert not lo <= memory.step_memory(step, "cuda").net <= hi
    del hold


def test_a_gpu_without_bfloat16(cuda_rehearsal, monkeypatch):
    monkeypatch.setitem(training.PARITY, "steps", PARITY_STEPS)
    r = cuda_rehearsal("V100")
    entry = r.run(amp.suite, "accuracy_parity")
    assert entry.outcome == "pass", entry.reason
    assert {row["mode"] for row in entry.tables["parity"]} == {"fp32", "fp16"}
    skipped = r.run(amp.suite, "autocast_op_lists", {"dtype": "bfloat16"})
    assert skipped.outcome == "skip"
    assert "Tesla V100-SXM2-16GB has no bfloat16" in skipped.reason


@pytest.mark.distributed
def test_autocast_op_lists_read_the_cuda_lists_in_a_worker(cuda_rehearsal):
    """PyTorch's CUDA expectation lists (AutocastTestLists), run entry by entry in the worker
    the case launches, on the rehearsed GPU. CPU autocast casts other ops than CUDA's, so
    entries fail here, and the case with them; what is rehearsed is that every entry is read,
    run and reported."""
    r = cuda_rehearsal("H200")
    entry = r.run(amp.suite, "autocast_op_lists", {"dtype": "float16"})
    assert entry.outcome == "fail" and failed(entry), entry.reason
    assert entry.details["lists"] == "AutocastTestLists"
    total = entry.tables["per_list"][-1]
    assert total["list"] == "all" and total["entries"] == 121
    assert total["checked"] == len(entry.checks) > 100
    # the matmul family is cast to float16 by CPU autocast as by CUDA's
    assert "torch_fp16/mm" not in failed(entry)


def test_the_fingerprint_names_the_rehearsed_gpu(cuda_rehearsal):
    from harness.running import machine

    r = cuda_rehearsal("A100")
    assert machine.machine_name() == "nvidia-a100-sxm4-80gb-x1"
    assert machine._gpus() == [{"index": 0, "name": r.gpu.name, "capability": "8.0",
                                "memory_bytes": r.gpu.memory_bytes, "multiprocessors": 108}]


@pytest.mark.distributed
@pytest.mark.parametrize("suite", [amp.suite, profiler.suite], ids=["amp", "profiler"])
def test_clean_exit_in_fresh_processes(cuda_rehearsal, monkeypatch, suite):
    """The minimal programs on "cuda", in fresh processes that rehearse the GPU themselves;
    and the check failing when each process aborts at exit."""
    r = cuda_rehearsal("H200")
    entry = r.run(suite, "clean_exit", {"trials": 2})
    assert entry.outcome == "pass", entry.reason
    profiler_breaks.abort_at_exit(monkeypatch)
    monkeypatch.setenv("RELEASE_BENCH_PLANT", "exit_abort=1,cuda=H200")
    broken = r.run(suite, "clean_exit", {"trials": 2})
    assert broken.outcome == "fail", broken.reason


def test_nvml_readings(cuda_rehearsal):
    r = cuda_rehearsal("H200")
    entry = r.run(telemetry.suite, "nvml_readings", side=64)
    assert entry.outcome == "pass", entry.reason
    (gpu,) = entry.tables["gpu_summary"]
    assert gpu["energy_method"] == "energy counter" and gpu["power_w_mean"] == 300


def test_nvml_readings_fail_where_nvml_does_not_see_the_cuda_device(cuda_rehearsal,
                                                                     monkeypatch):
    """The GPU torch computes on must be one NVML reads: with NVML seeing only another GPU
    (a CUDA_VISIBLE_DEVICES that NVML does not follow, say), the check fails, never n/a."""
    import sys

    from fake_pynvml import FakeGpu, FakeNvml

    r = cuda_rehearsal("H200")
    other = FakeGpu(name=r.gpu.name, uuid="GPU-99999999-0000-0000-0000-000000000000")
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([other]))
    entry = r.run(telemetry.suite, "nvml_readings", side=64)
    assert entry.outcome == "fail", entry.reason
    (failed,) = [c for c in entry.checks if c.failed]
    assert failed.name == "the CUDA device is among NVML's visible GPUs"
    assert failed.detail == r.gpu.uuid  # as torch reports it


def test_sampling_overhead(cuda_rehearsal):
    r = cuda_rehearsal("H200")
    entry = r.run(telemetry.suite, "sampling_overhead", {"interval_s": 0.1}, side=64,
                  run_time_s=0.03)
    assert entry.outcome == "pass", entry.reason
    assert {m.name for m in entry.metrics} >= {"overhead", "samples_taken"}
    assert r.stand_in.synchronized > 0


# ---- each CUDA conformance check fails with its feature broken --------------------------

SMALL = {"gemm_ladder": GEMM, "nvml_readings": {"side": 64}}


@pytest.mark.parametrize(("suite", "table", "name", "params_id"), [
    *[(amp.suite, amp_breaks.FEATURE_OFF, n, p) for n, p in amp_breaks.FEATURE_OFF],
    *[(telemetry.suite, telemetry_breaks.FEATURE_OFF, n, p)
      for n, p in telemetry_breaks.FEATURE_OFF if n == "nvml_readings"],
], ids=[f"{n}-{p}" for n, p in (*amp_breaks.FEATURE_OFF, ("nvml_readings", "default"))])
def test_each_cuda_case_fails_with_its_feature_off(cuda_rehearsal, feature_off, suite, table,
                                                   name, params_id):
    r = cuda_rehearsal("H200")
    if name in SMALL:
        r.small(suite, name, **SMALL[name])
    plant, params = table[name, params_id]
    if name == "train_step":
        table = {**table, (name, params_id): (plant, {**params, **STEP})}
    entry = feature_off.assert_fails(suite, table, name, params_id, "cuda")
    if plant == "autocast":
        assert "autocast did not engage" in entry.reason, entry.reason


@pytest.mark.parametrize("name", list(amp_breaks.SCALER_BREAKS))
def test_grad_scaler_check_fails_when_broken(cuda_rehearsal, monkeypatch, name):
    cuda_rehearsal("H200")
    patches, expected = amp_breaks.SCALER_BREAKS[name]
    assert amp_breaks.run("grad_scaler", "cuda").outcome == "pass"
    for (owner, attr), value in patches.items():
        monkeypatch.setattr(owner, attr, value)
    entry = amp_breaks.run("grad_scaler", "cuda")
    assert entry.outcome == "fail", entry.reason
    assert failed(entry) == expected


def test_parity_check_fails_when_autocast_precision_is_too_low(cuda_rehearsal, monkeypatch):
    import torch.nn.functional as F

    cuda_rehearsal("H200")
    monkeypatch.setattr(F, "linear", amp_breaks._float8_linear(F.linear))
    bad = failed(amp_breaks.run("accuracy_parity", "cuda"))
    assert bad == {f"{m} ends within 5% of the fp32 loss" for m in amp.AMP_MODES["cuda"]}


# ---- rpc and ddp_rpc on CUDA: the bookkeeping around TensorPipe's device maps -------------


def test_rpc_device_maps():
    """On CUDA each worker maps GPU 0 to GPU 0 towards every other worker; on CPU, none."""
    from suites.rpc.caller import device_maps

    assert device_maps(0, 2, "cuda") == {"worker1": {0: 0}}
    assert device_maps(1, 3, "cuda:0") == {"worker0": {0: 0}, "worker2": {0: 0}}
    assert device_maps(0, 2, "cpu") == {}


def test_tensorpipe_takes_the_cuda_device_maps(cuda_rehearsal, monkeypatch):
    """The maps joined() gives TensorPipe's options for a CUDA group, on the rehearsed GPU
    (what TensorPipe does with them when it starts needs the GPU: here the options are taken
    where the group would start); a CPU group's options carry none."""
    import contextlib

    from suites.rpc import caller

    cuda_rehearsal("H200")
    given = {}

    @contextlib.contextmanager
    def group(rank, world, name, opts, *rest):
        given[rank] = opts
        yield None

    monkeypatch.setattr(caller.rpc_group, "joined", group)
    for device in ("cuda", "cpu"):
        with caller.joined(0, 2, caller.GroupSpec(port=1, device=device)):
            pass
        maps = {peer: {int(k.index): int(v.index) for k, v in m.items()}
                for peer, m in given[0].device_maps.items()}
        assert maps == ({"worker1": {0: 0}} if device == "cuda" else {}), device


@pytest.mark.parametrize(("gpus", "devices"), [(1, ["cuda:0", "cuda:0"]),
                                               (2, ["cuda:0", "cuda:1"]),
                                               (4, ["cuda:0", "cuda:1"])])
def test_ddp_rpc_trainers_take_the_gpus_in_turn(gpus, devices):
    import torch

    from suites.ddp_rpc.model import TRAINER_RANKS
    from suites.ddp_rpc.workers import trainer_device

    assert [trainer_device("cuda", r, gpus) for r in TRAINER_RANKS] == list(
        map(torch.device, devices))
    assert trainer_device("cpu", TRAINER_RANKS[1], gpus) == torch.device("cpu")


def test_ddp_rpc_trainers_on_the_rehearsed_gpu(cuda_rehearsal):
    import torch

    from suites.ddp_rpc.model import TRAINER_RANKS
    from suites.ddp_rpc.workers import trainer_device

    cuda_rehearsal("H200")  # one GPU: both trainers share it
    assert {trainer_device("cuda", r) for r in TRAINER_RANKS} == {torch.device("cuda", 0)}
    with pytest.raises(ValueError, match="need a GPU; 0 visible"):
        trainer_device("cuda", TRAINER_RANKS[0], gpus=0)


# ---- profiler on CUDA: the device memory records, in the allocator's blocks ---------------

# the smallest grid with a block rounded up (7 floats: 512 B) and one exact (1000 floats)
ALLOCATIONS = {"allocations": (profiler.Allocations(("empty", "zeros"), (torch.float32,),
                                                    ((7,), (1000,))),)}


def test_known_allocations(cuda_rehearsal):
    r = cuda_rehearsal("H200")
    entry = r.run(profiler.suite, "known_allocations", **ALLOCATIONS)
    assert entry.outcome == "pass", entry.reason
    assert {c.name for c in entry.checks} == {
        f"{api}: {what}" for api in profiler_apis.API_NAMES
        for what in ("allocations report the true bytes", "frees report the same bytes, negative",
                     "bytes equal the allocator's allocated-bytes delta")} | {
        f"{api}: a local run's regions say node_id -1" for api in ("profiler", "autograd")}
    rows = entry.tables["accuracy"]
    assert [row["truth_B"] for row in rows] == [512, 4096, 512, 4096]
    assert all(row["allocator_B"] == row["profiler_B"] == row["truth_B"] for row in rows)


def each_check_fails_under_a_break(r, monkeypatch, name: str, settings: dict) -> None:
    """What test_breaks shows on a GPU: every check of the profiler case `name` fails under
    one of its breaks, on the rehearsed GPU."""
    r.small(profiler.suite, name, **settings)
    checks = {c.name for c in profiler_breaks.run(name, "cuda").checks}
    caught: set[str] = set()
    for brk in profiler_breaks.CASE_BREAKS[name]:
        with monkeypatch.context() as mp:
            profiler_breaks.BREAKS[brk](mp)
            entry = profiler_breaks.run(name, "cuda")
        assert entry.outcome == "fail", f"{brk}: {entry.outcome}: {entry.reason}"
        caught |= failed(entry)
    assert checks and caught == checks, f"never failed: {sorted(checks - caught)}"


def test_known_allocations_fail_when_the_profiler_is_broken(cuda_rehearsal, monkeypatch):
    each_check_fails_under_a_break(cuda_rehearsal("H200"), monkeypatch, "known_allocations",
                                   ALLOCATIONS)


def test_known_allocations_fail_when_the_allocator_reports_wrong_bytes(cuda_rehearsal):
    r = cuda_rehearsal("H200")
    r.stand_in.allocator.reported = 1.25  # the allocator's figures and its profiler records
    entry = r.run(profiler.suite, "known_allocations", **ALLOCATIONS)
    assert entry.outcome == "fail"
    assert failed(entry) == {f"{api}: {what}" for api in profiler_apis.API_NAMES for what in
                             ("allocations report the true bytes",
                              "frees report the same bytes, negative")}


# the smallest resnet18 training step: 32x32 images come out of its pooling as 1x1, and
# batch norm in training needs two values per channel
STEP_MEMORY = {"step_batch": 2, "step_image": 32}


def test_peak_memory(cuda_rehearsal, monkeypatch):
    """The peak rebuilt from the device memory records against max_memory_allocated and the
    analytic peak, in the allocator's blocks; and its checks failing with the frees dropped.

    The training step's checks fail in the rehearsal, for want of a stand-in: the host's
    allocator reports no free of a block allocated before profiling began (torch warns so),
    and the step frees the gradients of the warm-up step (zero_grad(set_to_none=True)); the
    caching allocator on a GPU reports those frees. So the step's rebuilt peak keeps the old
    gradients and the new."""
    r = cuda_rehearsal("H200")
    entry = r.run(profiler.suite, "peak_memory", **STEP_MEMORY)
    step = {f"{api}: resnet18 training step peak equals max_memory_allocated"
            for api in profiler_apis.KINETO_APIS}
    assert failed(entry) == step, entry.reason
    rows = {row["case"]: row for row in entry.tables["peak"]}
    for api in profiler_apis.KINETO_APIS:
        sequence = rows[f"allocation sequence [{api}]"]
        assert sequence["reconstructed_B"] == sequence["max_memory_allocated_B"] \
            == sequence["analytic_B"] > 0
        assert rows[f"resnet18 training step [{api}]"]["error_B"] > 0  # the old gradients
    profiler_breaks.drop_frees(monkeypatch)
    broken = r.run(profiler.suite, "peak_memory")
    assert failed(broken) == {c.name for c in entry.checks}  # the sequence's checks too


def test_resnet18_ops(cuda_rehearsal, monkeypatch):
    """Each op's device bytes against the analytic blocks, the whole forward against the
    allocator's delta; and every check failing with each event's bytes scaled x1.5 and 4 B
    added (the case's two breaks at once: one run instead of two).

    The in-place ops' checks fail in the rehearsal, for the stand-ins: the placement mode
    calls relu_ again (two events per call), and the counting mode's references to its
    outputs move the frees of the downsample shortcuts into aten::add_."""
    r = cuda_rehearsal("H200")
    entry = r.run(profiler.suite, "resnet18_ops", passes=1)
    in_place = {f"{api}: {op} equals analytic" for api in profiler_apis.API_NAMES
                for op in ("aten::relu_", "aten::add_")}
    assert failed(entry) == in_place, entry.reason
    assert {f"{api}: forward total equals the allocator's delta"
            for api in profiler_apis.API_NAMES} <= {c.name for c in entry.checks}
    (whole,) = [row for row in entry.tables["per_op"] if row["op"] == "whole forward"]
    assert whole["profiler_B"] == whole["autograd_B"] == whole["legacy_B"] > 0
    profiler_breaks.skew_memory(monkeypatch, factor=1.5, offset=4)
    broken = r.run(profiler.suite, "resnet18_ops")
    assert failed(broken) == {c.name for c in entry.checks}


# two region lengths, one of them checked (from 20 ms), in three sessions of each API
TIMING = {"durations_s": (0.005, 0.02), "sessions": (3, 3)}


def test_timing_accuracy(cuda_rehearsal, monkeypatch):
    """Spins of torch.cuda._sleep timed by CUDA events against the spin kernels' device time
    each profiler reports (the kernel events of Kineto, the device time of the legacy
    profiler's regions); every check failing under the case's breaks, and the spins' checks
    with the spin kernels reported 1.5 times as long as they ran."""
    r = cuda_rehearsal("H200")
    entry = r.run(profiler.suite, "timing_accuracy", **TIMING)
    assert entry.outcome == "pass", entry.reason
    spun = {f"{api}: 20 ms region within 5%" for api in profiler_apis.API_NAMES}
    assert {c.name for c in entry.checks} == spun | {
        f"{api}: {what}" for api in profiler_apis.API_NAMES
        for what in ("a decorated function's region ends with each call",  # a host-side spin
                     "a region with no op inside reports all its time as its own",
                     "key_averages' row sums its events' calls and times")}
    assert all(row["case"].startswith("cuda._sleep") for row in entry.tables["timing_accuracy"])
    each_check_fails_under_a_break(r, monkeypatch, "timing_accuracy", TIMING)
    r.stand_in.spins.reported = 1.5
    assert failed(r.run(profiler.suite, "timing_accuracy")) == spun


def test_timing_accuracy_fails_without_its_regions(cuda_rehearsal, feature_off):
    """record_function off (the case's feature-off plant): no region reaches the profiler."""
    r = cuda_rehearsal("H200")
    r.small(profiler.suite, "timing_accuracy", **TIMING)
    feature_off.assert_fails(profiler.suite, profiler_breaks.FEATURE_OFF, "timing_accuracy",
                             "default", "cuda")


def test_overhead(cuda_rehearsal):
    """The resnet18 step on CUDA, off and under each profiler mode with CUDA activity, side
    by side: every mode's overhead figure and row."""
    r = cuda_rehearsal("H200")
    entry = r.run(profiler.suite, "overhead", {"batch": 2, "image": 32})
    assert entry.outcome == "pass", entry.reason
    modes = [m for m in profiler.PROFILER_MODES if m != "off"]
    assert sorted(m.labels["mode"] for m in entry.metrics if m.name == "overhead") \
        == sorted(modes)
    assert [row["mode"] for row in entry.tables["overhead"]] == list(profiler.PROFILER_MODES)
    assert r.stand_in.synchronized > 0  # the timer's clock waited for the device


# ---- rpc and ddp_rpc end to end on CUDA: device tensors between processes -----------------

# one payload, one session of two rounds of a few calls per path
ROUND_TRIP = {"sizes": (4,), "plan": rpc_measure.Plan(seconds=0.005, min_samples=5,
                                                      max_samples=20, rounds=2, sessions=1,
                                                      warmup_s=0.001)}


def test_rpc_on_the_rehearsed_gpu(cuda_rehearsal, feature_off):
    """The bit-exact round trips and the round-trip benchmark with tensors on "cuda" (their
    device maps set, TensorPipe started without them), every path measured; and the round
    trips' checks failing with RPC off."""
    r = cuda_rehearsal("H200")
    entry = r.run(rpc.suite, "roundtrip")
    assert entry.outcome == "pass", entry.reason
    timed = r.run(rpc.suite, "round_trip", **ROUND_TRIP)
    assert timed.outcome == "pass", timed.reason
    assert {m.labels["path"] for m in timed.metrics if m.name == "p50"} >= set(rpc.MAIN_PATHS)
    feature_off.assert_fails(rpc.suite, rpc_breaks.FEATURE_OFF, "roundtrip", "default", "cuda")


@pytest.mark.parametrize("mode", ddp_rpc.MODES)
def test_ddp_rpc_matches_its_reference_on_the_rehearsed_gpu(cuda_rehearsal, mode):
    """Trainers on "cuda" against the float64 reference, each DDP mode; and the reference
    checks failing under the mode's break (tests of suites/ddp_rpc)."""
    r = cuda_rehearsal("H200")
    r.small(ddp_rpc.suite, "matches_reference", steps=3)
    entry = r.run(ddp_rpc.suite, "matches_reference", {"ddp": mode})
    assert entry.outcome == "pass", entry.reason
    plant, params = ddp_rpc_breaks.FEATURE_OFF["matches_reference", f"ddp={mode}"]
    broken = execute(ddp_rpc.suite.case("matches_reference"), "cuda", params, "quick",
                     worker_setup=plant)
    assert broken.outcome == "fail", broken.reason


def test_ddp_rpc_step_time_on_the_rehearsed_gpu(cuda_rehearsal):
    r = cuda_rehearsal("H200")
    params = ddp_rpc.suite.case("step_time").param_sets("quick")[0]
    entry = r.run(ddp_rpc.suite, "step_time", params, launches=1, rounds=1, steps_per_round=2)
    assert entry.outcome == "pass", entry.reason
    assert {m.name for m in entry.metrics} >= {"step_time", "rpc_embedding_forward",
                                               "allreduce_dense_grads"}


# ---- around the cases: what a GPU run executes besides the suites' device work ------------

def test_require_cuda_names_the_rehearsed_gpu(cuda_rehearsal, capsys):
    """The first step of scripts/gpu-check.sh, on a GPU."""
    from harness import cli

    cuda_rehearsal("H100")
    assert cli.main(["require-cuda"]) == 0
    assert capsys.readouterr().out == f"CUDA {torch.version.cuda}: NVIDIA H100 80GB HBM3\n"


def test_the_report_plots_the_gpus_power_and_clock(cuda_rehearsal):
    """A case sampled with NVML on the rehearsed GPU: the report's telemetry figure gains the
    GPU's power and SM clock beside the CPU's."""
    from harness.presenting import report
    from harness.running.telemetry import Telemetry

    r = cuda_rehearsal("H200")
    r.small(telemetry.suite, "nvml_readings", side=64)
    tel = Telemetry(interval_s=0.005)
    try:
        entry = execute(telemetry.suite.case("nvml_readings"), "cuda", {}, "quick", tel)
    finally:
        tel.close()
    series = entry.telemetry["series"]
    assert len(series["t_s"]) >= 3 and {"gpu0.power_w", "gpu0.sm_clock_mhz"} <= set(series)
    svg = report.fig_telemetry(entry).svg
    assert "gpu0 power W" in svg and "SM MHz" in svg and "CPU util %" in svg


def test_asv_machine_names_the_gpu_and_its_driver(cuda_rehearsal, monkeypatch, tmp_path):
    """`release-bench asv-machine` on a GPU: asv shows a machine by its `cpu` text, so the
    GPU, the driver and CUDA go there (asv's machine file is written under HOME)."""
    import json

    from harness.adapters.asv_adapter import register_machine

    cuda_rehearsal("A100")
    monkeypatch.setenv("HOME", str(tmp_path))
    name = register_machine(tmp_path / "asv")
    assert name.startswith("nvidia-a100-sxm4-80gb-x1")
    cpu = json.loads((tmp_path / ".asv-machine.json").read_text())[name]["cpu"]
    assert "+ 1x NVIDIA A100-SXM4-80GB (driver " in cpu and f"CUDA {torch.version.cuda})" in cpu
    fp = json.loads((tmp_path / "asv" / f"{name}.fingerprint.json").read_text())
    assert fp["machine"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"


def test_known_allocations_name_the_allocator_settings_in_effect(cuda_rehearsal, monkeypatch):
    r = cuda_rehearsal("H200")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    entry = r.run(profiler.suite, "known_allocations", **ALLOCATIONS)
    assert entry.outcome == "pass", entry.reason
    assert "allocator settings in effect: 'expandable_segments:True'" in entry.notes


def test_train_step_notes_the_steps_gradscaler_skipped(cuda_rehearsal, monkeypatch):
    """An fp16 step that overflows (a scale too high for its gradients, as the default 2^16
    can be early in a real run): the scale falls, and the case says how many optimizer steps
    were skipped."""
    from suites.amp import gradscaler

    r = cuda_rehearsal("H200")
    made = gradscaler.scaler
    monkeypatch.setattr(gradscaler, "scaler",
                        lambda device, **kw: made(device, init_scale=2.0**100))
    entry = r.run(amp.suite, "train_step", STEP)
    assert entry.outcome == "pass", entry.reason
    fell = entry.details["grad_scale[fp16]"]
    assert fell["after"] < fell["before"] == 2.0**100
    assert any(n.startswith("fp16: GradScaler's scale fell from 1.26765e+30") for n in entry.notes)


def test_train_step_on_cuda_with_the_scaler_torch_had_before_2_3(cuda_rehearsal, monkeypatch):
    """Before torch 2.3 (no torch.amp.GradScaler) the CUDA scaler is the 1.6 spelling,
    torch.cuda.amp.GradScaler."""
    from suites.amp import gradscaler

    r = cuda_rehearsal("H200")
    has = gradscaler.has_api
    monkeypatch.setattr(gradscaler, "has_api",
                        lambda api: api != "torch.amp.GradScaler" and has(api))
    assert type(gradscaler.scaler("cuda")) is torch.cuda.amp.GradScaler
    entry = r.run(amp.suite, "train_step", STEP)
    assert entry.outcome == "pass", entry.reason


def test_asvs_gpu_energy_view_reads_the_cases_nvml_telemetry(cuda_rehearsal):
    """The asv view only a GPU has (AmpEnergy): train_step run as its setup_cache runs each
    case (NVML sampled), then each track reads the first GPU's figure of the telemetry; a
    record without it is not available, with the reasons NVML gave."""
    import dataclasses
    import itertools

    from harness.adapters import asv_adapter
    from harness.cases import param_id
    from suites.amp import asv_bench

    cuda_rehearsal("H200")
    # the view as asv makes it on a GPU machine (its grid is of the devices found at import)
    view = type("AmpEnergy", (asv_bench.AmpEnergy,), {"case": "amp/train_step"})
    case = amp.suite.case("train_step")
    combo = next(c for c in itertools.product(*view.params)
                 if dict(zip(view.param_names, c, strict=True)).get("model") == "encoder")
    assert combo[0] == "cuda"
    params = next(p for p in case.param_sets("quick", "cuda") if p["model"] == "encoder")
    entry = asv_adapter.run_case(case, "cuda", {**params, **STEP})
    assert entry.outcome == "pass", entry.reason
    entries = {("cuda", param_id(params)): entry}
    v = view()
    v.setup(entries, *combo)
    gpu = entry.telemetry["gpus"][0]
    assert v.track_energy_per_step(entries, *combo) == gpu["energy_per_iteration_j"] > 0
    assert v.track_power_mean(entries, *combo) == gpu["power_w_mean"] > 0
    v.entry = dataclasses.replace(entry, telemetry={"unavailable": {"nvml": "unavailable: "
                                                                     "Driver Not Loaded"}})
    with pytest.raises(asv_adapter.NotAvailable, match=r"telemetry has no "
                       r"energy_per_iteration_j here \(nvml: unavailable: Driver Not Loaded\)"):
        v.track_energy_per_step(entries, *combo)


def test_the_release_notes_examples_take_their_cuda_branch_on_the_rehearsed_gpu(tmp_path):
    """The examples that ask torch.cuda.is_available() (the release history runs them on a
    GPU machine too): on the rehearsed H200 the AMP ones train on "cuda" in float16 and the
    profiler's records CUDA activity; with autocast off, the CUDA AMP examples fail."""
    import json
    import os
    import subprocess
    from pathlib import Path

    from tests.planted.wrap import planted_python

    root = Path(__file__).resolve().parent.parent

    def record(plant: str) -> dict:
        out = subprocess.run([str(planted_python(tmp_path / plant, plant)), "-m",
                              "harness.releases.api_record", "amp", "profiler"], cwd=root,
                             capture_output=True, text=True, timeout=300,
                             env=os.environ | {"PYTHONPATH": str(root)})
        assert out.returncode == 0, out.stderr
        return {r["example"]: r for r in map(json.loads, out.stdout.splitlines())}

    on_gpu = record("cuda=H200")
    for name in ("cuda_amp_autocast_and_gradscaler", "autocast_and_amp_gradscaler",
                 "torch_profiler_profile_memory", "autograd_profiler_profile_memory"):
        assert on_gpu[name]["status"] in ("works", "warns"), on_gpu[name]
    off = record("cuda=H200,off=autocast")
    for name in ("cuda_amp_autocast_and_gradscaler", "autocast_and_amp_gradscaler"):
        assert off[name]["status"] == "fails", off[name]
        assert off[name]["reason"] == "AssertionError: the linear layer gave torch.float32"


# ---- the device's own behaviours: clock limits, NVML in a container, MIG --------------------

def sampled(r, suite, name: str, params: dict | None = None, **settings):
    """Case `name` on the rehearsed GPU with telemetry sampled, NVML through the fake."""
    from harness.running.telemetry import Telemetry

    if settings:
        r.small(suite, name, **settings)
    tel = Telemetry(interval_s=0.01)
    try:
        return execute(suite.case(name), "cuda", params or {}, "quick", tel)
    finally:
        tel.close()


def gpu_flags(entry) -> list[str]:
    # the host-busy flag depends on what else this machine runs; these are about the GPU
    return [r for r in entry.telemetry["invalid_reasons"] if r.startswith("gpu")]


def test_a_heavy_case_at_its_power_cap_stays_valid_and_records_the_cap(cuda_rehearsal):
    """An H100 running the GEMM ladder at its power cap (sw_power_cap in every reading, at
    699 W and a lowered SM clock): the case is valid, and its record says the cap, its
    share of readings, the clocks and the power."""
    r = cuda_rehearsal("H100")
    (gpu,) = r.nvml.gpus
    gpu.clocks_event_mask, gpu.power_mw, gpu.sm_clock = 0x4, 699_000, 1755
    entry = sampled(r, amp.suite, "gemm_ladder", **GEMM)
    assert entry.outcome == "pass" and gpu_flags(entry) == []
    (g,) = entry.telemetry["gpus"]
    assert g["clocks_event_share"] == {"sw_power_cap": 1.0} and g["power_w_max"] == 699
    assert ("gpu0 at a clock limit (sw_power_cap in 100% of readings; SM clock 1755-1755 MHz, "
            "power up to 699 W): its working state under load, recorded, not contention"
            ) in entry.notes


def test_a_thermal_slowdown_invalidates_the_case(cuda_rehearsal):
    r = cuda_rehearsal("H100")
    r.nvml.gpus[0].clocks_event_mask = 0x4 | 0x40  # at the cap, and too hot
    entry = sampled(r, amp.suite, "gemm_ladder", **GEMM)
    assert gpu_flags(entry) == ["gpu0 throttled: hw_thermal_slowdown"]
    assert not entry.valid and "gpu0 throttled: hw_thermal_slowdown" in entry.contended()


def host_pid(k: int = 0) -> int:
    """A pid no process has here (past the kernel's pid_max), as the host's pid of one of
    this container's processes reads from inside it."""
    from pathlib import Path

    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1000 + k


def test_our_processes_listed_by_host_pids_in_a_container_are_ours(cuda_rehearsal):
    """In a container NVML lists this run's GPU processes by the host's pids: this process,
    which holds the (stand-in) GPU device, listed as a pid unknown here, leaves the case
    valid; more unknown pids than this run has processes holding the GPU are another's."""
    r = cuda_rehearsal("H200")
    r.nvml.gpus[0].pids = [host_pid()]
    assert gpu_flags(sampled(r, telemetry.suite, "nvml_readings", side=64)) == []
    r.nvml.gpus[0].pids = [host_pid(k) for k in range(8)]
    (flag,) = gpu_flags(sampled(r, telemetry.suite, "nvml_readings"))
    assert flag.startswith("gpu0 in use by another process (8 listed by pids of another "
                           "namespace")


def test_a_real_process_outside_the_run_on_the_gpu_invalidates_the_case(cuda_rehearsal):
    """A process of this machine, not started by the run, that holds the GPU's device (the
    rehearsal's stand-in for /dev/nvidia0) and that NVML lists: another's."""
    import os
    import signal
    import subprocess
    import sys

    from tests.planted.cuda_rehearsal import DEVICE_FILE

    r = cuda_rehearsal("H200")
    hold = (f"f = open({str(DEVICE_FILE)!r}); print(1, flush=True); "
            "import time; time.sleep(120)")
    spawn = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
             "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, "
             "text=True, start_new_session=True); p.stdout.readline(); print(p.pid)")
    stranger = int(subprocess.run([sys.executable, "-c", spawn, hold], capture_output=True,
                                  text=True, timeout=60, check=True).stdout)
    try:
        r.nvml.gpus[0].pids = [host_pid(), stranger]
        entry = sampled(r, telemetry.suite, "nvml_readings", side=64)
    finally:
        os.kill(stranger, signal.SIGKILL)
    assert gpu_flags(entry) == [f"gpu0 in use by another process (pid {stranger}: outside "
                                "this run's processes, holds the GPU, 1024 MiB)"]


def test_a_mig_slices_telemetry_is_found(cuda_rehearsal):
    """On a MIG slice (an H100 in MIG mode, torch's device its 1g.10gb slice): NVML's MIG
    device is the CUDA device (its MIG- UUID), its memory the slice's, and power, energy and
    clocks are read from its GPU; utilisation, which NVML does not report on a slice, is not
    checked."""
    r = cuda_rehearsal("H100 MIG 1g.10gb")
    entry = sampled(r, telemetry.suite, "nvml_readings", side=64)
    assert entry.outcome == "pass", entry.reason
    assert "the CUDA device is among NVML's visible GPUs" in {c.name for c in entry.checks}
    assert "utilisation seen under load" not in {c.name for c in entry.checks}
    (row,) = entry.tables["gpu_summary"]
    assert row["label"] == "gpu0-mig0" and row["energy_method"] == "energy counter"
    assert row["power_w_mean"] == 300 and row["memory_used_max_bytes"] == 2**30


# ---- the caching allocator: its rounding and splitting at the sizes the quick profile uses --

@pytest.mark.parametrize(("nbytes", "block", "segment"), [
    (4, 512, 2 * MIB),  # a float: the 512 B minimum, from a 2 MiB small-pool segment
    (4_000, 4_096, 2 * MIB),  # 1000 floats
    (1_000_000, 1_000_448, 2 * MIB),  # 1000x1000 int8 and bool: the small pool (<= 1 MiB)
    (MIB, MIB, 2 * MIB),  # 1 MiB itself is small
    (2_000_000, 2_000_384, 20 * MIB),  # 1000x1000 half: a 20 MiB large-pool segment, split
    (4_000_000, 4_000_256, 20 * MIB),  # 1000x1000 float: the "4 MB" allocation
    (8_000_000, 8_000_000, 20 * MIB),  # 1000x1000 double: a multiple of 512 B already
    (104_857_600, 104_857_600, 104_857_600),  # 5120x5120 float: its own segment, whole
    (11 * MIB + 1, 12 * MIB, 12 * MIB),  # 1 MiB - 512 B would remain: not split off
])
def test_the_stand_in_allocator_rounds_and_splits_as_the_caching_allocator(nbytes, block,
                                                                         segment):
    """From a fresh allocator, the block and segment each request gets, as
    c10/cuda/CUDACachingAllocator.cpp's rules give them; and the profiler suite's ground
    truth (suites/profiler/truth.py, written from the same rules apart) agrees."""
    from tests.planted.cuda_rehearsal import CachingAllocator

    a = CachingAllocator()
    assert (a.malloc(nbytes).size, a.reserved) == (block, segment)
    assert truth.cuda_block_size(nbytes, expandable=False) == block


def test_the_stand_in_allocator_reuses_merges_and_hands_out_whole_blocks():
    """A freed block merges with its free neighbours; the smallest cached block that fits
    serves the next request; one within 1 MiB of a large request is handed out whole;
    empty_cache returns wholly free segments."""
    from tests.planted.cuda_rehearsal import CachingAllocator

    a = CachingAllocator()
    x = a.malloc(12 * MIB)  # a 12 MiB segment of its own
    y = a.malloc(4 * MIB)  # a 20 MiB segment: 4 MiB split off
    assert (x.size, y.size, a.reserved) == (12 * MIB, 4 * MIB, 32 * MIB)
    a.free(x)
    z = a.malloc(int(11.5 * MIB))  # the cached 12 MiB block, 0.5 MiB too big: whole
    assert z.size == 12 * MIB and a.reserved == 32 * MIB
    assert truth.cuda_block_bounds(int(11.5 * MIB)) == (int(11.5 * MIB), int(12.5 * MIB))
    a.free(y)  # merges back with the rest of its segment
    assert [b.size for b in a.segments[y.segment]] == [20 * MIB]
    w = a.malloc(512)  # the small pool: a segment of its own
    a.empty_cache()  # the free 20 MiB segment goes; z's and w's stay
    assert a.reserved == 12 * MIB + 2 * MIB and w.size == 512
    # best fit: of a free 14 MiB block and a free 10.5 MiB one, a 10 MiB request takes the
    # 10.5 MiB block, whole (0.5 MiB would remain), not a split of the 14 MiB one
    a = CachingAllocator()
    big = a.malloc(14 * MIB)
    near = a.malloc(int(10.5 * MIB))  # from a 12 MiB segment, 1.5 MiB split off...
    a.malloc(int(1.5 * MIB))  # ...and taken, so that `near` stays apart when freed
    a.free(big)
    a.free(near)
    fit = a.malloc(10 * MIB)
    assert (fit.segment, fit.size) == (near.segment, int(10.5 * MIB))


def test_known_allocations_over_the_quick_profiles_grid(cuda_rehearsal):
    """profiler/known_allocations with its quick settings on the rehearsed H200: every
    allocation reports the caching allocator's block (the 4 MB and 100 MiB ones among them)
    and memory_allocated moves by the same bytes."""
    r = cuda_rehearsal("H200")
    entry = r.run(profiler.suite, "known_allocations")
    assert entry.outcome == "pass", entry.reason
    rows = {row["case"]: row for row in entry.tables["accuracy"]}
    assert rows["empty float32 1000x1000"]["truth_B"] == 4_000_256
    assert rows["rand float32 5120x5120"]["profiler_B"] == 104_857_600
    assert all(row["allocator_B"] == row["truth_B"] for row in rows.values())
