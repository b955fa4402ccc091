"""The 1.6 API as 1.6 users wrote it: each feature's release-notes example, run as written
(and beside it today's spelling), recorded for one torch release as

- `works`: it ran and gave the documented result, silently;
- `warns`: it ran and gave the result, with warnings (each kept: category and message);
- `removed`: the API is gone or no longer takes those arguments (the exception raised);
- `fails`: the API is there but the result is not the documented one, or it raised
  something else (the reason).

The examples live beside their feature, in `suites/<suite>/release_notes.py`, each a function
declared with `@example(...)`. `python -m harness.releases.api_record [SUITE ...]` runs a suite's
examples in the torch of the Python that runs it and prints one JSON object per example: how
`release-bench history` records each release.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass

# exceptions that mean the spelling no longer exists in this release
REMOVED = (AttributeError, ImportError, TypeError)
# a warning that names a file and line moves between releases: not a change
LOCATION = re.compile(r"(/[\w./-]+\.py)(:\d+)?")
SPELLINGS = ("1.6", "today")


@dataclass(frozen=True)
class Example:
    suite: str
    name: str
    spelling: str  # "1.6": as the 1.6 release notes wrote it; "today": today's spelling
    func: Callable[[], object]
    doc: str

    @property
    def code(self) -> str:
        """The example's body, as the page shows it."""
        lines = inspect.getsource(self.func).splitlines()
        body = lines[next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("def ")) + 1:]
        text = textwrap.dedent("\n".join(body))
        if text.lstrip().startswith('"""'):  # the docstring is the example's title, not code
            text = text.split('"""', 2)[2].lstrip("\n")
        return text.rstrip()


EXAMPLES: list[Example] = []


def example(suite: str, spelling: str) -> Callable[[Callable[[], object]], Callable[[], object]]:
    """Declare a release-notes example of `suite`: a function that runs the example and
    raises AssertionError when its result is not the documented one."""
    if spelling not in SPELLINGS:
        raise ValueError(f"spelling must be one of {SPELLINGS}")

    def register(func: Callable[[], object]) -> Callable[[], object]:
        # the docstring's first paragraph, on one line
        doc = " ".join((func.__doc__ or func.__name__).strip().split("\n\n")[0].split())
        EXAMPLES.append(Example(suite, func.__name__, spelling, func, doc))
        return func

    return register


def load(suite: str) -> list[Example]:
    """The examples of one suite (none where it has no release_notes module)."""
    try:
        importlib.import_module(f"suites.{suite}.release_notes")
    except ModuleNotFoundError as e:
        if e.name != f"suites.{suite}.release_notes":
            raise
    return [e for e in EXAMPLES if e.suite == suite]


def _warning_text(w: warnings.WarningMessage) -> str:
    return f"{w.category.__name__}: {LOCATION.sub('<file>', str(w.message)).strip()}"


def run(ex: Example) -> dict:
    """Run one example; its record (see the module's docstring)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ex.func()
        except AssertionError as e:
            status, reason = "fails", f"AssertionError: {e}"
        except REMOVED as e:
            status, reason = "removed", f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - any other exception is the example failing
            status, reason = "fails", f"{type(e).__name__}: {e}"
        else:
            status, reason = "works", ""
    warned = sorted({_warning_text(w) for w in caught})
    if status == "works" and warned:
        status = "warns"
    return {"suite": ex.suite, "example": ex.name, "spelling": ex.spelling, "title": ex.doc,
            "status": status, "reason": reason.splitlines()[0][:300] if reason else "",
            "warnings": [w[:300] for w in warned]}


def main(argv: list[str]) -> int:
    # the examples register with the module as imported (harness.releases.api_record), which is not
    # this one when it runs as __main__
    from harness import registry
    from harness.releases import api_record

    for suite in argv or registry.suite_names():
        for ex in api_record.load(suite):
            print(json.dumps(api_record.run(ex)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
