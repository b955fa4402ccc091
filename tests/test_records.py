"""Run records: the schema other tools read, atomic writes, and one-line rejections."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness import records

MACHINE = {"name": "test-machine"}


def a_doc(**overrides) -> dict:
    """A run record as JSON, with one result."""
    doc = records.new_run(MACHINE, "quick").to_json()
    doc["results"].append({
        "suite": "s", "case": "c", "params": {"n": 1}, "outcome": "pass", "reason": "",
        "metrics": [{"name": "t", "value": 0.5, "unit": "s", "stats": {"median": 0.5}}],
    })
    return doc | overrides


def a_run(**overrides) -> records.Run:
    return records.Run.from_json(a_doc(**overrides))


def test_round_trip_keeps_the_contract_fields(tmp_path):
    run = a_run()
    path = records.write_run(records.run_path(tmp_path, run), run)
    assert path.parent.name == "test-machine" and path.name.endswith("-quick.json")
    back = records.read_run(path)
    assert back == run
    doc = json.loads(path.read_text())
    for key in ("schema_version", "machine", "profile", "started", "finished", "results"):
        assert key in doc
    assert set(doc["results"][0]) >= {"suite", "case", "params", "outcome", "reason", "metrics"}


def test_typed_records_write_back_what_they_read():
    """Every field, and keys this version does not know (a newer record's), survive."""
    doc = a_doc(hosts=[{"host": "a"}], future_field={"x": 1})
    doc["results"][0] |= {
        "kind": "benchmark", "device": "cpu", "started": "2026-01-01T00:00:00+00:00",
        "elapsed_s": 1.5, "checks": [{"name": "ok", "passed": True, "detail": ""},
                                     {"name": "fast", "passed": False, "detail": "slow",
                                      "performance": True}],
        "notes": ["n"], "tables": {"t": [{"a": 1}]}, "shown_tables": ["t"], "details": {},
        "telemetry": {"valid": True}, "expected": {"status": "pass"}, "newer": 3}
    doc["results"][0]["metrics"][0] |= {
        "labels": {"path": "gloo", "bytes": 4}, "kind": "time", "better": "lower",
        "samples": [0.4, 0.5, 0.6], "sessions": [0.5, 0.5], "headline": True}
    assert records.Run.from_json(doc).to_json() == doc
    assert records.Run.from_json(doc).extra == {"future_field": {"x": 1}}


def test_records_are_frozen_and_know_their_identity():
    run = a_run()
    result = run.results[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.outcome = "fail"  # type: ignore[misc]
    assert result.key == "s/c[ n=1]"  # no device recorded
    m = result.metrics[0]
    assert m.key == records.MetricKey("t") and str(m.key) == "t"
    labelled = records.Metric("p50", 1.0, "us", labels={"path": "gloo", "bytes": 4})
    # one figure whatever the order its labels were recorded in
    assert labelled.key == records.MetricKey.of("p50", {"bytes": 4, "path": "gloo"})
    assert str(labelled.key) == "p50[bytes=4, path=gloo]"
    assert result.metric(m.key) is m and result.metric(labelled.key) is None


def test_a_check_cannot_be_passed_and_inconclusive_at_once():
    assert records.Check("p50 within 5%", False, inconclusive=True).failed is False
    with pytest.raises(ValueError, match="check 'p50 within 5%': passed and inconclusive at once"):
        records.Check("p50 within 5%", True, inconclusive=True)


def test_a_result_says_whether_its_figures_may_be_judged():
    ok = a_run().results[0]
    assert ok.valid and ok.contended() is None
    busy = dataclasses.replace(ok, telemetry={"valid": False, "invalid_reasons": ["steal 9%"]})
    assert not busy.valid and busy.contended() == "measured contended: steal 9%"
    assert dataclasses.replace(ok, outcome="invalid").contended() is not None


def test_version_1_records_are_still_read(tmp_path):
    """Schema 1 had no samples or labels: its figures read as figures without them."""
    doc = a_doc(schema_version=1)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    run = records.read_run(path)
    assert run.schema_version == 1
    assert run.results[0].metrics[0].samples is None and run.results[0].metrics[0].labels == {}


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "run.json"
    records.write_run(path, a_run())
    before = path.read_text()
    with pytest.raises(ValueError):  # NaN is not JSON; the dump fails half-way
        records.write_json_atomic(path, {"x": float("nan")})
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temp file left


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"hello": "world"}), "not a torch-release-bench run"),
        (json.dumps(a_doc(schema_version=99)), "schema_version 99 is not one this version reads"),
        (json.dumps(a_doc(results=[{"suite": "s"}])), "results/0"),
    ],
)
def test_bad_files_are_rejected_with_one_line(tmp_path, content, expected):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(records.RecordError) as err:
        records.read_run(path)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_outcome_is_rejected(tmp_path):
    doc = a_doc()
    doc["results"][0]["outcome"] = "sort of"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(records.RecordError, match="outcome"):
        records.read_run(path)


