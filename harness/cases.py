"""How a suite defines what it measures, once, for the CLI, pytest and asv alike.

A `Suite` holds three kinds of definitions:

- conformance cases: functions of a `Context` that call `ctx.check(...)` for each thing the
  release documents; the case fails when any check fails, and errors when it checked nothing;
- benchmark cases: functions of a `Context` that time workloads side by side and record
  metrics (medians, ratios, bytes) with units, and may check a figure against a floor;
- workloads: builders `build(device, **params) -> callable` of the one statement a benchmark
  times. The benchmark cases, the pytest-benchmark adapter and the asv classes all time the
  callables these builders return, so they cannot drift apart.

A case may also declare the figures asv tracks across commits (`tracks=[TrackView(...)]`);
harness.adapters.asv_adapter generates the asv classes from these declarations and the workloads.

Parameters are lists of dicts per profile (`quick`, `full`), optionally per device as well
(`"quick:cuda"` takes precedence over `"quick"` on CUDA); `grid()` builds products.

Settings are what a case runs with besides its parameters, and that change with the profile:
payload sizes, a sampling plan, launch timeouts, steps, repeats. A case declares them with
itself (`settings=`, see `Settings`) and reads them from `ctx.settings`; the harness checks
that every profile declares the same names, and `list` and `run --dry-run` print them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import itertools
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.records import Better, Check, MetricKind, Result
from harness.records import Metric as RecordedMetric
from harness.records import param_id as param_id  # how a parameter set is written, once

if TYPE_CHECKING:  # imported where used, so that the CLI can start (and explain) without torch
    from harness import stats
    from harness.running import launch, timing, turns

Params = dict[str, Any]
ParamSpec = Sequence[Params] | Mapping[str, Sequence[Params]]
# A case's settings by profile: {"quick": {"sizes": (4, 64), "timeout_s": 240.0}, "full": ...};
# "quick:cuda" overrides some of quick's values on CUDA. See `Settings`.
SettingsSpec = Mapping[str, Mapping[str, Any]]
PROFILES = ("quick", "full")
DEVICES = ("cpu", "cuda")

# Seconds of measurement per timed statement in each profile.
MIN_RUN_TIME = {"quick": 0.3, "full": 1.5}


class Skip(Exception):
    """Raised by a case that cannot run here; the message says why."""


def torch_release() -> str:
    """The installed torch's release, without its local build tag: "2.14.1" for
    "2.14.1+cu130"."""
    import torch

    return str(torch.__version__).split("+")[0]


@dataclass(frozen=True)
class Since:
    """The first torch release with what a case (or some of its parameter sets) exercises,
    and the evidence: what the releases before it do instead.

        Since("torch.autocast('cpu', dtype=torch.float16)", "2.2.0",
              before='warns "AutocastCPU only support Bfloat16" and stays disabled',
              device="cpu", params={"dtype": "float16"})

    In an older release the case does not run: its outcome is `n/a`, with this declaration
    as the reason. From `release` on the case runs, and whatever it finds missing, refusing
    or silently doing nothing there (`FeatureAbsent`) is a failure: in a release that has
    the API, that behaviour is the defect itself. n/a is declared here, never inferred from
    what a release does at run time. The release history's records are the evidence these
    declarations are checked against (tests/test_release_ranges.py).
    """

    what: str  # the API or dtype, as a user would write it
    release: str  # the first release that has it, e.g. "2.3.0"
    before: str  # what the releases before it do (their message)
    device: str = ""  # only on this device type ("" for every device)
    params: Mapping[str, Any] = field(default_factory=dict)  # only sets with these values

    def __post_init__(self) -> None:
        from packaging.version import InvalidVersion, Version

        try:
            Version(self.release)
        except InvalidVersion as e:
            raise ValueError(f"Since({self.what!r}): {self.release!r} is not a release") from e

    def applies(self, device: str, params: Mapping[str, Any]) -> bool:
        """Whether it declares something the run of `params` on `device` exercises."""
        kind = device.partition(":")[0]
        return ((not self.device or self.device == kind)
                and all(params.get(k) == v for k, v in self.params.items()))

    def absent_from(self, release: str) -> bool:
        """Whether `release` predates it."""
        from packaging.version import Version

        return Version(release.split("+")[0]) < Version(self.release)

    def reason(self, release: str) -> str:
        """The n/a reason in `release`: "torch.amp.GradScaler: not in torch 2.2.2 (from
        2.3.0; before: ...)"."""
        return f"{self.what}: not in torch {release} (from {self.release}; before: {self.before})"


