"""The validation experiments: one small JSON row each in results/validation/, and
docs/validation.md rendered from them.

    python scripts/validation.py record AB_DIR --name NAME --planted SPEC|A/A \
        [--affected REGEX] [--command TEXT] [--note TEXT]
    python scripts/validation.py render
    python scripts/validation.py spread AB_DIR ...

`record` reads a stored `ab` (or `calibrate`) folder (its ab.json, comparison.json, merged
runs and rounds) and writes `results/validation/<date>-<NAME>.json`: the date, commit and
machine it ran on, what was planted, how many figures were judged, how many of the figures
the plant affects (those whose `suite/case metric[labels]` matches REGEX) were flagged as
regressions and how many called unchanged, how many others were flagged (false flags), the
counts of changes inside the tolerance (worse or better), of unchanged and of inconclusive
figures, the median detectable change and the wall time. `render` writes docs/validation.md
from every row, oldest first; a test checks that the committed page is what `render` makes,
so a new experiment is a new row, not new prose.
Measurements that are not an ab of a plant (a release history's cost, a bisect, a change in
a release that the harness had to answer) are findings: one JSON each in
`results/validation/findings/` (date, commit, machine, title, text, command), listed under
the table.
Records of the test suite's power (`scripts/power.py run`: planted defects and the tests
that break features on purpose, caught or missed) are in `results/validation/power/`, shown
side by side under the findings.
`spread` prints each family's sd of log B/A per round (per swapped pair in a duet; a family's
figure is the 75% quantile of its members', as `calibrate` keeps it) in stored ab folders,
planted or not: a plant moves the mean, not the spread about it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = ROOT / "results" / "validation"
FINDINGS = ROWS / "findings"
PAGE = ROOT / "docs" / "validation.md"
CALIBRATIONS = ROOT / "results" / "calibration"
MUTATION = ROWS / "mutation"
POWER = ROWS / "power"
sys.path.insert(0, str(ROOT))

from harness import records  # noqa: E402
from harness.cases import metric_id  # noqa: E402
from harness.releases import mutants  # noqa: E402

COLUMNS = [  # (field, heading)
    ("date", "date"), ("commit", "commit"), ("machine", "machine"),
    ("experiment", "experiment"), ("design", "design"), ("judged", "judged"),
    ("affected", "affected"), ("caught", "caught"), ("affected_unchanged", "affected unchanged"),
    ("false_flags", "false flags"), ("inside_tolerance", "worse or better"),
    ("unchanged", "unchanged"),
    ("inconclusive", "inconclusive"), ("detectable_median", "detectable (median)"),
    ("wall_minutes", "wall"), ("command", "command"),
]


def _wall_minutes(base: Path) -> float | None:
    """From the first round's start to the last round's end."""
    times = []
    for path in (base / "rounds").rglob("*.json"):
        try:
            run = records.read_run(path)
        except records.RecordError:
            continue
        times += [run.started, run.finished or run.started]
    if not times:
        return None
    parsed = sorted(datetime.fromisoformat(t) for t in times)
    return round((parsed[-1] - parsed[0]).total_seconds() / 60, 1)


def row_from_ab(base: Path, name: str, planted: str, affected: str | None,
                command: str | None, note: str | None) -> dict:
    meta = json.loads((base / "ab.json").read_text())
    comparison = json.loads((base / "comparison.json").read_text())
    # each side's merged run: side-A.json, or A.json in folders older than the campaign engine
    side = records.read_run(next(p for p in (base / "side-A.json", base / "A.json")
                                 if p.exists()))
    machine = side.machine
    pattern = re.compile(affected) if affected else None
    changes = comparison["changes"]

    def label(c: dict) -> str:
        return f"{c['case'].split('[')[0]} {metric_id(c['metric'], c['labels'])}"

    hit = [c for c in changes if pattern and pattern.search(label(c))]
    flagged = [c for c in changes if c["verdict"] in ("regression", "improvement")]
    detectable = [c["detectable"] for c in changes if c.get("detectable") is not None]
    more = meta.get("more_rounds") or {}
    duets = (meta.get("design") or {}).get("duet_units")
    bursts = (meta.get("design") or {}).get("bursts_units")
    rest = ("; the rest sequential"
            if set(meta.get("groups", [])) - set(duets or bursts or []) else "")
    by_unit = (meta.get("design") or {}).get("units")
    chosen = {u.get("why", "").startswith("--design") for u in (by_unit or {}).values()}
    design = (f"ab, each benchmark in its best design, {meta['rounds']} rounds or swapped pairs ("
              + ", ".join(f"{name} {u['design']}" for name, u in by_unit.items()) + ")"
              if by_unit and chosen == {False} else
              f"ab --duet, {meta['rounds']} swapped pairs ({', '.join(duets)}{rest})"
              if duets else
              f"ab --bursts, {meta['rounds']} rounds ({', '.join(bursts)}{rest})"
              if bursts else f"ab, {meta['rounds']} rounds") + ("".join(
        f", {n} rounds for {u}" if duets else f", {n} for {u}"
        for u, n in sorted(more.items())) if more else "")
    if cap := (meta.get("max_rounds") or {}).get("cap"):
        design += f", --max-rounds {cap}"
    hit_keys = [f"{c['case']} {metric_id(c['metric'], c['labels'])}" for c in hit]  # as ab's
    stages = [{"rounds": max(j["rounds"].values()), "minutes": j["minutes"],
               "caught": sum(j["verdicts"].get(k) == "regression" for k in hit_keys),
               "affected_unchanged": sum(j["verdicts"].get(k) == "unchanged" for k in hit_keys),
               "counts": j["counts"]}
              for j in (meta.get("max_rounds") or {}).get("judged", [])]
    return {
        "name": name, "date": side.started[:10],
        "commit": ((machine.get("project") or {}).get("commit") or "")[:7],
        "machine": machine.get("name"), "experiment": planted,
        "command": command or records.scrub_paths(meta.get("command") or ""), "design": design,
        "judged": sum(1 for c in changes if c.get("adjusted") is not None),
        "affected": len(hit) if pattern else None,
        "caught": sum(c["verdict"] == "regression" for c in hit) if pattern else None,
        "affected_unchanged": (sum(c["verdict"] == "unchanged" for c in hit)
                               if pattern else None),
        "false_flags": sum(1 for c in flagged if c not in hit),
        "inside_tolerance": (comparison["counts"]["worse"] + comparison["counts"]["better"]
                             if "worse" in comparison["counts"] else None),
        "unchanged": comparison["counts"].get("unchanged"),
        "inconclusive": comparison["counts"].get("inconclusive"),
        "detectable_median": round(statistics.median(detectable), 4) if detectable else None,
        "wall_minutes": _wall_minutes(base),
        "source": f"ab folder {base.name}", "note": note or "",
        "stages": stages,
    }


def _cell(field: str, value) -> str:
    if value is None or value == "":
        return "—"
    if field == "detectable_median":
        return f"{100 * value:.1f}%"
    if field == "wall_minutes":
        return f"{value:g} min"
    if field == "command":
        return f"`{value}`"
    return str(value).replace("|", "\\|")


def render(rows: list[dict], findings: list[dict] | None = None) -> str:
    rows = sorted(rows, key=lambda r: (r["date"], r["name"]))
    findings = load_findings() if findings is None else findings
    lines = [
        "# Validation experiments",
        "",
        "What the method of [method.md](method.md) caught and missed on real machines: one row",
        "per experiment, generated by `python scripts/validation.py render` from the rows in",
        "`results/validation/` (`python scripts/validation.py record AB_DIR ...` adds one from",
        "a stored `ab` folder). **experiment**: what was planted (`tests/planted/wrap.py`:",
        "`matmul=F` makes linear, conv and matmul F slower, `rpc_us=N` every RPC call N us",
        "longer), or A/A",
        "(the same environment on both sides). **judged**: figures tested; **affected**: figures",
        "the plant moves past the tolerance; **caught**: of those, flagged as regressions;",
        "**affected unchanged**: of those, called unchanged (a broken promise); **false flags**:",
        "regressions or improvements among the others; **worse or better**: significant changes",
        "inside the tolerance (in an A/A, false ones; rows dated before 2026-12-05 predate the",
        "words, and counted them as unchanged; rows dated before 2026-12-06 counted a",
        "significant change whose interval reached past the tolerance as inconclusive, which is",
        "now worse or better: see the findings for the stored comparisons judged again);",
        "**unchanged** / **inconclusive**: counts",
        "of those verdicts (rows dated before 2026-12-03 predate them: every figure not flagged",
        "was then called unchanged); **detectable**: the median detectable change; **wall**: the",
        "experiment's wall time. For rows without an `ab` folder, **commit** is the commit that",
        "first reported the figures. `—`: not recorded.",
        "",
        "| " + " | ".join(h for _, h in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in rows:
        lines.append("| " + " | ".join(_cell(f, r.get(f)) for f, _ in COLUMNS) + " |")
    lines += ["", "## Notes", ""]
    for r in rows:
        if r.get("note") or len(r.get("stages") or []) > 1:
            lines.append(f"- **{r['date']}, {r['commit']}, {r['experiment']}, {r['design']}**: "
                         + "; ".join(filter(None, [r.get("note"), _stages(r)])) + ".")
    return "\n".join(lines + _finding_lines(findings) + _mutation_lines(MUTATION)
                     + _power_lines(load_power())
                     + _calibration_lines(load_calibrations())) + "\n"


def load_findings(root: Path = FINDINGS) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*.json"))]


def _finding_lines(findings: list[dict]) -> list[str]:
    if not findings:
        return []
    lines = ["", "## Findings", "",
             "Measurements that are not a planted comparison, each with the command that "
             "reproduces it (rows in `results/validation/findings/`)."]
    for f in sorted(findings, key=lambda f: (f["date"], f["title"])):
        lines += ["", f"- **{f['date']}, {f['commit']}, {f['machine']}: {f['title']}**. "
                  f"{f['text']} Reproduce: `{f['command']}`"]
    return lines


# the hand-written files beside the mutants records: each survivor's triage, and why the
# mutants not reached are not (by the function they are in)
TRIAGE, NOT_REACHED = "triage.json", "not-reached.json"
FATE_WORDS = {"check": "a check", "error": "an error", "timeout": "the time limit"}


def load_mutation(root: Path = MUTATION) -> tuple[list, dict, dict]:
    """The mutants records (one per module), the triage and the reasons for what is not
    reached."""
    if not root.is_dir():
        return [], {}, {}
    recs = [mutants.read_record(p) for p in sorted(root.glob("*.json"))
            if p.name not in (TRIAGE, NOT_REACHED)]
    extra = [json.loads((root / n).read_text()) if (root / n).exists() else {}
             for n in (TRIAGE, NOT_REACHED)]
    return recs, extra[0], extra[1]


def _reason(reasons: dict[str, str], function: str) -> str:
    """The reason whose function (or class) is the longest prefix of `function`."""
    hits = [k for k in reasons if function == k or function.startswith(k + ".")]
    return reasons[max(hits, key=len)] if hits else "not classified"


def _seconds(rec) -> float:
    """A mutants record's wall time: its survey and every judge's run of every mutant, the
    earlier runs of those judged again (`--again`) included."""
    return rec.setup_s + sum(
        j.get("seconds", 0) for e in rec.judged.values()
        for j in [*(v for k, v in e.items() if k in ("suite", "torch_tests")),
                  *e.get("earlier", [])])


def _mutation_lines(root: Path = MUTATION) -> list[str]:
    """The mutation analysis (`release-bench mutants`): per module, its mutants, those on
    reached lines, the sample, each judge's fates on the sample; the totals; the triage of
    every survivor; and the mutants not reached, by reason."""
    recs, triage, reasons = load_mutation(root)
    if not recs:
        return []
    dates = sorted({d[:10] for r in recs for d in (r.started, r.updated) if d})
    commits = sorted({j.get("commit", "") for r in recs for e in r.judged.values()
                      for k, j in e.items() if k in ("suite", "torch_tests")} - {""})
    wall = sum(_seconds(r) for r in recs)
    lines = ["", "## Mutation analysis", "",
             f"How strong the conformance checks are against defects nobody chose: "
             f"{recs[0].tool} (its {recs[0].operators} core operators that need no "
             "configuration) changes one place of a feature's Python layer in torch "
             f"{recs[0].torch}, and each sampled mutant is judged by the suite's conformance "
             "cases that run its lines, on the CPU (`release-bench mutants`; "
             "[guide](guide.md#mutation-analysis)). Sampled with seed "
             f"{recs[0].seed} among the mutants on lines a clean run of the cases executes "
             "(coverage, worker processes and TensorPipe's threads included). **by a "
             "check**: a check failed on a value, one that passes on the clean run; **by an "
             "error**: torch raised (also where a case reports the call that raised as its "
             "behaviour's check failing), a case errored or the run died; **time**: killed by "
             "the time limit. PyTorch's tests: "
             "the tests the wheel ships (`torch/testing/_internal`), sampled per group with "
             "the same seed, those that skip or fail here dropped, each mutant judged by the "
             "sampled tests that run its lines, stopping at the first that fails (**by an "
             "assertion**: an AssertionError, in the test or one of its processes). "
             f"Dates {dates[0]} to {dates[-1]}, commits {', '.join(commits)}, machine "
             f"{', '.join(sorted({r.machine['name'] for r in recs}))}, wall time "
             f"{wall / 3600:.1f} h in all (surveys included).", "",
             "| module | mutants | reached | sampled | by a check | by an error | time | "
             "survived | equivalent | killed of the rest | PyTorch's tests: judged | by an "
             "assertion | by an error | time | survived |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    total = {"sampled": 0, "judged": 0, "equivalent": 0, "killed": 0, "check": 0}
    both = {"suite": 0, "tests": 0, "judged": 0}
    for r in recs:
        f = mutants.counts(r, "suite")
        t = mutants.counts(r, "torch_tests")
        judged = [n for n in r.sample if r.judgement(n, "suite")]
        verdicts = triage.get(r.target.path, {})
        equivalent = sum(1 for n in judged if r.judgement(n, "suite").fate == "survived"
                         and verdicts.get(n, {}).get("verdict") == "equivalent")
        killed = len(judged) - f["survived"]
        rest = len(judged) - equivalent
        total["sampled"] += len(r.sample)
        total["judged"] += len(judged)
        total["equivalent"] += equivalent
        total["killed"] += killed
        total["check"] += f["check"]
        tested = [n for n in judged if r.judgement(n, "torch_tests")]
        if tested:
            both["judged"] += len(tested)
            both["suite"] += sum(r.judgement(n, "suite").fate != "survived" for n in tested)
            both["tests"] += sum(r.judgement(n, "torch_tests").fate != "survived"
                                 for n in tested)
        name = r.target.path + (f" ({', '.join(r.target.within)})" if r.target.within else "")
        sampled = (len(judged) if len(judged) == len(r.sample)
                   else f"{len(r.sample)} ({len(judged)} judged)")
        cells = [f"`{name}`", r.mutants, len(r.reached), sampled, f["check"], f["error"],
                 f["timeout"], f["survived"], equivalent,
                 f"{killed}/{rest}" if rest else "—"]
        cells += ([len(tested), t["check"], t["error"], t["timeout"], t["survived"]]
                  if tested else ["—"] * 5)
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    rest = total["judged"] - total["equivalent"]
    lines += ["", f"In all: {total['sampled']} mutants sampled, {total['judged']} judged, "
              f"{total['equivalent']} of them "
              f"equivalent; {total['killed']} of the other {rest} killed "
              f"({100 * total['killed'] / max(rest, 1):.0f}%), {total['check']} of those "
              f"{total['killed']} by a check "
              f"({100 * total['check'] / max(total['killed'], 1):.0f}%)."
              + (f" On the {both['judged']} mutants both judged, the suites killed "
                 f"{both['suite']} and PyTorch's tests {both['tests']}." if both["judged"]
                 else "")]
    lines += ["", "Judges and commands, per module:", ""]
    for r in recs:
        cases = sorted({records.CaseKey.parse(k).case_id for k in r.cases})
        tests = (f"; PyTorch's tests: {len(r.tests)} of {len(r.tests) + len(r.tests_dropped)} "
                 f"sampled from {', '.join(r.test_groups)} ({r.tests_sample} a group), "
                 f"{len(r.tests_dropped)} dropped" if r.test_groups else "")
        only = (f"; {r.reached_by_tests_only} mutants on lines only PyTorch's sampled tests "
                "run" if r.reached_by_tests_only else "")
        spent = _seconds(r)
        waiting = [n for n in r.sample if not r.judgement(n, "suite")]
        left = (f"; {len(waiting)} of its sample not judged yet (the same command judges "
                "them)" if waiting else "")
        again = "".join(f", then `{c}`" for c in r.again_commands)
        lines.append(f"- `{r.target.path}`: {', '.join(cases)}{tests}{only}{left}; "
                     f"{spent / 60:.0f} min. `{r.command}`{again}")
    lines += _triage_lines(recs, triage) + _not_reached_lines(recs, reasons)
    return lines


def _triage_lines(recs, triage: dict) -> list[str]:
    """Every mutant the suite let survive, and every one it let survive before a check was
    added, with its verdict: equivalent, outside the documented contract, or missed."""
    lines = ["", "### Survivors, triaged", "",
             "Each mutant the suite let survive: **equivalent** (no program can tell it from "
             "torch), **outside** (it changes what the documentation does not promise; the "
             "document named), or **missed** (a documented behaviour no check held: the "
             "check added since, and the mutant's fate when judged again).", ""]
    for r in recs:
        verdicts = triage.get(r.target.path, {})
        for name in r.sample:
            entry = r.judged.get(name)
            if not entry:
                continue
            now = r.judgement(name, "suite")
            before = [mutants.Judgement.from_json(j) for j in entry.get("earlier", [])]
            if now.fate != "survived" and not any(b.fate == "survived" for b in before):
                continue
            v = verdicts.get(name, {})
            change = "; ".join(ln.strip() for ln in entry["diff"].splitlines())[:160]
            fate = ("survives" if now.fate == "survived" else
                    f"now killed by {FATE_WORDS[now.fate]} ({'; '.join(now.by)[:160]}, "
                    f"commit {now.commit})")
            lines.append(f"- `{r.target.path}` {name} (line {entry['line']}, "
                         f"{entry['function'] or 'module level'}): `{change}`. "
                         f"**{v.get('verdict', 'not triaged')}**: {v.get('why', '')} {fate}.")
    return lines


def _not_reached_lines(recs, reasons: dict) -> list[str]:
    lines = ["", "### Not reached", "",
             "Mutants on lines no case runs on this CPU, by why (the reasons by function are "
             f"in `results/validation/mutation/{NOT_REACHED}`):", ""]
    for r in recs:
        why: dict[str, int] = {}
        for function, n in r.unreached.items():
            key = _reason(reasons.get(r.target.path, {}), function)
            why[key] = why.get(key, 0) + n
        text = "; ".join(f"{w}: {n}" for w, n in sorted(why.items(), key=lambda kv: -kv[1]))
        lines.append(f"- `{r.target.path}` ({r.mutants - len(r.reached)}): {text or 'none'}.")
    return lines


def load_power(root: Path = POWER) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*.json"))]


def _power_lines(docs: list[dict]) -> list[str]:
    """Each power record a column: every plant caught or missed (and by which test), and the
    break tests' outcomes, those not passed by name."""
    if not docs:
        return []
    docs = sorted(docs, key=lambda d: d["started"])
    heads = [f"{d['date']}, {d['commit']}, {d['machine']}" for d in docs]
    lines = ["", "## What the tests catch", "",
             "Planted defects (`scripts/power.py run`, records in `results/validation/power/`): "
             "each a feature turned off (tests/planted/feature_off.py) or a promise broken by a "
             "factor of 2 or by one step (tests/planted/defects.py), planted in every process "
             "of a pytest run of its area's tests (as `make test` selects them), which stops "
             "at the first failure: **caught** names the test that failed, **missed** means "
             "every test passed. Then the tests that break a feature on purpose themselves "
             "(each suite's test_breaks.py, the telemetry suite's broken readings, "
             "tests/test_feature_off.py) and the CUDA rehearsal: a pass is a catch. "
             "Compare two records with `scripts/power.py compare BEFORE AFTER`.", "",
             "| plant | kind | area | " + " | ".join(heads) + " |",
             "|---|---|---|" + "---|" * len(docs)]
    names = list(dict.fromkeys(n for d in docs for n in d["plants"]))
    for name in names:
        first = next(d["plants"][name] for d in docs if name in d["plants"])
        cells = []
        for d in docs:
            row = d["plants"].get(name)
            cells.append("—" if row is None else
                         f"caught by `{row['by']}` ({row['seconds']:g} s)"
                         if row["outcome"] == "caught" else
                         f"{row['outcome']} ({row['seconds']:g} s)")
        lines.append(f"| {name} (`{first['spec']}`) | {first['kind']} | "
                     f"{', '.join(first['area'])} | " + " | ".join(cells) + " |")
    tests = [d["tests"] for d in docs]
    counts = []
    for t in tests:
        by = {v: sum(1 for o in t.values() if o == v) for v in sorted(set(t.values()))}
        counts.append(", ".join(f"{n} {v}" for v, n in by.items()) or "not run")
    lines.append("| tests that break a feature on purpose, and the CUDA rehearsal | | | "
                 + " | ".join(counts) + " |")
    for d in docs:
        odd = sorted(k for k, v in d["tests"].items() if v not in ("passed", "skipped"))
        if odd:
            lines += ["", f"Not passed in the record of {d['date']}, {d['commit']}: "
                      + ", ".join(f"`{k}` ({d['tests'][k]})" for k in odd) + "."]
        if d.get("note"):
            lines += ["", f"{d['date']}, {d['commit']}: {d['note']}"]
    return lines