def test_resolve_picks_the_newest_run_in_a_folder(tmp_path):
    for stamp in ("20260101T000000Z", "20260301T000000Z", "20260201T000000Z"):
        records.write_run(tmp_path / "m" / f"{stamp}-quick.json", a_run())
    assert records.resolve_run(tmp_path).name == "20260301T000000Z-quick.json"
    with pytest.raises(records.RecordError, match="no such run file"):
        records.resolve_run(tmp_path / "missing.json")


def test_machine_paths_are_scrubbed_from_records():
    import sys
    from pathlib import Path

    root = str(Path(records.__file__).resolve().parent.parent)
    doc = {"traceback": f'File "{sys.prefix}/lib/x.py"\nFile "{root}/harness/y.py"',
           "nested": [f"{Path.home()}/z"], "n": 1}
    out = records.scrub_paths(doc)
    assert out == {"traceback": 'File "<env>/lib/x.py"\nFile "<project>/harness/y.py"',
                   "nested": ["~/z"], "n": 1}


def test_a_record_that_show_would_refuse_is_never_written(tmp_path):
    path = tmp_path / "run.json"
    records.write_run(path, a_run())
    before = path.read_text()
    bad = dataclasses.replace(a_run(), results=(dataclasses.replace(
        a_run().results[0], metrics=(records.Metric("t", "0.5", "s"),)),))  # not a number
    with pytest.raises(records.RecordError) as e:
        records.write_run(path, bad)
    assert "not written" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="outcome 'passed' is not one of pass, fail"):
        dataclasses.replace(a_run().results[0], outcome="passed")  # refused where it is made
    nan = dataclasses.replace(a_run(), results=(dataclasses.replace(
        a_run().results[0], metrics=(records.Metric("t", float("nan"), "s"),)),))
    with pytest.raises(records.RecordError):
        records.write_run(path, nan)
    assert path.read_text() == before  # the earlier record is kept whole
    assert records.read_run(path) == a_run().__class__.from_json(json.loads(before))


def test_a_case_key_is_written_and_read_back_as_stored_comparisons_keep_it():
    key = records.CaseKey.of("rpc", "round_trip", "cpu", {"n": 2, "path": "tp-shm"})
    assert str(key) == "rpc/round_trip[cpu n=2-path=tp-shm]"
    assert records.CaseKey.parse(str(key)) == key
    assert (key.case_id, key.unit) == ("rpc/round_trip", "rpc.round_trip")
    bare = records.CaseKey.parse("amp/gemm_ladder[cpu default]")
    assert bare == records.CaseKey("amp", "gemm_ladder", "cpu") and bare.params == ()
    result = records.Result("rpc", "round_trip", "pass", device="cpu",
                            params={"n": 2, "path": "tp-shm"})
    assert result.case_key == key and result.key == str(key)
    for text in ("amp/gemm_ladder", "amp[cpu default]", "a/b[cpu]", "a/b[cpu junk]"):
        with pytest.raises(ValueError):
            records.CaseKey.parse(text)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("kind", "tme", "kind 'tme' is not one of time, latency"),
    ("better", "up", "better 'up' is not higher or lower")])
def test_a_figure_of_no_known_kind_or_direction_is_refused_where_it_is_recorded(field, value,
                                                                               says):
    from harness.cases import Context

    ctx = Context("cpu", "quick", {})
    with pytest.raises(ValueError, match=says):
        ctx.metric("t", 1.0, "s", **{"kind": "time", "better": "lower", field: value})
    assert ctx.metrics == []
    m = ctx.metric("t", 1.0, "s", kind="time", better="lower")
    assert m.kind == records.MetricKind.TIME and m.record().to_json()["kind"] == "time"


def test_a_write_the_disk_refuses_keeps_the_previous_file(tmp_path, monkeypatch):
    """As above, the failure inside the write itself (a full disk)."""
    import os

    path = tmp_path / "run.json"
    records.write_json_atomic(path, {"figure": 1})

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        records.write_json_atomic(path, {"figure": 2})
    assert json.loads(path.read_text()) == {"figure": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_a_folder_given_as_a_run_file_or_without_runs_is_one_line(tmp_path):
    with pytest.raises(records.RecordError, match="cannot read") as err:
        records.read_run(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(records.RecordError, match="no run files in this directory"):
        records.resolve_run(tmp_path)


def test_check_raises_fails_on_the_wrong_exception_and_on_none():
    from harness.cases import Context

    ctx = Context("cpu", "quick", {})
    assert ctx.check_raises("raises ValueError", lambda: int("x"), ValueError, "invalid")
    assert not ctx.check_raises("raises KeyError", lambda: int("x"), KeyError)
    assert not ctx.check_raises("raises at all", lambda: 1, ValueError)
    assert [(c.passed, c.detail.split(":")[0]) for c in ctx.checks] == [
        (True, "raised ValueError"), (False, "raised ValueError instead"), (False, "did not raise")]


def test_a_relative_path_is_shown_as_given_and_a_missing_figure_as_n_a():
    from harness.formats import fmt_value

    assert records.shown_path("results/runs/x.json") == "results/runs/x.json"
    assert fmt_value(None, "s") == "n/a" and fmt_value(0.00123, "s") == "1.23 ms"