def declared_absence(since: Sequence[Since], device: str, params: Mapping[str, Any],
                     release: str) -> Since | None:
    """The first declaration that puts what the run exercises after `release`, or None."""
    return next((s for s in since if s.applies(device, params) and s.absent_from(release)),
                None)


class FeatureAbsent(Exception):
    """Raised by a case that finds the API or behaviour it exercises missing, refusing or
    doing nothing in this release (no `torch.amp.GradScaler`; an autocast that stays off).

    Never `n/a`: a release that lacks a case's API is declared with the case (`Since`), and
    the runner does not run the case there. Raised from a run, this is the case's failure.
    `FeatureAbsent("torch.amp.GradScaler", "torch.amp has no GradScaler")`.
    """

    def __init__(self, what: str, how: str, *, raised: bool = False):
        super().__init__(f"{what}: {how}")
        # raised: torch raised where the behaviour was tried (its check failed by an exception)
        self.what, self.how, self.raised = what, how, raised


def has_api(dotted: str) -> bool:
    """Whether this torch has the object a dotted name names (`torch.amp.GradScaler`), or
    a keyword argument of it (`torch.autograd.profiler.profile(use_cuda=)`)."""
    name, _, keyword = dotted.partition("(")
    parts = name.split(".")
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return False
    for i, part in enumerate(parts[1:], start=1):
        if not hasattr(obj, part):
            try:  # a submodule not imported by its package
                obj = importlib.import_module(".".join(parts[: i + 1]))
                continue
            except ImportError:
                return False
        obj = getattr(obj, part)
    if keyword := keyword.rstrip(")=").strip():
        try:
            return keyword in inspect.signature(obj).parameters
        except (TypeError, ValueError):
            return False
    return True


@dataclass(frozen=True)
class CheckVersion:
    """Which version of its checks judged a case's result. Every result carries it
    (`Result.check_version`), so that a record judged by checks that have changed since is
    known as stale: the pages mark it, and `history --stale` records its release again.

    A case declares a new version whenever what its checks judge changes (a control added, a
    tolerance moved, a check added or dropped), with one line of what changed, which a page
    gives beside a stale record. tests/test_check_versions.py holds a digest of the code that
    judges each case (`judging_code`) and fails when that code changes under the same version,
    so that a change cannot leave older records looking current by oversight."""

    number: int = 1
    changed: str = ""  # what this version judges differently from the one before

    def __post_init__(self) -> None:
        if not isinstance(self.number, int) or self.number < 1:
            raise ValueError(f"a check version is a whole number from 1, not {self.number!r}")


# what a result recorded before results carried their check's version is called
UNVERSIONED = "recorded before records carried the version of their checks"


def stale_reason(case: Case | None, recorded: int | None) -> str | None:
    """Why a result of `case` judged by version `recorded` of its checks is stale (None
    where it is current): its checks have a later version, or it carries none."""
    if case is None:
        return None  # a case gone from the suites: nothing current to hold it against
    if recorded is None:
        return UNVERSIONED
    if recorded < case.check.number:
        return (f"judged by version {recorded} of its checks; now {case.check.number}"
                + (f" ({case.check.changed})" if case.check.changed else ""))
    return None


def judging_code(case: Case) -> str:
    """The source of the code that judges `case`: its function and every function or class of
    its suite's package that the function names, and those name, and so on (attributes of the
    suite's modules included: `truth.expected_bytes`). The harness's own helpers are not in
    it; a change there that changes a verdict is declared by hand."""
    package = f"suites.{case.suite}"
    seen: dict[str, str] = {}

    def names_of(code) -> set[str]:
        out = set(code.co_names)
        for const in code.co_consts:
            if inspect.iscode(const):
                out |= names_of(const)
        return out

    def visit(obj: Any) -> None:
        if inspect.ismodule(obj):
            if obj.__name__.startswith(package):
                for value in vars(obj).values():
                    if getattr(value, "__module__", None) == obj.__name__:
                        pending.append(value)
            return
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            return
        module = getattr(obj, "__module__", "") or ""
        key = f"{module}.{obj.__qualname__}"
        if not module.startswith(package) or key in seen:
            return
        seen[key] = inspect.getsource(obj)
        functions = ([obj] if inspect.isfunction(obj) else
                     [f for f in vars(obj).values() if inspect.isfunction(f)])
        for fn in functions:
            for name in names_of(fn.__code__):
                if name in fn.__globals__:
                    target = fn.__globals__[name]
                    # a module of the suite stands for what the function reads from it
                    if inspect.ismodule(target) and target.__name__.startswith(package):
                        attrs = [getattr(target, n) for n in names_of(fn.__code__)
                                 if hasattr(target, n)]
                        pending.extend(attrs)
                    else:
                        pending.append(target)

    pending: list[Any] = [case.func]
    while pending:
        visit(pending.pop())
    return "\n".join(seen[k] for k in sorted(seen))


