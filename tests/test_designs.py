"""`ab`'s designs: without a flag each benchmark runs in the most precise design it declares
(a duet, bursts, or sequential rounds), a flag forces one, a duet's CUDA runs go sequentially,
the header says which design each benchmark ran in and why, and each figure is judged with its
design's calibration."""

from __future__ import annotations


def _units_of(*argv: str):
    """The units `release-bench ab A B ARGV...` would run, from its own parser."""
    from harness import cli
    from harness.commands import common, judging

    args = cli.build_parser().parse_args(["ab", "a", "b", *argv])
    return judging.units(common.selected_suites(args), args)


def test_without_a_design_flag_each_benchmark_runs_in_its_declared_best_design():
    """`ab` with no design flag: a duet for every benchmark that declares one, bursts for one
    that declares only bursts, sequential rounds for the rest; each unit says why."""
    from harness import registry
    from harness.records import Design

    units = {u.name: u for u in _units_of() if u.benchmark}
    for suite in registry.all_suites():
        for c in suite.cases:
            if c.kind != "benchmark":
                continue
            want = (Design.DUET if c.duet else Design.BURSTS if c.bursts
                    else Design.SEQUENTIAL)
            assert units[f"{suite.name}.{c.name}"].design == want, c.id
            assert units[f"{suite.name}.{c.name}"].why.startswith(
                "declares duet" if c.duet else "declares bursts" if c.bursts
                else "declares neither"), c.id
    (trip,) = [u for u in _units_of("--suite", "rpc", "--case", "round_trip") if u.benchmark]
    assert trip.design == Design.BURSTS
    (step,) = [u for u in _units_of("--suite", "amp", "--case", "train_step") if u.benchmark]
    assert step.design == Design.DUET and step.selection()[-2:] == ["--device", "cpu"]
    # a flag forces one design: the sequential one for all, a named one where declared
    assert {u.design for u in _units_of("--sequential")} == {Design.SEQUENTIAL}
    forced = {u.name: u.design for u in _units_of("--bursts", "--suite", "ddp_rpc")
              if u.benchmark}
    assert forced == {"ddp_rpc.step_time": Design.BURSTS}


def test_a_duets_cuda_runs_go_sequentially_and_the_header_says_why(monkeypatch):
    """On a machine with a GPU, a duet-capable benchmark runs its CPU side as a duet and its
    CUDA runs in a sequential unit of their own (one GPU cannot be halved), and ab's header
    says which design each ran in and why."""
    from harness.commands import judging
    from harness.comparing import ab, campaign
    from harness.records import CaseKey, Design

    units = [u for u in campaign.units(["amp"], "train_step", design=None, cuda=True)
             if u.benchmark]
    assert [(u.name, u.design, u.device) for u in units] == [
        ("amp.train_step", Design.DUET, "cpu"),
        ("amp.train_step@cuda", Design.SEQUENTIAL, "cuda")]
    assert units[1].selection()[-2:] == ["--device", "cuda"]
    assert units[0].covers(CaseKey("amp", "train_step", "cpu"))
    assert units[1].covers(CaseKey("amp", "train_step", "cuda:0"))
    assert not units[0].covers(CaseKey("amp", "train_step", "cuda:0"))
    monkeypatch.setattr("harness.running.duet.halves", lambda: ((0,), (1,)))
    lines = judging.design_lines(ab.design_of(units), 5, "AB")
    assert lines == [
        "duet (10 rounds a side, 5 swapped pairs on CPUs 0 and 1): amp.train_step -- declares "
        "duet=True: both sides at once, on swapped halves of the CPUs",
        "sequential (5 rounds, the sides one after the other): amp.train_step@cuda -- its "
        "CUDA runs: one GPU cannot be halved for a duet"]
    # without a GPU there is no CUDA unit
    assert [u.name for u in campaign.units(["amp"], "train_step", design=None, cuda=False)
            if u.benchmark] == ["amp.train_step"]


def test_a_campaign_of_mixed_designs_judges_each_figure_with_its_designs_calibration(
        monkeypatch, capsys):
    """A duet's figures are judged with the duet calibration and a sequential benchmark's
    with the sequential one; a design this machine has no calibration of leaves its figures
    to the conservative rules (five rounds at least) and says so."""
    import argparse

    from harness.commands import common
    from harness.comparing import calibration
    from harness.records import CaseKey, Design
    from tests.test_compare import _calibration

    units = [u for u in _units_of("--suite", "amp", "--suite", "fork_wait", "--suite", "rpc")
             if u.benchmark]
    duet_cal, seq_cal = _calibration(), _calibration()
    duet_cal.measured["design"] = "duet"
    duet_cal.rounds_factor["amp.train_step"] = 2
    monkeypatch.setattr(calibration, "for_machine", lambda fp, design=Design.SEQUENTIAL: (
        {Design.DUET: duet_cal, Design.SEQUENTIAL: seq_cal}.get(design),
        f"{design} calibration" if design != Design.BURSTS else "no bursts calibration"))
    cal, line = common.read_calibration(argparse.Namespace(calibration=None), {}, units)
    assert isinstance(cal, calibration.ByDesign)
    assert line.splitlines() == ["bursts: no bursts calibration", "duet: duet calibration",
                                 "sequential: sequential calibration"]
    assert cal._part(CaseKey("amp", "train_step", "cpu")) is duet_cal
    assert cal._part(CaseKey("fork_wait", "scaling", "cpu")) is seq_cal
    assert not cal.covers(CaseKey("rpc", "round_trip", "cpu"))
    assert cal.rounds_factor["amp.train_step"] == 2
    capsys.readouterr()
