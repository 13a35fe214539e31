"""The four widgets as a student sees them in JupyterLab, in the Light and the Dark theme.

One Lab, one notebook, one kernel for the whole module (the machine is small): it renders
OffersBrowser, LaunchForm, InstancesPanel and ChatWidget against the sandbox (``connect()``),
chats six messages with an image through the page, then checks, in each theme, what a person
would see: bubbles as tall as their text, the image's shape, the transcript at its newest
message, no horizontal scrollbar, labels not cut, and WCAG AA contrast (4.5:1) for every visible
text of every widget. Screenshots go to ``test-artifacts/screenshots/widgets-*.png``.

Lab's kernels get this checkout on ``PYTHONPATH``, so the code under test is this tree's.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from PIL import Image, ImageDraw
from playwright.sync_api import Browser, Locator, Page

from gpucloud_nb.sandbox import service

from .lab import ARTIFACTS, REPO, SCREENSHOTS, Lab, LabServer, lab_session, wait_until_idle

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SETUP = """\
from gpucloud_nb import connect
from gpucloud_nb.widgets import ChatWidget, InstancesPanel, LaunchForm, OffersBrowser

cloud = connect(quiet=True)
offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
instance = cloud.instances.create(
    name="look-1", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
    region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
"""
OFFERS = "OffersBrowser(cloud)"
FORM = "LaunchForm(cloud, offer).fill(delete_after='30m')"
PANEL = "panel = InstancesPanel(cloud)\npanel.select(instance.id)\npanel"
CHAT = "chat = ChatWidget(cloud.sandbox_inference())\nchat"

ROOTS = {
    "offers": ".gpucloud-offers-browser",
    "form": ".gpucloud-launch-form",
    "panel": ".gpucloud-instances-panel",
    "chat": ".gpucloud-chat",
}

# Every visible text of the widget under `root`: its colour against the first opaque background
# behind it, both with their alpha (and the opacity of their ancestors) composited.
CONTRAST_JS = """(root) => {
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 1;
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  const rgba = (css) => {
    const m = css.match(/^color\\(srgb ([\\d.e-]+) ([\\d.e-]+) ([\\d.e-]+)(?: \\/ ([\\d.e-]+))?\\)$/);
    if (m) return [m[1] * 255, m[2] * 255, m[3] * 255, m[4] === undefined ? 1 : +m[4]];
    const n = css.match(/^rgba?\\(([\\d.]+),? ([\\d.]+),? ([\\d.]+)(?:[,/] ?([\\d.]+))?\\)$/);
    if (n) return [+n[1], +n[2], +n[3], n[4] === undefined ? 1 : +n[4]];
    ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = '#000'; ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
    const d = ctx.getImageData(0, 0, 1, 1).data;
    return [d[0], d[1], d[2], d[3] / 255];
  };
  const over = (top, bottom) => {
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat([1]);
  };
  const lum = (c) => {
    const [r, g, b] = c.slice(0, 3).map(v => { v /= 255;
      return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const opacity = (el) => { let o = 1;
    for (let e = el; e; e = e.parentElement) o *= +getComputedStyle(e).opacity; return o; };
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let bg = layers.length && layers[layers.length - 1][3] >= 1 ? layers.pop() : [255, 255, 255, 1];
    while (layers.length) bg = over(layers.pop(), bg);
    return bg;
  };
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && el.checkVisibility();
  };
  const results = [];
  for (const container of document.querySelectorAll(root)) {
    for (const el of [container, ...container.querySelectorAll('*')]) {
      if (['STYLE', 'SCRIPT', 'OPTION'].includes(el.tagName)) continue;
      const own = Array.from(el.childNodes).filter(n => n.nodeType === 3)
        .map(n => n.textContent).join('').trim();
      const field = ['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName)
        && el.type !== 'checkbox' && el.type !== 'file' ? (el.value || '').trim() : '';
      const text = own || field;
      if (!text || !visible(el)) continue;
      if (el.closest(':disabled, .mod-disabled')) continue;  // WCAG: inactive controls are exempt
      const bg = background(el);
      const fg0 = rgba(getComputedStyle(el).color);
      const fg = over([fg0[0], fg0[1], fg0[2], fg0[3] * opacity(el)], bg);
      const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
      results.push({ text: text.slice(0, 60), cls: el.className && String(el.className),
                     color: getComputedStyle(el).color, ratio: (a + 0.05) / (b + 0.05),
                     fg: fg.slice(0, 3).map(Math.round), bg: bg.slice(0, 3).map(Math.round) });
    }
  }
  return results;
}"""

BUBBLES_JS = """() => Array.from(document.querySelectorAll('.gpucloud-chat-message')).map(b => {
  const inner = [b, ...b.querySelectorAll('*')].filter(e => e.tagName !== 'PRE' && e.tagName !== 'CODE')
    .filter(e => e.scrollHeight > e.clientHeight + 1 && e.clientHeight > 0
                 && getComputedStyle(e).overflowY !== 'visible');
  const text = Array.from(b.querySelectorAll('.widget-html-content'));
  const line = text.length ? parseFloat(getComputedStyle(text[0]).lineHeight) || 20 : 20;
  const top = b.getBoundingClientRect().top, bottom = b.getBoundingClientRect().bottom;
  const clipped = text.filter(t => t.getBoundingClientRect().bottom > bottom + 1
                                  || t.getBoundingClientRect().top < top - 1).length;
  return { height: b.getBoundingClientRect().height, line, scrollers: inner.length, clipped,
           text: (b.textContent || '').trim().slice(0, 40) };
})"""


def picture() -> bytes:
    """A 320×160 PNG (2:1), so a squashed image shows."""
    image = Image.new("RGB", (320, 160), "red")
    ImageDraw.Draw(image).ellipse((120, 40, 200, 120), fill="blue")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def widgets_lab_server(tmp_path_factory: pytest.TempPathFactory,
                       chromium: Browser) -> Iterator[LabServer]:
    base = tmp_path_factory.mktemp("widgets-lab")
    server = LabServer(root=base / "root", home=base / "home",
                       log_path=ARTIFACTS / "lab-widgets.log",
                       env={"PYTHONPATH": str(REPO),
                            "GPUCLOUD_SANDBOX_HOME": str(base / "sandbox")})
    try:
        server.start()
        yield server
    finally:
        server.stop()
        service.stop(base / "sandbox")  # the kernel's connect() started it; it outlives kernels


@pytest.fixture
def widgets_lab(widgets_lab_server: LabServer, chromium: Browser,
                request: pytest.FixtureRequest) -> Iterator[Lab]:
    with lab_session(widgets_lab_server, chromium, request.node) as session:
        yield session


def shot(page: Page, name: str, part: Locator | None = None) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    (part or page).screenshot(path=str(path), **({} if part else {"full_page": True}))
    return path


def set_theme(page: Page, theme: str) -> None:
    page.evaluate("(theme) => window.jupyterapp.commands.execute('apputils:change-theme', {theme})",
                  theme)
    page.wait_for_function("(theme) => document.body.dataset.jpThemeName === theme", arg=theme)
    page.wait_for_timeout(800)


def run_cell(page: Page, index: int) -> None:
    """Run the notebook's cell ``index`` (Shift+Enter on it) and wait until the kernel is idle."""
    cell = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Shift+Enter")
    wait_until_idle(page, timeout=90)


def wait_replies(page: Page, count: int) -> None:
    page.wait_for_function(
        """(n) => document.querySelectorAll('.gpucloud-chat-message-assistant').length >= n
                 && !document.querySelector('.gpucloud-chat-streaming')""", arg=count,
        timeout=60_000)


def transcript(page: Page) -> dict[str, Any]:
    return page.evaluate("""() => { const t = document.querySelector('.gpucloud-chat-messages');
        return { top: t.scrollTop, height: t.scrollHeight, client: t.clientHeight }; }""")


def test_the_widgets_look_right_in_light_and_dark(widgets_lab: Lab) -> None:
    notebook = new_notebook(
        cells=[new_code_cell(source) for source in (SETUP, OFFERS, FORM, PANEL, CHAT)],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}})
    nbformat.write(notebook, widgets_lab.root / "look.ipynb")
    page = widgets_lab.open("look.ipynb")
    for index in range(5):
        run_cell(page, index)
    for root in ROOTS.values():
        page.locator(root).first.wait_for(state="visible", timeout=30_000)
    page.locator(".gpucloud-offers-table table").wait_for(state="visible")

    # Attach an image through the page's upload button: it counts the attachment.
    chat = page.locator(".gpucloud-chat")
    upload = chat.locator(".gpucloud-chat-upload-image")
    assert "Image (0)" in upload.inner_text()
    with page.expect_file_chooser() as chooser:
        upload.click()
    chooser.value.set_files(files=[{"name": "wide.png", "mimeType": "image/png",
                                    "buffer": picture()}])
    chat.locator(".gpucloud-chat-attachment img").wait_for(state="visible")  # the kernel has it
    page.wait_for_timeout(1500)  # and has answered the upload: the count is the kernel's
    assert "Image (1)" in upload.inner_text()

    # Six messages typed into the box and sent with Enter; the sandbox answers each.
    box = chat.locator("textarea.gpucloud-chat-textarea")
    prompts = ["What is in this picture?", "Tell me about GPUs, one word at a time.",
               "What is a GPU?", "Write a short poem about rented GPUs.",
               "Explain CUDA in three paragraphs.", "Thanks! Summarise our chat."]
    for number, prompt in enumerate(prompts, start=1):
        box.fill(prompt)
        box.press("Enter")
        if number == 5:  # the reader scrolls up while a reply streams: the transcript stays put
            page.wait_for_selector(".gpucloud-chat-streaming", timeout=20_000)
            page.evaluate("() => { const t = document.querySelector('.gpucloud-chat-messages');"
                          " t.scrollTop = 0; t.dispatchEvent(new Event('scroll')); }")
            page.wait_for_timeout(600)
            still = transcript(page)
            wait_replies(page, number)
            assert transcript(page)["top"] <= still["top"] + 1, "it scrolled back while reading"
            page.evaluate("() => { const t = document.querySelector('.gpucloud-chat-messages');"
                          " t.scrollTop = t.scrollHeight; }")
            page.wait_for_timeout(300)
        if number == 6:  # at the bottom, the transcript follows a reply while it streams
            page.wait_for_selector(".gpucloud-chat-streaming", timeout=20_000)
            page.wait_for_timeout(500)
            where = transcript(page)
            assert where["height"] - where["top"] - where["client"] <= 30, where
        wait_replies(page, number)
    assert "Image (0)" in upload.inner_text()  # sent: nothing attached any more
    page.wait_for_timeout(500)

    for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        set_theme(page, theme)
        shot(page, f"widgets-{name}")
        for key, root in ROOTS.items():
            shot(page, f"widgets-{key}-{name}", page.locator(root).first)

        # The transcript scrolls as a whole and stays at its newest message.
        where = transcript(page)
        assert where["height"] > where["client"], "six messages should overflow the transcript"
        assert where["height"] - where["top"] - where["client"] <= 2, where

        # Bubbles take their content's height: no inner scrollbars, no clipped text.
        bubbles = page.evaluate(BUBBLES_JS)
        assert len(bubbles) >= 12
        for bubble in bubbles:
            assert bubble["scrollers"] == 0, bubble
            assert bubble["clipped"] == 0, bubble
            assert bubble["height"] > bubble["line"] + 8, bubble

        # The image keeps its shape (2:1), in the message and nowhere squashed.
        shapes = page.evaluate("""() => Array.from(document.querySelectorAll(
            '.gpucloud-chat-message img')).map(i => ({ w: i.getBoundingClientRect().width,
            h: i.getBoundingClientRect().height, nw: i.naturalWidth, nh: i.naturalHeight }))""")
        assert shapes, "the sent image is shown in its message"
        for shape in shapes:
            assert shape["h"] > 0 and abs(shape["w"] / shape["h"] - shape["nw"] / shape["nh"]) < 0.05, shape

        # No horizontal scrollbar under any widget, nor in the notebook, at 1400 px.
        wide = page.evaluate("""(roots) => roots.flatMap(r => Array.from(document.querySelectorAll(
            r + ', ' + r + ' *'))).filter(e => e.scrollWidth > e.clientWidth + 1
            && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)
            && !e.closest('pre') && !e.closest('.gpucloud-offers-table'))
            .map(e => e.className + ' ' + e.scrollWidth + '>' + e.clientWidth)""",
                             [ROOTS["chat"], ROOTS["form"], ROOTS["panel"]])
        sticking_out = page.evaluate("""(roots) => roots.flatMap(r => {
            const root = document.querySelector(r), right = root.getBoundingClientRect().right;
            return Array.from(root.querySelectorAll('*')).filter(e => !e.closest('pre')
                && e.getBoundingClientRect().right > right + 1 && e.checkVisibility())
              .map(e => e.tagName + '.' + e.className + ' ' + (e.getBoundingClientRect().right - right));
            })""", [ROOTS["chat"], ROOTS["form"], ROOTS["panel"]])
        assert wide == [], sticking_out
        notebook_width = page.evaluate("""() => { const n = document.querySelector(
            '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
            return n ? n.scrollWidth - n.clientWidth : 0; }""")
        assert notebook_width <= 1

        # The offers table shows region and availability without scrolling sideways.
        columns = page.evaluate("""() => { const t = document.querySelector('.gpucloud-offers-table');
            const right = t.getBoundingClientRect().right;
            return Array.from(t.querySelectorAll('thead th')).map(h => ({ name: h.textContent.trim(),
              shown: h.getBoundingClientRect().right <= right + 1 })); }""")
        shown = {c["name"] for c in columns if c["shown"]}
        assert {"region", "available", "hourlyPrice", "gpuName"} <= shown, columns

        # Labels are not cut: the panel's auto-delete button, Max tokens' "0 = no limit".
        for selector in (".gpucloud-auto-delete-set", ".gpucloud-auto-delete-after .widget-label",
                         ".gpucloud-chat-max-tokens .widget-label", ".gpucloud-chat-upload-image"):
            cut = page.evaluate("""(s) => { const e = document.querySelector(s);
                return e && { text: e.textContent, scroll: e.scrollWidth, client: e.clientWidth }; }""",
                                selector)
            assert cut and cut["scroll"] <= cut["client"], (selector, cut)
        assert "Set auto-delete" in page.locator(".gpucloud-auto-delete-set").inner_text()
        assert "0 = no limit" in page.locator(".gpucloud-chat-max-tokens").inner_text()
        assert page.locator(".gpucloud-launch-name input").get_attribute("placeholder") == "e.g. train-1"

        # The form says who keeps the auto-delete timer (the personal gateway in front).
        assert "by the gateway, even if this kernel stops" in page.locator(
            ".gpucloud-launch-form").inner_text()

        # WCAG AA: every visible text of every widget at 4.5:1 or more.
        for key, root in ROOTS.items():
            texts = page.evaluate(CONTRAST_JS, root)
            assert len(texts) > 5, (key, texts)
            poor = [t for t in texts if t["ratio"] < 4.5]
            assert poor == [], (name, key, poor)
        print(f"{name}: {len(bubbles)} bubbles, transcript {where}, checked contrast")


def test_the_offers_table_shows_every_header_whole_beside_the_file_browser(widgets_lab: Lab) -> None:
    """Issue #35: at 1400 px with the file browser open the table ended in "pricePerGpuHo"."""
    notebook = new_notebook(
        cells=[new_code_cell("from gpucloud_nb import connect\n"
                             "from gpucloud_nb.widgets import OffersBrowser\n"
                             "OffersBrowser(connect(quiet=True))")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}})
    nbformat.write(notebook, widgets_lab.root / "offers.ipynb")
    page = widgets_lab.open("offers.ipynb")
    run_cell(page, 0)
    page.locator(".gpucloud-offers-table table").wait_for(state="visible", timeout=60_000)
    assert page.locator(".jp-FileBrowser").is_visible()
    headers = page.evaluate("""() => { const t = document.querySelector('.gpucloud-offers-table');
        const right = t.getBoundingClientRect().left + t.clientWidth;
        return Array.from(t.querySelectorAll('thead th')).map(h => ({ name: h.textContent.trim(),
          right: h.getBoundingClientRect().right, edge: right,
          whole: h.scrollWidth <= h.clientWidth })); }""")
    shot(page, "widgets-offers-beside-file-browser")
    assert headers and all(h["whole"] and h["right"] <= h["edge"] + 1 for h in headers), headers
    assert headers[-1]["name"] == "instanceId"
