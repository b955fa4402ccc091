"""`release-bench history`: the conformance checks, their warnings and the 1.6 API record across
many torch releases, and each change located at the first release that shows it.

Each release is recorded on its own, oldest first, as `<dir>/torch-<version>.json`:

- the build (`envs.build_of`: local version, CUDA, compiler, math libraries);
- every conformance case's outcome (`n/a` where the release lacks its API), its reason and
  its warnings, judged by the expectations file (entries name the torch versions they hold
  for), from one fresh process per suite, as `matrix` runs them (`harness.comparing.campaign`);
- the 1.6 API record (`api_record`): each release-notes example as 1.6 code wrote it,
  and today's spelling beside it: works / warns / removed / fails;
- its wall time.

A release already recorded is kept (`again` records it afresh), so a history grows by the
releases it lacks, and one stopped half-way resumes. With `stale`, a recorded release whose
record holds a case judged by an older version of its checks (`harness.cases.CheckVersion`)
has those cases' suites recorded again, and the record keeps its other suites as they were.
An environment the history builds is removed once its release is recorded where `discard`
asks (with the torch packages in uv's cache): 29 releases' environments do not fit on a
small disk at once. Time figures are not recorded here: `matrix` and `bisect` measure them.

`changes` compares neighbouring releases: a case's outcome, a warning that appeared or went,
an example's status, and the build, when a step changes it (a CPU-only build between two CUDA
builds changes what the other columns mean).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import records
from harness.comparing import campaign, expectations
from harness.comparing.campaign import CampaignError, Unit
from harness.releases import envs
from harness.releases.matrix import outcome_changes, summarize_side
from harness.running import machine

SCHEMA = "release-bench-history/1"
API_TIMEOUT_S = 600


def record_path(folder: Path, version: str) -> Path:
    return folder / f"torch-{version}.json"


def read_document(path: Path, schema: str, what: str) -> dict:
    """A JSON document of `schema` (a history record, a night record); CampaignError, one
    line, for anything else."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CampaignError(f"{path}: not a {what} ({e})") from e
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise CampaignError(f"{path}: not a {what} (schema {found!r})")
    return doc


def read(folder: Path) -> list[dict]:
    """The releases recorded in `folder`, oldest first."""
    found = [read_document(path, SCHEMA, "history record") for path in folder.glob("torch-*.json")]
    return sorted(found, key=lambda r: envs.release_key(r["release"]))


def api_record(python: Path, suites: list[str]) -> list[dict]:
    """The release-notes examples of `suites`, run in that environment (one process)."""
    out = subprocess.run([str(python), "-m", "harness.releases.api_record", *suites],
                         capture_output=True, text=True, timeout=API_TIMEOUT_S,
                         env=campaign.checkout_env(), cwd=campaign.ROOT)
    got = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 and not got:
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise CampaignError(f"{python}: the release-notes examples did not run ({last})")
    return got


def record_release(label: str, python: Path, env: envs.TorchEnv | None, units: list[Unit],
                   run_args: list[str], suites: list[str], scratch: Path,
                   expected: tuple[list, str] | None,
                   progress: Callable[[str], None]) -> dict[str, Any]:
    """One release's history record (see the module's docstring)."""
    t0 = time.monotonic()
    merged = campaign.run_alone(label, python, units, run_args,
                                campaign.new_folder(scratch, f"history-{label}"), progress,
                                "history")
    judged = None
    if expected is not None:  # entries name the torch versions they hold for
        judged = expectations.judge_run(merged, expected[0], expected[1],
                                        expectations.known_cases())
        merged = expectations.annotate(merged, judged)
    progress(f"{label}: the release-notes examples ...")
    api = api_record(python, suites)
    fp = machine.fingerprint()
    return records.scrub_paths({
        "schema": SCHEMA, "release": label, "torch": merged.machine["torch"]["version"],
        "torchvision": env.torchvision if env else None,
        "without_torchvision": env.without_torchvision_why if env else None,
        "build": env.build if env else {},
        "env": {"disk_bytes": env.disk_bytes, "added_bytes": env.added_bytes,
                "built_s": env.built_s} if env and not env.reuses else None,
        # the CPU flags that explain an outcome (machines of one name differ in them)
        "machine": {"name": fp["name"], "cpu": fp["cpu"]["model"],
                    "flags": sorted(f for f, on in fp["cpu"].get("flags", {}).items() if on)},
        "project": fp["project"],
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - t0, 1),
        **summarize_side(merged), "expectations": judged.to_json() if judged else None,
        "api": api})


def stale_cases(rec: dict) -> dict[str, str]:
    """The cases of a record (history's, a matrix side's) judged by checks that have changed
    since, each with why (`harness.cases.stale_reason`); a case gone from the suites is
    none of them."""
    from harness import registry
    from harness.cases import stale_reason

    out = {}
    for key, case in rec.get("cases", {}).items():
        found = registry.find_case(case.get("suite", ""), key.split("/", 1)[-1].split("[")[0])
        if (why := stale_reason(found, case.get("check_version"))) is not None:
            out[key] = why
    return out


