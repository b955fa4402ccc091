"""The AMP suite's measuring tools measure what they claim to."""

from __future__ import annotations

import sys
import types
from collections import Counter

import pytest
import torch

from harness.adapters.pytest_adapter import unbroken
from harness.running import launch, runner
from suites.amp import cases, memory, oplists, training
from suites.profiler import truth


def test_allocation_walk_of_known_tensors():
    def known():
        a = torch.empty(1000, 1000)  # 4 MB live
        b = torch.empty(500, 1000)  # 6 MB
        del a  # 2 MB
        c = torch.empty(250, 1000)  # 3 MB
        d = torch.empty(2000, 1000)  # 11 MB: the peak
        del b, c, d

    assert memory.allocation_walk(memory.cpu_allocation_events(known)) == (11_000_000, 0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_step_memory_accounts_for_every_byte(device, mode):
    """A step leaves exactly its new gradients behind: what the walk nets out to."""
    step = training.TrainStep("encoder", device, mode, batch=2, side=16)
    step()
    m = memory.step_memory(step, device)
    grads = memory.storage_bytes(p.grad for p in step.model.parameters())
    params = list(step.model.parameters())
    assert grads == sum(p.numel() * p.element_size() for p in params)
    if device == "cpu":
        assert m.net == grads
    else:  # each gradient in a block of the caching allocator: rounded up to 512 B, and a
        # large one up to 1 MiB more where a cached block is handed out whole
        bounds = [truth.cuda_block_bounds(p.numel() * p.element_size()) for p in params]
        assert sum(lo for lo, _ in bounds) <= m.net <= sum(hi for _, hi in bounds)
    assert m.transient >= m.net
    momentum = [s["momentum_buffer"] for s in step.optimizer.state.values()]
    assert m.resident == memory.storage_bytes([*params, *momentum, step.x, step.target])
    assert m.peak == m.resident + m.transient


def parse_lists(rank: int, world: int) -> dict:
    """Worker: how this suite reads AutocastTestLists (the CUDA lists), built on CPU tensors
    so that the reading can be checked without a GPU."""
    from torch.testing._internal.autocast_test_lists import AutocastTestLists

    lists = AutocastTestLists(torch.device("cpu"))
    out = {}
    for dtype in (torch.float16, torch.bfloat16):
        parsed = oplists.cases_of(lists, dtype)
        out[str(dtype)] = [(c.list_name, c.op, str(c.run_as), str(c.out_type), c.expect_error,
                            c.skip, c.module is None) for c in parsed]
    return out


@pytest.mark.distributed
def test_cuda_lists_are_read_as_pytorch_reads_them():
    (res,) = launch.launch(parse_lists, 1, timeout_s=300, label="parse worker")
    for dtype, rows in res.items():
        assert len(rows) == 121
        assert [r[1] for r in rows if r[5]] == ["einsum"]  # PyTorch's test never runs it
        by_list = Counter(r[0] for r in rows)
        assert by_list["torch_fp16"] == 28 and by_list["torch_fp32"] == 44
        for name, op, run_as, out_type, expect_error, _, method_only in rows:
            if name == "banned":
                assert expect_error
            elif name in ("torch_fp16", "nn_fp16", "linalg_fp16", "methods_fp16"):
                assert run_as == out_type == dtype, (name, op)
            elif name.endswith("expect_builtin_promote"):
                assert run_as == "torch.float32" and out_type in ("torch.float32", "torch.bool")
            else:
                assert run_as == out_type == "torch.float32", (name, op)
            assert method_only == name.startswith("methods_")


def test_an_op_list_entry_not_run_says_why_and_a_missing_op_is_a_problem():
    x = torch.ones(2)
    unknown = oplists.parse("torch_int8", 0, ("mm", (x, x)), torch.bfloat16)
    assert unknown.skip == "list 'torch_int8' is not one this suite knows how to read"
    rocm = oplists.parse("nn_fp16", 0, ("conv_tbc", (x, x), True), torch.float16)
    assert rocm.skip == "PyTorch's test skips this entry on ROCm"
    assert oplists.parse("nn_fp16", 0, ("conv_tbc", (x, x), False), torch.float16).skip == ""
    # an entry naming an op this torch does not have fails, with the op's name
    gone = oplists.parse("torch_16", 0, ("no_such_op", (x,)), torch.bfloat16)
    problems: list[str] = []
    assert oplists._run_outofplace(gone, "cpu", torch.bfloat16, problems) == ""
    assert problems == ["no_such_op is neither in torch nor a Tensor method"]


def test_a_banned_entry_passes_only_when_the_op_refuses_to_run_under_autocast():
    """PyTorch's "banned" list (binary_cross_entropy on CUDA): an op documented as unsafe to
    autocast must raise under autocast; one that runs is this entry's failure."""
    x = torch.rand(3)

    def refuses(*args):
        raise RuntimeError("unsafe to autocast")

    module = type("Ops", (), {"refuses": staticmethod(refuses), "runs": staticmethod(torch.neg)})
    banned = {op: oplists.OpCase("banned", i, op, (x,), module=module, expect_error=True)
              for i, op in enumerate(("refuses", "runs"))}
    row = oplists.run_case(banned["refuses"], "cpu", torch.bfloat16)
    assert (row["outcome"], row["detail"]) == ("pass", "")
    row = oplists.run_case(banned["runs"], "cpu", torch.bfloat16)
    assert row["outcome"] == "fail" and not row.get("raised")
    assert row["detail"] == "ran under autocast; documented to raise (unsafe to autocast)"
    # an entry that raises where it should run fails as raised (not as a wrong dtype)
    ran = oplists.OpCase("fp32", 0, "refuses", (x,), module=module, out_type=torch.float32)
    row = oplists.run_case(ran, "cpu", torch.bfloat16)
    assert (row["outcome"], row["raised"]) == ("fail", True)
    assert row["detail"] == "raised RuntimeError: unsafe to autocast"


def test_what_differs_from_the_control_is_said_for_each_kind_of_output():
    a = torch.tensor([1, 2, 3])
    assert oplists._difference(a, torch.tensor([1, 2, 4])) == "values differ"
    assert oplists._difference(a, a.float()) == "int64(3,) vs float32(3,)"
    assert oplists._difference((a, a), (a, a + 1)) == "element 1: values differ"
    assert oplists._difference((a, a), (a,)) == "(int64, int64) vs (int64)"
    assert oplists._difference((a, a), [a, a]) == "tuple vs list"
    assert oplists._difference((a,), (a.float(),)) == "(int64) vs (float32)"
    assert oplists._difference(2, 2.5) == "int vs float"
    assert oplists._difference(2, 3) == "2 vs 3"


@pytest.mark.parametrize(("dtype", "want"), [("float32", torch.float32),
                                             ("bfloat16", torch.bfloat16),
                                             ("autocast-bfloat16", torch.bfloat16)])
def test_matmul_workload_runs_in_its_dtype(dtype, want):
    out = cases.matmul("cpu", 64, dtype)()
    assert out.dtype == want and out.abs().sum() > 0


def test_tf32_is_refused_on_cpu():
    with pytest.raises(ValueError, match="tf32"):
        cases.matmul("cpu", 64, "tf32")


def test_a_tf32_training_step_is_skipped_on_cpu():
    """The grid's tf32=True runs are CUDA runs: on the CPU they are skipped, saying why."""
    entry = runner.execute(cases.suite.case("train_step"), "cpu",
                           {"model": "encoder", "tf32": True}, "quick")
    assert entry.outcome == "skip" and "TF32 is a CUDA setting" in entry.reason


def test_backend_flags_are_restored():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)
    with training.restored_backend_flags():
        training.CudaSettings(tf32=not before[0], cudnn_benchmark=not before[1]).apply()
        assert torch.backends.cuda.matmul.allow_tf32 != before[0]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark) == before


