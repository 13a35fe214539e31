"""Endpoints (the cloud's inference instances, #38) in JupyterLab, driven in Chromium: the
sidebar lists one with its containers and $/h and stops and starts it; the deploy form is
filled, shows its price, deploys, and says when the endpoint is active.

Lab runs with ``GPUCLOUD_API_KEY``/``GPUCLOUD_BASE_URL`` naming a sandbox this module starts, so
its server extension and its kernels reach that cloud through the user's personal gateway (one,
in a home of this module's), as for a user with a key; no cost cap, so a deploy is not refused.
The tests read the cloud directly (``observer``), or deploy as a kernel of this Lab would
(``beside_lab``). This checkout's built lab extension is loaded when there is one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import Browser, Page

from gpucloud_nb import GPUCloud
from gpucloud_nb._connect import cloud_settings
from gpucloud_nb.display import per_hour
from gpucloud_nb.sandbox import Sandbox

from .lab import (
    SCREENSHOTS,
    Lab,
    LabServer,
    keyed_lab,
    lab_session,
    run_all,
    sandbox_fixture,
    save_screenshot,
)
from .test_gpucloud_sidebar import CONTRAST_JS, set_theme

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

MODEL = "sandbox-vision-1"  # deploys on the A10 by default
KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
FORM = """\
from gpucloud_nb import connect
from gpucloud_nb.widgets import DeployForm
form = DeployForm(connect(quiet=True), model="sandbox-vision-1")
form
"""


box = sandbox_fixture(launch_seconds=3, delete_seconds=1)


@pytest.fixture(scope="module")
def endpoints_lab_server(box: Sandbox, tmp_path_factory: pytest.TempPathFactory,
                         chromium: Browser) -> Iterator[LabServer]:
    with keyed_lab(tmp_path_factory.mktemp("endpoints-lab"), box.management_url, box.api_key,
                   "lab-endpoints.log") as server:
        yield server


@pytest.fixture
def endpoints_lab(endpoints_lab_server: LabServer, chromium: Browser,
                  request: pytest.FixtureRequest) -> Iterator[Lab]:
    with lab_session(endpoints_lab_server, chromium, request.node) as session:
        yield session


@pytest.fixture
def observer(box: Sandbox) -> Iterator[GPUCloud]:
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as client:
        yield client


@pytest.fixture
def beside_lab(endpoints_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Iterator[GPUCloud]:
    """A client as a kernel of this Lab has: through Lab's personal gateway, sharing Lab's cache
    dir (its changes touch the stamp Lab's poller watches)."""
    for name in ("XDG_CACHE_HOME", "GPUCLOUD_GATEWAY_HOME", "GPUCLOUD_API_KEY",
                 "GPUCLOUD_BASE_URL"):
        monkeypatch.setenv(name, endpoints_lab.server.env[name])
    monkeypatch.delenv("GPUCLOUD_GATEWAY", raising=False)
    key, url, through_gateway = cloud_settings()
    assert through_gateway and url != endpoints_lab.server.env["GPUCLOUD_BASE_URL"]
    with GPUCloud(api_key=key, base_url=url) as client:
        yield client


def notebook(lab: Lab, name: str, *sources: str) -> Page:
    nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources], metadata=KERNELSPEC),
                   lab.root / name)
    return lab.open(name)


def open_sidebar(page: Page) -> None:
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpucloud-sidebar"]').click()
    page.locator("#gpucloud-sidebar").wait_for(state="visible")


def wait_status(page: Page, endpoint_id: str, status: str, containers: str,
                timeout: float = 60_000) -> None:
    """Wait until the endpoint's row shows ``status`` (the cloud's) and ``containers``."""
    page.wait_for_function(
        """([id, status, containers]) => {
             const row = document.querySelector(`[data-gpucloud-endpoint="${id}"]`);
             return row && row.dataset.status === status && !row.dataset.busy
               && row.querySelector('.gpucloud-Endpoint-containers').textContent === containers;
           }""", arg=[endpoint_id, status, containers], timeout=timeout)


