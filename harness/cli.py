"""`release-bench`: list the suites, run them, show a run.

Exit status: 0 when every case passed, skipped or was invalid (a performance check missed on
a contended machine), 1 when any failed or errored, 130/143 when SIGINT/SIGTERM stopped a
run (its record kept and marked interrupted), 2 for bad
input (an unknown suite, profile or device, CUDA asked for but absent, an unreadable run
file), always with one line on stderr saying what was wrong.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence

from harness import records
from harness.cases import DEVICES, PROFILES, param_id

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_ROUNDS = 5  # `ab`'s rounds a side: A B, B A, A B, B A, A B


class UsageError(Exception):
    """Bad input: reported as one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage block on error; one line says it better.
    def error(self, message: str):
        raise UsageError(message)


def _float(text: str) -> float:
    """The number `text` spells, or NaN, which fails every range check below."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1 such as 0.1, "
                                         f"got {text!r}")
    return value


def _param(text: str) -> tuple[str, object]:
    import json

    key, sep, raw = text.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw  # a bare word: a string


def _threshold(text: str) -> tuple[str, float]:
    kind, _, tol = text.partition("=")
    value = _float(tol)
    if not kind or not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"expected KIND=TOLERANCE such as latency=0.2, "
                                         f"got {text!r}")
    return kind, value


def _add_selection(parser: argparse.ArgumentParser) -> None:
    """--suite, --case, --skip and --profile: what `run`, `ab` and `matrix` measure."""
    parser.add_argument("--suite", action="append", metavar="S",
                        help="a suite to run (repeatable; default: all)")
    parser.add_argument("--case", metavar="TEXT", help="only cases whose name contains TEXT")
    parser.add_argument("--skip", action="append", default=[], metavar="TEXT",
                        help="leave out cases whose name contains TEXT (repeatable), e.g. "
                             "clean_exit: its 20 fresh processes per suite are most of a "
                             "quick run's time")
    parser.add_argument("--profile", default="quick", choices=PROFILES)


def _add_calibration(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibration", metavar="FILE",
                        help="this machine's calibration (default: results/calibration/"
                             "<machine>.json, made by `release-bench calibrate`); 'none' uses "
                             "the conservative defaults")


def _calibration(args, fingerprint: dict | None = None):
    """The calibration `--calibration` names (None: the conservative defaults) and one line
    saying which, for the command to print with its verdicts (not before: bad input stays
    one line)."""
    import json
    from pathlib import Path

    from harness import calibration, compare, machine

    spec = getattr(args, "calibration", None)
    if spec == "none":
        return None, "calibration: none (--calibration none): conservative defaults"
    fingerprint = fingerprint or machine.fingerprint()
    if spec is None:
        return calibration.for_machine(fingerprint)
    try:
        cal = calibration.Calibration.from_json(json.loads(Path(spec).read_text()), spec)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--calibration {spec}: not a calibration ({e})") from e
    if differ := compare.machine_differences(cal.machine, fingerprint):
        raise UsageError(f"--calibration {spec}: of other hardware ({differ[0]})")
    return cal, f"calibration: {spec}"


def _add_expectations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--expectations", metavar="FILE",
                        help="the expected results (default: expectations.toml at the "
                             "repository root); 'none' judges the raw outcomes: any failure "
                             "fails the command")


def _expectations(args) -> tuple[list, str] | None:
    """The expectations `--expectations` names, with their source; None for 'none'."""
    from harness import expectations

    spec = getattr(args, "expectations", None)
    if spec == "none":
        return None
    try:
        loaded = expectations.load(spec)
    except expectations.ExpectationsError as e:
        raise UsageError(str(e)) from e
    return loaded, spec or expectations.DEFAULT_FILE.name


def _run_args(args) -> list[str]:
    """The selection options of `ab` and `matrix`, passed on to each round's `run`."""
    return (["--profile", args.profile] + (["--case", args.case] if args.case else [])
            + [a for text in args.skip for a in ("--skip", text)])


