"""The profiler suite under pytest: its cases as tests, its workloads as benchmarks, and the
ground-truth helpers it relies on."""

from __future__ import annotations

import pytest
import torch

from harness.adapters.pytest_adapter import (
    benchmark_case_tests,
    conformance_tests,
    workload_benchmarks,
)
from suites.profiler import apis, cases, truth
from suites.profiler.cases import fmt_memory, suite

test_conformance = conformance_tests(suite)
test_benchmark_case = benchmark_case_tests(suite)
test_workload = workload_benchmarks(suite)

MiB = 1 << 20


@pytest.mark.parametrize(("nbytes", "block"), [
    (1, 512), (4, 512), (512, 512), (513, 1024), (4000, 4096),
    (4_000_000, 4_000_256),  # 1000x1000 float32: rounded to 512 B, split off a 20 MiB segment
    (MiB, MiB),  # the largest small-pool request
    (MiB + 1, MiB + 512),  # large pool, 20 MiB segment, split
    (9 * MiB + MiB // 2, 9 * MiB + MiB // 2),  # 20 MiB segment, 10.5 MiB left: split
    (19 * MiB + MiB // 2, 20 * MiB),  # own 20 MiB segment, 0.5 MiB left: not split
    (104_857_600, 104_857_600),  # 5120x5120 float32: exactly fills its segment
    (108_000_000, 108_000_256),  # segment 109,051,904: 1,051,648 B left > 1 MiB: split
    (0, 0),  # an empty tensor takes no block
])
def test_cuda_block_rule(nbytes: int, block: int) -> None:
    assert truth.cuda_block_size(nbytes, expandable=False) == block


def test_cuda_block_rule_expandable_always_splits() -> None:
    assert truth.cuda_block_size(19 * MiB + MiB // 2, expandable=True) == 19 * MiB + MiB // 2


def test_cuda_block_bounds_allow_an_unsplit_large_block() -> None:
    assert truth.cuda_block_bounds(4000) == (4096, 4096)  # small pool: always split
    assert truth.cuda_block_bounds(0) == (0, 0)
    assert truth.cuda_block_bounds(4_000_000) == (4_000_256, 4_000_256 + MiB)
    op = truth.OpBytes("op", tensors=[4000, 4_000_000, -4_000_000])
    assert op.bounds("cpu") == (4000, 4000)
    assert op.bounds("cuda") == (4096 - MiB, 4096 + MiB)


def test_each_profiler_api_is_named_as_users_spell_it_and_the_legacy_one_has_no_timeline():
    """The three profilers a run may record with, each named as its users import it; the
    legacy autograd profiler keeps no time-stamped memory records, and says so."""
    from torch.autograd import profiler as autograd_profiler
    from torch.autograd import profiler_legacy

    legacy = profiler_legacy.profile(profile_memory=True)
    assert apis.api_of(torch.profiler.profile()) == "torch.profiler.profile"
    assert apis.api_of(autograd_profiler.profile()) == "torch.autograd.profiler.profile"
    assert apis.api_of(legacy) == "torch.autograd.profiler_legacy.profile"
    with pytest.raises(TypeError, match="profiler_legacy.profile keeps no time-stamped memory"):
        apis.memory_records(legacy, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("nbytes", [1, 4000, 4_000_000, MiB + 1, 19 * MiB + MiB // 2,
                                    104_857_600, 108_000_000])
def test_cuda_block_rule_matches_the_allocator(nbytes: int) -> None:
    """The rule the suite checks against is the allocator's own behaviour."""
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() - before == truth.cuda_block_size(nbytes)
    del t


def test_fmt_memory_prints_like_the_profiler_tables() -> None:
    assert fmt_memory(49_674_240) == "47.37 MB"
    assert fmt_memory(20_000) == "19.53 KB"
    assert fmt_memory(4) == "4 B"
    assert fmt_memory(-4_000_000) == "-3.81 MB"


def test_peak_live_follows_allocations_and_frees() -> None:
    recs = [apis.MemRecord(i, b) for i, b in enumerate([3, 5, -3, 4, 4, -5, -4, -4])]
    assert apis.peak_live(recs) == (13, 0)
    assert apis.peak_live([]) == (0, 0)


def test_allocation_sequence_peak_on_cpu() -> None:
    run, peak = truth.allocation_sequence("cpu", unit=1000)
    run()
    assert peak == 5000 + 2 * 4000


def test_unknown_api_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown profiler API"):
        apis.open_profiler("nvtx", "cpu")


def test_error_column_of_a_row_no_api_fills() -> None:
    """On CUDA batch_norm's row carries no API figure (not checked per op): no error, no
    max() of nothing."""
    rows = cases._with_error_column([
        {"op": "aten::batch_norm", "calls": 20, "analytic_B": 512, "why": "output"},
        {"op": "aten::conv2d", "calls": 20, "analytic_B": 512, "profiler_B": 1024,
         "autograd_B": 512, "why": "output"}])
    assert [r["error_B"] for r in rows] == [None, 512]
    assert list(rows[0])[-1] == "why"


def _event(name: str, device, start: int, device_us: float):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start),
                           device_time_total=device_us)


def test_device_durations_read_the_spin_kernels_in_order() -> None:
    """timing_accuracy on CUDA: the spin kernels' device times (Kineto), or each region's
    device time (legacy), oldest first, in seconds."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    events = [_event("void spin_kernel(long)", DeviceType.CUDA, 30, 20_000.0),
              _event("20 ms", DeviceType.CPU, 5, 19_000.0),
              _event("void spin_kernel(long)", DeviceType.CUDA, 10, 5_000.0),
              _event("5 ms", DeviceType.CPU, 1, 4_000.0),
              _event("aten::copy_", DeviceType.CUDA, 20, 7.0)]
    prof = SimpleNamespace(function_events=events)
    assert cases._device_durations(prof, "profiler", ["5 ms", "20 ms"]) == [0.005, 0.02]
    assert cases._device_durations(prof, "legacy", ["5 ms", "20 ms"]) == [0.004, 0.019]


@pytest.mark.parametrize(("errors", "outcome", "sessions"), [
    ([0.01, 0.012, 0.011], "pass", 3),  # inside 5% after the first sessions: no more
    ([0.20, 0.21, 0.19], "fail", 3),  # past it: no more either
    ([0.02, 0.08] * 5, "inconclusive", 9),  # across it: further sessions, up to the cap
], ids=["inside", "past", "across"])
def test_timing_accuracy_takes_further_sessions_only_while_undecided(monkeypatch, errors,
                                                                     outcome, sessions):
    """The verdict's rule, on sessions of set errors: pass when the interval over the
    sessions lies inside the tolerance, fail past it, and further sessions (up to the cap)
    while it reaches across; inconclusive if it still does then."""
    from harness.running.runner import execute

    taken: dict[str, int] = {}  # sessions per profiler API, each given the same errors

    def session(api, device, durations):
        e = errors[taken.setdefault(api, 0)]
        taken[api] += 1
        return cases.TimedSession({cases.region_label(d): e for d in durations}, 0.0, 0.0)

    monkeypatch.setattr(cases, "_timed_session", session)
    entry = execute(suite.case("timing_accuracy"), "cpu", {}, "quick")
    assert entry.outcome == outcome, entry.reason
    counts = [m.value for m in entry.metrics if m.name == "sessions"]
    assert counts and set(counts) == {sessions}


def test_an_older_torch_takes_the_profilers_older_spelling_or_goes_without_an_api(monkeypatch):
    """Before torch 2.1 the autograd profiler's device switch was 1.6's `use_cuda`; an API a
    torch lacks is named with why and left uncovered; with none at all the case is a Skip."""
    from harness.cases import Context, Skip

    opened = {}
    with monkeypatch.context() as m:
        m.setattr(apis, "has_api", lambda _name: False)
        m.setattr(apis.autograd_profiler, "profile", lambda **kw: opened.update(kw) or "old")
        assert apis.open_profiler("autograd", "cpu") == "old"
    assert opened == {"use_cuda": False, "profile_memory": True, "record_shapes": False}

    real = apis.open_profiler

    def without(*missing: str):
        def open_profiler(api, device, **kw):
            if api in missing:
                raise AttributeError(f"module 'torch.autograd' has no attribute {api!r}")
            return real(api, device, **kw)
        return open_profiler

    monkeypatch.setattr(apis, "open_profiler", without("legacy"))
    ctx = Context("cpu", "quick", {})
    assert cases._apis(ctx) == ("profiler", "autograd")
    assert ctx.notes == ["profiler API legacy not in this torch (AttributeError: module "
                         "'torch.autograd' has no attribute 'legacy'): not covered"]
    monkeypatch.setattr(apis, "open_profiler", without(*apis.API_NAMES))
    with pytest.raises(Skip, match="none of the profiler APIs is available"):
        cases._apis(Context("cpu", "quick", {}))


def test_an_empty_region_that_reports_bytes_is_a_note_and_the_correction():
    from harness.cases import Context

    ctx = Context("cpu", "quick", {})
    assert cases.region_cost(ctx, "legacy", [0, 0, 0]) == 0 and ctx.notes == []
    assert cases.region_cost(ctx, "legacy", [16, 16, 32]) == 16
    assert ctx.notes == ["legacy: empty record_function regions reported [16, 16, 32] B (the "
                         "region's own cost); every region's bytes are corrected by 16 B"]


def test_a_region_the_profiler_did_not_record_is_the_profilers_failure():
    """The checks read the regions they ran by name; one missing from the profile is
    FeatureAbsent naming the API and the region, never a check passed over nothing."""
    with torch.profiler.profile() as prof, torch.profiler.record_function("ran"):
        torch.ones(4).sum()
    assert set(apis.regions(prof, {"ran"})) == {"ran"}
    with pytest.raises(apis.FeatureAbsent, match=r"torch\.profiler\.profile.*recorded 1 of the "
                                                 r"2 regions run; none of \['never_ran'\]"):
        apis.regions(prof, ["ran", "never_ran"])


def test_the_1_6_device_switch_example_runs_where_profile_takes_use_cuda(monkeypatch):
    """profile(use_cuda=...) is gone from today's torch (the example fails there, which the
    history records); in a torch that takes it, as 1.6 to 2.13 did (stood in: a profile that
    accepts the switch), the example runs and its memory table is read."""
    import torch.autograd.profiler as profiler

    from harness.releases import api_record
    from suites.profiler import release_notes

    (example,) = [e for e in api_record.load("profiler")
                  if e.func is release_notes.autograd_profiler_use_cuda_switch]
    switched = []

    class OlderProfile(profiler.profile):
        def __init__(self, *args, use_cuda: bool = False, **kwargs):
            switched.append(use_cuda)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(profiler, "profile", OlderProfile)
    got = api_record.run(example)
    assert got["status"] in ("works", "warns"), got
    assert switched == [torch.cuda.is_available()]