def wait_cloud(observer: GPUCloud, endpoint_id: str, statuses: tuple[str, ...]) -> str:
    deadline = time.monotonic() + 30
    while (status := observer.inference_instances.get(endpoint_id).status) not in statuses:
        assert time.monotonic() < deadline, f"the cloud still says {status}"
        time.sleep(0.2)
    return status


def serving_now(observer: GPUCloud) -> tuple[float, int]:
    """What the cloud's endpoints cost now (price × containers up) and how many have one up."""
    details = [observer.inference_instances.get(e.id) for e in observer.inference_instances.list()
               if e.status != "DELETED"]
    return sum(d.hourly_price * d.total for d in details), sum(1 for d in details if d.total)


def wait_statusbar(page: Page, text: str) -> None:
    page.wait_for_function(
        "t => document.querySelector('#gpucloud-statusbar').textContent.trim() === t",
        arg=text, timeout=30_000)


def test_the_sidebar_lists_an_endpoint_and_stops_and_starts_it(
        endpoints_lab: Lab, beside_lab: GPUCloud, observer: GPUCloud) -> None:
    made = beside_lab.inference_instances.create(name="sidebar-endpoint", model=MODEL, min=1,
                                                 max=2)
    page = notebook(endpoints_lab, "endpoints.ipynb")
    open_sidebar(page)
    row = page.locator(f'[data-gpucloud-endpoint="{made.id}"]')
    row.wait_for(state="visible", timeout=30_000)
    assert "sidebar-endpoint" in row.locator(".gpucloud-Endpoint-name").inner_text()
    wait_status(page, made.id, "ACTIVE", "1/1 ready")
    price = observer.inference_instances.get(made.id).hourly_price
    assert row.locator(".gpucloud-Endpoint-price").inner_text() == per_hour(price)  # one container
    assert per_hour(price * 2) in row.locator(".gpucloud-Endpoint-price").get_attribute("title")
    assert row.locator(".gpucloud-Endpoint-status").inner_text() == "active"
    assert row.locator(".gpucloud-Endpoint-start").is_disabled()
    section = page.locator(".gpucloud-Endpoints")
    assert f"1 endpoint · {per_hour(price)} now" in section.inner_text()
    page.mouse.move(1300, 500)  # no hover colours
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for theme, look in (("JupyterLab Dark", "dark"), ("JupyterLab Light", "light")):
        set_theme(page, theme)
        section.screenshot(path=str(SCREENSHOTS / f"gpucloud-sidebar-endpoints-{look}.png"))
        texts = page.evaluate(CONTRAST_JS, [["#gpucloud-sidebar .gpucloud-Endpoints"], "none"])
        seen = {t["where"] for t in texts}
        for part in ("Endpoints-title", "Endpoints-total", "Endpoint-name", "Endpoint-status",
                     "Endpoint-containers", "Endpoint-price", "Endpoint-stop", "Endpoint-delete"):
            assert any(part in where for where in seen), (look, part, sorted(seen))
        low = [t for t in texts if t["ratio"] < 4.5]
        assert not low, (look, low)  # AA, as every other text of the sidebar
    heading = section.locator(".gpucloud-Endpoints-total")
    assert heading.evaluate("node => node.scrollWidth <= node.clientWidth")  # not cut
    # #38: what runs now costs instances and endpoints: the totals and the status bar count it
    hourly, serving = serving_now(observer)
    assert hourly >= price and serving >= 1
    wait_statusbar(page, f"{per_hour(hourly)} · 0 running · {serving} endpoint"
                         f"{'' if serving == 1 else 's'} serving")
    rate = page.locator("#gpucloud-sidebar .gpucloud-Totals-rate")
    assert rate.inner_text() == f"{per_hour(hourly)} now"
    assert f"endpoints {per_hour(hourly)}" in (rate.get_attribute("title") or "")

    row.locator(".gpucloud-Endpoint-stop").click()
    assert wait_cloud(observer, made.id, ("DISABLED",)) == "DISABLED"  # it reached the cloud
    wait_status(page, made.id, "DISABLED", "0/0 ready")
    assert row.locator(".gpucloud-Endpoint-status").inner_text() == "stopped"
    assert row.locator(".gpucloud-Endpoint-price").inner_text() == "$0.00/h"
    assert row.locator(".gpucloud-Endpoint-stop").is_disabled()
    left, serving = serving_now(observer)  # a stopped endpoint bills nothing
    assert left == pytest.approx(hourly - price)
    wait_statusbar(page, f"{per_hour(left)} · 0 running" + (
        f" · {serving} endpoint{'' if serving == 1 else 's'} serving" if serving else ""))

    row.locator(".gpucloud-Endpoint-start").click()
    wait_cloud(observer, made.id, ("PENDING", "DEPLOYING", "ACTIVE"))
    wait_status(page, made.id, "ACTIVE", "1/1 ready")
    assert observer.inference_instances.get(made.id).ready == 1

    row.locator(".gpucloud-Endpoint-delete").click()  # asks first
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(state="visible")
    assert "Delete endpoint sidebar-endpoint" in dialog.inner_text()
    dialog.locator("button.jp-mod-accept").click()
    wait_cloud(observer, made.id, ("DELETING", "DELETED"))
    row.wait_for(state="detached", timeout=30_000)  # deleted endpoints leave the sidebar


