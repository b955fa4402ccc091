"""`release-bench report`: one self-contained HTML page built from run records.

The page reads records only; it never measures. Plots are matplotlib figures inlined as SVG:
the page needs no network, no JavaScript and no files beside it, opens from disk, and the
figures stay sharp when zoomed; an interactive plotting library would add a script bundle
for no gain in a page that is read, not explored.

Sections per run: the release checklist (each feature, its 1.6 status, conformance counts),
each suite's figures (declared by the suite itself, `figures`), its cases, the tables
cases chose to show, telemetry time series per case, and the machine fingerprint. The page
comes from an auto-escaping Jinja2 template (templates/report.html.j2); this module knows no
suite and no metric.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from harness import records
from harness.cases import param_id
from harness.presenting import figures
from harness.presenting.summary import key_figures

KEY_FIGURES = 6  # figures a case's row shows, headline ones first
TEMPLATES = Path(__file__).parent / "templates"


def fig_telemetry(e: records.Result) -> figures.Figure | None:
    """CPU (and GPU power and clock) over the case's time, where telemetry sampled it."""
    tel = e.telemetry or {}
    s = tel.get("series") or {}
    if len(s.get("t_s", [])) < 3:
        return None
    gpu_keys = sorted(k for k in s if k.startswith("gpu") and k.endswith(".power_w"))
    fig, axes = figures.subplots(1, 2 if gpu_keys else 1, figsize=(7 if gpu_keys else 3.6, 1.9),
                                 squeeze=False)
    ax = axes[0][0]
    ax.plot(s["t_s"], s["cpu_util_pct"], label="CPU util %")
    ax.plot(s["t_s"], s["other_cpu_pct"], label="others, % of a core", alpha=.7)
    ax.set(xlabel="s", ylim=(0, None))
    ax.legend(fontsize=6)
    for k in gpu_keys:
        gpu = k.split(".")[0]
        ax2 = axes[0][1]
        ax2.plot(s["t_s"], s[k], label=f"{gpu} power W")
        if f"{gpu}.sm_clock_mhz" in s:
            ax3 = ax2.twinx()
            ax3.plot(s["t_s"], s[f"{gpu}.sm_clock_mhz"], color="#dd8452", label="SM MHz")
            ax3.set_ylabel("SM MHz", fontsize=7)
        ax2.set(xlabel="s")
        ax2.legend(fontsize=6)
    fig.suptitle(f"{e.case_id} [{param_id(e.params)}]", fontsize=8)
    return figures.plot(e.case_id, fig)


# -- what the template shows ---------------------------------------------------------------

FigureFn = Callable[[list[records.Result]], "figures.Figure | None"]


def _suites() -> dict[str, tuple[str, str, list[FigureFn]]]:
    """{suite: (feature, 1.6 status, figures)} from the suites' own definitions."""
    from harness import registry

    out = {}
    for name in registry.suite_names():
        try:
            suite = registry.load(name)
            out[name] = (suite.feature, suite.status, registry.figures(name))
        except Exception:  # a report of old runs must not need every suite importable
            continue
    return out


def _safe(fig: figures.Figure) -> figures.Figure:
    """The figure with its SVG marked safe (the template escapes everything else), its table
    rows made whole."""
    return figures.Figure(fig.title, Markup(fig.svg), _cells(fig.rows, 3))


def _cells(rows: list[dict[str, Any]], digits: int = 6) -> list[dict[str, Any]]:
    """Rows over the first row's columns, numbers to `digits` significant digits, a missing
    or None cell empty."""
    cols = list(rows[0]) if rows else []
    return [{c: "" if r.get(c) is None else figures.sig(r.get(c), digits) for c in cols}
            for r in rows]


def _stale(e: records.Result) -> str:
    """Why a result was judged by checks that have changed since ("" where it is current)."""
    from harness import registry
    from harness.cases import stale_reason

    return stale_reason(registry.find_case(e.suite, e.case), e.check_version) or ""


def _case_row(e: records.Result) -> dict[str, Any]:
    tel = e.telemetry or {}
    exp = e.expected or {}
    return {"outcome": e.status, "case": e.case, "device": e.device,
            "params": param_id(e.params), "figures": key_figures(e, KEY_FIGURES),
            "reason": e.reason, "invalid": "; ".join(tel.get("invalid_reasons", [])),
            "issue": exp.get("issue", ""), "expected_why": exp.get("why", ""),
            "rates": "; ".join(exp.get("rates", [])), "stale": _stale(e)}