def load_calibrations(root: Path = CALIBRATIONS) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*.json"))]


def _calibration_lines(docs: list[dict]) -> list[str]:
    """Each machine's calibrations side by side, sequential, duet and bursts: a family's sd
    of log B/A per round (per swapped pair in a duet) and the change the default 5 detect."""
    if not docs:
        return []
    lines = ["", "## What each design detects", "",
             "From the committed calibrations (`release-bench calibrate`, `release-bench "
             "calibrate --duet` and `release-bench calibrate --bursts`, in "
             "`results/calibration/`): per family of figures (one case's figures of one kind), "
             "the sd of a round's log B/A in an A/A (of a swapped pair's, in a duet; the 75% "
             "quantile of the family's figures), and the smallest change 5 rounds (sequential, "
             "bursts) or 5 swapped pairs (duet, in about the same wall time) detect at it, for "
             "one figure at the 95% level. `—`: not calibrated in that design."]
    by_machine: dict[str, dict[str, dict]] = {}
    for doc in docs:
        design = doc.get("measured", {}).get("design", "sequential")
        by_machine.setdefault(doc["machine"].get("name", "?"), {})[design] = doc
    for name, designs in sorted(by_machine.items()):
        lines += ["", f"**{name}**: " + "; ".join(
            f"{d}: {doc['measured'].get('rounds')} rounds of an A/A on "
            f"{doc['measured'].get('started', '?')[:10]}, commit "
            f"{(doc['measured'].get('commit') or '?')[:7]}"
            for d, doc in sorted(designs.items())), "",
            "| family | sequential sd | sequential detects at 5 | duet sd | duet detects at 5 "
            "pairs | bursts sd | bursts detects at 5 |", "|---|---|---|---|---|---|---|"]
        families = {d: {(f["case"], f["kind"]): f for f in doc["families"]}
                    for d, doc in designs.items()}
        for key in sorted({k for fams in families.values() for k in fams}):
            cells = []
            for d in ("sequential", "duet", "bursts"):
                f = families.get(d, {}).get(key)
                cells += ([f"{100 * f['sd_log_ratio']:.1f}%",
                           f"{100 * f['detectable_at']['5']:.1f}%"] if f else ["—", "—"])
            lines.append(f"| {key[0]} {key[1]} | " + " | ".join(cells) + " |")
    return lines


