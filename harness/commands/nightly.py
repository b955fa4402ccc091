"""`release-bench nightly BUILD [BUILD ...]`: a night per torch build, each judged against the
night before on this machine (`harness.releases.nightly`); with several builds, consecutive
nights: a rehearsal over real releases."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from harness.commands import common
from harness.commands.common import EXIT_OK, UsageError
from harness.records import Design

DEFAULT_DIR = ".nightly"
DEFAULT_RECORDS = "results/nightly"
# ab's swapped pairs a night: about 2% detectable on a 2-vCPU Xeon with 5 (docs/validation.md)
DEFAULT_ROUNDS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("builds", metavar="BUILD", nargs="+",
                        help="tonight's torch build: a release (its environment in .envs/, built "
                             "with `env create` where missing), a venv folder or a Python "
                             "executable; several: one night each, in order (a rehearsal)")
    parser.add_argument("--rehearse", action="store_true",
                        help="start from no previous night (DIR must hold none) and record "
                             "under results/nightly/rehearsal/<machine>/ unless --record says")
    parser.add_argument("--dir", default=DEFAULT_DIR, metavar="DIR",
                        help="the nightly's own folder, kept between nights and not committed: "
                             "the builds ledger (asv's axis), asv's results and pages, last "
                             f"night's build, the pages (default: {DEFAULT_DIR})")
    parser.add_argument("--record", metavar="DIR",
                        help="where each night's record goes (small JSON; default: "
                             f"{DEFAULT_RECORDS}/<machine>/)")
    parser.add_argument("--suite", action="append", metavar="S",
                        help="a suite whose conformance cases and release-notes examples run "
                             "(repeatable; default: all)")
    parser.add_argument("--skip", action="append", default=["clean_exit"], metavar="TEXT",
                        help="leave out cases whose name contains TEXT (repeatable; default: "
                             "clean_exit)")
    parser.add_argument("--gate", action="append", metavar="SUITE/CASE",
                        help="a headline benchmark the gate compares builds on (repeatable; "
                             "default: the selected suites' benchmark cases whose figures asv "
                             "tracks)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="K",
                        help=f"the gate's rounds (swapped pairs for duets; default "
                             f"{DEFAULT_ROUNDS})")
    common.add_design(parser)
    parser.add_argument("--no-duet", dest="design", action="store_const",
                        const=Design.SEQUENTIAL.value, help="--design sequential")
    parser.add_argument("--asv-bench", metavar="REGEX",
                        help="asv's benchmarks over builds (asv run --bench; default: the asv "
                             "figures of the gate's cases)")
    parser.add_argument("--no-registry-dates", action="store_true",
                        help="date a build the ledger has not seen by the night it is first "
                             "seen, without asking the package registry for its upload time")
    parser.add_argument("--registry-builds", action="store_true",
                        help="build missing environments from the package indexes only "
                             "(`env create --registry-builds`)")
    common.add_calibration(parser)
    common.add_expectations(parser)


def _headline_units(suites: list[str], gate: list[str] | None, skip: list[str],
                    cal, design: Design | None):
    from harness import registry
    from harness.comparing import campaign

    units = [u for u in campaign.units(suites if gate is None else registry.suite_names(),
                                       skip=skip, cal=cal, design=design) if u.benchmark]
    if gate is None:
        return [u for u in units if registry.load(u.suite).case(u.cases[0]).tracks]
    wanted = {g.replace("/", ".", 1) for g in gate}
    known = {u.name for u in units}
    if missing := sorted(wanted - known):
        raise UsageError(f"nightly: --gate {missing[0].replace('.', '/', 1)}: no such "
                         f"benchmark case (benchmarks: {', '.join(sorted(known))})")
    return [u for u in units if u.name in wanted]


def asv_names(units) -> list[str]:
    """The asv benchmarks of the gate's cases: their track views' methods."""
    from harness import registry

    out = []
    for u in units:
        case = registry.load(u.suite).case(u.cases[0])
        out += [f"{u.suite}.asv_bench.{v.name}.track_{t.name}" for v in case.tracks
                for t in v.tracks]
    return out


def _tonight(spec: str, registry_builds: bool, progress):
    from harness.comparing import campaign
    from harness.releases import envs
    from harness.releases.nightly import Tonight

    if envs.VERSION.fullmatch(spec):
        env, _ = envs.get_or_create(spec, True, not registry_builds, progress)
        return Tonight(spec, env.python_path, env)
    python = campaign.python_of(spec)
    path = Path(spec)
    return Tonight(path.name if path.is_dir() else python.name, python)


def one_night(spec: str, folder, record_dir: Path, plan, args, cal, expected,
              progress) -> dict:
    """One night: conformance, the gate, asv, the record and the pages."""
    from harness import records
    from harness.adapters.asv_adapter import register_machine
    from harness.comparing.campaign import CampaignError
    from harness.presenting import asv_dashboard, nightly_page
    from harness.releases import history, ledger, nightly
    from harness.running import machine

    t0 = time.monotonic()
    started = records.now()
    tonight = _tonight(spec, args.registry_builds, progress)
    last = folder.last_night()
    commit, build = ledger.identify(tonight.label, tonight.python, folder.ledger.ensure(),
                                    not args.no_registry_dates)
    name = nightly.night_name(nightly.next_number(record_dir), build)
    progress(f"== night {name}: torch {build.torch} ({build.git_version[:12]}), "
             f"built {build.date} ({build.date_source.value}); ledger commit {commit[:12]}")
    steps: dict[str, float] = {}
    failures: list[str] = []

    t = time.monotonic()
    rec = nightly.conformance(tonight, plan, folder.scratch / "conformance", expected, progress)
    records.write_json_atomic(record_dir / f"{name}.conformance.json", rec)
    steps["conformance_s"] = nightly.elapsed(t)
    events = []
    if last and Path(last["conformance"]).exists():
        import json

        events = history.changes([json.loads(Path(last["conformance"]).read_text()), rec])

    gate = None
    t = time.monotonic()
    if last is None:
        progress("gate: the first night has no previous build to compare with")
    elif not plan.gate:
        progress("gate: no benchmark selected")
    else:
        progress(f"gate: ab {last['label']} (A) against {tonight.label} (B)")
        try:
            gate = nightly.gate(Path(last["python"]), tonight.python, plan,
                                folder.scratch / "ab", progress, cal, {})
        except CampaignError as e:
            failures.append(f"gate: did not run ({e})")
    steps["gate_s"] = nightly.elapsed(t)

    t = time.monotonic()
    asv_part: dict = {"commit": commit, "previous": last["commit"] if last else None,
                      "compare": [], "regressions": []}
    conf = ledger.asv_config(Path("asv.conf.json"), folder.ledger, folder.path)
    machine_name = register_machine(folder.path / "asv")
    wrapper = folder.point_python_at(tonight.python)
    log = folder.scratch / f"asv-{name}.log"
    progress(f"asv: {plan.asv_bench or 'every benchmark'} in torch {build.torch}, under "
             f"ledger commit {commit[:12]}")
    if rc := nightly.asv_run(conf, machine_name, wrapper, commit, plan.asv_bench, log):
        failures.append(f"asv run: exit status {rc} (a benchmark failed; "
                        f"{records.shown_path(log)})")
    try:
        if last and last["commit"] != commit:
            asv_part["compare"] = nightly.asv_compare(conf, machine_name, last["commit"], commit)
        nightly.keep_tracked(folder.path / "asv" / "results")
        html = asv_dashboard.publish(str(conf))
        builds = dict(folder.ledger.builds())
        asv_part["regressions"] = nightly.asv_regressions(Path(html), builds)
    except (CampaignError, OSError) as e:
        failures.append(f"asv: {e}")
    except Exception as e:  # asv publish failing: say so, the night's other parts stand
        failures.append(f"asv publish: {type(e).__name__}: {e}")
    steps["asv_s"] = nightly.elapsed(t)

    unexpected = nightly.unexpected(rec)
    light, why = nightly.judge(unexpected, gate, failures)
    fp = machine.fingerprint()
    night = records.scrub_paths({
        "schema": nightly.SCHEMA, "night": name, "started": started,
        "machine": {"name": fp["name"], "cpu": fp["cpu"]["model"]}, "project": fp["project"],
        "build": build.to_json(), "commit": commit,
        "previous": {"label": last["label"], "torch": last["torch"], "commit": last["commit"]}
        if last else None,
        "status": light.name.lower(), "exit": light.value, "why": why,
        "conformance": {"record": f"{name}.conformance.json",
                        "expectations": rec.get("expectations"), "unexpected": unexpected,
                        "cases": len(rec["cases"]), "examples": len(rec["api"])},
        "events": events, "gate": gate, "asv": asv_part,
        "selection": {"suites": list(plan.suites), "skip": list(plan.skip),
                      "gate": [u.name for u in plan.gate], "rounds": plan.rounds,
                      "asv_bench": plan.asv_bench},
        "steps": steps, "wall_s": nightly.elapsed(t0)})
    records.write_json_atomic(record_dir / f"{name}.json", night)
    records.write_json_atomic(folder.state, {
        "label": tonight.label, "python": str(tonight.python.absolute()),
        "torch": build.torch, "commit": commit,
        "conformance": str((record_dir / f"{name}.conformance.json").absolute())})
    page = nightly_page.write(folder.html, record_dir, Path(folder.asv_html))
    progress(f"night {name}: {light.name.lower()}"
             + (": " + "; ".join(why) if why else " (nothing unexpected, no regression)")
             + f"; {night['wall_s'] / 60:.1f} min; the page: {records.shown_path(page)}")
    return night


def write_rehearsal(record_dir: Path, builds: list[str], nights: list[dict],
                    wall_s: float) -> None:
    """rehearsal.json: the builds asked for, each night run so far (status, why, wall time)
    and the time in all."""
    from harness import records

    command = ["release-bench", *(records.shown_path(a) if Path(a).is_absolute() else a
                                  for a in sys.argv[1:])]
    records.write_json_atomic(record_dir / "rehearsal.json", records.scrub_paths({
        "schema": "release-bench-nightly-rehearsal/1", "builds": builds,
        "command": " ".join(command),
        "nights": [{"night": n["night"], "build": n["build"]["label"],
                    "torch": n["build"]["torch"], "status": n["status"], "exit": n["exit"],
                    "why": n["why"], "wall_s": n["wall_s"]} for n in nights],
        "wall_s": round(wall_s, 1)}))


def main(args) -> int:
    from harness.comparing import campaign
    from harness.comparing.campaign import CampaignError
    from harness.releases import envs, ledger
    from harness.releases.nightly import Folder, Light, Plan
    from harness.running import machine

    suites = common.selected_suites(args)
    if args.rounds < 2:
        raise UsageError(f"--rounds {args.rounds}: the gate needs at least 2 rounds")
    folder = Folder(Path(args.dir))
    if args.rehearse and folder.state.exists():
        raise UsageError(f"nightly --rehearse: {args.dir} holds a previous night; a rehearsal "
                         "starts from none (give another --dir)")
    if not args.rehearse and len(args.builds) > 1:
        raise UsageError("nightly: several builds are consecutive nights: add --rehearse")
    units = _headline_units(suites, args.gate, args.skip, None, common.design(args))
    cal, cal_line = common.read_calibration(args, units=units)
    if cal is not None:
        units = campaign.with_rounds_factors(units, cal)
    bench = args.asv_bench
    if bench is None:
        names = asv_names(units)
        # asv matches --bench against names with their parameters: no anchor at the end
        bench = "^(" + "|".join(re.escape(n) for n in names) + ")" if names else None
    plan = Plan(tuple(suites), tuple(s for s in args.skip if s), tuple(units), args.rounds,
                bench)
    expected = common.read_expectations(args)
    default = f"{DEFAULT_RECORDS}/{'rehearsal/' if args.rehearse else ''}{machine.machine_name()}"
    record_dir = Path(args.record or default)
    record_dir.mkdir(parents=True, exist_ok=True)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    print(cal_line)
    t0 = time.monotonic()
    nights: list[dict] = []
    try:
        for spec in args.builds:
            nights.append(one_night(spec, folder, record_dir, plan, args, cal, expected,
                                    progress))
            if args.rehearse:  # after each night: a rehearsal stopped half-way says what ran
                write_rehearsal(record_dir, args.builds, nights, time.monotonic() - t0)
    except (CampaignError, envs.EnvError, ledger.LedgerError) as e:
        raise UsageError(f"nightly: {e}") from e
    for n in nights:
        print(f"{n['night']}: {n['status']} (exit {n['exit']}) in {n['wall_s'] / 60:.1f} min"
              + (": " + "; ".join(n["why"]) if n["why"] else ""))
        for m in (n["gate"] or {}).get("moved", []):
            print(f"  gate: {m['case']} {m['figure']}: {m['verdict']}"
                  + (f" x{m['factor']:.3f}" if m["factor"] is not None else ""))
        for r in n["asv"]["regressions"]:
            if r["to"] == n["build"]["label"]:
                print(f"  asv step: {r['benchmark']} {r['from']} -> {r['to']}: "
                      f"{r['before']:.4g} -> {r['after']:.4g}")
    total = time.monotonic() - t0
    print(f"{len(nights)} night{'s' * (len(nights) != 1)} in {total / 60:.1f} "
          f"min; records in {record_dir}; the page: {folder.html / 'index.html'}")
    worst = max((n["exit"] for n in nights), default=EXIT_OK)
    return Light(worst).value


COMMANDS = (common.Command("nightly", "a night per torch build: conformance, the gate (ab of last "
                           "night's build against tonight's) and asv over builds; exit 1 on "
                           "news", add_arguments, main),)
