"""Log in through a real JupyterHub as a student and as the admin; the sidebar finds the gateway.

The hub, its proxy and the gateway service are ``tests/hub_helpers.py``'s; each login spawns that
user's JupyterLab, whose GPU-cloud sidebar talks to the hub's gateway service with no setting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from gpucloud_nb.sandbox import Sandbox
from tests.helpers import UPSTREAM_KEY
from tests.hub_helpers import ADMIN_PASSWORD, PASSWORD, RealHub

from .lab import save_screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(420)]


@pytest.fixture
def hub(sandbox_factory: Callable[..., Sandbox], tmp_path: Path) -> Iterator[RealHub]:
    upstream = sandbox_factory(api_key=UPSTREAM_KEY)
    real = RealHub(tmp_path, upstream.management_url, UPSTREAM_KEY,
                   "default = 12\n[groups]\nphysics = 9\n")
    try:
        yield real
    finally:
        real.stop()


def log_in(page: Page, hub: RealHub, user: str) -> None:
    page.goto(f"{hub.url}/hub/login")
    page.locator("#username_input").fill(user)
    page.locator("#password_input").fill(ADMIN_PASSWORD if user == "grace" else PASSWORD)
    page.locator("#login_submit").click()
    page.wait_for_url(re.compile(rf"/user/{user}/lab"), timeout=240_000)
    page.locator("#jp-main-dock-panel").wait_for(state="visible", timeout=120_000)


def open_sidebar(page: Page) -> None:
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpucloud-sidebar"]').click()
    page.locator("#gpucloud-sidebar").wait_for(state="visible")


def test_a_student_and_the_admin_log_in_through_the_hub(hub: RealHub, chromium: Browser) -> None:
    student = chromium.new_context(viewport={"width": 1400, "height": 1000})
    admin = chromium.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = student.new_page()
        log_in(page, hub, "ada")
        open_sidebar(page)
        budget = page.locator("#gpucloud-sidebar .gpucloud-BudgetLeft")
        expect(budget).to_have_text("$9.00 left of your $9.00 budget", timeout=90_000)
        save_screenshot(page, "jupyterhub-student-sidebar")

        teacher = admin.new_page()
        log_in(teacher, hub, "grace")
        open_sidebar(teacher)
        expect(teacher.locator("#gpucloud-sidebar .gpucloud-BudgetLeft")).to_have_text(
            "$0.00 spent; no budget on this key", timeout=90_000)
        # The admin is the gateway's teacher: the class lists the student who came in.
        answer = teacher.request.get(f"{hub.gateway_url}/gateway/class",
                                     headers={"x-api-key": hub.token_for("grace")})
        assert [(r["name"], r["group"]) for r in answer.json()["accounts"]] == [("ada", "physics")]
        teacher.goto(f"{hub.url}/hub/admin")
        expect(teacher.locator("body")).to_contain_text("ada", timeout=60_000)
        save_screenshot(teacher, "jupyterhub-admin")
    finally:
        student.close()
        admin.close()