def grid(**axes: Sequence[Any]) -> list[Params]:
    """All combinations of the given parameter values, as a list of dicts."""
    names = list(axes)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*axes.values())]


class SettingsError(ValueError):
    """A settings declaration that does not give every profile the same names."""


@dataclass(frozen=True)
class Settings:
    """What a case runs with in each profile besides its parameter sets, declared with it:

        @suite.benchmark(settings={
            "quick": {"sizes": (4, 65536), "launch_timeout_s": 240.0},
            "full": {"sizes": (4, 64, 1024, 65536), "launch_timeout_s": 900.0},
            "full:cuda": {"sizes": (4, 65536, 2**20)},  # only what differs on CUDA
        })
        def round_trip(ctx):
            sizes = ctx.settings["sizes"]

    Every profile of PROFILES declares the same names; a "<profile>:<device>" entry replaces
    some of its profile's values on that device. Parameters are what a run is repeated over
    (one result entry each); settings are how each of those runs is done. Values should be
    immutable (tuples, frozen dataclasses): every run of the case shares them.
    """

    by_profile: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def declare(cls, spec: SettingsSpec | None, owner: str) -> Settings:
        """`spec` checked: each profile present, with the same names; device entries only
        replacing names of their profile."""
        spec = {k: dict(v) for k, v in (spec or {}).items()}
        if not spec:
            return cls()
        for key in spec:
            profile, _, device = key.partition(":")
            if profile not in PROFILES or (":" in key and device not in DEVICES):
                raise SettingsError(f"{owner}: settings key {key!r} is not a profile "
                                    f"({', '.join(PROFILES)}), optionally ':<device>'")
        if missing := [p for p in PROFILES if p not in spec]:
            raise SettingsError(f"{owner}: settings for profile {missing[0]!r} missing")
        names = list(spec[PROFILES[0]])
        for key, values in spec.items():
            profile = key.partition(":")[0]
            extra = set(values) - set(names)
            if extra or (profile == key and set(values) != set(names)):
                odd = sorted(extra or set(names) - set(values))
                raise SettingsError(f"{owner}: settings {key!r} differ from "
                                    f"{PROFILES[0]!r}'s names in {', '.join(odd)}")
        return cls(spec)

    @property
    def names(self) -> list[str]:
        return list(self.by_profile.get(PROFILES[0], {}))

    def for_run(self, profile: str, device: str = "cpu") -> dict[str, Any]:
        """The values for `profile` on `device` (a device entry over its profile's)."""
        if not self.by_profile:
            return {}
        if profile not in self.by_profile:
            raise KeyError(f"no settings for profile {profile!r}")
        kind = device.partition(":")[0]
        return {**self.by_profile[profile], **self.by_profile.get(f"{profile}:{kind}", {})}


