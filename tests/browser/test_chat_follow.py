"""The chat transcript's follower (``widgets/_chat_follow.py``'s front-end code) in Chromium,
without Lab: a transcript that grows between the follower's scroll and the browser's scroll
event (an image laid out, a reply's first words) must still be followed (issue #35: after a turn
with an image, the reply and the next turns stayed hidden)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page

from gpucloud_nb.widgets._chat_follow import FollowBottom

pytestmark = pytest.mark.browser

PAGE = """<div class="gpucloud-chat"><div id="view"></div>
<div class="gpucloud-chat-messages" style="height:200px;overflow-y:auto"></div></div>"""

SETUP = """async (esm) => {
  const module = await import('data:text/javascript,' + encodeURIComponent(esm));
  const box = document.querySelector('.gpucloud-chat-messages');
  window.message = (px) => { const m = document.createElement('div');
    m.style.height = px + 'px'; box.append(m); return m; };
  for (let i = 0; i < 5; i++) message(100);
  module.default.render({ el: document.getElementById('view') });
  window.frames2 = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  await frames2();
}"""

WHERE = """() => { const b = document.querySelector('.gpucloud-chat-messages');
  return b.scrollHeight - b.scrollTop - b.clientHeight; }"""


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    context = chromium.new_context()
    page = context.new_page()
    page.set_content(PAGE)
    page.evaluate(SETUP, FollowBottom()._esm)
    yield page
    context.close()


def test_it_follows_new_messages(page: Page) -> None:
    assert page.evaluate(WHERE) <= 1
    page.evaluate("async () => { message(150); await frames2(); }")
    assert page.evaluate(WHERE) <= 1


def test_it_keeps_following_when_a_message_grows_before_the_scroll_event(page: Page) -> None:
    # The image message arrives (followed at once), then its image is laid out before the
    # browser dispatches the scroll event of that follow.
    page.evaluate("""async () => { const m = message(20); await Promise.resolve();
        m.style.height = '400px'; await frames2(); }""")
    for _ in range(8):  # the reply and the next turns
        page.evaluate("async () => { message(120); await frames2(); }")
        assert page.evaluate(WHERE) <= 1


def test_it_stops_while_the_reader_scrolls_up_and_resumes_at_the_bottom(page: Page) -> None:
    page.evaluate("""async () => { const b = document.querySelector('.gpucloud-chat-messages');
        b.scrollTop = 0; await frames2(); message(120); await frames2(); }""")
    assert page.evaluate("() => document.querySelector('.gpucloud-chat-messages').scrollTop") == 0
    page.evaluate("""async () => { const b = document.querySelector('.gpucloud-chat-messages');
        b.scrollTop = b.scrollHeight; await frames2(); message(120); await frames2(); }""")
    assert page.evaluate(WHERE) <= 1
