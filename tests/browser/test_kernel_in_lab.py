"""A notebook in JupyterLab whose kernel runs on a sandbox instance (``gpucloud-<name>``), opened
from a notebook that names the kernelspec, and from the sidebar's "Notebook on this instance".

Lab runs with ``GPUCLOUD_API_KEY``/``GPUCLOUD_BASE_URL`` pointing at a sandbox this module
starts, and with this checkout on ``PYTHONPATH``, so the provisioner that Lab's kernel manager
loads is this checkout's. As for a user with a key, Lab (its sidebar and the provisioner) talks to
the cloud through the user's personal gateway, and so does the test's client (``through_lab``:
``connect()``'s path). The test installs the kernelspec into Lab's ``JUPYTER_DATA_DIR`` and
opens a notebook that names it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import Browser, Page, expect

from gpucloud_nb import GPUCloud
from gpucloud_nb._connect import cloud_settings
from gpucloud_nb.client.remote import default_public_key
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.sandbox import Sandbox

from .lab import Lab, LabServer, keyed_lab, lab_session, output_text, sandbox_fixture
from .test_gpucloud_sidebar import CONTRAST_JS, set_theme

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
box = sandbox_fixture(launch_seconds=0.3, delete_seconds=0.2)


@pytest.fixture(scope="module")
def kernel_lab_server(box: Sandbox, tmp_path_factory: pytest.TempPathFactory,
                      kernel_provisioner_entry_point: Path | None) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("kernel-lab")
    paths = [str(REPO)] + ([str(kernel_provisioner_entry_point)]
                           if kernel_provisioner_entry_point else [])
    with keyed_lab(base, box.management_url, box.api_key, "lab-kernel.log",
                   XDG_CONFIG_HOME=str(base / "config"),
                   PYTHONPATH=os.pathsep.join(paths)) as server:
        yield server


def launch(cloud: GPUCloud, name: str) -> Any:
    """An active instance of the cheapest VM offer, reachable with this machine's SSH key."""
    offer = next(o for o in cloud.instances.offers(available=True)
                 if o.deployment_type == "vm")
    instance = cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]},
        ssh_key=default_public_key(None))
    return cloud.instances.wait_until_active(instance.id, timeout=30)


@pytest.fixture
def through_lab(kernel_lab: Lab, box: Sandbox) -> Iterator[GPUCloud]:
    """A client as a kernel of this Lab has: ``connect()``'s, through Lab's personal gateway."""
    key, url, through_gateway = cloud_settings()
    assert through_gateway and url != box.management_url
    with GPUCloud(api_key=key, base_url=url) as cloud:
        yield cloud


@pytest.fixture
def kernel_lab(kernel_lab_server: LabServer, chromium: Browser, request: pytest.FixtureRequest,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    """Lab, with this process seeing its data dir and SSH key as the server does."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(kernel_lab_server.home / "jupyter-data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", kernel_lab_server.env["XDG_CONFIG_HOME"])
    monkeypatch.setenv("HOME", str(kernel_lab_server.home / "home"))
    for name in ("GPUCLOUD_GATEWAY_HOME", "GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL"):
        monkeypatch.setenv(name, kernel_lab_server.env[name])
    monkeypatch.delenv("GPUCLOUD_GATEWAY", raising=False)
    with lab_session(kernel_lab_server, chromium, request.node, height=900) as session:
        yield session


def test_a_notebook_on_the_instance_kernel_prints_its_id_and_renders_a_slider(
        kernel_lab: Lab, through_lab: GPUCloud, run_all, cell_errors, screenshot) -> None:
    cloud = through_lab
    instance = launch(cloud, "lab-kernel")
    name = install_kernel(cloud, "lab-kernel")

    notebook = new_notebook(
        cells=[new_code_cell("import os\nprint('on', os.environ['GPUCLOUD_INSTANCE_ID'])"),
               new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=7, description='epochs')")],
        metadata={"kernelspec": {"name": name, "display_name": name, "language": "python"}})
    nbformat.write(notebook, kernel_lab.root / "remote.ipynb")
    page = kernel_lab.open("remote.ipynb")
    run_all(page)

    assert cell_errors(page) == []
    assert f"on {instance.id}" in output_text(page)
    slider = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .widget-slider")
    expect(slider).to_be_visible(timeout=30_000)
    expect(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .widget-readout")).to_have_text("7")
    screenshot(page)


def test_notebook_on_this_instance_from_the_sidebar_runs_there_and_renders_a_slider(
        kernel_lab: Lab, through_lab: GPUCloud, screenshot) -> None:
    cloud = through_lab
    instance = launch(cloud, "sidebar-kernel")

    nbformat.write(new_notebook(metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}),
        kernel_lab.root / "start.ipynb")
    page = kernel_lab.open("start.ipynb")
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpucloud-sidebar"]').click()
    button = page.locator(f'[data-gpucloud-instance="{instance.id}"] .gpucloud-Row-notebook')
    expect(button).to_be_enabled(timeout=30_000)
    button.click()

    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    expect(panel.locator(".jp-KernelName")).to_contain_text("Python 3 on sidebar-kernel",
                                                            timeout=30_000)
    expect(panel.locator(".jp-Notebook-ExecutionIndicator")).to_have_attribute(
        "data-status", "idle", timeout=60_000)
    panel.locator(".jp-Cell .cm-content").first.click()
    page.keyboard.type("import os, ipywidgets; print('on', os.environ['GPUCLOUD_INSTANCE_ID']); "
                       "ipywidgets.IntSlider(value=5, description='epochs')")
    page.keyboard.press("Shift+Enter")

    expect(panel.locator(".jp-OutputArea-output").first).to_contain_text(f"on {instance.id}",
                                                                          timeout=30_000)
    expect(panel.locator(".widget-slider")).to_be_visible(timeout=30_000)
    expect(panel.locator(".widget-readout")).to_have_text("5")
    screenshot(page)


def run_cell(page: Page, code: str) -> None:
    """Type ``code`` into the last cell of the open notebook and run it (Shift+Enter)."""
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Cell .cm-content").last.click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")


def output_of(page: Page, index: int) -> Any:
    """The output area of cell ``index`` of the open notebook."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").nth(index).locator(
        ".jp-OutputArea-output")


