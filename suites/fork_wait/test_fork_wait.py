"""The fork/wait suite under pytest: its cases as tests, its workloads as benchmarks."""

from harness.adapters.pytest_adapter import (
    benchmark_case_tests,
    conformance_tests,
    workload_benchmarks,
)
from suites.fork_wait.cases import suite

test_conformance = conformance_tests(suite)
test_benchmark_case = benchmark_case_tests(suite)
test_workload = workload_benchmarks(suite)


def test_the_release_notes_scripted_example_checks_its_answer_as_plain_python(monkeypatch):
    """The 1.6 example's scripted body, run as Python (TorchScript off, as PYTORCH_JIT=0 does:
    fork then runs each task at once): it gives the notes' -100, and a `foo` that does not
    negate makes the example fail, saying what it gave."""
    import torch.jit._state

    from harness.releases import api_record
    from suites.fork_wait import release_notes

    (example,) = [e for e in api_record.load("fork_wait")
                  if e.func is release_notes.scripted_fork_wait]
    monkeypatch.setattr(torch.jit._state._enabled, "enabled", False)  # restored after
    assert api_record.run(example)["status"] in ("works", "warns")
    monkeypatch.setattr(release_notes, "foo", torch.abs)
    got = api_record.run(example)
    assert got["status"] == "fails" and "gave 100" in got["reason"], got