def describe(value: Any) -> str:
    """A setting's value as `list` and `run --dry-run` print it."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(describe, value)) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(map(describe, value)) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value) and type(value).__str__ is object.__str__:
        fields = ", ".join(f"{f.name}={describe(getattr(value, f.name))}"
                           for f in dataclasses.fields(value))
        return f"{type(value).__name__}({fields})"
    return str(value)


@dataclass
class Metric:
    """One figure. Its identity is `name` plus `labels` (e.g. name "p50", labels
    {"path": "tp_builtin", "bytes": 4}), never a string with the labels packed into it."""

    name: str
    value: float | None
    unit: str
    # what kind of figure this is (records.MetricKind): `compare` picks its tolerance by kind
    kind: MetricKind = MetricKind.VALUE
    better: Better | None = None  # which way is good; None when direction does not apply
    labels: dict[str, Any] = field(default_factory=dict)
    samples: list[float] | None = None  # what the value was computed from (thinned)
    stats: dict[str, Any] | None = None  # harness.stats.summarize of the samples
    headline: bool = False  # shown first in summaries (the figure the case exists for)
    # the figure in each of the case's sessions, where a case measures in several
    # independent sessions within its processes (fresh RPC groups, see suites/rpc/measure.py):
    # their spread is the figure's spread at the level where it arises
    sessions: list[float] | None = None

    def __post_init__(self) -> None:
        # a kind or direction spelled wrongly would make the figure silently unjudged
        # ("unverified"): refused where the figure is recorded, in one line
        try:
            self.kind = MetricKind(self.kind)
        except ValueError:
            raise ValueError(f"metric {self.name!r}: kind {self.kind!r} is not one of "
                             f"{', '.join(MetricKind)}") from None
        if self.better is not None:
            try:
                self.better = Better(self.better)
            except ValueError:
                raise ValueError(f"metric {self.name!r}: better {self.better!r} is not "
                                 f"{' or '.join(Better)} (or None)") from None

    def record(self) -> RecordedMetric:
        """The figure as the run record keeps it (frozen)."""
        return RecordedMetric(self.name, self.value, self.unit, self.kind, self.better,
                              dict(self.labels), self.stats, self.samples, self.headline,
                              self.sessions)


def metric_id(name: str, labels: Mapping[str, Any] | None) -> str:
    """How a metric is written for people: p50[path=gloo, bytes=4]."""
    if not labels:
        return name
    return f"{name}[{', '.join(f'{k}={v}' for k, v in labels.items())}]"


def _samples_of(x: Any) -> list[float]:
    """Per-call seconds of a Timing, or a plain sequence of samples."""
    return list(getattr(x, "times", x))


_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+)', re.M)


def raised_in_torch(e: BaseException) -> str | None:
    """Where in torch's Python code `e` was raised (`amp/grad_scaler.py:476`), or None when
    the innermost frame of its traceback is not torch's (the harness's, or a test's).

    For a launch that failed (`launch.LaunchError`), from the tracebacks the workers sent:
    where the first that raised did, when that is in torch. Workers that fail together (each
    timing out in one collective) are gathered in the order they happen to report, and the
    first may be the harness's call into one of torch's bindings, which raise RuntimeError or
    a DistError: then a peer that torch raised in makes it torch's (`... in rank R`). A first
    worker that failed with another error (an AttributeError, say) is the harness's, whatever
    its peers raised after it."""
    from harness.running import launch

    if not isinstance(e, launch.LaunchError):
        tb = e.__traceback__
        if tb is None:
            return None
        while tb.tb_next is not None:
            tb = tb.tb_next
        return _in_torch(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    sent = [f for f in e.failures if f.kind == "exception" and f.traceback]
    for k, failure in enumerate(sent):
        frames = list(_FRAME.finditer(failure.traceback))
        if frames and (where := _in_torch(frames[-1]["file"], int(frames[-1]["line"]))):
            return where if k == 0 else f"{where} in rank {failure.rank}"
        if k == 0 and _raised_type(failure.traceback) not in _BINDING_ERRORS:
            return None
    return None


# What torch's C++ bindings raise; a traceback ending in the harness's call into one
_BINDING_ERRORS = frozenset({"RuntimeError", "DistError", "DistBackendError",
                             "DistNetworkError", "DistStoreError"})


def _raised_type(traceback: str) -> str:
    """The exception's class name on a sent traceback's last line (`RuntimeError: ...`)."""
    last = traceback.rstrip().rpartition("\n")[2]
    return last.partition(":")[0].strip().rpartition(".")[2]


def _in_torch(file: str, line: int) -> str | None:
    """`file`:`line` relative to torch's package folder, or None when outside it."""
    import torch

    root = os.path.dirname(os.path.realpath(torch.__file__))
    where = os.path.realpath(file)
    if os.path.commonpath([root, where]) != root:
        return None
    return f"{os.path.relpath(where, root)}:{line}"