def _suite_view(anchor: str, name: str, entries: list[records.Result],
                known: dict[str, tuple[str, str, list[FigureFn]]]) -> dict[str, Any]:
    feature, status, figure_fns = known.get(name, (name, "?", []))
    conformance = Counter(e.outcome for e in entries if e.kind == "conformance")
    benchmark = Counter(e.outcome for e in entries if e.kind == "benchmark")
    statuses = Counter(e.status for e in entries)
    # a failure the expectations excuse is shown as such, and does not fail the suite
    bad = sum(statuses[s] for s in ("fail", "error", "unexpected-fail", "unexpected-pass"))
    made = [fn(entries) for fn in figure_fns]
    return {
        "name": name, "anchor": f"{anchor}-{name}", "feature": feature, "status": status,
        "conformance": conformance, "benchmark": benchmark,
        "verdict": "fail" if bad else ("expected-fail" if statuses["expected-fail"] else (
            "pass" if conformance["pass"] + benchmark["pass"] else "skip")),
        "expected_fails": statuses["expected-fail"],
        "stale": sum(1 for e in entries if _stale(e)),
        "figures": [_safe(f) for f in made if f is not None and not f.empty],
        "cases": [_case_row(e) for e in entries],
        "tables": [{"case": e.case, "device": e.device, "params": param_id(e.params),
                    "name": t, "rows": _cells(e.tables.get(t, []))}
                   for e in entries for t in e.shown_tables],
        "notes": [{"case": e.case, "text": "; ".join(notes)} for e in entries
                  if (notes := [n for n in e.notes if "recorded, not shown" not in n])],
    }


def _run_view(i: int, run: records.Run, known: dict) -> dict[str, Any]:
    anchor = f"run{i}"
    by_suite: dict[str, list[records.Result]] = defaultdict(list)
    for e in run.results:
        by_suite[e.suite].append(e)
    m = run.machine
    cpu, torch_info = m.get("cpu", {}), m.get("torch", {})
    tel = run.telemetry
    return {
        "anchor": anchor, "machine": m, "started": run.started, "profile": run.profile,
        "finished": run.finished, "result_count": len(run.results),
        "stale": sum(1 for e in run.results if _stale(e)),
        "hosts": run.hosts or [],
        "suites": [_suite_view(anchor, name, entries, known)
                   for name, entries in by_suite.items()],
        "telemetry_sources": json.dumps(tel, indent=1) if tel else "not recorded",
        "telemetry_series": [_safe(f) for e in run.results if (f := fig_telemetry(e))],
        "cpu_model": cpu.get("model"), "cores": cpu.get("logical_cores"),
        "cpu_flags": ", ".join(f for f, on in cpu.get("flags", {}).items() if on),
        "gpus": ", ".join(g["name"] for g in m.get("gpus", [])) or "none",
        "torch_version": torch_info.get("version"), "cuda": torch_info.get("cuda"),
        "cudnn": torch_info.get("cudnn"), "commit": (m.get("project") or {}).get("commit"),
        "fingerprint": json.dumps(m, indent=1),
    }


def templates() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True)


def build(runs: list[records.Run], title: str = "torch-release-bench report") -> str:
    """The page for `runs` (which it leaves as they are)."""
    known = _suites()
    return templates().get_template("report.html.j2").render(
        title=title, runs=[_run_view(i, r, known) for i, r in enumerate(runs)])


def _matrix_view(record: dict) -> dict[str, Any]:
    """The release matrix as the template shows it: features x versions, the changes, and
    headline figures x versions with each version's verdict against the one before."""
    from harness.comparing.compare import VERDICTS
    from harness.presenting.summary import fmt_metric

    labels = [v["label"] for v in record["versions"]]
    changed = defaultdict(set)  # case -> versions it changed in
    for step in record["steps"]:
        for c in step["changes"]:
            changed[c["case"]].add(step["to"])
    from harness.releases.history import stale_cases

    cases = sorted({cid for side in record["sides"].values() for cid in side["cases"]})
    stale = {lb: stale_cases(record["sides"][lb]) for lb in labels}
    features = [{"case": cid, "cells": [
        {**(record["sides"][lb]["cases"].get(cid) or {"outcome": "absent", "warnings": []}),
         "changed": lb in changed[cid], "stale": stale[lb].get(cid, "")} for lb in labels]}
        for cid in cases]
    verdicts = {(step["to"], v["case"], v["metric"], json.dumps(v["labels"], sort_keys=True)):
                v for step in record["steps"] for v in step["headline_verdicts"]}
    rows: dict[tuple, dict] = {}
    for lb in labels:
        for h in record["sides"][lb]["headlines"]:
            key = (h["case"], h["name"], json.dumps(h["labels"], sort_keys=True))
            row = rows.setdefault(key, {"case": h["case"], "metric": h["metric"], "cells": {}})
            v = verdicts.get((lb, *key))
            row["cells"][lb] = {
                "text": fmt_metric(records.Metric(h["name"], h["value"], h["unit"],
                                                  stats={"ci": h["ci"]})),
                "verdict": v["verdict"] if v else "",
                "factor": (f"{v['factor']:.3g}x" + (
                    f" [{v['interval'][0]:.3g}, {v['interval'][1]:.3g}]"
                    if v["interval"] and None not in v["interval"] else ""))
                if v and v["factor"] is not None else ""}
    changes = [{**c, "step": f"{step['from']} → {step['to']}"} for step in record["steps"]
               for c in step["changes"]]
    return {"versions": record["versions"], "labels": labels, "features": features,
            "headlines": [{**r, "cells": [r["cells"].get(lb) for lb in labels]}
                          for r in rows.values()],
            "changes": changes, "rounds": record["rounds"],
            "stale": sum(len(v) for v in stale.values()),
            "machine": (record.get("machine") or {}).get("name", ""),
            "started": record.get("started", ""),
            # every verdict a column, those of records judged before `worse` and `better` too
            "counts": [{"step": f"{s['from']} → {s['to']}",
                        **{v: s["counts"].get(v, 0) for v in VERDICTS}}
                       for s in record["steps"]]}