def _selected_suites(args) -> list[str]:
    """The suites --suite names (all by default); an unknown one is bad input."""
    from harness import registry

    names = registry.suite_names()
    unknown = [s for s in args.suite or [] if s not in names]
    if unknown:
        raise UsageError(f"unknown suite {unknown[0]!r} (suites: {', '.join(names)})")
    return args.suite or names


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="release-bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("list", help="the suites, their cases, and what each needs")

    run = sub.add_parser("run", help="run suites and write a run record")
    _add_selection(run)
    run.add_argument("--device", action="append", choices=DEVICES,
                     help="cpu or cuda (repeatable; default: every device present)")
    run.add_argument("--out", default="results/runs", metavar="DIR",
                     help="where runs go, one folder per machine (default: results/runs)")
    run.add_argument("--no-telemetry", action="store_true",
                     help="do not sample the hardware while cases run")
    run.add_argument("--telemetry-interval", type=_positive_float, default=0.1, metavar="S",
                     help="seconds between telemetry samples (default: 0.1, i.e. 10 Hz)")
    run.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                     type=_param,
                     help="set a parameter of every case that has it, e.g. --param batch=256 "
                          "--param tf32=true (values are JSON: numbers, true/false, strings)")
    run.add_argument("--only", action="append", metavar="CASE",
                     help="only the case named CASE exactly (repeatable); `ab` runs each "
                          "benchmark case in a process of its own with it")
    run.add_argument("--dry-run", action="store_true",
                     help="print what would run (any device, present or not) and stop")
    _add_expectations(run)

    multi = sub.add_parser("multihost", help="run the suites that span hosts across several "
                           "hosts through torchrun (the same command on every host)")
    multi.add_argument("--nnodes", type=int, metavar="N",
                       help="how many hosts (default under srun: SLURM_NNODES)")
    multi.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                       help="the rendezvous, hosted by the host that has this address "
                            "(default under srun: $MASTER_ADDR:$MASTER_PORT)")
    multi.add_argument("--iface", default="lo", metavar="NAME",
                       help="the network interface every listener binds to (default: lo)")
    multi.add_argument("--join-timeout", type=_positive_float, default=120.0, metavar="S",
                       help="how long to wait for every host to join (default: 120 s)")
    multi.add_argument("run_args", nargs=argparse.REMAINDER, metavar="-- RUN OPTIONS",
                       help="options of `run` for node 0: --suite, --case, --profile, --out, ...")
    sub.add_parser("require-cuda", help="exit 2 with one line unless torch sees a CUDA device")
    sub.add_parser("asv-machine", help="register this machine with asv (GPU included) and "
                                       "print its name")
    pub = sub.add_parser("asv-publish", help="asv publish, with the dashboard's scripts served "
                                             "locally so it works offline")
    pub.add_argument("--config", default="asv.conf.json")

    show = sub.add_parser("show", help="summary table of a run, or the verdicts of an ab")
    show.add_argument("run", help="a run file, or a folder (its newest run), or an ab folder "
                                  "(its comparison.json)")
    show.add_argument("--no-tables", action="store_true", help="omit the per-case tables")

    report = sub.add_parser("report", help="one self-contained HTML page from run records")
    report.add_argument("runs", nargs="*", metavar="RUN",
                        help="run files (default: the newest run of each machine in --runs-dir)")
    report.add_argument("--runs-dir", default="results/runs", metavar="DIR")
    report.add_argument("--out", metavar="FILE",
                        help="default results/html/report.html (matrix.html with --matrix)")
    report.add_argument("--matrix", metavar="MATRIX",
                        help="the release-matrix page of a `release-bench matrix` record (its "
                             "matrix.json, or the folder holding it) instead of runs")

    compare = sub.add_parser("compare", help="changes between two runs; exit 1 on regression")
    compare.add_argument("baseline", help="a run file, or a folder (its newest run)")
    compare.add_argument("candidate", help="a run file, or a folder (its newest run)")
    compare.add_argument("--threshold", action="append", default=[], metavar="KIND=TOL",
                         type=_threshold,
                         help="tolerated relative change for a kind of metric, e.g. latency=0.2 "
                              "(defaults: ratio/throughput 0.05, time/latency 0.15, bytes 0.10)")
    compare.add_argument("--all", action="store_true", help="list unchanged metrics too")
    compare.add_argument("--json", metavar="FILE", help="also write the changes as JSON")
    compare.add_argument("--history", metavar="DIR",
                         help="earlier runs of this machine, for the spread between runs "
                              "(default: the baseline's folder)")
    compare.add_argument("--no-history", action="store_true",
                         help="use no history: without a spread between runs every figure "
                              "but a rate is then unverified")
    compare.add_argument("--across-machines", action="store_true",
                         help="judge runs of different hardware anyway")
    _add_calibration(compare)

    cal = sub.add_parser("calibrate", help="an A/A comparison of this machine's benchmarks: "
                                           "how much each figure wanders from round to round, "
                                           "which compare and ab then use")
    _add_selection(cal)
    cal.add_argument("--rounds", type=int, default=8, metavar="K",
                     help="rounds a side (default 8: each figure's spread on 7 degrees of "
                          "freedom, its family's on many more)")
    cal.add_argument("--python", metavar="PY", default=sys.executable,
                     help="the environment to calibrate with (default: this Python)")
    cal.add_argument("--out", default=None, metavar="DIR",
                     help="where the calibration goes (default: results/calibration)")
    cal.add_argument("--work", default="results/scratch/calibrate", metavar="DIR",
                     help="where the A/A's rounds go")

    ab = sub.add_parser("ab", help="the same cases in two Python environments, interleaved in "
                                   "fresh processes; exit 1 on regression")
    ab.add_argument("a", metavar="A", nargs="?",
                    help="a venv folder or a Python executable (baseline)")
    ab.add_argument("b", metavar="B", nargs="?",
                    help="a venv folder or a Python executable (candidate)")
    ab.add_argument("--history", metavar="DIR",
                    help="this machine's separate runs (e.g. results/runs/<machine>): each "
                         "metric's run-to-run spread there is a floor under the rounds' "
                         "(stricter: it includes the drift between runs that ab cancels)")
    ab.add_argument("--no-history", action="store_true",
                    help="judge by the rounds' spread alone (the default)")
    ab.add_argument("--judge", metavar="AB_DIR",
                    help="give the verdicts again from an earlier ab's stored rounds")
    _add_selection(ab)
    ab.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="K",
                    help="fresh processes per side and group (default 5: A B, B A, A B, B A, "
                         "A B); a benchmark whose level this machine's calibration found drawn "
                         "per process gets a multiple (its rounds factor)")
    ab.add_argument("--max-rounds", type=int, metavar="N",
                    help="give a benchmark with inconclusive figures the further rounds they "
                         "need to be decided, judging again after each stage, up to N in all "
                         "(times its rounds factor); default: no further rounds")
    _add_calibration(ab)
    ab.add_argument("--out", default="results/scratch/ab", metavar="DIR",
                    help="where both sides' runs and the comparison go")
    ab.add_argument("--threshold", action="append", default=[], metavar="KIND=TOL",
                    type=_threshold, help="tolerated relative change for a kind of metric "
                                          "(default 0.05 for every kind but a rate's 0)")
    mx = sub.add_parser("matrix", help="the release checklist and headline figures across "
                                       "torch versions, interleaved; exit 1 on an unexpected "
                                       "result or a regression")
    mx.add_argument("sides", metavar="ENV", nargs="*",
                    help="a torch version with an environment in .envs/ (release-bench env "
                         "create), or a venv folder or Python executable; oldest first")
    mx.add_argument("--judge", metavar="MATRIX_DIR",
                    help="give the verdicts again from an earlier matrix's stored rounds")
    _add_selection(mx)
    mx.add_argument("--rounds", type=int, default=2, metavar="K",
                    help="fresh processes per environment and suite (default 2), the order "
                         "of the environments rotated each round")
    mx.add_argument("--out", default="results/scratch/matrix", metavar="DIR",
                    help="where the matrix record, the merged runs and the rounds go")
    mx.add_argument("--threshold", action="append", default=[], metavar="KIND=TOL",
                    type=_threshold, help="tolerated relative change for a kind of metric "
                                          "(default 0.05 for every kind but a rate's 0)")
    _add_expectations(mx)
    _add_calibration(mx)

    exp = sub.add_parser("expectations", help="the expected results (expectations.toml): "
                                              "judge runs by them, or update them from runs")
    exp_sub = exp.add_subparsers(dest="exp_command", required=True, metavar="ACTION")
    check = exp_sub.add_parser("check", help="judge run records by the expectations; exit 1 "
                                             "when anything is unexpected")
    check.add_argument("runs", nargs="+", metavar="RUN", help="run files or folders")
    check.add_argument("--file", metavar="FILE", help="default: expectations.toml")
    upd = exp_sub.add_parser("update", help="print the edit of the expectations that RUNs call "
                                            "for (new failures, cases that now pass, stale "
                                            "entries); --write applies it")
    upd.add_argument("runs", nargs="+", metavar="RUN", help="run files or folders")
    upd.add_argument("--file", metavar="FILE", help="default: expectations.toml")
    upd.add_argument("--write", action="store_true", help="write the edit into the file")

    env = sub.add_parser("env", help="one Python environment per torch release, in .envs/")
    env_sub = env.add_subparsers(dest="env_command", required=True, metavar="ACTION")
    create = env_sub.add_parser("create", help="build .envs/torch-VERSION from the registry")
    create.add_argument("version", metavar="VERSION", help="a torch release, e.g. 2.13.0")
    create.add_argument("--reuse", metavar="VENV",
                        help="take torch and every other package from VENV instead of the "
                             "registry (no download; for tests)")
    create.add_argument("--without-torchvision", action="store_true",
                        help="leave torchvision out (a torch whose registry torchvision does "
                             "not import beside it); the cases that need it skip")
    env_sub.add_parser("list", help="the environments built, with their size")
    remove = env_sub.add_parser("remove", help="remove .envs/torch-VERSION")
    remove.add_argument("version", metavar="VERSION")
    return parser