@dataclass
class Context:
    """What a case receives: where and how to run, and where to put what it found."""

    device: str
    profile: str
    params: Params
    metrics: list[Metric] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    shown_tables: list[str] = field(default_factory=list)
    iterations: int = 0  # calls timed in this process, for telemetry's energy per iteration
    # Where the case's worker processes run (`launch`), as the runner was told: the hosts of a
    # run across hosts (`harness.running.nodes.Cluster`), or this machine when None.
    cluster: launch.Cluster | None = None
    # What each of those workers runs first: how a test breaks a feature inside them.
    worker_setup: Callable[[], None] | None = None
    # the case's declared settings for this profile and device (Case.settings_for): what it
    # reads instead of keeping tables by profile
    settings: Mapping[str, Any] = field(default_factory=dict)
    # a side of a round in bursts (`ab --bursts`): the turns the case's measuring worker takes
    # (harness.running.turns.Turns); None when it measures alone
    turns: turns.Turns | None = None

    @property
    def min_run_time(self) -> float:
        return MIN_RUN_TIME[self.profile]

    @property
    def across_hosts(self) -> bool:
        """Whether the case's workers may run on other hosts than this one."""
        return self.cluster is not None

    def launch(self, fn: Callable[..., Any], nprocs: int, args: Sequence[Any] = (),
               **kw: Any) -> list[Any]:
        """`harness.running.launch.launch` for this case: its ranks spread over the run's hosts in a
        run across hosts, on this machine otherwise, each worker running `worker_setup` first
        unless the call gives a `setup` of its own."""
        from harness.running import launch

        kw["setup"] = kw.get("setup") or self.worker_setup
        return launch.launch(fn, nprocs, args, cluster=self.cluster, **kw)

    def check(self, name: str, passed: bool, detail: str = "", *,
              performance: bool = False, raised: bool = False) -> bool:
        """Record one documented behaviour as passed or failed; returns `passed`.

        `performance=True` marks a check of a timing (a speedup floor, a latency bound) rather
        than of a result: failed on a machine that telemetry found contended, it makes the
        case invalid instead of failed. `raised=True` says that a failure is torch raising
        where the behaviour was exercised, not a wrong value (as `exercising` records it).
        """
        self.checks.append(Check(name, bool(passed), detail, performance,
                                 raised=raised and not passed))
        return bool(passed)

    @contextlib.contextmanager
    def exercising(self, behaviour: str) -> Iterator[None]:
        """A block that exercises one documented behaviour as its documentation shows it. An
        exception that torch raises in the block (the innermost frame of its traceback is
        torch's; for workers, of a traceback one of them sent: `raised_in_torch`) is that
        behaviour failing: the failed check `behaviour`, with what torch raised and where, and
        the case goes on to its other behaviours. An exception the harness's own code raises,
        a worker that died or hung, is not caught: the case errors."""
        try:
            yield
        except Exception as e:
            from harness.running import launch

            where = raised_in_torch(e)
            if where is None:
                raise
            what = str(e) if isinstance(e, launch.LaunchError) else \
                f"torch raised {type(e).__name__}: {e}"
            self.check(behaviour, False, f"{what[:240]} (at {where})", raised=True)

    def check_within(self, name: str, samples: Sequence[float], limit: float,
                     fmt: Callable[[float], str] = "{:.3g}".format) -> stats.Within:
        """Check that the mean of `samples` (independent repetitions of one figure) lies
        within +-`limit`, judged with its 95% interval (`stats.mean_ci`): passed when the whole
        interval is inside, failed when it is all past the limit, inconclusive when it
        reaches across (a caller may measure more and judge again). `fmt` writes a value."""
        from harness import stats

        mean, low, high = stats.mean_ci(samples)
        where = stats.within(low, high, limit)
        self.checks.append(Check(
            name, where is stats.Within.INSIDE,
            f"{fmt(mean)} [{fmt(low)}, {fmt(high)}] over {len(samples)}, limit {fmt(limit)}"
            + {stats.Within.INSIDE: "", stats.Within.OUTSIDE: ": past the limit",
               stats.Within.ACROSS: ": the interval reaches across the limit"}[where],
            inconclusive=where is stats.Within.ACROSS))
        return where

    def check_raises(
        self,
        name: str,
        fn: Callable[[], object],
        exc: type[BaseException] | tuple[type[BaseException], ...],
        match: str | None = None,
    ) -> bool:
        """Check that `fn()` raises `exc` (and that its message contains `match`)."""
        try:
            fn()
        except exc as e:
            ok = match is None or match in str(e)
            return self.check(name, ok, f"raised {type(e).__name__}: {str(e)[:200]}")
        except Exception as e:  # the wrong exception is a failed check, not an error
            return self.check(name, False, f"raised {type(e).__name__} instead: {str(e)[:200]}")
        return self.check(name, False, "did not raise")

    def metric(self, name: str, value: float | None, unit: str, *,
               labels: Mapping[str, Any] | None = None, samples: Any = None,
               q: float = 0.5, ci: tuple[float | None, float | None] | None = None,
               count: int | None = None, sessions: Sequence[float] | None = None,
               **kw: Any) -> Metric:
        """Record a figure. With `samples` (a Timing or the values the figure was computed
        from) the record keeps them and their statistics: the `q` quantile's interval, or
        `ci` for a derived figure whose interval comes from its inputs. `sessions` is the
        figure in each independent session of the case (see Metric)."""
        from harness import stats

        m = Metric(name, None if value is None else float(value), unit,
                   labels=dict(labels or {}), **kw)
        if sessions is not None:
            m.sessions = [float(x) for x in sessions]
        if samples is not None:
            xs = _samples_of(samples)
            m.samples = stats.thin(xs)
            m.stats = stats.summarize(xs, q=q, ci=ci, count=count or len(xs))
        self.metrics.append(m)
        return m

    def ratio(self, name: str, num: Any, den: Any, *, unit: str = "x", kind: str = "ratio",
              better: str | None = "higher", scale: float = 1.0, offset: float = 0.0,
              **kw: Any) -> Metric:
        """Record scale * median(num) / median(den) + offset, measured side by side (an
        overhead in percent is scale 100, offset -100). Its samples are the ratios of the
        blocks timed next to each other (paired by position), its interval a bootstrap over
        both inputs' samples."""
        import numpy as np

        from harness import stats

        a, b = np.asarray(_samples_of(num), float), np.asarray(_samples_of(den), float)
        n = min(a.size, b.size)
        lo, hi = stats.ratio_of_medians_ci(a, b)
        ci = (None if lo is None else lo * scale + offset,
              None if hi is None else hi * scale + offset)
        return self.metric(name, scale * float(np.median(a) / np.median(b)) + offset, unit,
                           kind=kind, better=better, samples=scale * a[:n] / b[:n] + offset,
                           ci=ci, **kw)

    def measure(self, name: str, fn: Callable[[], object], *,
                labels: Mapping[str, Any] | None = None, **kw: Any) -> timing.Timing:
        """Time `fn` with the profile's run time and record its median as a metric."""
        from harness.running import timing

        kw.setdefault("min_run_time", self.min_run_time)
        t = timing.measure(fn, device=self.device, **kw)
        self.iterations += t.calls
        self.metric(name, t.median, "s", kind="time", better="lower", samples=t,
                    labels=labels)
        return t

    def measure_side_by_side(
        self, fns: Mapping[str, Callable[[], object]], *, name: str | None = None,
        label: str = "variant", labels: Mapping[str, Any] | None = None, **kw: Any
    ) -> dict[str, timing.Timing]:
        """Time several statements interleaved and record each median as a metric: named by
        its key, or, with `name`, all named `name` with the key as the label `label`."""
        from harness.running import timing

        kw.setdefault("min_run_time", self.min_run_time)
        ts = timing.measure_interleaved(fns, device=self.device, **kw)
        for key, t in ts.items():
            self.iterations += t.calls
            ids = (key, dict(labels or {})) if name is None else (
                name, {**(labels or {}), label: key})
            self.metric(ids[0], t.median, "s", kind="time", better="lower", samples=t,
                        labels=ids[1])
        return ts

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def table(self, name: str, rows: list[dict[str, Any]], show: bool = False) -> None:
        """Keep a table in the record; `show` also prints it in the CLI summary."""
        self.tables[name] = rows
        if show and name not in self.shown_tables:
            self.shown_tables.append(name)


