"""The lesson notebooks 02-07 run in JupyterLab, and their widgets work there when clicked.

Each test opens a fresh copy of one notebook, runs all its cells, checks what the lesson's
widget or output shows, and that no cell shows an error. Screenshots (the widget scrolled into
view) land in ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from .lab import output_text

pytestmark = pytest.mark.browser

WIDGET_TIMEOUT = 30_000  # ms, for a widget to render or a reply to arrive


def in_notebook(page: Page, selector: str) -> Locator:
    """``selector`` inside the notebook that is showing."""
    return page.locator(f".jp-NotebookPanel:not(.lm-mod-hidden) {selector}")


def show(locator: Locator) -> Locator:
    """Wait until ``locator`` is visible and scroll it into view (for the screenshot)."""
    locator.wait_for(state="visible", timeout=WIDGET_TIMEOUT)
    locator.scroll_into_view_if_needed()
    return locator


def test_offers_with_pandas(lab, run_all, cell_errors, screenshot) -> None:
    page = lab.open("02-offers-with-pandas.ipynb")
    run_all(page)
    assert cell_errors(page) == []
    # The matplotlib scatter plot and the styled price table rendered.
    expect(in_notebook(page, '.jp-OutputArea-output[data-mime-type="image/png"] img')).to_have_count(1)
    assert "$0." in output_text(page)

    browser = show(in_notebook(page, ".gpucloud-offers-browser").first)
    rows = browser.locator(".gpucloud-offers-table table tbody tr")
    expect(rows.first).to_be_visible(timeout=WIDGET_TIMEOUT)
    assert rows.count() > 3
    count = browser.locator(".gpucloud-offers-count")
    expect(count).to_have_text(re.compile(r"\d+ of \d+ offers"))
    shown, total = map(int, re.findall(r"\d+", count.inner_text())[:2])
    assert 0 < shown <= total
    screenshot(page, suffix="browser")


def test_launch_with_the_form(lab, run_all, cell_errors, screenshot) -> None:
    page = lab.open("03-launch-with-the-form.ipynb")
    run_all(page)
    assert cell_errors(page) == []
    text = output_text(page)
    assert "Refused: Launching this" in text  # the cost cap at work
    assert "lesson-3-timed is deleted; its timer was kept by the gateway" in text

    # Run All launched "lesson-3" from code; the form shows the result.
    form = in_notebook(page, ".gpucloud-launch-form").first
    result = form.locator(".gpucloud-launch-result")
    expect(result).to_contain_text("lesson-3 is active", timeout=WIDGET_TIMEOUT)
    ssh = form.locator(".gpucloud-launch-ssh textarea")  # the whole command, as it works
    expect(ssh).to_have_value(re.compile(r"^ssh .*-p \d+ \S+@127\.0\.0\.1$"))
    show(form)
    screenshot(page, suffix="after-run-all")

    # Now as a person would: type a name, click Launch, wait for it to be active.
    name = form.locator(".gpucloud-launch-name input")
    name.fill("clicked-in-lab")
    button = form.locator(".gpucloud-launch-button")
    expect(button).to_be_enabled(timeout=WIDGET_TIMEOUT)
    button.click()
    expect(result).to_contain_text("clicked-in-lab is active", timeout=WIDGET_TIMEOUT)
    expect(ssh).to_have_value(re.compile(r"^ssh .*-p \d+ \S+@127\.0\.0\.1$"))
    show(form.locator(".gpucloud-launch-button"))
    screenshot(page, suffix="clicked")

    panel = show(in_notebook(page, ".gpucloud-instances-panel").first)
    expect(panel).to_contain_text("clicked-in-lab", timeout=WIDGET_TIMEOUT)
    screenshot(page, suffix="panel")
    assert cell_errors(page) == []


def test_volumes_with_magics(lab, run_all, cell_errors, screenshot) -> None:
    page = lab.open("04-volumes-with-magics.ipynb")
    run_all(page)
    assert cell_errors(page) == []
    tables = in_notebook(page, '.jp-OutputArea-output[data-mime-type="text/html"] table')
    listed = tables.filter(has_text="course data")
    expect(listed.first).to_be_visible()
    assert listed.count() >= 2  # listed after creating it, and again after its instance is gone
    text = output_text(page)
    assert "Created volume course data" in text
    assert "keeps its data" in text
    assert "Deleted volume course data" in text
    show(listed.last)
    screenshot(page, suffix="volumes")


def test_chat_and_vision(lab, run_all, cell_errors, screenshot) -> None:
    page = lab.open("05-chat-and-vision.ipynb")
    run_all(page)
    assert cell_errors(page) == []
    chat = show(in_notebook(page, ".gpucloud-chat").first)
    replies = chat.locator(".gpucloud-chat-message-assistant")
    expect(replies).to_have_count(1, timeout=WIDGET_TIMEOUT)
    expect(replies.first).to_contain_text("red", timeout=WIDGET_TIMEOUT)  # it saw the image
    screenshot(page, suffix="from-code")

    # Type a message and click Send, as a person would.
    box = chat.locator(".gpucloud-chat-input textarea").first
    box.fill("What did I just show you?")
    chat.locator(".gpucloud-chat-send").click()
    expect(replies).to_have_count(2, timeout=WIDGET_TIMEOUT)
    expect(replies.nth(1)).to_contain_text("What did I just show you?", timeout=WIDGET_TIMEOUT)
    expect(chat.locator(".gpucloud-chat-streaming")).to_have_count(0, timeout=WIDGET_TIMEOUT)
    expect(chat.locator(".gpucloud-chat-error")).to_have_count(0)
    show(replies.nth(1))
    screenshot(page, suffix="typed")

    # Keys: Shift+Enter starts a new line, Enter sends.
    asked = chat.locator(".gpucloud-chat-message-user")
    box.click()
    box.press_sequentially("Two lines")
    box.press("Shift+Enter")
    box.press_sequentially("second line")
    expect(asked).to_have_count(2)  # Shift+Enter sent nothing
    box.press("Enter")
    expect(asked).to_have_count(3, timeout=WIDGET_TIMEOUT)
    expect(asked.nth(2)).to_contain_text("Two lines")
    expect(asked.nth(2)).to_contain_text("second line")
    expect(replies).to_have_count(3, timeout=WIDGET_TIMEOUT)
    expect(box).to_have_value("")
    assert cell_errors(page) == []


def test_transcribe_audio(lab, run_all, cell_errors, screenshot) -> None:
    page = lab.open("06-transcribe-audio.ipynb")
    run_all(page)
    assert cell_errors(page) == []
    show(in_notebook(page, ".jp-OutputArea-output audio").first)
    text = output_text(page)
    assert "hello" in text.lower()
    assert "Refused: notes.txt is not audio" in text
    assert "Refused: notes.wav is not audio" in text
    screenshot(page, suffix="player")


def test_serve_a_model_on_your_instance(lab, run_all, cell_errors, screenshot) -> None:
    page = lab.open("07-serve-a-model-on-your-instance.ipynb")
    run_all(page)
    assert cell_errors(page) == []
    text = output_text(page)
    assert "Copied" in text and "startup complete" in text  # put, then vllm serve over SSH
    assert "sandbox-vision-1" in text  # /v1/models through the forwarded port 8000
    chat = show(in_notebook(page, ".gpucloud-chat").first)
    replies = chat.locator(".gpucloud-chat-message-assistant")
    expect(replies).to_have_count(1, timeout=WIDGET_TIMEOUT)
    expect(replies.first).to_contain_text("red", timeout=WIDGET_TIMEOUT)  # it saw the image
    assert "model-server is deleted" in output_text(page)
    screenshot(page, suffix="chat")