def _cmd_list(args) -> int:
    from harness import registry

    for suite in registry.all_suites():
        print(f"{suite.name}: {suite.feature} (1.6 status: {suite.status})")
        print(f"  {suite.summary}")
        for c in suite.cases:
            needs = ", ".join([f"devices: {'/'.join(c.devices)}", *c.needs])
            sets = {p: len(c.param_sets(p, c.devices[0])) for p in PROFILES}
            print(f"  {c.kind:<11} {c.name:<34} [{needs}; param sets quick {sets['quick']}, "
                  f"full {sets['full']}]")
            if c.doc:
                print(f"  {'':<11} {c.doc}")
        for w in suite.workloads:
            print(f"  {'workload':<11} {w.name:<34} [devices: {'/'.join(w.devices)}] {w.doc}")
    return EXIT_OK


def _devices(requested: Sequence[str] | None, dry_run: bool = False) -> list[str]:
    import torch

    if not requested:
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    if "cuda" in requested and not torch.cuda.is_available() and not dry_run:
        raise UsageError("--device cuda: CUDA is not available on this machine")
    return list(dict.fromkeys(requested))


def _cmd_run(args, hosts: list[dict] | None = None) -> int:
    """`run`; with `hosts` (node 0 of a run across hosts) the cases that need one host are
    left out, and the record lists every host."""
    from harness import registry, runner, summary, telemetry

    suites = [registry.load(n) for n in _selected_suites(args)]
    devices = _devices(args.device, args.dry_run)
    overrides = dict(args.param)
    planned = runner.plan(suites, args.profile, devices, args.case, overrides, args.skip,
                          args.only)
    notes = []
    if hosts is not None:
        one_host = [p for p in planned if "one_host" in p.case.needs]
        planned = [p for p in planned if "one_host" not in p.case.needs]
        notes = [f"across {len(hosts)} hosts: left out {p.label}, which runs on one host only "
                 f"(it kills workers by pid, or runs its own processes)" for p in one_host]
        for line in notes:
            print(line, file=sys.stderr)
    if not planned:
        raise UsageError("nothing to run: no case matches the given suite, case, skip and device")
    known = {k for p in planned for k in (*p.params, *p.case.options)}
    if unknown_params := sorted(set(overrides) - known):
        raise UsageError(f"no case to run takes parameter {unknown_params[0]!r} "
                         f"(parameters: {', '.join(sorted(known)) or 'none'})")
    expected = _expectations(args)  # a bad file fails here, before anything runs
    if args.dry_run:
        for p in planned:
            print(f"would run {p.label}")
        print(f"{len(planned)} case runs planned, profile {args.profile}, devices "
              f"{', '.join(devices)}")
        return EXIT_OK
    tel = None if args.no_telemetry else telemetry.Telemetry(args.telemetry_interval)
    try:
        path, run = runner.run(planned, args.profile, args.out, telemetry=tel,
                               hosts=hosts, notes=notes)
    except runner.Interrupted as e:
        # SIGINT or SIGTERM: the workers are reaped and the record is marked; say where it is
        kept = f"the run record is in {e.path}" if e.path else "no run record was written yet"
        print(f"release-bench: run {e}; {kept}", file=sys.stderr)
        return e.exit_status
    finally:
        if tel is not None:
            tel.close()
    judged = _judge_run(run, path, expected)
    print(summary.run_summary(run))
    print(f"\nrun written to {path}")
    # An invalid case (a performance check missed on a contended machine) is reported but does
    # not fail the run: the measurement is void, the feature is not known to be broken.
    reported = [e for e in run["results"] if e["outcome"] in ("fail", "error", "invalid")]
    for e in reported:
        print(f"{e['outcome']}: {e['suite']}/{e['case']} [{e['device']} {param_id(e['params'])}]"
              f": {e['reason']}", file=sys.stderr)
    if judged is None:  # --expectations none: the raw outcomes decide
        return EXIT_FAILED if any(e["outcome"] != "invalid" for e in reported) else EXIT_OK
    return _expectations_exit(judged)


