"""ClassPanel as a teacher sees it in JupyterLab: three students, stop the whole class, both themes.

The kernel serves a sandbox of its own with a class gateway in front of it (three student keys,
a teacher key, budgets) and launches instances for two students through the gateway; the panel
is clicked through the page: "Stop the whole class…" asks, "Confirm stop" stops every instance.
Screenshots go to ``test-artifacts/screenshots/class-panel-*.png``; every visible text passes
WCAG AA in both themes. Lab's kernels get this checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

from collections.abc import Iterator

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import Browser

from gpucloud_nb.sandbox import service

from .lab import ARTIFACTS, Lab, LabServer
from .test_widgets_in_lab import CONTRAST_JS, run_cell, set_theme, shot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SETUP = """\
from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway, GatewayConfig
from gpucloud_nb.gateway.keys import parse_keys
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.widgets import ClassPanel

box = Sandbox(api_key="upstream-key-0123456789", launch_seconds=0.2).start()
students = ["student-a-key-0123456789", "student-b-key-0123456789", "student-c-key-0123456789"]
people = parse_keys(f"{students[0]} 20 Ada\\n{students[1]} 0 Alan\\n{students[2]} - Grace\\n"
                    "teacher-key-0123456789ab teacher T\\n")
gateway = Gateway(GatewayConfig(people=tuple(people), upstream_url=box.management_url,
                                upstream_key="upstream-key-0123456789")).start()
clouds = [GPUCloud(api_key=key, base_url=gateway.url) for key in students]
offer = clouds[0].instances.offers(deployment_type="vm", available=True, sort="price")[0]
for cloud, count in ((clouds[0], 2), (clouds[2], 1)):
    for n in range(count):
        cloud.instances.create(name=f"lab-{n}", cloud_provider=offer.cloud.id,
                               instance_id=offer.instance_id, region=offer.available_regions[0],
                               vm={"os": offer.configuration.os[0]})
teacher = GPUCloud(api_key="teacher-key-0123456789ab", base_url=gateway.url)
"""
PANEL = "panel = ClassPanel(teacher)\npanel"
STOP = "gateway.stop()\nbox.stop()"


@pytest.fixture
def class_lab(tmp_path_factory: pytest.TempPathFactory, chromium: Browser) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("class-lab")
    from .lab import REPO

    server = LabServer(root=base / "root", home=base / "home",
                       log_path=ARTIFACTS / "lab-class.log",
                       env={"PYTHONPATH": str(REPO),
                            "GPUCLOUD_SANDBOX_HOME": str(base / "sandbox")})
    server.start()
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    session = Lab(server, context, "class-panel")
    try:
        yield session
    finally:
        session.close()
        server.stop()
        service.stop(base / "sandbox")  # the Lab extension's poller may have started one


def test_the_class_panel_with_three_students_stops_the_class(class_lab: Lab) -> None:
    notebook = new_notebook(cells=[new_code_cell(source) for source in (SETUP, PANEL, STOP)],
                            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                     "language": "python"}})
    nbformat.write(notebook, class_lab.root / "class.ipynb")
    page = class_lab.open("class.ipynb")
    run_cell(page, 0)
    run_cell(page, 1)
    panel = page.locator(".gpucloud-class-panel")
    panel.wait_for(state="visible", timeout=30_000)
    rows = panel.locator("table.gpucloud-class-table tbody tr")
    assert rows.count() == 3
    assert [rows.nth(i).locator("td").first.inner_text() for i in range(3)] == \
        ["Ada", "Alan", "Grace"]
    assert "(spent)" in rows.nth(1).inner_text()
    for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        set_theme(page, theme)
        shot(page, f"class-panel-{name}", panel)
        low = [r for r in page.evaluate(CONTRAST_JS, ".gpucloud-class-panel") if r["ratio"] < 4.5]
        assert low == [], low

    panel.locator(".gpucloud-class-stop-all button, button.gpucloud-class-stop-all").first.click()
    question = panel.locator(".gpucloud-class-question")
    question.wait_for(state="visible")
    assert "Stop the whole class: 3 instances of 2 students?" in question.inner_text()
    shot(page, "class-panel-confirm", panel)
    panel.locator(".gpucloud-class-confirm-button button, button.gpucloud-class-confirm-button"
                  ).first.click()
    page.wait_for_function("""() => (document.querySelector('.gpucloud-class-status') || {})
        .textContent?.includes('Stopping 3 instances of the whole class.')""", timeout=30_000)
    page.wait_for_function("""() => Array.from(document.querySelectorAll(
        '.gpucloud-class-table tbody tr td:nth-child(2)')).every(td => td.textContent === '0')""",
                           timeout=30_000)
    shot(page, "class-panel-stopped", panel)
    run_cell(page, 2)