def test_the_measured_peak_keeps_the_samples_of_the_size_that_reached_it():
    """A figure without samples is never judged (compare calls it unverified): the peak is
    one size's TFLOP/s, and carries that size's samples."""
    entry = unbroken(cases.suite.case("gemm_ladder"), "cpu", {})  # the run its breaks share
    for dtype in cases.GEMM_DTYPES["cpu"]:
        peak = next(m for m in entry.metrics if m.name == "measured_peak_tflops"
                    and m.labels["dtype"] == dtype)
        sizes = [m for m in entry.metrics if m.name == "tflops" and m.labels["dtype"] == dtype]
        top = max(sizes, key=lambda m: m.value)
        assert peak.value == pytest.approx(top.value)
        assert peak.samples == top.samples and peak.count == top.count


def test_the_proof_that_autocast_engaged_needs_a_layer_autocast_casts():
    x = torch.randn(2, 4)
    assert training.first_layer_dtype(torch.nn.Linear(4, 2), x, torch.bfloat16) == \
        torch.bfloat16
    assert training.first_layer_dtype(torch.nn.Linear(4, 2), x, None) == torch.float32
    with pytest.raises(ValueError, match="ReLU ran no linear or convolution layer"):
        training.first_layer_dtype(torch.nn.ReLU(), x, torch.bfloat16)


