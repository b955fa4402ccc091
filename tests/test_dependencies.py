"""The oldest numpy and scipy the code runs on: stated once, checked at every entry point, and
the APIs that newer releases renamed reached by the name the installed release has."""

from __future__ import annotations

import importlib.metadata as metadata
from pathlib import Path

import numpy as np
from scipy import stats as sps

from harness import cli, dependencies, stats

ROOT = Path(__file__).resolve().parent.parent


def versions(**found: str):
    def version_of(package: str) -> str:
        if package not in found:
            raise metadata.PackageNotFoundError(package)
        return found[package]
    return version_of


def test_an_older_or_missing_package_is_one_line_naming_it():
    assert dependencies.problems(versions(numpy="2.4.6", scipy="1.17.1")) == []
    assert dependencies.problems(versions(numpy="1.26.0", scipy="1.12.0")) == []
    assert dependencies.problems(versions(numpy="2.0.0", scipy="1.11.4")) == [
        "scipy 1.11.4 is older than this project needs: scipy >= 1.12 "
        "(scipy.stats.quantile_test)"]
    assert dependencies.problems(versions(numpy="1.25.2", scipy="1.16.0rc1")) == [
        "numpy 1.25.2 is older than this project needs: numpy >= 1.26 "
        "(the oldest numpy this code was run with)"]
    assert dependencies.problems(versions(numpy="2.1.0")) == [
        "scipy is not installed; this project needs scipy >= 1.12 (scipy.stats.quantile_test)"]


def test_pyproject_states_the_minimums_the_code_checks():
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    stated = {r.name: str(r.specifier) for r in map(Requirement, project["dependencies"])
              if r.name in ("numpy", "scipy")}
    assert stated == {m.package: f">={m.version}" for m in dependencies.MINIMUMS}


def test_release_bench_refuses_an_older_scipy_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(dependencies.metadata, "version", versions(numpy="2.4.6",
                                                                   scipy="1.10.1"))
    assert cli.main(["list"]) == 2
    err = capsys.readouterr().err
    assert err == ("release-bench: scipy 1.10.1 is older than this project needs: "
                   "scipy >= 1.12 (scipy.stats.quantile_test)\n")


def test_the_bootstrap_seed_goes_by_the_keyword_the_installed_scipy_takes():
    """SciPy 1.15 named bootstrap's generator `rng`; before, `random_state`. A record's
    bootstrap interval is the same by either name (both are accepted from 1.15 on)."""
    def before_1_15(data, statistic, *, random_state=None):
        pass

    assert stats.seed_keyword(before_1_15) == "random_state"
    data = ([1.0, 2.0, 3.0, 5.0, 8.0, 13.0],)
    names = ("rng", "random_state") if stats.SEED_KEYWORD == "rng" else ("random_state",)
    interval = {k: sps.bootstrap(data, np.median, vectorized=True, method="percentile",
                                 n_resamples=99, **{k: np.random.default_rng(0)}
                                 ).confidence_interval for k in names}
    assert len(set(interval.values())) == 1
    assert stats.bootstrap_ci(np.median, data[0]) == (2.0, 10.5)  # any SciPy from 1.12

