"""Run records: the schema other tools read, atomic writes, and one-line rejections."""

from __future__ import annotations

import json

import pytest

from harness import records

MACHINE = {"name": "test-machine"}


def a_run(**overrides):
    run = records.new_run(MACHINE, "quick")
    run["results"].append({
        "suite": "s", "case": "c", "params": {"n": 1}, "outcome": "pass", "reason": "",
        "metrics": [{"name": "t", "value": 0.5, "unit": "s", "stats": {"median": 0.5}}],
    })
    run.update(overrides)
    return run


def test_round_trip_keeps_the_contract_fields(tmp_path):
    run = a_run()
    path = records.write_json_atomic(records.run_path(tmp_path, run), run)
    assert path.parent.name == "test-machine" and path.name.endswith("-quick.json")
    back = records.read_run(path)
    assert back == run
    for key in ("schema_version", "machine", "profile", "started", "finished", "results"):
        assert key in back
    assert set(back["results"][0]) >= {"suite", "case", "params", "outcome", "reason", "metrics"}


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "run.json"
    records.write_json_atomic(path, a_run())
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
        (json.dumps(a_run(schema_version=99)), "schema_version 99 is not one this version reads"),
        (json.dumps(a_run(results=[{"suite": "s"}])), "results/0"),
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
    run = a_run()
    run["results"][0]["outcome"] = "sort of"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(run))
    with pytest.raises(records.RecordError, match="outcome"):
        records.read_run(path)


def test_resolve_picks_the_newest_run_in_a_folder(tmp_path):
    for stamp in ("20260101T000000Z", "20260301T000000Z", "20260201T000000Z"):
        records.write_json_atomic(tmp_path / "m" / f"{stamp}-quick.json", a_run())
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
