"""dask-labextension's own *Dask* sidebar in JupyterLab, driven in Chromium, building our
``GPUCloudCluster`` from its ``labextension.factory`` config (#40).

Lab runs with dask-labextension (from the ``[cluster]`` extra), the factory configured as
docs/dask-labextension.md says (``~/.config/dask/labextension.yaml`` in Lab's home), and
``GPUCLOUD_API_KEY``/``GPUCLOUD_BASE_URL`` pointing at a sandbox this module starts, so the
cluster rents through the user's personal gateway, as for a user with a key. The test presses the
sidebar's buttons (its DOM: dask-labextension 7's ``src/clusters.tsx`` and ``src/scaling.tsx``)
and reads the cloud directly (``observer``).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox import Sandbox

from .lab import Lab, LabServer, keyed_lab, lab_session

pytestmark = pytest.mark.browser
pytest.importorskip("dask_labextension", reason="dask-labextension comes with the [cluster] extra")

#: docs/dask-labextension.md's configuration, as a user writes it.
LABEXTENSION_YAML = """\
labextension:
  factory:
    module: "gpucloud_nb.cluster"
    class: "GPUCloudCluster"
    args: []
    kwargs:
      n_workers: 1
  default:
    adapt: null
"""

LIVE = ("pending", "active")


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    # A sandbox instance is this machine: its SSH commands run `python3` from this PATH, which
    # must be this venv's (it has Dask), as on a real instance the cluster's own Python.
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{path}"
    sandbox = Sandbox(launch_seconds=0.3, delete_seconds=0.2).start()
    try:
        yield sandbox
    finally:
        sandbox.stop()
        os.environ["PATH"] = path


@pytest.fixture(scope="module")
def dask_lab_server(box: Sandbox, tmp_path_factory: pytest.TempPathFactory,
                    chromium: Browser) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("dask-lab")
    config = base / "home" / "home" / ".config" / "dask" / "labextension.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(LABEXTENSION_YAML, encoding="utf-8")
    with keyed_lab(base, box.management_url, box.api_key, "lab-dask.log",
                   PATH=os.environ["PATH"]) as server:
        yield server


@pytest.fixture
def dask_lab(dask_lab_server: LabServer, chromium: Browser,
             request: pytest.FixtureRequest) -> Iterator[Lab]:
    with lab_session(dask_lab_server, chromium, request.node, height=900) as session:
        yield session


@pytest.fixture
def observer(box: Sandbox) -> Iterator[GPUCloud]:
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as client:
        yield client


def live_dask_instances(observer: GPUCloud) -> dict[str, str]:
    """Id → name of the live instances of Dask clusters (named ``dask-<cluster>-<i>``)."""
    return {i.id: i.name for i in observer.instances.list()
            if i.status in LIVE and i.name.startswith("dask-")}


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.25)


def open_dask_sidebar(lab: Lab) -> Page:
    page = lab.context.new_page()
    lab.pages.append(page)
    query = urllib.parse.urlencode({"token": lab.token, "reset": ""})
    page.goto(f"{lab.url}/lab?{query}", wait_until="domcontentloaded")
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="dask-dashboard-launcher"]').click()
    page.locator(".dask-DaskClusterManager").wait_for(state="visible")
    return page


@pytest.mark.timeout(420)
def test_the_dask_sidebars_new_scale_and_shutdown_rent_resize_and_delete_our_cluster(
        dask_lab: Lab, observer: GPUCloud) -> None:
    """#40: dask-labextension's NEW button rents the factory's GPUCloudCluster on the sandbox,
    its listing shows it with its worker, its dashboard panes open, SCALE to 2 rents a second
    instance, adaptive scaling between 1 and 1 deletes it again, SHUTDOWN deletes the rest."""
    assert live_dask_instances(observer) == {}
    page = open_dask_sidebar(dask_lab)
    manager = page.locator(".dask-DaskClusterManager")
    new = manager.locator('.jp-Toolbar [data-command="dask:launch-cluster"]')
    assert new.inner_text().strip() == "NEW"
    new.click()

    item = manager.locator(".dask-ClusterListingItem")
    item.wait_for(state="visible", timeout=180_000)  # the server answers once the cluster runs
    assert item.count() == 1
    assert item.locator(".dask-ClusterListingItem-title").inner_text() == "GPUCloudCluster 1"
    assert "Scheduler Address: tls://127.0.0.1:" in item.inner_text()
    assert "Dashboard URL: http://127.0.0.1:" in item.inner_text()
    item.get_by_text("Number of Workers: 1").wait_for(timeout=30_000)
    rented = live_dask_instances(observer)
    assert len(rented) == 1 and next(iter(rented.values())).endswith("-0"), rented
    # Rented as a user with a key rents: through the personal gateway Lab started.
    assert list(Path(dask_lab.server.env["GPUCLOUD_GATEWAY_HOME"]).glob("*/"))

    # The dashboard panes: the active cluster's dashboard, through dask-labextension's proxy
    # to our SSH forward, lists its plots (it read the dashboard's individual-plots.json).
    item.click()
    plots = page.locator(".dask-DashboardListing-item button")
    plots.first.wait_for(state="visible", timeout=60_000)
    assert "Task Stream" in plots.evaluate_all("buttons => buttons.map(b => b.value)")
    plots.and_(page.locator('[value="Task Stream"]')).click()
    pane = page.locator(".dask-DaskDashboard-widget iframe")
    pane.wait_for(state="attached", timeout=30_000)
    assert f"/dask/dashboard/{item.get_attribute('data-cluster-id')}/" in \
        pane.get_attribute("src")

    # SCALE: the dialog's first number is the workers wanted.
    item.locator(".dask-ClusterListingItem-scale").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(state="visible")
    dialog.locator(".dask-ScalingInput").first.fill("2")
    dialog.locator("button.jp-mod-accept").click()
    dialog.wait_for(state="detached")
    # The listing polls every 5 s; the new worker's instance starts meanwhile.
    item.get_by_text("Number of Workers: 2").wait_for(timeout=180_000)
    scaled = live_dask_instances(observer)
    assert len(scaled) == 2 and set(rented) < set(scaled), scaled
    cluster = next(iter(rented.values())).removesuffix("-0")
    assert sorted(scaled.values()) == [f"{cluster}-0", f"{cluster}-1"]

    # SCALE's "Adaptive Scaling" (adapt between 1 and 1): a worker is retired, never the one
    # beside the scheduler (cluster/adaptive.py), so the newest's instance is deleted and no
    # instance bills with no worker on it.
    item.locator(".dask-ClusterListingItem-scale").click()
    dialog.wait_for(state="visible")
    dialog.locator(".dask-ScalingCheckbox").check()
    inputs = dialog.locator(".dask-ScalingInput")
    inputs.nth(1).fill("1")
    inputs.nth(2).fill("1")
    dialog.locator("button.jp-mod-accept").click()
    dialog.wait_for(state="detached")
    item.get_by_text("Maximum Workers: 1").wait_for(timeout=30_000)
    assert "Minimum Workers: 1" in item.inner_text()
    item.get_by_text("Number of Workers: 1").wait_for(timeout=180_000)
    wait_until(lambda: list(live_dask_instances(observer).values()) == [f"{cluster}-0"],
               timeout=120, what=f"the newest worker's instance was not deleted: {scaled}")

    # SHUTDOWN: the listing empties and the cloud shows every instance deleted.
    item.locator(".dask-ClusterListingItem-stop").click()
    item.wait_for(state="detached", timeout=180_000)
    wait_until(lambda: {observer.instances.get(i).status for i in scaled} == {"deleted"},
               timeout=120, what=f"the cluster's instances were not all deleted: {scaled}")
    assert live_dask_instances(observer) == {}