@dataclass(frozen=True)
class Track:
    """One figure asv tracks, as the method `track_<name>`: the case's metric `metric` (or,
    with `telemetry`, a key of the case's telemetry summary, as energy_per_iteration_j),
    in `unit`, the record's unit for it."""

    name: str
    metric: str = ""  # `name` when empty
    unit: str = ""  # the view's unit when empty
    telemetry: bool = False
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.metric:
            object.__setattr__(self, "metric", self.name)


@dataclass(frozen=True)
class TrackView:
    """Figures of one case that asv tracks together: one asv class called `name` (the name
    asv files their results under), with a `track_*` method per figure.

    The class's parameters are the device, the case's parameters that vary between its
    quick sets, and the metric labels `labels` (each figure is looked up with them). Figures
    over different labels are different views of the same case (the case still runs once).
    """

    name: str
    doc: str
    tracks: Sequence[Track | str]  # a bare name stands for Track(name)
    unit: str = ""
    labels: Mapping[str, LabelSpec] = field(default_factory=dict)
    devices: tuple[str, ...] = ()  # fewer devices than the case's, if given

    def __post_init__(self) -> None:
        object.__setattr__(self, "tracks", tuple(t if isinstance(t, Track) else Track(t)
                                                 for t in self.tracks))


@dataclass(frozen=True)
class FromSetting:
    """A label whose values are one of the case's settings (the payload sizes it measures,
    say), so that they are declared once, with the case."""

    name: str
    # what each of the setting's values is called as a label (the value itself by default)
    label: Callable[[Any], Any] | None = None


# a label's values: a sequence, sequences keyed as parameters are ("quick", "quick:cuda") or
# by device ("cuda"), or one of the case's settings (`FromSetting`)
LabelSpec = Sequence[Any] | Mapping[str, Sequence[Any]] | FromSetting