@pytest.mark.timeout(480)
def test_an_instance_deleted_from_elsewhere_is_one_sentence_and_the_sidebar_restores_it(
        kernel_lab: Lab, through_lab: GPUCloud, screenshot) -> None:
    cloud = through_lab
    instance = launch(cloud, "lab-lost")
    name = install_kernel(cloud, "lab-lost")
    nbformat.write(new_notebook(
        cells=[new_code_cell("%load_ext gpucloud_nb\nkept = 7\n%gpucloud checkpoint")],
        metadata={"kernelspec": {"name": name, "display_name": name, "language": "python"}}),
        kernel_lab.root / "lost.ipynb")
    page = kernel_lab.open("lost.ipynb")
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Cell .cm-content").first.click()
    page.keyboard.press("Shift+Enter")
    expect(panel.locator(".jp-OutputArea-output").first).to_contain_text("Checkpoint saved to",
                                                                          timeout=60_000)
    server = kernel_lab.server

    cloud.instances.delete(instance.id)  # from elsewhere: not this notebook, not the sidebar
    deadline = time.monotonic() + 120
    while not server.api("GET", "/gpucloud/kernels/lost")["kernels"]:
        assert time.monotonic() < deadline, "the kernel was never found lost"
        time.sleep(0.5)
    run_cell(page, "print(kept)")

    error = output_of(page, 1)
    expect(error).to_contain_text("was deleted from outside this notebook", timeout=60_000)
    text = error.inner_text()
    assert f"Instance lab-lost ({instance.id}) was deleted from outside this notebook" in text
    assert "%gpucloud restore " in text and "--gpu " in text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1  # one sentence
    path = kernel_lab.path_of("lost.ipynb")
    assert server.kernel_state(path)[0] == "idle"  # answered, not restarting

    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpucloud-sidebar"]').click()
    row = page.locator("#gpucloud-sidebar .gpucloud-LostKernel")
    expect(row).to_have_attribute("data-state", "lost", timeout=30_000)
    expect(row.locator(".gpucloud-Lost-name")).to_have_text("lost.ipynb")
    expect(row.locator(".gpucloud-Lost-detail")).to_contain_text("%gpucloud restore ")
    page.mouse.move(1300, 500)  # no hover colours
    for theme, look in (("JupyterLab Dark", "dark"), ("JupyterLab Light", "light")):
        set_theme(page, theme)
        texts = page.evaluate(CONTRAST_JS, [["#gpucloud-sidebar .gpucloud-Lost"], "none"])
        seen = {t["where"] for t in texts}
        for part in ("Lost-title", "Lost-name", "Lost-status", "Lost-detail", "Lost-restore"):
            assert any(part in where for where in seen), (look, part, sorted(seen))
        assert not [t for t in texts if t["ratio"] < 4.5], look  # AA, as the rest of the sidebar
    screenshot(page)
    row.locator(".gpucloud-Lost-restore").click()
    expect(row).to_have_attribute("data-state", "restored", timeout=240_000)
    expect(row.locator(".gpucloud-Lost-detail")).to_contain_text(
        "1 name; the next cell runs there.")
    expect(row.locator(".gpucloud-Lost-restore")).to_be_hidden()
    assert server.kernel_state(path)[0] == "idle"  # never restarted: the same kernel
    assert "restarting kernel" not in server.log_tail(2000).lower()  # no restart loop
    new = [i for i in cloud.instances.list()
           if i.status == "active" and i.name.startswith("lab-lost-")]
    assert len(new) == 1 and new[0].gpu_model == instance.gpu_model

    run_cell(page, "import os\nprint(kept, os.environ['GPUCLOUD_INSTANCE_ID'])")
    expect(output_of(page, 2)).to_contain_text(
        f"7 {new[0].id}", timeout=60_000)
    screenshot(page)
    cloud.instances.delete(new[0].id)
