"""A student's first hour, clicked through in JupyterLab (issue #25's "Must show").

One Lab whose kernels and whose GPU-cloud sidebar share one sandbox service (no key, this
checkout on ``PYTHONPATH``, this checkout's lab extension when built). One notebook walks the
flow as a person would: browse offers → filter by GPU → pick an offer (the launch form opens,
pre-filled) → launch with the form → the instances panel lists it → the sidebar and the status
bar show it → delete it from the sidebar → chat six messages with an image → the ``%gpucloud``
magics. The flow runs once in the Light and once in the Dark theme (the same Lab and sandbox,
one after the other), with WCAG AA contrast checked mid-flow and at its end. Screenshots go to
``test-artifacts/screenshots/flow-{light,dark}-*.png``.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from playwright.sync_api import Browser, Locator, Page

from gpucloud_nb.sandbox import service

from .lab import (
    ARTIFACTS,
    SCREENSHOTS,
    Lab,
    LabServer,
    lab_session,
    output_text,
    save_screenshot,
    this_checkout,
)
from .test_gpucloud_sidebar import CONTRAST_JS as SIDEBAR_CONTRAST_JS
from .test_gpucloud_sidebar import open_sidebar, status_text
from .test_widgets_in_lab import (
    BUBBLES_JS,
    CONTRAST_JS,
    picture,
    run_cell,
    set_theme,
    transcript,
    wait_replies,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

WIDGETS = """\
from gpucloud_nb import connect
from gpucloud_nb.widgets import ChatWidget, InstancesPanel, OffersBrowser

