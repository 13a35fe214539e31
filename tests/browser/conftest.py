"""Fixtures for browser tests: JupyterLab driven in Debian's Chromium by Playwright.

    import pytest
    from .lab import output_text

    @pytest.mark.browser
    def test_my_notebook(lab, run_all, cell_errors, screenshot):
        page = lab.open("01-quickstart.ipynb")      # a fresh copy in lab.root, kernel idle
        run_all(page)                               # Run → Run All Cells, waits for the end
        screenshot(page)                            # test-artifacts/screenshots/<test>.png
        assert cell_errors(page) == []
        assert "SANDBOX" in output_text(page)

* ``lab_server`` (session): one ``jupyter lab`` for the whole run; ``.url``, ``.token``,
  ``.root``, ``.api(method, path)``, ``.log_path`` (``test-artifacts/lab.log``).
* ``lab`` (per test): a fresh browser context and a fresh copy of ``notebooks/`` at
  ``lab.root``; ``.url``, ``.token``, ``.root``, ``.open(name) -> Page``, ``.context``.
  Its kernels are shut down and its context closed when the test ends; a failing test leaves
  a screenshot of each page it opened.
* ``run_all(page, timeout=90)``, ``cell_errors(page) -> list[str]``,
  ``screenshot(page, suffix="") -> Path``.

Every browser test is limited to 120 s. Without ``/usr/bin/chromium`` browser tests skip, or fail
when ``CI=true``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from . import lab as harness
from .lab import CHROMIUM, CHROMIUM_ARGS, Lab, LabServer, save_screenshot, this_checkout

BROWSER_TEST_TIMEOUT = 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(BROWSER_TEST_TIMEOUT))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    report = yield
    setattr(item, f"_report_{report.when}", report)
    return report


def _require_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    reason = f"{CHROMIUM} is missing (apt-get install chromium); browser tests need it"
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="package")
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless, shared by the browser tests (each gets its own context).

    Package-scoped on purpose: while Playwright's sync API is alive it marks its event loop as
    running in the main thread, which breaks every later ``asyncio.run()``; it must stop when
    the browser tests end, not at the end of the session.
    """
    _require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                             headless=True)
        yield browser
        browser.close()


@pytest.fixture(scope="package")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """One JupyterLab for the session, on a free loopback port, its log in test-artifacts/; its
    kernels and server extension run this checkout (not whatever the venv installed)."""
    _require_chromium()
    base = tmp_path_factory.mktemp("lab")
    server = LabServer(root=base / "root", home=base / "home", env=this_checkout(base))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def lab(lab_server: LabServer, chromium: Browser, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """This test's JupyterLab: a fresh browser context and a fresh copy of notebooks/."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    session = Lab(lab_server, context, request.node.name)
    try:
        yield session
    finally:
        report = getattr(request.node, "_report_call", None)
        if report is not None and report.failed:
            for index, page in enumerate(session.pages):
                try:
                    save_screenshot(page, f"{request.node.name}-failed-{index}")
                except Exception as exc:  # a dead page must not hide the real failure
                    print(f"no screenshot of page {index}: {exc}")
        session.close()


@pytest.fixture
def run_all() -> Callable[..., None]:
    """``run_all(page, timeout=90)``: Run → Run All Cells and wait until the kernel is idle."""
    return harness.run_all


@pytest.fixture
def cell_errors() -> Callable[[Page], list[str]]:
    """``cell_errors(page)``: the errors shown in the notebook's outputs (empty when none)."""
    return harness.cell_errors


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Callable[..., Path]:
    """``screenshot(page, suffix="")``: save test-artifacts/screenshots/<test>[-suffix].png."""

    def take(page: Page, suffix: str = "") -> Path:
        name = request.node.name + (f"-{suffix}" if suffix else "")
        return save_screenshot(page, name)

    return take