def build_matrix(record: dict, title: str = "torch release matrix") -> str:
    """The release-matrix page for a `release-bench matrix` record."""
    return templates().get_template("matrix.html.j2").render(title=title, m=_matrix_view(record))


def _history_view(recs: list[dict]) -> dict[str, Any]:
    """The release history as the template shows it: builds, features x releases and examples x
    releases with each change marked at the first release that shows it, and the changes."""
    from harness.releases import envs, history

    labels = [r["release"] for r in recs]
    changed = defaultdict(set)  # case or example -> releases where it changed
    changes = []
    for c in history.changes(recs):
        before, release = c["versions"]
        changed[c["case"]].add(release)
        detail = (c.get("warning") or c.get("detail")
                  or f"{c.get('from')} → {c.get('to')}"
                  + (f": {c['reason']}" if c.get("reason") else "")
                  + (f" (before: {c['reason_before']})" if c.get("reason_before") else ""))
        changes.append({"release": release, "before": before, "case": c["case"],
                        "what": c["what"], "detail": detail, "flag": c.get("flag"),
                        "stale": c.get("stale", "")})
    cases = sorted({cid for r in recs for cid in r["cases"]})
    stale = {r["release"]: history.stale_cases(r) for r in recs}
    features = []
    for cid in cases:
        cells = []
        for r in recs:
            c = r["cases"].get(cid) or {"outcome": "absent", "warnings": [], "reason": ""}
            why = stale[r["release"]].get(cid, "")
            cells.append({**c, "css": "na" if c["outcome"] == "n/a" else c["outcome"],
                          "title": "\n".join(filter(None, [c.get("reason"),
                                                           why and f"STALE: {why}"])),
                          "changed": r["release"] in changed[cid], "stale": why})
        features.append({"case": cid, "cells": cells})
    examples: dict[str, dict] = {}
    for r in recs:
        for a in r["api"]:
            examples.setdefault(f"{a['suite']}.{a['example']}", {
                "suite": a["suite"], "title": a["title"], "spelling": a["spelling"],
                "code": _example_code(a["suite"], a["example"]), "by": {}})["by"][
                    r["release"]] = a
    rows = []
    for name, e in sorted(examples.items(), key=lambda kv: (kv[1]["suite"], kv[1]["spelling"],
                                                             kv[0])):
        cells = []
        for lb in labels:
            a = e["by"].get(lb) or {"status": "absent", "reason": "", "warnings": []}
            cells.append({"status": a["status"], "css": a["status"],
                          "title": "\n".join(filter(None, [a["reason"], *a["warnings"]])),
                          "changed": lb in changed[name]})
        rows.append({**e, "cells": cells})
    prev_build = None
    releases = []
    for r in recs:
        build = r.get("build") or {}
        env = r.get("env")
        releases.append({
            **r, "build": build,
            "build_changed": prev_build is not None and bool(envs.same_build(prev_build, build)),
            "env": {"disk": f"{env['disk_bytes'] / 2**30:.1f} GiB",
                    "added": f"{(env['added_bytes'] or 0) / 2**30:.1f} GiB"} if env else None})
        prev_build = build
    return {"releases": releases, "features": features, "examples": rows, "changes": changes,
            "first": labels[0] if labels else "", "last": labels[-1] if labels else "",
            "machine": (recs[0].get("machine") or {}).get("name", "") if recs else "",
            "wall_min": round(sum(r.get("wall_s", 0) for r in recs) / 60, 1),
            "stale": {release: len(why) for release, why in stale.items() if why},
            **history.totals(recs)}


def _example_code(suite: str, name: str) -> str:
    from harness.releases import api_record

    found = [e for e in api_record.load(suite) if e.name == name]
    return found[0].code if found else ""


def build_history(recs: list[dict], title: str = "torch release history") -> str:
    """The release-history page for the records of `release-bench history`."""
    return templates().get_template("history.html.j2").render(title=title,
                                                                h=_history_view(recs))


def latest_runs(root: str | Path) -> list[Path]:
    """The newest run file of each machine folder under `root`."""
    root = Path(root)
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [records.resolve_run(f) for f in folders if any(f.glob("*.json"))]


def write(run_paths: list[Path], out: str | Path) -> Path:
    runs = [records.read_run(p) for p in run_paths]
    return records.write_text_atomic(out, build(runs))