def merged_record(old: dict, new: dict) -> dict:
    """`new`, a record of some suites of a release, with the cases and examples of `old`'s
    other suites kept, and where they came from said (`kept`)."""
    redone = {c["suite"] for c in new["cases"].values()} | {a["suite"] for a in new["api"]}
    kept = sorted({c["suite"] for c in old["cases"].values()} - redone)
    if not kept:
        return new
    cases = {k: c for k, c in old["cases"].items() if c["suite"] not in redone} | new["cases"]
    statuses: dict[str, int] = {}
    for c in cases.values():
        if (status := (c.get("expected") or {}).get("status")) is not None:
            statuses[status] = statuses.get(status, 0) + 1
    judged = new.get("expectations")
    return {**new, "cases": dict(sorted(cases.items())),
            "headlines": [h for h in old.get("headlines", [])
                          if h["case"].split("/")[0] in kept] + new.get("headlines", []),
            "expectations": judged and {**judged, "counts": {
                s: statuses.get(s, 0) for s in judged["counts"]}},
            "api": [a for a in old["api"] if a["suite"] not in redone] + new["api"],
            "kept": {"suites": kept, "recorded": old.get("kept", {}).get("recorded",
                                                                          old.get("recorded")),
                     "project": old.get("kept", {}).get("project", old.get("project"))}}


def history(versions: list[str], folder: Path, units: list[Unit], run_args: list[str],
            suites: list[str], scratch: Path, expected: tuple[list, str] | None,
            progress: Callable[[str], None], *, again: bool = False, build: bool = True,
            discard: bool = False, local_files: bool = False,
            stale: bool = False) -> dict[str, Any]:
    """Record each release of `versions` not yet in `folder` (all with `again`; with `stale`,
    the suites of a recorded one whose checks have changed since), building its environment
    where it has none (`build`), removing what it built afterwards (`discard`). Returns what
    it did: the releases recorded, kept, built, and the seconds it took."""
    folder.mkdir(parents=True, exist_ok=True)
    done: dict[str, Any] = {"recorded": [], "kept": [], "built": [], "added_bytes": 0}
    t0 = time.monotonic()
    for version in versions:
        old, todo = None, units
        if record_path(folder, version).exists():
            # a record of some suites keeps the others' cases
            old = read_document(record_path(folder, version), SCHEMA, "history record")
        if old is not None and not again:
            outdated = {key.split("/")[0] for key in stale_cases(old)} if stale else set()
            todo = [u for u in units if u.suite in outdated]
            if not todo:
                done["kept"].append(version)
                continue
            progress(f"torch {version}: checks changed since its record in "
                     f"{', '.join(sorted(outdated))}: recording those again")
        env, made = envs.get_or_create(version, build, local_files, progress)
        if made:
            done["built"].append(version)
            done["added_bytes"] += env.added_bytes or 0
        try:
            rec = record_release(version, env.python_path, env, todo, run_args,
                                 [s for s in suites if any(u.suite == s for u in todo)],
                                 scratch, expected, progress)
            if old is not None:
                rec = merged_record(old, rec)
            records.write_json_atomic(record_path(folder, version), rec)
            done["recorded"].append(version)
            progress(f"torch {version}: recorded in {rec['wall_s']:.0f} s")
        finally:
            if made and discard:
                envs.remove(version)
                envs.forget_cached(("torch", "torchvision"))
    done["wall_s"] = round(time.monotonic() - t0, 1)
    return done


def totals(recs: list[dict]) -> dict[str, Any]:
    """What the environments of the recorded releases cost: minutes to build, and the disk
    each added, summed (files shared between releases counted once: as if all were kept)."""
    built = [r["env"] for r in recs if r.get("env")]
    return {"built_min": round(sum(e["built_s"] for e in built) / 60, 1),
            "added_gib": round(sum(e["added_bytes"] or 0 for e in built) / 2**30, 1),
            "envs_measured": len(built)}


def _examples(rec: dict) -> dict[str, dict]:
    return {f"{a['suite']}.{a['example']}": a for a in rec.get("api", [])}


def changes(recs: list[dict]) -> list[dict]:
    """What changed between each release and the one before it: case outcomes and warnings
    (as `matrix` lists them), the examples' statuses and warnings, and the build."""
    out = []
    for prev, this in zip(recs, recs[1:], strict=False):
        step = [prev["release"], this["release"]]
        found = outcome_changes(prev, this, *step)
        stale = {**stale_cases(prev), **stale_cases(this)}
        for c in found:  # what the case said before, too: "n/a -> pass" says which API came
            if c["what"] == "outcome" and (was := prev["cases"][c["case"]]["reason"]):
                c["reason_before"] = was
            if c["case"] in stale:  # a change of the checks as much as of the release
                c["stale"] = stale[c["case"]]
        if diff := envs.same_build(prev.get("build") or {}, this.get("build") or {}):
            found.append({"case": "(build)", "what": "build", "detail": "; ".join(diff),
                          "versions": step})
        a, b = _examples(prev), _examples(this)
        for name in sorted(a.keys() | b.keys()):
            was, now = a.get(name), b.get(name)
            if was is None or now is None:
                continue
            if was["status"] != now["status"]:
                found.append({"case": name, "what": "example", "from": was["status"],
                              "to": now["status"], "reason": now["reason"], "versions": step})
            for w in sorted(set(now["warnings"]) - set(was["warnings"])):
                found.append({"case": name, "what": "warning appeared", "warning": w,
                              "versions": step})
            for w in sorted(set(was["warnings"]) - set(now["warnings"])):
                found.append({"case": name, "what": "warning went", "warning": w,
                              "versions": step})
        out += found
    return out