def _stages(row: dict) -> str:
    """What each judging of a comparison with `--max-rounds` decided, the default rounds'
    first."""
    if len(row.get("stages") or []) < 2:
        return ""
    return "by stage: " + "; ".join(
        f"{s['rounds']} rounds ({s['minutes']:g} min): "
        + (f"{s['caught']} of {row['affected']} affected caught, {s['affected_unchanged']} "
           f"called unchanged, " if row.get("affected") else "")
        + ", ".join(f"{n} {v}" for v, n in s["counts"].items() if n)
        for s in row["stages"])


def spreads(base: Path) -> list[dict]:
    """Each family's spread in a stored ab folder, as `calibrate` measures it from an A/A: the
    sd of a round's log B/A (of a swapped pair's, in a duet) about its mean, so that a plant,
    which moves the mean, leaves it as it is; and the change 5 rounds (pairs) detect at it."""
    from harness.comparing import calibrate, calibration, campaign

    meta = json.loads((base / "ab.json").read_text())
    rounds = campaign.load_rounds(base)
    cal = calibrate.measure(rounds["A"], rounds["B"], {}, meta.get("groups", []),
                            meta["rounds"], {})
    design = meta.get("design") or {}
    duets, bursts = set(design.get("duet_units") or []), set(design.get("bursts_units") or [])

    def design_of(case: str) -> str:
        unit = case.replace("/", ".")
        return "duet" if unit in duets else "bursts" if unit in bursts else "sequential"

    return [{"folder": base.name, "family": f"{case} {kind}", "design": design_of(case),
             "sd": s.sd, "detectable_at_5": calibration.detectable(s.variance, 5)}
            for (case, kind), s in sorted(cal.families.items())]