def _judge_run(run: dict, path, expected: tuple[list, str] | None):
    """The run judged by the expectations and annotated on disk; None without them."""
    from harness import expectations

    if expected is None:
        return None
    judged = expectations.judge_run(run, expected[0], expected[1], expectations.known_cases())
    records.write_json_atomic(path, expectations.annotate(run, judged))
    return judged


def _expectations_exit(judged) -> int:
    """Print what the expectations say of a run; 1 exactly when anything is unexpected."""
    from harness import expectations

    for line in expectations.lines(judged):
        print(line, file=sys.stderr)
    unexpected = judged.unexpected
    counts = judged.counts()
    print(f"expectations ({judged.source}): " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n) + (
        f"; {len(unexpected)} unexpected" if unexpected else "; nothing unexpected"))
    return EXIT_FAILED if unexpected else EXIT_OK


def _suites_spanning_hosts() -> list[str]:
    from harness import registry

    return [n for n in registry.suite_names() if registry.load(n).spans_hosts]


def run_across_hosts(run_argv: list[str], hosts: list[dict]) -> int:
    """Node 0's part of `multihost`: `run RUN_ARGV` with its ranks spread over `hosts`."""
    try:
        args = _build_parser().parse_args(["run", *run_argv])
        args.suite = args.suite or _suites_spanning_hosts()
        return _cmd_run(args, hosts)
    except (UsageError, records.RecordError) as e:
        print(f"release-bench: error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _cmd_multihost(args) -> int:
    from harness import nodes

    run_argv = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    # bad run options fail here, on every host, before any rendezvous
    run = _build_parser().parse_args(["run", *run_argv])
    spanning = _suites_spanning_hosts()
    run.suite = run.suite or spanning
    if bad := [s for s in _selected_suites(run) if s not in spanning]:
        raise UsageError(f"suite {bad[0]!r} has no multi-process cases to spread over hosts "
                         f"(multihost runs: {', '.join(spanning)})")
    try:
        plan = nodes.plan_from(args, dict(os.environ))
        return nodes.multihost(plan, run_argv)
    except nodes.NodeError as e:
        raise UsageError(str(e)) from e


def _cmd_require_cuda(args) -> int:
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"no CUDA device visible to torch {torch.__version__} "
                         f"(CUDA build: {torch.version.cuda or 'none'}); run this on a GPU machine")
    print(f"CUDA {torch.version.cuda}: {torch.cuda.get_device_name(0)}")
    return EXIT_OK


