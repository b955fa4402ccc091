"""What `compare`, `ab`, `matrix` and `show` print of verdicts, and the options they share:
the history of separate runs, the rounds, the units a campaign runs."""

from __future__ import annotations

from harness import records
from harness.commands import common
from harness.commands.common import UsageError
from harness.records import Design


def history_runs(spec, cand: records.Run, exclude: set, required: bool) -> list[records.Run]:
    """The readable runs under `spec` of the candidate's machine, hardware and profile, oldest
    first."""
    from pathlib import Path

    from harness.running import machine

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
        if (run.machine_name, run.profile) != (cand.machine_name, cand.profile):
            continue
        # A machine name can outlive its hardware (a VM moved to another host CPU): runs of
        # other hardware would set the noise floor from figures this one does not produce.
        if differ := machine.differences(run.machine, cand.machine):
            other_hardware.append(differ[0])
        else:
            runs.append(run)
    if other_hardware:
        print(f"history: {len(other_hardware)} run(s) of {cand.machine_name} on other "
              f"hardware left out ({other_hardware[-1]})")
    if not runs and required:
        raise UsageError(f"--history {spec}: no runs of machine {cand.machine_name}, "
                         f"profile {cand.profile}")
    return sorted(runs, key=lambda r: r.started)


def history_line(history: list[records.Run] | None, changes) -> str:
    """What the spread between runs came from, and the changes it lets one detect."""
    if not history or len(history) < 2:
        return ("no history of this machine beside the baseline: the spread between runs is "
                "unknown, so changes past a tolerance are unverified (use --history DIR or ab)")
    return f"history: {len(history)} runs; " + detectable_line(changes)


def more_rounds_text(res: dict) -> str:
    """The benchmarks that had more rounds than the rest (their level is drawn per process)."""
    more = res.get("more_rounds") or {}
    return "".join(f"; {n} rounds for {name}" for name, n in more.items())


def detectable_line(changes) -> str:
    """The smallest change the spread between runs (or rounds) lets through, at the Bonferroni
    level (BH's, which the verdicts use, is lower when several metrics changed)."""
    shown = sorted((c.detectable, c.case, c.name) for c in changes if c.detectable is not None)
    if not shown:
        return "no metric with a spread between runs"
    worst = "; ".join(f"{n} {100 * d:.0f}%" for d, _, n in shown[-5:][::-1])
    return (f"minimum detectable change: median {100 * shown[len(shown) // 2][0]:.1f}% over "
            f"{len(shown)} metrics; worst: {worst}")


def print_changes(changes, show_all: bool) -> dict[str, int]:
    from harness.comparing import compare
    from harness.presenting import summary

    rows = compare.changes_table(changes, show_all=show_all)
    print(summary.table_text(rows, limit=500) if rows else
          "no regression, improvement, worse, better or inconclusive figure")
    counts = compare.counts(changes)
    judged = sum(1 for c in changes if c.adjusted is not None)
    print(", ".join(f"{n} {v}" for v, n in counts.items())
          + f" ({judged} figures tested; 95% intervals, false-discovery rate "
            f"{compare.stats.ALPHA:g} over them: regression/improvement = a change shown "
            "(significant), its estimate past the tolerance; worse/better = a change shown, "
            "its estimate inside the tolerance; unchanged = interval inside the tolerance and "
            "no change shown; inconclusive = neither shown)")
    return counts


def exit_status(counts: dict[str, int]) -> int:
    """A comparison's exit status: failed exactly on a regression. A change inside the
    tolerance (`worse`, `better`) and an inconclusive figure are listed, never failures."""
    return common.EXIT_FAILED if counts["regression"] else common.EXIT_OK


