"""The nightly's page, the one a person opens first: tonight's verdict and why, the checklist,
the events since last night, the gate's verdicts and the figures that moved, each linked to
its asv graph over builds, and the nights before; beside it the release-history page of the
nights' conformance records. Built from the night records only (`harness.releases.nightly`),
from an auto-escaping Jinja2 template (templates/nightly.html.j2)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness import records
from harness.presenting import report

PAGE = "index.html"
HISTORY_PAGE = "history.html"


def asv_link(asv_html: str, benchmark: str) -> str:
    """The address of a benchmark's graph over builds on asv's pages."""
    return f"{asv_html}/index.html#{benchmark.split('(', 1)[0]}"


def _case_benchmarks(case: str) -> list[str]:
    """The asv benchmarks of a gate case (suite/case[...]): its track views' methods."""
    from harness import registry

    suite, _, rest = case.partition("/")
    try:
        c = registry.load(suite).case(rest.split("[", 1)[0])
    except (KeyError, ValueError, ImportError):
        return []
    return [f"{suite}.asv_bench.{v.name}.track_{t.name}" for v in c.tracks for t in v.tracks]


def view(nights: list[dict], conformance: dict, asv_html: str) -> dict[str, Any]:
    """What the template shows of the last night of `nights`."""
    from harness.releases.history import stale_cases

    night = nights[-1]
    label = night["build"]["label"]
    stale = stale_cases(conformance)
    checklist = [{"case": key, "outcome": c["outcome"],
                  "status": (c.get("expected") or {}).get("status", c["outcome"]),
                  "why": (c.get("expected") or {}).get("why") or c.get("reason", ""),
                  "warnings": c.get("warnings", []), "stale": stale.get(key, "")}
                 for key, c in sorted(conformance["cases"].items())]
    gate = night.get("gate")
    rows = []
    for verdicts in ((gate or {}).get("moved", []), (gate or {}).get("inconclusive", [])):
        for m in verdicts:
            links = _case_benchmarks(m["case"])
            rows.append({**m, "links": [(b, asv_link(asv_html, b)) for b in links]})
    asv = night["asv"]
    here = [{**r, "link": asv_link(asv_html, r["benchmark"])}
            for r in asv["regressions"] if r["to"] == label]
    earlier = [{**r, "link": asv_link(asv_html, r["benchmark"])}
               for r in asv["regressions"] if r["to"] != label]
    compared = [{**r, "link": asv_link(asv_html, r["benchmark"])} for r in asv["compare"]]
    return {"night": night, "checklist": checklist, "gate": gate, "gate_rows": rows,
            "asv_here": here, "asv_earlier": earlier, "asv_compare": compared,
            "asv_index": f"{asv_html}/index.html", "asv_regressions": f"{asv_html}/#regressions",
            "history": HISTORY_PAGE, "examples": conformance["api"],
            "nights": list(reversed(nights))}


def write(html_dir: Path, record_dir: Path, asv_html: Path) -> Path:
    """The page of the last night recorded in `record_dir`, and the release-history page of
    the nights' builds (each build once, at its last night), into `html_dir`."""
    from harness.releases import nightly

    nights = nightly.read_nights(record_dir)
    recs: dict[str, dict] = {}
    for n in nights:
        rec = json.loads((record_dir / n["conformance"]["record"]).read_text())
        recs.pop(rec["release"], None)
        recs[rec["release"]] = rec
    records.write_text_atomic(html_dir / HISTORY_PAGE, report.build_history(
        list(recs.values()), title="torch builds, night by night"))
    last = json.loads((record_dir / nights[-1]["conformance"]["record"]).read_text())
    link = Path(os.path.relpath(asv_html, html_dir)).as_posix()
    page = report.templates().get_template("nightly.html.j2").render(
        title=f"nightly: torch {nights[-1]['build']['torch']}", v=view(nights, last, link))
    return records.write_text_atomic(html_dir / PAGE, page)
