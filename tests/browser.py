"""A real headless browser for the page tests: Debian's chromium driven by Playwright.

`scripts/ensure-chromium.sh` (run by `make test`) installs chromium; without it the page tests
skip and say why. Playwright's own browser download is not used (it needs a network this
kind of machine does not have).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "results" / "screenshots"
# No background services, no sandbox (root in a container), software rendering only.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def needs_asv_dashboard_scripts() -> None:
    """Skip, saying why, where the scripts asv's dashboard loads have no local copies (the
    cache `release-bench asv-vendor` fills, which `make test` runs first): its pages would
    fetch them from the internet, which the tests never reach."""
    from harness.presenting import asv_dashboard

    cache = asv_dashboard.vendor_cache()
    missing = sorted({f"{name}-{version}" for name, version, _ in
                      asv_dashboard.CDN_FILES.values()
                      if not (cache / f"{name}-{version}.tgz").exists()})
    if missing:
        pytest.skip(f"asv's dashboard scripts are not in {cache} ({', '.join(missing)}): "
                    "`release-bench asv-vendor` fetches them (make test runs it first)")


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("no chromium on this machine (scripts/ensure-chromium.sh installs it)")
    return path


@dataclass
class PageVisit:
    title: str
    text: str
    console_errors: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    screenshot: Path | None = None


# asv's graph page draws its overview with flot into a panel that may not have its width yet:
# flot throws this, then the graph draws as it should (a race in asv's page, not in what this
# project publishes)
ASV_FLOT_RACE = "Invalid dimensions for plot, width = 0"
ASV_GRAPH_LOADS = 3


def visit(url: str, name: str, count: tuple[str, ...] = (), wait_for: str | None = None,
          then_hash: str | None = None) -> PageVisit:
    """Load `url`, wait for the network to settle (and `wait_for` to appear), collect console
    errors and uncaught exceptions, count elements, and save a full-page screenshot.

    `then_hash` opens an in-page address after the page has settled, as a reader following a
    link does (`wait_for` then applies to it). asv's pages need this for a graph: opened
    cold from a deep link, flot draws before the page has its width more often. Even so the
    race shows now and then (twice in the CI runs here), so a graph page whose only errors are
    ASV_FLOT_RACE is loaded again in a fresh browser, up to ASV_GRAPH_LOADS loads in all: a
    page that throws it on every load, or throws anything else, still fails its test.
    """
    for _ in range(ASV_GRAPH_LOADS if then_hash else 1):
        page = _visit_once(url, name, count, wait_for, then_hash)
        if not page.console_errors or any(ASV_FLOT_RACE not in e
                                          for e in page.console_errors):
            break
    return page


def _visit_once(url: str, name: str, count: tuple[str, ...], wait_for: str | None,
                then_hash: str | None) -> PageVisit:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
            page.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}")
                    if r.status >= 400 else None)
            page.goto(url, wait_until="networkidle")
            if then_hash:
                page.evaluate("h => { window.location.hash = h; }", then_hash)
                page.wait_for_load_state("networkidle")
            if wait_for:
                page.wait_for_selector(wait_for, timeout=20_000)
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / f"{name}.png"
            page.screenshot(path=str(shot), full_page=True)
            return PageVisit(page.title(), page.inner_text("body"), errors,
                             {sel: page.locator(sel).count() for sel in count}, shot)
        finally:
            browser.close()


@contextmanager
def served(directory: Path) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (asv's pages load their data over HTTP)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
