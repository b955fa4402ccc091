"""A case declares what it runs with in each profile (its settings) with itself: the harness
checks each profile names the same settings, a case reads them from its context, and no suite
keeps a table of its own by profile, where `list` and `run --dry-run` could not see it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import registry
from harness.cases import DEVICES, PROFILES, Context, SettingsError, Suite, describe
from harness.running import runner

ROOT = Path(__file__).resolve().parent.parent

demo = Suite("demo", feature="a test suite", status="beta", summary="settings by profile")


@demo.conformance(devices=("cpu", "cuda"), settings={
    "quick": {"sizes": (1, 2), "timeout_s": 30.0},
    "full": {"sizes": (1, 2, 4, 8), "timeout_s": 90.0},
    "full:cuda": {"sizes": (64, 128)}})
def reads_its_settings(ctx: Context):
    ctx.details["seen"] = dict(ctx.settings)
    ctx.check("has its settings", bool(ctx.settings))


@demo.conformance(devices=("cpu",))
def declares_none(ctx: Context):
    ctx.details["seen"] = dict(ctx.settings)
    ctx.check("ran", True)


@pytest.mark.parametrize(("profile", "seen"), [
    ("quick", {"sizes": [1, 2], "timeout_s": 30.0}),
    ("full", {"sizes": [1, 2, 4, 8], "timeout_s": 90.0}),
])
def test_a_case_reads_the_settings_of_the_profile_it_runs_in(profile, seen):
    entry = runner.execute(demo.case("reads_its_settings"), "cpu", {}, profile)
    assert entry.outcome == "pass", entry.reason
    assert entry.details["seen"] == seen  # as the record keeps them


def test_a_device_entry_replaces_only_what_it_names():
    case = demo.case("reads_its_settings")
    assert case.settings_for("quick", "cuda") == {"sizes": (1, 2), "timeout_s": 30.0}
    assert case.settings_for("full", "cuda") == {"sizes": (64, 128), "timeout_s": 90.0}
    assert case.settings_for("full", "cuda:1") == case.settings_for("full", "cuda")


def test_settings_of_a_profile_never_declared_are_a_key_error_naming_it():
    with pytest.raises(KeyError, match="no settings for profile 'nightly'"):
        demo.case("reads_its_settings").settings_for("nightly")


def test_a_label_reads_its_values_from_the_case_by_profile_or_by_device():
    """A label's values (asv's parameter grid): one of the case's settings, which needs the
    case; by profile and device, by device, by profile; none where nothing applies."""
    from harness.cases import FromSetting, label_values

    case = demo.case("reads_its_settings")
    assert label_values(FromSetting("sizes"), "full", "cuda", case) == [64, 128]
    assert label_values(FromSetting("sizes", label=str), "quick", "cpu", case) == ["1", "2"]
    with pytest.raises(ValueError, match="label from setting 'sizes': no case to read it"):
        label_values(FromSetting("sizes"), "quick", "cpu")
    by = {"quick:cuda": [1], "cuda": [2], "full": [3]}
    assert [label_values(by, p, d) for p, d in (("quick", "cuda"), ("full", "cuda"),
                                                ("full", "cpu"), ("quick", "cpu"))] == [
        [1], [2], [3], []]


def test_a_case_without_settings_gets_none():
    entry = runner.execute(demo.case("declares_none"), "cpu", {}, "full")
    assert entry.outcome == "pass" and entry.details["seen"] == {}


@pytest.mark.parametrize(("settings", "says"), [
    ({"quick": {"n": 1}}, "settings for profile 'full' missing"),
    ({"quick": {"n": 1}, "full": {"n": 2, "m": 3}}, "differ from 'quick''s names in m"),
    ({"quick": {"n": 1, "m": 3}, "full": {"n": 2}}, "differ from 'quick''s names in m"),
    ({"quick": {"n": 1}, "full": {"n": 2}, "full:cuda": {"m": 3}}, "'full:cuda' differ"),
    ({"quick": {"n": 1}, "full": {"n": 2}, "huge": {"n": 3}}, "'huge' is not a profile"),
    ({"quick": {"n": 1}, "full": {"n": 2}, "full:tpu": {"n": 3}}, "'full:tpu' is not a profile"),
])
def test_a_declaration_must_give_every_profile_the_same_names(settings, says):
    other = Suite("other", feature="f", status="beta", summary="s")
    with pytest.raises(SettingsError, match=says) as e:
        other.benchmark(settings=settings)(declares_none)
    assert str(e.value).startswith("other/declares_none: ")
    assert other.cases == []


@dataclass(frozen=True)
class Plan:
    rounds: int
    seconds: float


def test_values_print_as_declared():
    assert describe((4, 65536)) == "(4, 65536)"
    assert describe([0.5, 240.0, True]) == "[0.5, 240, True]"
    assert describe({"resnet18": (8, 112)}) == "{resnet18: (8, 112)}"
    assert describe(Plan(rounds=8, seconds=0.08)) == "Plan(rounds=8, seconds=0.08)"
    case = demo.case("reads_its_settings")
    assert case.describe_settings("quick") == ["sizes = (1, 2)", "timeout_s = 30"]
    assert case.describe_settings("full") == [
        "sizes on cpu = (1, 2, 4, 8)", "sizes on cuda = (64, 128)", "timeout_s = 90"]
    assert case.describe_settings("full", ["cuda"]) == ["sizes = (64, 128)", "timeout_s = 90"]


def test_every_case_declares_its_settings_for_every_profile_and_device():
    declaring = []
    for suite in registry.all_suites():
        for c in suite.cases:
            names = set(c.settings.names)
            for p in PROFILES:
                for d in c.devices:
                    assert set(c.settings_for(p, d)) == names, (c.id, p, d)
            if names:
                declaring.append(c.id)
    # the cases whose sizes, plans and timeouts once lived in tables of their modules
    assert {"rpc/round_trip", "ddp_rpc/matches_reference", "ddp_rpc/step_time",
            "telemetry/sampling_overhead", "profiler/known_allocations",
            "profiler/timing_accuracy", "amp/train_step", "amp/gemm_ladder",
            "fork_wait/scaling"} <= set(declaring)


# --- no table by profile outside the declarations ----------------------------------------------

PROFILE_KEYS = {*PROFILES, *(f"{p}:{d}" for p in PROFILES for d in DEVICES)}
# calls that read a declaration for a profile (a workload's defaults, an asv view's labels)
READERS = {"settings_for", "param_sets", "setting"}


def _names_a_profile(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in PROFILE_KEYS
    return isinstance(node, ast.Tuple) and any(_names_a_profile(e) for e in node.elts)


def _is_param_spec(node: ast.AST) -> bool:
    """A dict display of parameter sets ({"quick": [{...}], "full": [{...} for ...]}): shared
    between declarations, and what runner.plan, `list` and `run --dry-run` read."""
    def sets(v: ast.AST) -> bool:
        return ((isinstance(v, ast.List) and all(isinstance(e, ast.Dict) for e in v.elts))
                or (isinstance(v, ast.ListComp) and isinstance(v.elt, ast.Dict)))

    return isinstance(node, ast.Dict) and bool(node.values) and all(map(sets, node.values))


def profile_tables(source: str) -> list[str]:
    """Where a module names a profile outside a case's declaration (its `params=` or
    `settings=`), a shared parameter spec or a reader of a declaration, or reads ctx.profile:
    "line: text" of each."""
    tree = ast.parse(source)
    allowed: set[int] = set()  # ids of the nodes inside declarations
    for node in ast.walk(tree):
        inside = []
        if isinstance(node, ast.Call):
            inside += [k.value for k in node.keywords if k.arg in ("params", "settings")]
            func = node.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) \
                    in READERS:
                inside += node.args
        elif _is_param_spec(node):
            inside.append(node)
        for sub in inside:
            allowed.update(id(n) for n in ast.walk(sub))
    found = []
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        reads_profile = (isinstance(node, ast.Attribute) and node.attr == "profile"
                         and isinstance(node.value, ast.Name) and node.value.id == "ctx")
        if reads_profile or (isinstance(node, ast.Constant) and _names_a_profile(node)):
            found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def suite_modules() -> list[Path]:
    """Every module of the suites but their tests (which run cases in a profile on purpose)."""
    return sorted(p for p in (ROOT / "suites").rglob("*.py")
                  if not p.name.startswith("test_"))


def test_no_suite_module_keeps_a_table_by_profile():
    found = {str(p.relative_to(ROOT)): hits for p in suite_modules()
             if (hits := profile_tables(p.read_text()))}
    assert found == {}


@pytest.mark.parametrize("source", [
    'TIMEOUT = {"quick": 240.0, "full": 900.0}\n',
    'SIZES = {("cpu", "quick"): (1, 2), ("cpu", "full"): (1, 2, 4)}\n',
    'def f(ctx):\n    return TIMEOUT[ctx.profile]\n',
    'def allocations(profile):\n    return [1] if profile == "quick" else [1, 2]\n',
])
def test_the_check_finds_a_table_by_profile(source):
    assert profile_tables(source)


def test_the_check_lets_declarations_be():
    source = ('@suite.benchmark(params={"quick": [{"n": 1}], "full": [{"n": n} for n in N]},\n'
              '                 settings={"quick": {"t": 1.0}, "full": {"t": 2.0}})\n'
              'def case(ctx):\n    return ctx.settings["t"]\n'
              'SHARED = {"quick": [{"n": 1}], "full": [{"n": 2}]}\n'
              'def build(device):\n'
              '    return suite.case("case").settings_for("quick", device)["t"]\n')
    assert profile_tables(source) == []