def label_values(spec: LabelSpec, profile: str, device: str,
                 case: Case | None = None) -> list[Any]:
    """A label's values on `device` in `profile` (see LabelSpec); `case` is the case whose
    settings a FromSetting names."""
    if isinstance(spec, FromSetting):
        if case is None:
            raise ValueError(f"label from setting {spec.name!r}: no case to read it from")
        values = case.settings_for(profile, device)[spec.name]
        return [spec.label(v) for v in values] if spec.label else list(values)
    if not isinstance(spec, Mapping):
        return list(spec)
    for key in (f"{profile}:{device}", device, profile):
        if key in spec:
            return list(spec[key])
    return []


@dataclass(frozen=True)
class Case:
    suite: str
    name: str
    kind: str  # "conformance" | "benchmark"
    func: Callable[[Context], None]
    doc: str
    params: ParamSpec
    devices: tuple[str, ...]
    needs: tuple[str, ...]  # besides the device: "distributed", "torchvision", ...
    sampled: bool = True  # whether the runner samples telemetry around it
    options: tuple[str, ...] = ()  # parameters it reads when given, beyond its sets' keys
    tracks: tuple[TrackView, ...] = ()  # the figures asv tracks (harness.adapters.asv_adapter)
    settings: Settings = Settings()  # what it runs with in each profile (ctx.settings)
    # whether `ab --duet` may run it as a side of a duet (harness.running.duet): one process, its
    # figures CPU-bound and meaningful on half of the machine
    duet: bool = False
    # whether `ab --bursts` may run it in bursts (harness.running.turns): both sides' processes
    # alive through a round, measuring in turns; the case hands `ctx.turns` to the worker
    # that measures, which takes a turn around each short block of its timing
    bursts: bool = False
    # the releases where what it exercises came (`Since`): in an older release its outcome
    # is `n/a`, with the declared evidence; in a later one, what it finds absent is a failure
    since: tuple[Since, ...] = ()
    # the version of its checks, carried by each of its results (`CheckVersion`)
    check: CheckVersion = CheckVersion()

    def param_sets(self, profile: str, device: str = "cpu") -> list[Params]:
        return _param_sets(self.params, profile, device)

    def settings_for(self, profile: str, device: str = "cpu") -> dict[str, Any]:
        return self.settings.for_run(profile, device)

    def describe_settings(self, profile: str, devices: Sequence[str] | None = None) -> list[str]:
        """One line per setting in `profile`, "name = value"; a value that differs between
        `devices` (default: the case's) gets a line per device, "name on cuda = value"."""
        by_device = {d: self.settings_for(profile, d) for d in devices or self.devices}
        return _per_device_lines(self.settings.names, {
            d: {name: describe(v[name]) for name in v} for d, v in by_device.items()})

    def describe_params(self, profile: str, devices: Sequence[str] | None = None) -> list[str]:
        """One line per parameter in `profile`: the values its sets take, "name in a, b";
        per device where the devices' sets differ."""
        by_device = {}
        for d in devices or self.devices:
            values: dict[str, list[str]] = {}
            for p in self.param_sets(profile, d):
                for k, v in p.items():
                    if describe(v) not in values.setdefault(k, []):
                        values[k].append(describe(v))
            by_device[d] = {k: ", ".join(v) for k, v in values.items()}
        names = list(dict.fromkeys(k for v in by_device.values() for k in v))
        return _per_device_lines(names, by_device, " in ")

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"


@dataclass(frozen=True)
class Workload:
    """A builder of the one statement a benchmark times: build(device, **params) -> fn."""

    suite: str
    name: str
    build: Callable[..., Callable[[], object]]
    doc: str
    params: ParamSpec
    devices: tuple[str, ...]
    needs: tuple[str, ...]
    # what asv files its timings under, "Class.time_method"; empty: derived from the name
    asv_name: str = ""

    def param_sets(self, profile: str, device: str = "cpu") -> list[Params]:
        return _param_sets(self.params, profile, device)


def _per_device_lines(names: Sequence[str], shown: Mapping[str, Mapping[str, str]],
                      sep: str = " = ") -> list[str]:
    """"name = value" for each name; "name on <device> = value" for each device where the
    devices' values differ ("-" where a device has none)."""
    lines = []
    for name in names:
        values = {d: v.get(name, "-") for d, v in shown.items()}
        if len(set(values.values())) == 1:
            lines.append(f"{name}{sep}{next(iter(values.values()))}")
        else:
            lines += [f"{name} on {d}{sep}{v}" for d, v in values.items()]
    return lines


def _param_sets(spec: ParamSpec, profile: str, device: str) -> list[Params]:
    if isinstance(spec, Mapping):
        return [dict(p) for p in spec.get(f"{profile}:{device}", spec[profile])]
    return [dict(p) for p in spec] or [{}]