def print_spreads(bases: list[Path]) -> int:
    rows = [r for b in bases for r in spreads(b)]
    width = max(len(r["family"]) for r in rows) if rows else 10
    print(f"{'folder':<22} {'family':<{width}} {'design':<10} {'sd of log B/A':>13} "
          f"{'detectable at 5':>15}")
    for r in rows:
        print(f"{r['folder']:<22} {r['family']:<{width}} {r['design']:<10} "
              f"{100 * r['sd']:>12.1f}% {100 * r['detectable_at_5']:>14.1f}%")
    return 0


def load_rows(root: Path = ROWS) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*.json"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="add a row from a stored ab folder")
    rec.add_argument("ab_dir")
    rec.add_argument("--name", required=True)
    rec.add_argument("--planted", required=True, help="the plant's spec, or A/A")
    rec.add_argument("--affected", help="regex on 'suite/case metric[labels]' of the figures "
                                        "the plant moves past the tolerance")
    rec.add_argument("--command", dest="ran",
                     help="the command that ran it (default: from ab.json)")
    rec.add_argument("--note")
    sub.add_parser("render", help="write docs/validation.md from the rows")
    spread_cmd = sub.add_parser("spread", help="each family's sd of log B/A in stored ab folders")
    spread_cmd.add_argument("ab_dirs", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "spread":
        return print_spreads([Path(d) for d in args.ab_dirs])
    if args.command == "record":
        base = Path(args.ab_dir)
        if not (base / "comparison.json").exists():
            print(f"validation: {base}: not an ab folder (no comparison.json)", file=sys.stderr)
            return 2
        row = row_from_ab(base, args.name, args.planted, args.affected, args.ran, args.note)
        path = records.write_json_atomic(ROWS / f"{row['date']}-{args.name}.json", row)
        print(f"row written to {path}")
    records.write_text_atomic(PAGE, render(load_rows()))
    print(f"{PAGE.relative_to(ROOT)} written ({len(load_rows())} experiments)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