def units(suites: list[str], args, cal=None) -> list:  # of campaign.Unit
    """What `ab` and `matrix` run in one process per side and round (`campaign.units`), each
    benchmark in the design the options ask for (each its best by default, where the command
    has `--design`), with the rounds factors of the calibration `cal`. A design asked for by
    name that no selected benchmark declares is bad input; where the best design of some is a
    duet on a machine that cannot halve its CPUs, they run sequentially and say why."""
    from dataclasses import replace

    from harness.comparing import campaign
    from harness.running import duet as duets

    wanted = common.design(args)
    if not (units := campaign.units(suites, args.case, args.skip, cal, wanted)):
        raise UsageError("nothing to run: no case matches the given suite, case and skip")
    if wanted == Design.BURSTS and not any(u.bursts for u in units):
        raise UsageError("--bursts: none of the selected benchmarks can run in bursts (see "
                         "`release-bench list`: bursts-capable cases say so)")
    if wanted == Design.DUET and not any(u.duet for u in units):
        raise UsageError("--duet: none of the selected benchmarks can run as a duet (see "
                         "`release-bench list`: duet-capable cases say so)")
    if any(u.duet for u in units):
        try:
            duets.halves()
        except duets.DuetError as e:
            if wanted == Design.DUET:
                raise UsageError(f"--duet: {e}") from e
            units = [replace(u, design=Design.SEQUENTIAL, device="",
                             why=f"its best design is a duet, but {e}") if u.duet else u
                     for u in units]
    return units


def design_lines(design: dict, rounds: int, folder) -> list[str]:
    """The header lines that say which design each benchmark ran in, and why (`ab.design_of`;
    a folder from before designs were kept per unit: its lists of duets and bursts)."""
    units = design.get("units") or {
        **{n: {"design": Design.DUET, "why": "--duet"} for n in design.get("duet_units", [])},
        **{n: {"design": Design.BURSTS, "why": "--bursts"}
           for n in design.get("bursts_units", [])}}
    groups: dict[tuple[str, str], list[str]] = {}
    for name, u in units.items():
        groups.setdefault((u["design"], u["why"]), []).append(name)
    def n(k: int, word: str) -> str:
        return f"{k} {word}" + ("" if k == 1 else "s")

    how = {Design.DUET: f"{n(2 * rounds, 'round')} a side, {n(rounds, 'swapped pair')}"
           + (" on CPUs " + " and ".join(",".join(map(str, h)) for h in design["halves"])
              if design.get("halves") else ""),
           Design.BURSTS: f"{n(rounds, 'round')}, both sides alive through each, in turns; the "
                          f"turns' log in {folder}/turns",
           Design.SEQUENTIAL: f"{n(rounds, 'round')}, the sides one after the other"}
    order = [Design.DUET, Design.BURSTS, Design.SEQUENTIAL]
    return [f"{d} ({how[Design(d)]}): {', '.join(names)} -- {why}"
            for (d, why), names in sorted(groups.items(), key=lambda g: order.index(g[0][0]))]


def check_rounds(args) -> None:
    """`--rounds` and `--max-rounds` of ab and matrix, refused in one line when they make no
    sense."""
    if args.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {args.rounds}")
    if args.max_rounds is not None and args.max_rounds <= args.rounds:
        raise UsageError(f"--max-rounds must be above --rounds ({args.rounds}), "
                         f"got {args.max_rounds}")


def print_stages(judged: list[dict]) -> None:
    """What further rounds bought: the verdicts after each stage (nothing without any)."""
    for stage in judged if len(judged) > 1 else []:
        print(f"after {max(stage['rounds'].values())} rounds ({stage['minutes']} min): "
              + ", ".join(f"{n} {v}" for v, n in stage["counts"].items() if n))


def add_threshold(parser) -> None:
    """`--threshold` of ab and matrix, whose rounds judge every kind at 5% by default."""
    parser.add_argument("--threshold", action="append", default=[], metavar="KIND=TOL",
                        type=common.threshold,
                        help="tolerated relative change for a kind of metric (default 0.05 for "
                             "every kind but a rate's 0)")