def test_a_torchvision_model_without_torchvision_is_skipped_with_the_reason(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchvision" else find_spec(name, *a))
    entry = runner.execute(cases.suite.case("train_step"), "cpu", {"model": "resnet18"}, "quick")
    assert (entry.outcome, entry.reason) == ("skip", "torchvision is not installed")


# the older spelling is deprecated in today's torch: its warning is what the test calls for
@pytest.mark.filterwarnings("ignore:torch.is_autocast_cpu_enabled:DeprecationWarning")
def test_an_older_torch_without_todays_amp_apis_says_so_or_takes_the_older_spelling(
        monkeypatch):
    """What a torch older than today's lacks, each stood in for by removing it here: the
    device-generic GradScaler (on the CPU there is no other: FeatureAbsent), the device
    argument of is_autocast_enabled (before 2.4 the CPU had a function of its own), an op-list
    class of torch's test lists, and the profiler's event types the memory walk reads."""
    import torch.testing._internal as internal

    from harness.cases import FeatureAbsent
    from suites.amp import gradscaler

    with monkeypatch.context() as m:
        m.setattr(gradscaler, "has_api", lambda _name: False)
        with pytest.raises(FeatureAbsent, match="torch.amp has no GradScaler"):
            gradscaler.scaler("cpu")

    def without_device(*args):
        if args:
            raise TypeError("is_autocast_enabled() takes 0 positional arguments")
        return False  # CUDA's, off

    with torch.autocast("cpu", dtype=torch.bfloat16):
        with monkeypatch.context() as m:
            m.setattr(torch, "is_autocast_enabled", without_device)
            assert oplists._autocast_on("cpu") is True and oplists._autocast_on("cuda") is False

    with monkeypatch.context() as m:
        # torch's lists without the class: a module standing in for them, since importing
        # torch's (and so its common_utils) would freeze torch.backends' flags for every later
        # test of this process
        name = "torch.testing._internal.autocast_test_lists"
        without = types.ModuleType(name)
        m.setitem(sys.modules, name, without)
        m.setattr(internal, "autocast_test_lists", without, raising=False)
        with pytest.raises(oplists.ListsUnavailable, match="has no autocast_test_lists"):
            oplists.load_lists("cpu")

    with monkeypatch.context() as m:
        m.delattr(torch._C._profiler, "_EventType")
        with pytest.raises(RuntimeError, match="this torch's profiler has no event types"):
            memory.cpu_allocation_events(lambda: None)