def test_the_deploy_form_shows_its_price_deploys_and_says_when_the_endpoint_is_active(
        endpoints_lab: Lab, observer: GPUCloud) -> None:
    page = notebook(endpoints_lab, "deploy.ipynb", FORM)
    run_all(page)
    form = page.locator(".gpucloud-deploy-form")
    form.wait_for(state="visible", timeout=60_000)
    hardware = observer.inference_instances.hardwares()
    a10 = next(h for h in hardware if h.id == observer.inference_instances.models()[0]
               .default_hardware_id)
    chosen = form.locator(".gpucloud-deploy-hardware select")
    assert per_hour(a10.price) in chosen.locator("option:checked").inner_text()
    region = form.locator(".gpucloud-deploy-region select").locator("option:checked").inner_text()
    assert "capacity" in region and "no capacity" not in region

    form.locator(".gpucloud-deploy-name input").fill("form-endpoint")
    maximum = form.locator(".gpucloud-deploy-max input")
    maximum.fill("2")
    maximum.press("Enter")  # an IntText syncs on Enter or blur
    price = form.locator(".gpucloud-deploy-price")
    expected = (f"{per_hour(a10.price)} per container: {per_hour(0)} at min 0, "
                f"up to {per_hour(a10.price * 2)} at max 2.")
    page.wait_for_function("([el, text]) => el.textContent.trim() === text",
                           arg=[price.element_handle(), expected], timeout=30_000)
    def named() -> list[Any]:
        return [e for e in observer.inference_instances.list() if e.name == "form-endpoint"]

    assert named() == []  # the price came before anything was deployed

    form.locator(".gpucloud-deploy-deploy").click()
    status = form.locator(".gpucloud-deploy-status")
    page.wait_for_function("(el) => el.textContent.includes('is active at')",
                           arg=status.element_handle(), timeout=90_000)
    [made] = named()
    details = observer.inference_instances.get(made.id)
    assert (details.name, details.status, details.max_containers) == ("form-endpoint", "ACTIVE", 2)
    said = status.inner_text().removeprefix("✓").strip()  # the address the kernel reaches it at
    assert said.startswith("form-endpoint is active at http://127.0.0.1:") and made.id in said
    save_screenshot(page, "deploy-form-active")
    observer.inference_instances.delete(made.id)