def _first_line(fn: Callable) -> str:
    return (fn.__doc__ or "").strip().split("\n")[0]


class Suite:
    """One release feature: its conformance cases, benchmark cases and workloads."""

    def __init__(self, name: str, feature: str, status: str, summary: str,
                 spans_hosts: bool = False):
        self.name = name
        self.feature = feature
        self.status = status  # the feature's status in the 1.6 release: "stable" or "beta"
        self.summary = summary
        # whether its multi-process cases can spread their ranks over hosts (`multihost`)
        self.spans_hosts = spans_hosts
        self.cases: list[Case] = []
        self.workloads: list[Workload] = []
        # the report's figures: each takes the run's entries of this suite
        # (harness.presenting.figures)
        self.figures: list[Callable[[list[Result]], Any]] = []

    def figure(self, func: Callable[[list[Result]], Any]) -> Callable[[list[Result]], Any]:
        """Declare a report figure (in `suites/<name>/figures.py`; see
        harness.presenting.figures)."""
        self.figures.append(func)
        return func

    def _case(self, kind: str, params: ParamSpec, devices: Sequence[str], needs: Sequence[str],
              sampled: bool = True, options: Sequence[str] = (),
              tracks: Sequence[TrackView] = (), settings: SettingsSpec | None = None,
              duet: bool = False, since: Sequence[Since] = (), bursts: bool = False,
              check: CheckVersion = CheckVersion()):
        def register(func: Callable[[Context], None]) -> Callable[[Context], None]:
            declared = Settings.declare(settings, f"{self.name}/{func.__name__}")
            self.cases.append(
                Case(self.name, func.__name__, kind, func, _first_line(func),
                     params or [{}], tuple(devices), tuple(needs), sampled, tuple(options),
                     tuple(tracks), declared, duet, bursts, tuple(since), check)
            )
            return func

        return register

    def conformance(self, *, params: ParamSpec = (), devices: Sequence[str] = DEVICES,
                    needs: Sequence[str] = (), tracks: Sequence[TrackView] = (),
                    settings: SettingsSpec | None = None, since: Sequence[Since] = (),
                    check: CheckVersion = CheckVersion()):
        """Decorator: register a conformance case (named after the function). An upstream
        defect it is known to catch is an entry of `expectations.toml`, not part of the case.
        `tracks` declares the figures it records that asv tracks; `settings` are its values
        by profile (see `Settings`), read from `ctx.settings`. `since` declares the releases
        that have what it exercises: in an older one its outcome is `n/a` (see `Since`).
        `check` is the version of its checks (`CheckVersion`: a new one whenever what they
        judge changes)."""
        return self._case("conformance", params, devices, needs, tracks=tracks,
                          settings=settings, since=since, check=check)

    def benchmark(self, *, params: ParamSpec = (), devices: Sequence[str] = DEVICES,
                  needs: Sequence[str] = (), sampled: bool = True, options: Sequence[str] = (),
                  tracks: Sequence[TrackView] = (), settings: SettingsSpec | None = None,
                  duet: bool = False, since: Sequence[Since] = (), bursts: bool = False,
                  check: CheckVersion = CheckVersion()):
        """Decorator: register a benchmark case (named after the function). `sampled=False`
        keeps the runner's telemetry off while it runs (for cases that sample themselves);
        `options` names parameters it reads when given (the CLI's --param may set them);
        `tracks` declares the figures asv tracks; `settings` are its values by profile (sizes,
        plans, timeouts: see `Settings`), read from `ctx.settings`. `duet=True`: `ab --duet`
        runs it on the CPU as a side of a duet (one process whose figures hold on half the
        machine; see harness.running.duet). `bursts=True`: `ab --bursts` runs both sides'
        processes through a round together, taking turns (harness.running.turns): the case
        passes `ctx.turns` to what measures. How many rounds `ab` gives it is this machine's
        calibration's to say. `since` and `check`: as for `conformance`."""
        return self._case("benchmark", params, devices, needs, sampled, options, tracks,
                          settings, duet, since, bursts, check)

    def workload(self, *, params: ParamSpec = (), devices: Sequence[str] = DEVICES,
                 needs: Sequence[str] = (), asv_name: str = ""):
        """Decorator: register a workload builder (named after the function). asv times it
        as `asv_name` ("Class.time_method"), by default `<Name>Time.time_<name>`."""

        def register(build: Callable[..., Callable[[], object]]):
            self.workloads.append(
                Workload(self.name, build.__name__, build, _first_line(build),
                         params or [{}], tuple(devices), tuple(needs), asv_name)
            )
            return build

        return register

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no case {name!r}")