cloud = connect()
OffersBrowser(cloud)
"""
PANEL = "panel = InstancesPanel(cloud)\npanel"
CHAT = "ChatWidget(cloud.sandbox_inference())"
MAGIC_BOX = """\
%load_ext gpucloud_nb
offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
box = cloud.instances.create(
    name="magic-box", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
    region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
cloud.instances.wait_until_active(box.id, timeout=60).status
"""
INSTANCES = "%gpucloud instances"
SPEND = "%gpucloud spend"
DELETE = "%gpucloud delete magic-box --yes"
CELLS = (WIDGETS, PANEL, CHAT, MAGIC_BOX, INSTANCES, SPEND, DELETE)

CELL = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell"
BROWSER = ".gpucloud-offers-browser"
FORM = ".gpucloud-offers-browser .gpucloud-launch-form"
PANEL_ROOT = ".gpucloud-instances-panel"
CHAT_ROOT = ".gpucloud-chat"


@pytest.fixture(scope="module")
def flow_lab_server(tmp_path_factory: pytest.TempPathFactory,
                    chromium: Browser) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("flow-lab")
    env = {"GPUCLOUD_SANDBOX_HOME": str(base / "sandbox"),
           "GPUCLOUD_SANDBOX_LAUNCH_SECONDS": "3",
           "XDG_CACHE_HOME": str(base / "cache"),  # one change stamp for kernels and server
           **this_checkout(base)}
    server = LabServer(root=base / "root", home=base / "home",
                       log_path=ARTIFACTS / "lab-flow.log", env=env)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        service.stop(base / "sandbox")  # a kernel's connect() started it; it outlives kernels


@pytest.fixture
def flow_lab(flow_lab_server: LabServer, chromium: Browser,
             request: pytest.FixtureRequest) -> Iterator[Lab]:
    with lab_session(flow_lab_server, chromium, request.node) as session:
        yield session


def shot(page: Page, name: str, selector: str | None = None) -> None:
    """Save ``flow-<name>.png``: the whole page, or the first element matching ``selector``."""
    if selector is None:
        save_screenshot(page, f"flow-{name}")
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(selector).first.screenshot(path=str(SCREENSHOTS / f"flow-{name}.png"))


def table_rows(part: Locator) -> list[dict[str, str]]:
    """The body rows of the first HTML table in ``part``, as header → cell text."""
    return part.locator("table").first.evaluate("""(table) => {
        const heads = Array.from(table.querySelectorAll('thead tr:last-child th'))
          .map(h => h.textContent.trim());
        return Array.from(table.querySelectorAll('tbody tr')).map(tr => {
          const cells = Array.from(tr.children).map(c => c.textContent.trim());
          return Object.fromEntries(heads.map((h, i) => [h || '#' + i, cells[i] ?? '']));
        });
    }""")


def headers(part: Locator) -> list[str]:
    """The column titles of the first HTML table in ``part`` (the index's empty one left out)."""
    return part.locator("table").first.evaluate(
        "(t) => Array.from(t.querySelectorAll('thead tr:last-child th'))"
        ".map(h => h.textContent.trim()).filter(Boolean)")


def wrapped(part: Locator, cells: str = "th, td") -> list[str]:
    """The table cells in ``part`` (matching ``cells``) whose text takes more than one line."""
    return part.evaluate("""(root, cells) => Array.from(root.querySelectorAll(cells)).filter(cell => {
        const range = document.createRange();
        range.selectNodeContents(cell);
        return new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top))).size > 1;
      }).map(cell => cell.textContent.trim())""", cells)


def output(page: Page, index: int) -> Locator:
    """The output area of the notebook's cell ``index``."""
    return page.locator(CELL).nth(index).locator(".jp-OutputArea")


def low_contrast(page: Page) -> list[str]:
    """Every visible text of the widgets, the sidebar and the status bar under 4.5:1."""
    poor = [f"{root} {t['text']!r} {t['ratio']:.2f}:1"
            for root in (BROWSER, PANEL_ROOT, CHAT_ROOT)
            for t in page.evaluate(CONTRAST_JS, root) if t["ratio"] < 4.5]
    poor += [f"{t['where']} {t['text']!r} {t['ratio']}:1"
             for t in page.evaluate(SIDEBAR_CONTRAST_JS,
                                    [["#gpucloud-sidebar", "#gpucloud-statusbar"], "#none"])
             if t["ratio"] < 4.5]
    return poor


def chat_reads_well(page: Page) -> None:
    """Bubbles as tall as their content, no inner scrollbars, the newest message in view."""
    bubbles = page.evaluate(BUBBLES_JS)
    assert len(bubbles) >= 12, bubbles
    for bubble in bubbles:
        assert bubble["scrollers"] == 0 and bubble["clipped"] == 0, bubble
        assert bubble["height"] > bubble["line"] + 8, bubble
    where = transcript(page)
    assert where["height"] > where["client"], "six messages overflow the transcript"
    assert where["height"] - where["top"] - where["client"] <= 2, where


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_students_first_hour(flow_lab: Lab, theme: str) -> None:
    notebook = new_notebook(cells=[new_code_cell(source) for source in CELLS],
                            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                     "language": "python"}})
    nbformat.write(notebook, flow_lab.root / "first-hour.ipynb")
    page = flow_lab.open("first-hour.ipynb")
    set_theme(page, f"JupyterLab {theme.title()}")
    open_sidebar(page)
    sidebar = page.locator("#gpucloud-sidebar")
    for index in range(3):  # the offers browser, the instances panel, the chat
        run_cell(page, index)
    page.locator(f"{BROWSER} .gpucloud-offers-table table").wait_for(state="visible")
    page.wait_for_function("document.querySelector('#gpucloud-sidebar').dataset.state === 'empty'",
                           timeout=30_000)  # the other theme's run deleted its instances
    assert status_text(page) == "$0.00/h · 0 running"
    shot(page, f"{theme}-01-offers", BROWSER)

    # Browse, then filter: VMs only, then one GPU model. The table narrows; every row matches.
    count = page.locator(f"{BROWSER} .gpucloud-offers-count")

    def shown() -> int:
        return int(re.match(r"(\d+) of", count.inner_text()).group(1))

    def narrowed(than: int) -> None:
        """Wait until the count and the table (two widgets, updated one after the other) agree
        on fewer rows than ``than``."""
        page.wait_for_function("""([root, than]) => {
            const n = parseInt(document.querySelector(root + ' .gpucloud-offers-count').textContent);
            const rows = document.querySelectorAll(root + ' .gpucloud-offers-table tbody tr');
            return n < than && rows.length === Math.min(n, 100); }""", arg=[BROWSER, than])

    everything = shown()
    page.locator(f"{BROWSER} .gpucloud-filter-deployment select").select_option(label="vm")
    narrowed(everything)
    vms = shown()
    gpu = table_rows(page.locator(f"{BROWSER} .gpucloud-offers-table"))[0]["gpuName"]
    page.locator(f"{BROWSER} .gpucloud-filter-gpu select").select_option(label=gpu)
    narrowed(vms)
    rows = table_rows(page.locator(f"{BROWSER} .gpucloud-offers-table"))
    assert 0 < shown() < vms < everything and len(rows) == shown()
    assert {row["gpuName"] for row in rows} == {gpu}
    assert {row["deploymentType"] for row in rows} == {"vm"}
    assert all(re.fullmatch(r"\$[\d,]+(\.\d+)?", row["hourlyPrice"]) for row in rows), rows
    shot(page, f"{theme}-02-filtered", BROWSER)

    # Pick the first offer: the launch form opens below the table, pre-filled with it.
    pick = page.locator(f"{BROWSER} .gpucloud-offers-select select")
    label = pick.locator("option").nth(1).inner_text()
    pick.select_option(index=1)
    form = page.locator(FORM)
    form.wait_for(state="visible")
    offer_id = rows[0]["instanceId"]
    assert offer_id in label
    assert offer_id in form.locator(".gpucloud-launch-offer select").evaluate(
        "s => s.options[s.selectedIndex].textContent")
    assert form.locator(".gpucloud-launch-region select").input_value().startswith(
        rows[0]["region"] + " ")
    assert form.locator(".gpucloud-launch-name input").get_attribute("placeholder") == "e.g. train-1"
    form.locator(".gpucloud-launch-name input").fill("flow-1")
    after = form.locator(".gpucloud-launch-auto-delete input")
    after.fill("30m")
    after.press("Tab")
    form.locator(".gpucloud-launch-cost").filter(has_text="Auto-deletes after 30 min").wait_for()
    assert "by the gateway, even if this kernel stops" in form.inner_text()
    launch = form.locator("button.gpucloud-launch-button")
    page.wait_for_function("(b) => !b.disabled", arg=launch.element_handle())
    shot(page, f"{theme}-03-form", FORM)

    # Launch: the sidebar shows the instance at once (the change stamp), not after the 30 s poll.
    launch.click()
    clicked = time.monotonic()
    row = sidebar.locator(".gpucloud-Row", has_text="flow-1")
    row.wait_for(state="visible", timeout=30_000)
    appeared = time.monotonic() - clicked
    print(f"flow-1 appeared in the sidebar {appeared:.1f} s after Launch was clicked")
    assert appeared <= 5, f"the sidebar showed the launch after {appeared:.1f} s"
    form.locator(".gpucloud-launch-status").filter(has_text="flow-1 is active.").wait_for(
        timeout=60_000)
    # The form's SSH box shows the whole command (no inner scrolling) and copies as it is.
    ssh_box = form.locator(".gpucloud-launch-ssh textarea")
    ssh = ssh_box.input_value()
    assert ssh_box.evaluate("t => t.scrollHeight <= t.clientHeight + 1 "
                            "&& t.scrollWidth <= t.clientWidth + 1"), ssh
    flow_lab.context.grant_permissions(["clipboard-read", "clipboard-write"])
    ssh_box.click(click_count=3, force=True)  # it is read-only: select it and copy
    page.keyboard.press("Control+c")
    assert page.evaluate("navigator.clipboard.readText()") == ssh
    words = shlex.split(ssh)
    assert words[0] == "ssh" and words[-1] == "ubuntu@127.0.0.1", ssh
    assert any(w.startswith("UserKnownHostsFile=") for w in words), ssh
    assert any(w.startswith("HostKeyAlias=") for w in words), ssh
    assert "-i" in words, ssh  # the kernel's HOME has no ~/.ssh: the package's key, named
    shot(page, f"{theme}-04-launched", FORM)

    # The copied command works as printed, from the kernel's HOME (which has no ~/.ssh).
    from test_remote import _openssh  # tests/ is on sys.path, as for every test module

    ran = _openssh(ssh, flow_lab.server.home / "home")
    assert (ran.returncode, ran.stdout) == (0, "ok\n"), ran.stderr

    # The status bar counts it; the sidebar row is active.
    page.wait_for_function("document.querySelector('#gpucloud-statusbar')"
                           ".textContent.endsWith('· 1 running')", timeout=10_000)
    assert re.fullmatch(r"\$[\d.]+/h · 1 running", status_text(page)), status_text(page)
    row.locator(".gpucloud-Row-status", has_text="active").wait_for(timeout=10_000)
    page.evaluate("navigator.clipboard.writeText('')")
    row.locator(".gpucloud-Row-ssh").click()  # the sidebar copies the same command
    page.wait_for_function("async (ssh) => (await navigator.clipboard.readText()) === ssh", arg=ssh,
                           timeout=5_000)
    shot(page, f"{theme}-05-sidebar", "#gpucloud-sidebar")

    # The panel lists it, name first, with who keeps the auto-delete timer and which SSH key.
    panel = page.locator(PANEL_ROOT)
    panel.locator(".gpucloud-instances-refresh").click()
    panel.locator(".gpucloud-instances-table td", has_text="flow-1").first.wait_for()
    assert headers(panel.locator(".gpucloud-instances-table"))[0] == "name"
    [listed] = [r for r in table_rows(panel.locator(".gpucloud-instances-table"))
                if "flow-1" in r.values()]
    assert listed["status"] == "active", listed
    assert re.fullmatch(r"in (29|30) min( \d+ s)? \(gateway\)", listed["autoDelete"]), listed
    choice = panel.locator(".gpucloud-instances-select option", has_text="flow-1").inner_text()
    panel.locator(".gpucloud-instances-select select").select_option(label=choice)
    panel.locator(".gpucloud-instance-details-button").click()
    details = panel.locator(".gpucloud-instance-details")
    details.filter(has_text="SSH key").wait_for()
    key = details.locator("tr", has_text="SSH key").locator("td").inner_text()
    assert key and key != "none", key
    assert wrapped(details, "th") == [], "a label wraps"
    spacing = details.locator("td").first.evaluate(
        "td => parseFloat(getComputedStyle(td).lineHeight) / parseFloat(getComputedStyle(td).fontSize)")
    assert spacing <= 1.6, f"details lines are {spacing:.1f} font sizes apart"
    shot(page, f"{theme}-06-panel", PANEL_ROOT)
    page.mouse.move(1300, 900)  # no hover colours
    assert low_contrast(page) == []  # the form, the panel and the sidebar with an instance

    # Delete from the sidebar, after its confirmation: sidebar, status bar and panel follow.
    row.locator(".gpucloud-Row-delete").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(state="visible")
    assert "flow-1" in dialog.inner_text() and "lost" in dialog.inner_text()
    shot(page, f"{theme}-07-delete-confirmation")
    dialog.locator("button.jp-mod-accept").click()
    row.wait_for(state="detached", timeout=30_000)
    page.wait_for_function("document.querySelector('#gpucloud-statusbar')"
                           ".textContent.trim() === '$0.00/h · 0 running'", timeout=10_000)
    panel.locator(".gpucloud-instances-table td", has_text="flow-1").first.wait_for(
        state="detached", timeout=30_000)

    # Chat: an image attached through the page, then six messages typed and sent with Enter.
    chat = page.locator(CHAT_ROOT)
    chat.scroll_into_view_if_needed()
    upload = chat.locator(".gpucloud-chat-upload-image")
    assert "Image (0)" in upload.inner_text()
    with page.expect_file_chooser() as chooser:
        upload.click()
    chooser.value.set_files(files=[{"name": "wide.png", "mimeType": "image/png",
                                    "buffer": picture()}])
    chat.locator(".gpucloud-chat-attachment img").wait_for(state="visible")
    page.wait_for_function("() => document.querySelector('.gpucloud-chat-upload-image')"
                           ".textContent.includes('Image (1)')", timeout=10_000)
    box = chat.locator("textarea.gpucloud-chat-textarea")
    prompts = ["What is in this picture?", "What is a GPU?", "Tell me about CUDA.",
               "Write a short poem about rented GPUs.", "Explain VRAM in three paragraphs.",
               "Thanks! Summarise our chat."]
    for number, prompt in enumerate(prompts, start=1):
        box.fill(prompt)
        box.press("Enter")
        wait_replies(page, number)
    assert "Image (0)" in upload.inner_text()  # sent: nothing attached any more
    page.wait_for_timeout(500)
    chat_reads_well(page)
    assert chat.locator(".gpucloud-chat-message img").count() >= 1  # the image is in its message
    shot(page, f"{theme}-08-chat", CHAT_ROOT)

    # Magics: a second instance, listed and billed as a person reads it, deleted by its name.
    for index in range(3, 7):
        run_cell(page, index)
    instances = output(page, 4)
    assert headers(instances)[0] == "name", headers(instances)
    [magic] = table_rows(instances)
    assert magic["name"] == "magic-box" and magic["status"] == "active", magic
    assert re.fullmatch(r"\$[\d.]+/h", magic["hourlyPrice"]), magic
    spend = output(page, 5)
    assert headers(spend)[0] == "name", headers(spend)
    spent = table_rows(spend)
    assert spent[-1]["name"].startswith("Total"), spent
    assert "magic-box" in {r["name"] for r in spent} and "flow-1" not in {r["name"] for r in spent}
    assert all(re.fullmatch(r"\$[\d.,]+", r["spend"]) for r in spent), spent
    deleted = output(page, 6).inner_text()
    assert "magic-box" in deleted and "not found" not in deleted, deleted
    page.wait_for_function("document.querySelector('#gpucloud-statusbar')"
                           ".textContent.trim() === '$0.00/h · 0 running'", timeout=30_000)
    assert wrapped(instances) == [] and wrapped(spend) == [], (wrapped(instances), wrapped(spend))
    text = output_text(page)
    assert text.count("gpucloud-nb: SANDBOX") == 1, text
    assert "Traceback" not in text and "Error" not in text, text
    for index, name in ((4, "09-magic-instances"), (5, "10-magic-spend"), (6, "11-magic-delete")):
        output(page, index).screenshot(path=str(SCREENSHOTS / f"flow-{theme}-{name}.png"))
    shot(page, f"{theme}-12-end")
    page.mouse.move(1300, 900)
    assert low_contrast(page) == []
