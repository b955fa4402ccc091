"""`release-bench report`: one self-contained HTML page built from run records.

The page reads records only; it never measures. Plots are matplotlib figures inlined as SVG:
the page needs no network, no JavaScript and no files beside it, opens from disk, and the
figures stay sharp when zoomed; an interactive plotting library would add a script bundle
for no gain in a page that is read, not explored.

Sections per run: the release checklist (each feature, its 1.6 status, conformance counts),
each suite's figures (AMP speedup and memory bars, RPC latency against payload with the
floor, fork/wait speedup against the ideal, the profiler accuracy table, the DDP+RPC result),
the tables cases chose to show, telemetry time series per case, and the machine fingerprint.
"""

from __future__ import annotations

import html
import io
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harness import records  # noqa: E402
from harness.cases import metric_id, param_id  # noqa: E402
from harness.summary import fmt_metric, headline_first  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "figure.dpi": 96})

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1150px;
color:#1d1d1f;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
h3{margin-top:1.4em}table{border-collapse:collapse;margin:.6em 0;font-size:.85em}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f6}.pass{color:#137333;font-weight:600}.fail,.error{color:#b3261e;
font-weight:600}.skip{color:#8a6d00}.invalid{color:#b3261e}.muted{color:#666}
.fig{display:inline-block;margin:.4em}.grid{display:flex;flex-wrap:wrap}
code{background:#f4f4f6;padding:0 .2em}nav a{margin-right:1em}
"""


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue: the page is HTML


def _metric(e: dict, name: str) -> float | None:
    for m in e["metrics"]:
        if m["name"] == name:
            return m["value"]
    return None


def _metrics_by_label(e: dict, name: str, label: str) -> dict[Any, float]:
    """{value of `label`: value} of the metrics called `name` (v1 records, which packed the
    label into the name as `name[label=value]` or `name[value]`, are read too)."""
    out = {}
    for m in e["metrics"]:
        if m["value"] is None:
            continue
        if m["name"] == name and label in (m.get("labels") or {}):
            out[m["labels"][label]] = m["value"]
        elif hit := re.fullmatch(rf"{re.escape(name)}\[(?:{re.escape(label)}=)?(.+)\]",
                                 m["name"]):
            out[hit.group(1)] = m["value"]
    return out


def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _html_table(rows: list[dict[str, Any]], limit: int = 200) -> str:
    if not rows:
        return "<p class=muted>(empty)</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{_esc(_fmt_cell(r.get(c)))}</td>" for c in cols) + "</tr>"
        for r in rows[:limit])
    more = f"<p class=muted>{len(rows) - limit} more rows in the run file</p>" \
        if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _fmt_cell(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else v


# -- suite figures -------------------------------------------------------------------------
# Each takes the run's entries of one suite and returns HTML (figures and tables), or "".

def fig_fork_wait(entries: list[dict]) -> str:
    runs = [e for e in entries if e["case"] == "scaling" and e["metrics"]]
    if not runs:
        return ""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    top = 1
    for e in sorted(runs, key=lambda e: e["params"].get("interop_threads", 0)):
        sp = {int(k): v for k, v in _metrics_by_label(e, "speedup", "K").items()}
        ideal = {int(k): v for k, v in _metrics_by_label(e, "ideal", "K").items()}
        ks = sorted(sp)
        n = e["params"].get("interop_threads")
        line, = ax.plot(ks, [sp[k] for k in ks], "o-", label=f"measured, {n} inter-op threads")
        ax.plot(ks, [ideal[k] for k in ks], "--", color=line.get_color(), alpha=.6,
                label=f"ideal min(K, cores, {n})")
        top = max(top, *sp.values(), *ideal.values())
    ax.set(xlabel="independent forked tasks K", ylabel="speedup over serial (x)",
           title="TorchScript fork/wait scaling", ylim=(0, top * 1.15))
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    ax.grid(alpha=.3)
    return f"<div class=fig>{_svg(fig)}</div>"


def fig_amp(entries: list[dict]) -> str:
    """Bars of autocast speedup and peak-memory ratio against fp32, per model and mode."""
    rows = []
    for e in entries:
        if e["case"] != "train_step":
            continue
        speed = _metrics_by_label(e, "speedup", "mode")
        mem = _metrics_by_label(e, "memory_ratio", "mode")
        extra = ", ".join(f"{k}={v}" for k, v in e["params"].items() if k != "model")
        for mode in speed:
            rows.append((f"{e['params'].get('model')} {mode} [{e.get('device')}"
                         f"{', ' + extra if extra else ''}]", speed[mode], mem.get(mode)))
    if not rows:
        return ""
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.35 * len(rows) + 1.4), sharey=True)
    for ax, idx, title in ((axes[0], 1, "training-step speedup over fp32 (x, higher is better)"),
                           (axes[1], 2, "peak memory / fp32 (x, lower is better)")):
        vals = [r[idx] if r[idx] is not None else 0 for r in rows]
        ax.barh(range(len(rows)), vals, color="#4c72b0" if idx == 1 else "#dd8452")
        ax.axvline(1.0, color="k", lw=.8)
        ax.set_title(title, fontsize=9)
        for i, v in enumerate(vals):
            ax.text(v, i, f" {v:.2f}", va="center", fontsize=7)
    axes[0].set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    axes[0].invert_yaxis()
    return f"<div class=fig>{_svg(fig)}</div>"


def _bytes(label: str) -> int:
    """'4B', '64KiB', '4MiB' -> bytes."""
    num, unit = re.fullmatch(r"(\d+)\s*(B|KiB|MiB|GiB)", label).groups()
    return int(num) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


def fig_rpc(entries: list[dict]) -> str:
    """Round-trip p50 against payload, log-log, one line per path, the TCP floor dashed."""
    figs = []
    for e in entries:
        rows = e.get("tables", {}).get("round_trip")
        if not rows:
            continue
        lines: dict[str, dict[int, float]] = defaultdict(dict)
        for r in rows:
            lines[r["path"]][_bytes(r["size"])] = r["p50_us"]
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for path, pts in sorted(lines.items()):
            xs = sorted(pts)
            floor = path.startswith("tcp")
            ax.plot(xs, [pts[x] for x in xs], "k--" if path == "tcp" else
                    (":" if floor else "o-"), ms=3, alpha=.5 if floor and path != "tcp" else 1,
                    label=f"{path} (floor)" if floor else path)
        ax.set(xscale="log", yscale="log", xlabel="payload (bytes)", ylabel="round trip p50 (us)",
               title=f"RPC round trip against payload [{e.get('device')}]")
        ax.grid(alpha=.3, which="both")
        ax.legend(fontsize=7)
        figs.append(f"<div class=fig>{_svg(fig)}</div>")
    return "".join(figs)


def fig_ddp_rpc(entries: list[dict]) -> str:
    """The hybrid's result in one table: each variant's largest difference from the
    single-process reference, and whether its checks held."""
    rows = []
    for e in entries:
        if e["case"] != "matches_reference":
            continue
        rows.append({"variant (DDP)": e["params"].get("ddp", param_id(e["params"])),
                     "device": e.get("device"),
                     "max abs diff": _metric(e, "max_abs_diff"),
                     "max rel diff": _metric(e, "max_rel_diff"),
                     "steps": _metric(e, "steps"), "outcome": e["outcome"]})
    if not rows:
        return ""
    return "<p><b>Parameters after training against the single-process reference</b></p>" + \
        _html_table(rows)


SUITE_FIGURES: dict[str, Callable[[list[dict]], str]] = {
    "fork_wait": fig_fork_wait,
    "amp": fig_amp,
    "rpc": fig_rpc,
    "ddp_rpc": fig_ddp_rpc,
}


def fig_telemetry(e: dict) -> str:
    tel = e.get("telemetry") or {}
    s = tel.get("series") or {}
    if len(s.get("t_s", [])) < 3:
        return ""
    gpu_keys = sorted(k for k in s if k.startswith("gpu") and k.endswith(".power_w"))
    fig, axes = plt.subplots(1, 2 if gpu_keys else 1, figsize=(7 if gpu_keys else 3.6, 1.9),
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
    fig.suptitle(f"{e['suite']}/{e['case']} [{param_id(e['params'])}]", fontsize=8)
    return f"<div class=fig>{_svg(fig)}</div>"


# -- page ----------------------------------------------------------------------------------

def _suite_meta() -> dict[str, tuple[str, str]]:
    """{suite: (feature, 1.6 status)} from the suites' own definitions."""
    try:
        from harness import registry

        return {s.name: (s.feature, s.status) for s in registry.all_suites()}
    except Exception:  # a report of old runs must not need every suite importable
        return {}


def _checklist(run: dict, meta: dict) -> str:
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for e in run["results"]:
        by_suite[e["suite"]].append(e)
    rows = []
    for suite, entries in by_suite.items():
        feature, status = meta.get(suite, (suite, "?"))
        conf = Counter(e["outcome"] for e in entries if e.get("kind") == "conformance")
        bench = Counter(e["outcome"] for e in entries if e.get("kind") == "benchmark")
        bad = conf["fail"] + conf["error"] + bench["fail"] + bench["error"]
        verdict = "fail" if bad else ("pass" if conf["pass"] + bench["pass"] else "skip")
        rows.append(
            f"<tr><td><a href='#{_esc(run['_anchor'])}-{suite}'>{_esc(suite)}</a></td>"
            f"<td>{_esc(feature)}</td><td>{_esc(status)}</td>"
            f"<td>{conf['pass']} pass, {conf['fail']} fail, {conf['error']} error, "
            f"{conf['skip']} skip</td>"
            f"<td>{bench['pass']} pass, {bench['fail'] + bench['error']} not, "
            f"{bench['skip']} skip</td><td class={verdict}>{verdict}</td></tr>")
    return ("<table><tr><th>suite</th><th>release feature</th><th>1.6 status</th>"
            "<th>conformance cases</th><th>benchmark cases</th><th>verdict</th></tr>"
            + "".join(rows) + "</table>")


def _case_rows(entries: list[dict]) -> str:
    rows = []
    for e in entries:
        tel = e.get("telemetry") or {}
        flags = "; ".join(tel.get("invalid_reasons", []))
        figures = ", ".join(f"{metric_id(m['name'], m.get('labels'))}={fmt_metric(m)}"
                            for m in headline_first(e["metrics"])[:6])
        if len(e["metrics"]) > 6:
            figures += f", +{len(e['metrics']) - 6} more"
        checks = e.get("checks") or []
        if checks:
            figures = f"checks {sum(c['passed'] for c in checks)}/{len(checks)}; " + figures
        rows.append(
            f"<tr><td class={e['outcome']}>{e['outcome']}</td><td>{_esc(e['case'])}</td>"
            f"<td>{_esc(e.get('device'))}</td><td>{_esc(param_id(e['params']))}</td>"
            f"<td>{_esc(figures)}</td><td>{_esc(e['reason'])}"
            f"{'<br><span class=invalid>INVALID: ' + _esc(flags) + '</span>' if flags else ''}"
            f"</td></tr>")
    return ("<table><tr><th>outcome</th><th>case</th><th>device</th><th>params</th>"
            "<th>figures</th><th>reason / flags</th></tr>" + "".join(rows) + "</table>")


def _run_section(run: dict, meta: dict) -> str:
    anchor = run["_anchor"]
    m = run["machine"]
    parts = [f"<h2 id='{anchor}'>{_esc(m['name'])}: {_esc(run['started'])} "
             f"({_esc(run['profile'])} profile)</h2>",
             f"<p>torch {_esc(m.get('torch', {}).get('version'))}, "
             f"finished {_esc(run['finished'] or 'no (interrupted)')}, "
             f"{len(run['results'])} results.</p>",
             "<h3>Release checklist</h3>", _checklist(run, meta)]
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for e in run["results"]:
        by_suite[e["suite"]].append(e)
    for suite, entries in by_suite.items():
        feature, status = meta.get(suite, (suite, "?"))
        parts.append(f"<h3 id='{anchor}-{suite}'>{_esc(suite)}: {_esc(feature)} "
                     f"<span class=muted>({_esc(status)})</span></h3>")
        if suite in SUITE_FIGURES:
            parts.append(SUITE_FIGURES[suite](entries))
        parts.append(_case_rows(entries))
        for e in entries:
            for name in e.get("shown_tables", []):
                parts.append(f"<p><b>{_esc(e['case'])}</b> [{_esc(e.get('device'))} "
                             f"{_esc(param_id(e['params']))}]: {_esc(name)}</p>")
                parts.append(_html_table(e["tables"].get(name, [])))
            notes = [n for n in e.get("notes", []) if "recorded, not shown" not in n]
            if notes:
                parts.append(f"<p class=muted>{_esc(e['case'])}: " +
                             "; ".join(_esc(n) for n in notes) + "</p>")
    series = [f for e in run["results"] if (f := fig_telemetry(e))]
    parts.append("<h3>Telemetry</h3>")
    tel = run.get("telemetry")
    parts.append("<details><summary>telemetry sources</summary><pre>"
                 f"{_esc(json.dumps(tel, indent=1)) if tel else 'not recorded'}</pre></details>")
    parts.append("<div class=grid>" + "".join(series) + "</div>" if series else
                 "<p class=muted>no time series (cases too short or telemetry off)</p>")
    cpu, torch_info = m.get("cpu", {}), m.get("torch", {})
    flags = ", ".join(f for f, on in cpu.get("flags", {}).items() if on)
    gpus = ", ".join(g["name"] for g in m.get("gpus", [])) or "none"
    parts.append(
        f"<h3>Machine</h3><p>{_esc(cpu.get('model'))}, {_esc(cpu.get('logical_cores'))} cores "
        f"(flags: {_esc(flags)}); GPUs: {_esc(gpus)}; torch {_esc(torch_info.get('version'))} "
        f"CUDA {_esc(torch_info.get('cuda'))} cuDNN {_esc(torch_info.get('cudnn'))}; "
        f"commit {_esc((m.get('project') or {}).get('commit'))}</p>"
        "<details><summary>full fingerprint</summary><pre>"
        + _esc(json.dumps(m, indent=1)) + "</pre></details>")
    return "\n".join(parts)


def build(runs: list[dict], title: str = "torch-release-bench report") -> str:
    meta = _suite_meta()
    for i, run in enumerate(runs):
        run["_anchor"] = f"run{i}"
    nav = "".join(f"<a href='#run{i}'>{_esc(r['machine']['name'])} {_esc(r['started'])}</a>"
                  for i, r in enumerate(runs))
    body = "\n".join(_run_section(r, meta) for r in runs)
    for run in runs:
        del run["_anchor"]
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f"<meta name=viewport content='width=device-width'><title>{_esc(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{_esc(title)}</h1><nav>{nav}</nav>"
            f"{body}</body></html>")


def latest_runs(root: str | Path) -> list[Path]:
    """The newest run file of each machine folder under `root`."""
    root = Path(root)
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [records.resolve_run(f) for f in folders if any(f.glob("*.json"))]


def write(run_paths: list[Path], out: str | Path) -> Path:
    runs = [records.read_run(p) for p in run_paths]
    return records.write_text_atomic(out, build(runs))