def _cmd_show(args) -> int:
    import json
    from pathlib import Path

    from harness import compare, summary

    path = Path(args.run)
    stored = path / "comparison.json" if path.is_dir() else path
    if stored.name == "comparison.json" and stored.is_file():  # an ab's (or calibrate's)
        try:
            doc = json.loads(stored.read_text())
            changes = [compare.Change.from_json(c) for c in doc["changes"]]
        except (ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{stored}: not a comparison ({e})") from e
        print(f"A: torch {doc.get('A')}\nB: torch {doc.get('B')}\n{doc.get('rounds')} rounds "
              f"per side; calibration: {doc.get('calibration') or 'none (conservative defaults)'}")
        _print_changes(changes, not args.no_tables)
        return EXIT_OK
    run = records.read_run(records.resolve_run(args.run))
    print(summary.run_summary(run, tables=not args.no_tables))
    return EXIT_OK


def _cmd_asv_machine(args) -> int:
    from harness.asv_adapter import register_machine

    print(register_machine())
    return EXIT_OK


def _cmd_asv_publish(args) -> int:
    from harness.asv_dashboard import publish

    html_dir = publish(args.config)
    print(f"asv dashboard in {html_dir}; view it with: asv preview (or any static web server)")
    return EXIT_OK


def _cmd_report(args) -> int:
    from pathlib import Path

    from harness import report

    if args.matrix:
        path = Path(args.matrix)
        path = path / "matrix.json" if path.is_dir() else path
        try:
            record = json.loads(path.read_text())
            if record.get("schema") != "release-bench-matrix/1":
                raise ValueError("not a release-bench matrix record")
        except (OSError, ValueError) as e:
            raise UsageError(f"{args.matrix}: {e}") from e
        out = records.write_text_atomic(args.out or "results/html/matrix.html",
                                        report.build_matrix(record))
        print(f"release matrix of {len(record['versions'])} versions written to {out}")
        return EXIT_OK
    paths = [records.resolve_run(r) for r in args.runs] or report.latest_runs(args.runs_dir)
    if not paths:
        raise UsageError(f"no runs under {args.runs_dir}; run `release-bench run` first")
    out = report.write(paths, args.out or "results/html/report.html")
    print(f"report of {len(paths)} run(s) written to {out}")
    print(f"open it with: xdg-open {Path(out)}  (or any browser; it needs no server)")
    return EXIT_OK


def _history(spec, cand: dict, exclude: set, required: bool) -> list[dict]:
    """The readable runs under `spec` of the candidate's machine, hardware and profile, oldest
    first."""
    from pathlib import Path

    from harness import compare

    root = Path(spec)
    if not root.is_dir():
        raise UsageError(f"--history {spec}: not a folder of runs")
    runs, other_hardware = [], []
    for p in sorted(root.rglob("*.json")):
        if p.resolve() in exclude:
            continue
        try:
            run = records.read_run(p)
        except records.RecordError:
            continue  # not a run file (a comparison, a fingerprint)
        if (run["machine"]["name"], run["profile"]) != (cand["machine"]["name"],
                                                        cand["profile"]):
            continue
        # A machine name can outlive its hardware (a VM moved to another host CPU): runs of
        # other hardware would set the noise floor from figures this one does not produce.
        if differ := compare.machine_differences(run["machine"], cand["machine"]):
            other_hardware.append(differ[0])
        else:
            runs.append(run)
    if other_hardware:
        print(f"history: {len(other_hardware)} run(s) of {cand['machine']['name']} on other "
              f"hardware left out ({other_hardware[-1]})")
    if not runs and required:
        raise UsageError(f"--history {spec}: no runs of machine {cand['machine']['name']}, "
                         f"profile {cand['profile']}")
    return sorted(runs, key=lambda r: r["started"])


def _history_line(history: list[dict] | None, changes) -> str:
    """What the spread between runs came from, and the changes it lets one detect."""
    if not history or len(history) < 2:
        return ("no history of this machine beside the baseline: the spread between runs is "
                "unknown, so changes past a tolerance are unverified (use --history DIR or ab)")
    return f"history: {len(history)} runs; " + _detectable_line(changes)


def _more_rounds(res: dict) -> str:
    """The benchmarks that had more rounds than the rest (their level is drawn per process)."""
    more = res.get("more_rounds") or {}
    return "".join(f"; {n} rounds for {name}" for name, n in more.items())


def _detectable_line(changes) -> str:
    """The smallest change the spread between runs (or rounds) lets through, at the Bonferroni
    level (BH's, which the verdicts use, is lower when several metrics changed)."""
    shown = sorted((c.detectable, c.case, c.name) for c in changes if c.detectable is not None)
    if not shown:
        return "no metric with a spread between runs"
    worst = "; ".join(f"{n} {100 * d:.0f}%" for d, _, n in shown[-5:][::-1])
    return (f"minimum detectable change: median {100 * shown[len(shown) // 2][0]:.1f}% over "
            f"{len(shown)} metrics; worst: {worst}")


def _print_changes(changes, show_all: bool) -> dict[str, int]:
    from harness import compare, summary

    rows = compare.changes_table(changes, show_all=show_all)
    print(summary.table_text(rows, limit=500) if rows else
          "no regression, improvement or inconclusive figure")
    counts = compare.counts(changes)
    judged = sum(1 for c in changes if c.adjusted is not None)
    print(", ".join(f"{n} {v}" for v, n in counts.items())
          + f" ({judged} figures tested; 95% intervals, false-discovery rate "
            f"{compare.stats.ALPHA:g} over them: regression = past the tolerance and "
            "significant; unchanged = interval inside the tolerance; inconclusive = neither)")
    return counts


def _cmd_compare(args) -> int:
    from harness import compare

    paths = [records.resolve_run(args.baseline), records.resolve_run(args.candidate)]
    base, cand = (records.read_run(p) for p in paths)
    differ = compare.machine_differences(base["machine"], cand["machine"])
    if differ and not args.across_machines:
        raise UsageError("the runs are from different hardware (" + "; ".join(differ)
                         + "): no verdicts; pass --across-machines to judge them anyway")
    exclude = {paths[1].resolve()}  # the candidate is judged against the others
    if args.no_history:
        history = None
    elif args.history:
        history = _history(args.history, cand, exclude, required=True)
    else:
        history = sorted(_history(paths[0].parent, cand, exclude | {paths[0].resolve()},
                                  required=False) + [base], key=lambda r: r["started"])
    cal, cal_line = _calibration(args, cand["machine"])
    changes = compare.compare_runs(base, cand, dict(args.threshold), history=history, cal=cal)
    for label, run in (("baseline ", base), ("candidate", cand)):
        print(f"{label} {run['started']} {run['machine']['name']} torch "
              f"{run['machine'].get('torch', {}).get('version')}")
    if differ:
        print("different hardware, judged anyway: " + "; ".join(differ))
    print(_history_line(history, changes))
    print(cal_line)
    counts = _print_changes(changes, args.all)
    if args.json:
        records.write_json_atomic(args.json, [c.to_json() for c in changes])
    return EXIT_FAILED if counts["regression"] else EXIT_OK


def _units(suites: list[str], args, cal=None) -> list:  # of ab.Group
    """What `ab` and `matrix` run in one process per side and round (`ab.groups`), with the
    rounds factors of the calibration `cal`."""
    from harness import ab

    if not (units := ab.groups(suites, args.case, args.skip, cal)):
        raise UsageError("nothing to run: no case matches the given suite, case and skip")
    return units


def _ab_history(args) -> list[dict] | None:
    """The separate runs whose spread is a floor under the rounds' (only when asked for: the
    rounds, interleaved side by side in one run, are what ab judges by)."""
    from harness import machine

    if args.no_history or not args.history:
        return None
    # the whole fingerprint: the history keeps to this machine's hardware (`_history`)
    me = {"machine": machine.fingerprint(), "profile": args.profile}
    return _history(args.history, me, set(), required=True)


def _cmd_ab(args) -> int:
    from pathlib import Path

    from harness import ab

    suites = _selected_suites(args)
    if args.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {args.rounds}")
    if not args.judge and not (args.a and args.b):
        raise UsageError("ab needs two environments, A and B (or --judge AB_DIR)")
    if args.max_rounds is not None and args.max_rounds <= args.rounds:
        raise UsageError(f"--max-rounds must be above --rounds ({args.rounds}), "
                         f"got {args.max_rounds}")
    history = _ab_history(args)
    run_args = _run_args(args)
    cal, cal_line = _calibration(args)
    try:
        if args.judge:
            res = ab.judge(Path(args.judge), dict(args.threshold), history, cal)
        else:
            res = ab.ab(args.a, args.b, _units(suites, args, cal), run_args, args.rounds,
                        Path(args.out), lambda s: print(s, file=sys.stderr, flush=True),
                        dict(args.threshold), history, args.max_rounds, cal)
    except ab.AbError as e:
        raise UsageError(str(e)) from e
    print(f"A: torch {res['versions']['A']}\nB: torch {res['versions']['B']}\n"
          f"{res['rounds']} rounds per side, round by round ({res['schedule']} for each "
          f"suite's conformance cases and each benchmark case{_more_rounds(res)}); "
          f"history floor: {f'{len(history)} runs' if history else 'none'}")
    print(cal_line)
    counts = _print_changes(res["changes"], False)
    for stage in res.get("judged", []) if len(res.get("judged", [])) > 1 else []:
        print(f"after {max(stage['rounds'].values())} rounds ({stage['minutes']} min): "
              + ", ".join(f"{n} {v}" for v, n in stage["counts"].items() if n))
    print("rounds' spread: " + _detectable_line(res["changes"]))
    print(f"both sides' runs and the comparison are in {res['dir']}")
    return EXIT_FAILED if counts["regression"] else EXIT_OK


def _cmd_calibrate(args) -> int:
    from pathlib import Path

    from harness import ab, calibration, compare, machine, summary

    suites = _selected_suites(args)
    if args.rounds < 3:
        raise UsageError(f"--rounds must be at least 3 to measure a spread, got {args.rounds}")
    units = [u for u in _units(suites, args) if u.benchmark]
    if not units:
        raise UsageError("nothing to calibrate: no benchmark case matches the selection")
    root = Path(args.out) if args.out else calibration.CALIBRATIONS
    started = records.now()
    try:
        res = ab.ab(args.python, args.python, units, _run_args(args), args.rounds,
                    Path(args.work), lambda s: print(s, file=sys.stderr, flush=True))
    except ab.AbError as e:
        raise UsageError(f"calibrate: {e}") from e
    fingerprint = res["A"]["machine"]
    measured = {"started": started, "finished": records.now(), "rounds": args.rounds,
                "design": "sequential", "profile": args.profile,
                "torch": (fingerprint.get("torch") or {}).get("version"),
                "commit": (fingerprint.get("project") or {}).get("commit"),
                "command": ["release-bench", *sys.argv[1:]] if sys.argv[1:2] == ["calibrate"]
                else ["release-bench", "calibrate"],
                "ab": str(res["dir"]), "aa_counts": compare.counts(res["changes"])}
    by_side = ab.load_rounds(res["dir"])
    cal = calibration.measure(by_side["A"], by_side["B"], machine.fingerprint(),
                              [u.name for u in units], DEFAULT_ROUNDS, measured)
    path = calibration.write(cal, root)
    doc = cal.to_json()
    print(summary.table_text([
        {"family": f"{f['case']} {f['kind']}", "sd of log B/A": f"{100 * f['sd_log_ratio']:.1f}%",
         "detectable at 5 rounds": f"{100 * f['detectable_at']['5']:.1f}%",
         "rounds for 10%": f["rounds_for"]["0.1"], "rounds for 5%": f["rounds_for"]["0.05"],
         "level per process": f["per_process"]} for f in doc["families"]], limit=200))
    print("rounds factors: " + ", ".join(f"{u} {n}" for u, n in doc["rounds_factor"].items()))
    print("A/A verdicts: " + ", ".join(f"{n} {v}" for v, n in measured["aa_counts"].items()))
    print(f"calibration written to {path}")
    return EXIT_OK


def _cmd_matrix(args) -> int:
    from pathlib import Path

    from harness import ab, matrix

    suites = _selected_suites(args)
    if args.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {args.rounds}")
    run_args = _run_args(args)
    expected = _expectations(args)
    if not args.judge and len(args.sides) < 2:
        raise UsageError("matrix needs at least two environments (or --judge MATRIX_DIR)")
    cal, cal_line = _calibration(args)
    try:
        if args.judge:
            res = matrix.judge_again(Path(args.judge), dict(args.threshold), expected, cal)
        else:
            res = matrix.matrix(args.sides, _units(suites, args, cal), run_args, args.rounds,
                                Path(args.out), lambda s: print(s, file=sys.stderr, flush=True),
                                dict(args.threshold), expected, cal)
    except ab.AbError as e:
        raise UsageError(f"matrix: {e}") from e
    unexpected = 0
    for v in res["versions"]:
        side = res["sides"][v["label"]]
        cases = side["cases"].values()
        outcomes = {o: sum(c["outcome"] == o for c in cases) for o in ab.OUTCOME_ORDER}
        warned = sum(1 for c in cases if c["warnings"])
        print(f"torch {v['torch']}: " + ", ".join(f"{n} {o}" for o, n in outcomes.items() if n)
              + f"; {warned} cases warned")
        for cid, c in side["cases"].items():
            status = (c.get("expected") or {}).get("status")
            if status in ("expected-fail", "unexpected-fail", "unexpected-pass"):
                unexpected += status != "expected-fail"
                why = c["expected"].get("why") or c["expected"].get("issue") or ""
                print(f"  {status}: {cid}" + (f": {why}" if why else ""))
        if expected is None:  # raw outcomes: any failure counts
            unexpected += outcomes["fail"] + outcomes["error"]
    print(cal_line)
    changed = False
    for step in res["steps"]:
        print(f"\n{step['from']} -> {step['to']}: "
              + ", ".join(f"{n} {v}" for v, n in step["counts"].items()))
        for c in step["changes"]:  # reported; the expectations judge the outcomes
            what = (f"{c['from']} -> {c['to']}" if c["what"] in ("outcome", "case")
                    else c["warning"])
            print(f"  {c['case']}: {c['what']}: {what}")
        for v in step["headline_verdicts"]:
            lo, hi = v["interval"] or (None, None)
            ci = f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else ""
            factor = f"{v['factor']:.3g}x" if v["factor"] is not None else "n/a"
            print(f"  headline {v['case']} {v['metric']} {v['labels'] or ''}: {factor}{ci} "
                  f"{v['verdict']}")
        changed |= bool(step["counts"].get("regression"))
    print(f"\nthe matrix record, the merged runs and the rounds are in {res['dir']}")
    # green exactly when nothing is unexpected: no result the expectations do not excuse, no
    # regression; a warning that appeared or went, and an outcome the expectations account
    # for, are findings, not failures
    return EXIT_FAILED if changed or unexpected else EXIT_OK


def _cmd_expectations(args) -> int:
    from pathlib import Path

    from harness import expectations

    runs = [records.read_run(records.resolve_run(r)) for r in args.runs]
    if args.exp_command == "check":
        args.expectations = args.file
        loaded, source = _expectations(args)
        status = EXIT_OK
        for spec, run in zip(args.runs, runs, strict=True):
            print(f"{spec}: torch {run['machine'].get('torch', {}).get('version')}")
            judged = expectations.judge_run(run, loaded, source, expectations.known_cases())
            status = max(status, _expectations_exit(judged))
        return status
    path = Path(args.file) if args.file else expectations.DEFAULT_FILE
    try:
        text = path.read_text() if path.exists() else ""
        upd = expectations.update(text, runs, expectations.known_cases(), str(path))
    except expectations.ExpectationsError as e:
        raise UsageError(str(e)) from e
    for line in upd.changes:
        print(line)
    if upd.new == upd.old:
        print(f"{path.name}: nothing to change")
        return EXIT_OK
    print(upd.diff(path.name), end="")
    if args.write:
        records.write_text_atomic(path, upd.new)
        print(f"written to {path}" + (
            "; name the issue of each new entry before the file can be used"
            if expectations.PLACEHOLDER_ISSUE in upd.new else ""))
    return EXIT_OK


def _cmd_env(args) -> int:
    from pathlib import Path

    from harness import envs

    try:
        if args.env_command == "create":
            e = envs.create(args.version, reuse=Path(args.reuse) if args.reuse else None,
                            torchvision=not args.without_torchvision,
                            log=lambda s: print(s, file=sys.stderr, flush=True))
            print(f"torch-{e.version}: torch {e.torch}, torchvision {e.torchvision or 'none'}, "
                  f"CUDA {e.cuda or 'none (CPU-only build)'}, Python {e.python}; built in "
                  f"{e.built_s:.0f} s, {e.disk_bytes / 2**30:.2f} GiB")
        elif args.env_command == "list":
            for e in envs.built():
                print(f"{e.version:10s} torch {e.torch:14s} torchvision "
                      f"{e.torchvision or 'none':10s} {e.disk_bytes / 2**30:5.2f} GiB"
                      + (f"  (reuses {e.reuses})" if e.reuses else ""))
        else:
            envs.remove(args.version)
            print(f"removed torch-{args.version}")
    except envs.EnvError as e:
        raise UsageError(f"env {args.env_command}: {e}") from e
    return EXIT_OK


COMMANDS = {"list": _cmd_list, "run": _cmd_run, "show": _cmd_show,
            "require-cuda": _cmd_require_cuda, "report": _cmd_report, "compare": _cmd_compare,
            "ab": _cmd_ab, "multihost": _cmd_multihost, "env": _cmd_env,
            "matrix": _cmd_matrix, "expectations": _cmd_expectations,
            "calibrate": _cmd_calibrate,
            "asv-machine": _cmd_asv_machine, "asv-publish": _cmd_asv_publish}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except (UsageError, records.RecordError) as e:
        print(f"release-bench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as e:
        if e.name not in ("torch", "torchvision"):
            raise
        print(f"release-bench: error: {e.name} is not installed in this Python "
              f"({sys.executable})", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Ctrl-C outside a run (a run reports its own interruption, with its record's path)
        print("release-bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
