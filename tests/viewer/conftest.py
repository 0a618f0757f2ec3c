"""Fixtures of the viewer tests: Stage 03 runs on the test bundle, their viewer, a Chromium.

The browser tests drive the system Chromium (Debian's ``chromium`` package) through
Playwright's Python package, pointed at the system binary (``playwright install`` is never
needed). Where Chromium or Playwright is missing they are skipped with the reason, except under
``CI=true``, where they fail: CI must run them (docs/viewer.md, "Tests").
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from viewer_runs import make_runs

from chexpercept.analysis.viewer import ViewerRun, write_viewer
from chexpercept.evaluation import SYSTEM_PROMPT

#: Where the browser tests leave their screenshots (git-ignored ``outputs/``); override with
#: ``CHEXPERCEPT_VIEWER_SCREENSHOTS``.
SCREENSHOT_DIR = Path(os.environ.get(
    "CHEXPERCEPT_VIEWER_SCREENSHOTS",
    Path(__file__).resolve().parents[2] / "outputs" / "viewer_screenshots"))
#: Chromium flags: no sandbox (root in containers), nothing that phones home.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-default-apps", "--no-default-browser-check"]


def chromium_executable() -> str | None:
    """``$CHEXPERCEPT_CHROMIUM``, else ``chromium`` / ``chromium-browser`` on PATH, else None."""
    given = os.environ.get("CHEXPERCEPT_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"browser tests cannot run under CI: {reason} (scripts/run_tests.sh "
                    "installs chromium with apt-get and playwright with the 'dev' extra)")
    pytest.skip(f"browser tests skipped: {reason}")


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    """:data:`SCREENSHOT_DIR`, created."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    return SCREENSHOT_DIR


@pytest.fixture(scope="session")
def viewer_runs(tmp_path_factory):
    """The test bundle and its three runs (see ``viewer_runs.make_runs``)."""
    return make_runs(tmp_path_factory.mktemp("viewer_runs"))


@pytest.fixture(scope="session")
def viewer_page(viewer_runs, tmp_path_factory) -> Path:
    """``index.html`` of the viewer of the three runs (first two side by side)."""
    runs = [ViewerRun(label.split(".oracle_")[0], label.split(".oracle_")[1], path)
            for label, path in viewer_runs["runs"].items()]
    return write_viewer(runs, tmp_path_factory.mktemp("viewer_out"), system_prompt=SYSTEM_PROMPT,
                        chunk_size=3)


@pytest.fixture(scope="module")
def browser():
    """A headless system Chromium driven by Playwright (skips or fails, see module doc).

    Module-scoped: Playwright's sync API keeps an event loop running in the main thread while
    it is open, and a later test's ``asyncio.run`` would refuse to start under it.
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install playwright)")
    executable = chromium_executable()
    if executable is None:
        _unavailable("no chromium on PATH (apt-get install -y chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Page:
    """A browser page that records every request, console error and page error."""

    def __init__(self, browser, url: str, viewport=(1400, 900)):
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        self.page.set_default_timeout(10_000)
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready]")

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def open_viewer(browser, viewer_page):
    """``open_viewer(fragment="", viewport, page_path=None)`` -> :class:`Page` (the three-run
    viewer unless ``page_path``); asserts at teardown that every request stayed on the file
    system and nothing was logged as an error."""
    pages: list[Page] = []

    def _open(fragment: str = "", viewport=(1400, 900), page_path: Path | None = None) -> Page:
        target = viewer_page if page_path is None else page_path
        page = Page(browser, target.resolve().as_uri() + fragment, viewport)
        pages.append(page)
        return page

    yield _open
    for page in pages:
        away = [u for u in page.requests if not u.startswith("file://")]
        assert away == [], f"requests left the file system: {away}"
        assert page.errors == [], f"console errors: {page.errors}"
        page.close()
