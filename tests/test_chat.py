"""ChatWidget, headless: against the sandbox over real HTTP, and a fake OpenAI-style server.

No browser: the panel's widgets are driven from Python, and what they would send to a browser is
read from their state or caught at the comm layer (``benchmarks.bench_chat.recording``).
"""

from __future__ import annotations

import asyncio
import datetime
import html
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helpers
import httpx
import ipywidgets as widgets
import pytest
from PIL import Image

from benchmarks.bench_chat import FakeChatServer, markdown_reply, recording
from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.widgets._chat_input import ChatInput
from gpucloud_nb.widgets._chat_turn import LoopThread
from gpucloud_nb.widgets._layout import iter_widgets
from gpucloud_nb.widgets.chat import CSS_CLASSES, UPLOAD_HINT, ChatTurn, ChatWidget

WAIT = 30
NOW = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)


# -- helpers --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """This module's sandbox streams replies at 500 tokens/s, to keep the tests quick; the chat
    endpoint keeps no state between requests, so the module's tests share it."""
    with Sandbox(stream_tokens_per_second=500) as sandbox:
        yield sandbox


@pytest.fixture
def client(sandbox: Sandbox) -> Iterator[InferenceClient]:
    with InferenceClient(sandbox.inference_url, sandbox.inference_secret) as inference:
        yield inference


@pytest.fixture
def chat_factory() -> Iterator[Callable[..., ChatWidget]]:
    made: list[ChatWidget] = []

    def make(*args: Any, **kwargs: Any) -> ChatWidget:
        chat = ChatWidget(*args, **kwargs)
        made.append(chat)
        return chat

    yield make
    for chat in made:
        chat.close()


@pytest.fixture
def fake_server() -> Iterator[Callable[..., FakeChatServer]]:
    started: list[FakeChatServer] = []

    def start(*args: Any, **kwargs: Any) -> FakeChatServer:
        server = FakeChatServer(*args, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


class CountingTransport(httpx.AsyncHTTPTransport):
    """Counts every request the async client sends."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        return await super().handle_async_request(request)


def png(colour: tuple[int, int, int] = (255, 0, 0), size: tuple[int, int] = (64, 64)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def html_text(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", value))


def assistant_boxes(chat: ChatWidget) -> list[widgets.Widget]:
    return [w for w in chat.message_widgets if CSS_CLASSES["assistant"] in w._dom_classes]


def shown_reply(box: widgets.Widget) -> str:
    """The reply's text as the browser would show it (block HTML joined, tags removed)."""
    parts = [w.value for w in iter_widgets(box) if isinstance(w, widgets.HTML)]
    return html_text("".join(parts))


def all_state(chat: ChatWidget) -> str:
    """Every synced trait of every widget in the panel, as JSON (bytes decoded loosely)."""
    states = []
    for widget in iter_widgets(chat):
        state = widget.get_state()
        states.append(json.dumps(state, default=lambda b: bytes(b).decode("latin-1")))
    return "\n".join(states)



def wait_for(condition: Callable[[], bool], timeout: float = WAIT) -> None:
    helpers.wait_for(condition, timeout)


# -- the panel ------------------------------------------------------------------------------


def test_panel_parts_and_css_classes(client: InferenceClient,
                                     chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client, system_prompt="Be brief.", temperature=0.3, max_tokens=50)
    assert isinstance(chat, widgets.VBox)
    assert CSS_CLASSES["root"] in chat._dom_classes
    classes = {c for w in iter_widgets(chat) for c in getattr(w, "_dom_classes", ())}
    for name in ("model", "temperature", "max_tokens", "system", "clear", "messages", "input",
                 "send", "stop", "attachments", "upload_image", "upload_audio",
                 "audio_send", "upload_hint", "status", "style"):
        assert CSS_CLASSES[name] in classes, name
    assert chat.model == "sandbox-vision-1"
    # Only chat models are offered: the endpoint's speech model answers transcriptions only.
    assert "sandbox-speech-1" in client.models()
    assert tuple(chat._model.options) == ("sandbox-vision-1",)
    assert (chat.system_prompt, chat.temperature, chat.max_tokens) == ("Be brief.", 0.3, 50)
    assert chat._image_upload.accept == "image/*" and chat._image_upload.multiple
    assert chat._audio_upload.accept == "audio/*"
    assert "10 MB" in chat._hint.value and "10 MB" in UPLOAD_HINT
    assert "10 MB" in (ChatWidget.__doc__ or "")
    assert chat._stop_button.disabled


def test_url_and_secret_arguments(sandbox: Sandbox, chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(sandbox.inference_url, secret=sandbox.inference_secret)
    assert chat.model == "sandbox-vision-1"
    assert sandbox.inference_secret not in repr(chat)


# -- streaming ------------------------------------------------------------------------------


def test_streamed_reply_arrives_whole(client: InferenceClient,
                                      chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    started = time.monotonic()
    turn = chat.send("Hello there, what is 6*7?")
    assert time.monotonic() - started < 1.0  # send() returns while the reply streams
    assert isinstance(turn, ChatTurn)
    assert turn.wait(WAIT) is turn
    assert turn.status == "done" and turn.error is None
    expected = client.chat([{"role": "user", "content": "Hello there, what is 6*7?"}],
                           model="sandbox-vision-1", temperature=0.7).text
    assert turn.text == expected
    assert chat.history == [{"role": "user", "content": "Hello there, what is 6*7?"},
                            {"role": "assistant", "content": expected}]
    box = assistant_boxes(chat)[-1]
    assert CSS_CLASSES["streaming"] not in box._dom_classes
    assert " ".join(shown_reply(box).split()) == " ".join(expected.split())
    assert chat._stop_button.disabled


def test_updates_are_throttled_and_finished_messages_frozen(
        fake_server: Callable[..., FakeChatServer], chat_factory: Callable[..., ChatWidget]) -> None:
    tokens = markdown_reply(400, seed=3)
    server = fake_server(tokens, tokens_per_second=400)
    chat = chat_factory(InferenceClient(server.url, server.secret))
    with recording() as recorder:
        first = chat.send("first").wait(WAIT)
        first_ids = {w.model_id for w in iter_widgets(assistant_boxes(chat)[0])}
        mark = time.monotonic()
        second = chat.send("second").wait(WAIT)
        end = time.monotonic()
    assert first.status == second.status == "done"
    assert first.text == second.text == "".join(tokens)
    # the finished first reply is never touched again
    assert not [m for m in recorder.since(mark) if m[2] in first_ids and m[1] == "comm_msg"]
    # the second reply: bounded updates, and each block frozen once the next one opens
    box = assistant_boxes(chat)[1]
    blocks = [w for w in iter_widgets(box) if isinstance(w, widgets.HTML)]
    ids = {w.model_id for w in blocks}
    updates = recorder.value_updates(ids, mark, end)
    seconds = end - mark
    assert seconds > 0.8  # 400 tokens at 400/s
    assert len(updates) / seconds <= 12
    assert len(updates) >= 3  # it did stream
    opened = {m[2]: m[0] for m in recorder.since(mark) if m[1] == "comm_open"}
    order = sorted((opened.get(w.model_id, mark), w.model_id) for w in blocks)
    for (_, block), (next_open, _) in itertools.pairwise(order):
        assert all(m[0] <= next_open for m in updates if m[2] == block)
    assert " ".join(shown_reply(box).split()) != ""
    # an observer on the streaming widgets sees the same bound
    assert recorder.value_updates(ids) == updates


def test_observer_counts_value_changes_while_streaming(
        fake_server: Callable[..., FakeChatServer], chat_factory: Callable[..., ChatWidget]) -> None:
    server = fake_server(markdown_reply(400, seed=5), tokens_per_second=400)
    chat = chat_factory(InferenceClient(server.url, server.secret))
    changes: list[float] = []
    watched: set[int] = set()

    def watch(widget: widgets.Widget) -> None:
        for child in iter_widgets(widget):
            if id(child) in watched:
                continue
            watched.add(id(child))
            if isinstance(child, widgets.HTML):
                child.observe(lambda change: changes.append(time.monotonic()), names="value")
            if isinstance(child, widgets.Box):
                child.observe(lambda change: [watch(c) for c in change["new"]], names="children")

    chat._messages.observe(lambda change: [watch(c) for c in change["new"]], names="children")
    start = time.monotonic()
    turn = chat.send("go").wait(WAIT)
    seconds = time.monotonic() - start
    assert turn.status == "done"
    assert 3 <= len(changes) <= 12 * seconds + 1


def test_stop_keeps_what_arrived(sandbox_factory: Callable[..., Sandbox],
                                 chat_factory: Callable[..., ChatWidget]) -> None:
    sandbox = sandbox_factory(stream_tokens_per_second=25)
    chat = chat_factory(InferenceClient(sandbox.inference_url, sandbox.inference_secret))
    turn = chat.send("Tell me about the sandbox")
    wait_for(lambda: len(turn.text.split()) >= 3)
    assert not chat._stop_button.disabled
    chat._stop_button.click()
    turn.wait(WAIT)
    assert turn.status == "stopped" and turn.stopped
    kept = turn.text
    assert len(kept.split()) >= 3
    assert chat.history[-1] == {"role": "assistant", "content": kept}
    box = assistant_boxes(chat)[-1]
    shown = shown_reply(box)
    assert shown.rstrip().endswith("[stopped]")
    assert " ".join(kept.split()) in " ".join(shown.split())
    assert CSS_CLASSES["streaming"] not in box._dom_classes
    assert "[stopped]" in chat.to_markdown()
    assert chat._stop_button.disabled
    time.sleep(0.3)
    assert turn.text == kept  # nothing more arrives after Stop


def test_stop_before_any_reply_leaves_no_history(sandbox_factory: Callable[..., Sandbox],
                                                 chat_factory: Callable[..., ChatWidget]) -> None:
    sandbox = sandbox_factory(stream_tokens_per_second=2)
    chat = chat_factory(InferenceClient(sandbox.inference_url, sandbox.inference_secret))
    turn = chat.send("Hello")
    time.sleep(0.2)
    turn.stop()
    turn.wait(WAIT)
    assert turn.status == "stopped" and turn.text == ""
    assert chat.history == []


def test_clear_while_streaming_leaves_nothing_behind(sandbox_factory: Callable[..., Sandbox],
                                                     chat_factory: Callable[..., ChatWidget]) -> None:
    sandbox = sandbox_factory(stream_tokens_per_second=25)
    chat = chat_factory(InferenceClient(sandbox.inference_url, sandbox.inference_secret))
    turn = chat.send("Hello")
    wait_for(lambda: len(turn.text.split()) >= 2)
    chat.clear()
    turn.wait(WAIT)
    assert turn.status == "stopped"
    time.sleep(0.2)
    assert chat.history == [] and chat.message_widgets == () and chat.errors == []
    assert not chat.status.is_error
    chat.max_tokens = 3
    assert chat.send("Again").wait(WAIT).status == "done"
    assert [m["role"] for m in chat.history] == ["user", "assistant"]


def test_sends_queue_one_after_another(client: InferenceClient,
                                       chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    first, second = chat.send("one"), chat.send("two")
    assert second.wait(WAIT).status == "done" and first.done()
    roles = [m["role"] for m in chat.history]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert "2 from you and 1 from the assistant" in chat.history[-1]["content"]


def client_connections(port: int) -> list[int]:
    """Local ports of this process's open TCP connections to ``port`` on loopback."""
    import psutil

    return [c.laddr.port for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED]


def test_one_client_serves_every_turn_and_closes_with_the_panel(
        fake_server: Callable[..., FakeChatServer]) -> None:
    server = fake_server(["Hi", " there"])
    chat = ChatWidget(server.url, secret=server.secret)
    try:
        for text in ("one", "two", "three"):
            assert chat.send(text).wait(WAIT).status == "done"
        # Every turn came over one kept-alive connection, not a new client per request.
        assert server.requests == 3 and len(set(server.ports)) == 1
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        assert server.ports[0] in client_connections(port)
    finally:
        chat.close()
    wait_for(lambda: client_connections(port) == [])  # the panel's clients closed with it


def test_every_turn_against_the_sandbox_goes_over_one_connection(
        sandbox: Sandbox, chat_factory: Callable[..., ChatWidget]) -> None:
    """#35 said the panel opened a new async client for every turn. A relay in front of the
    sandbox's endpoint counts the TCP connections the panel opens: the model list takes the
    sync client's, and every turn after it goes over the one async client's connection."""
    from urllib.parse import urlsplit, urlunsplit

    from tests.test_streaming import CountingRelay

    parts = urlsplit(sandbox.inference_url)
    relay = CountingRelay((parts.hostname or "127.0.0.1", parts.port or 80))
    try:
        url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{relay.port}"))
        chat = chat_factory(url, secret=sandbox.inference_secret)
        listing = relay.accepted  # the sync client, for the model picker
        assert listing >= 1
        for text in ("one", "two", "three", "four"):
            assert chat.send(text).wait(WAIT).status == "done"
        assert relay.accepted == listing + 1
    finally:
        relay.close()


def test_await_on_a_running_loop(client: InferenceClient) -> None:
    async def main() -> ChatTurn:
        chat = ChatWidget(client)
        try:
            turn = chat.send("Hello from a loop")
            with pytest.raises(RuntimeError, match="await"):
                turn.wait(0.01)
            return await turn
        finally:
            chat.close()

    turn = asyncio.run(main())
    assert turn.status == "done" and "Hello from a loop" in turn.text


# -- input: Enter, Send, multi-line ---------------------------------------------------------


def test_enter_in_the_text_box_sends(client: InferenceClient,
                                     chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    chat._input.value = "Sent with Enter"
    # what the box's view sends when Enter (without Shift) is pressed
    chat._input._handle_msg({"content": {"data": {"method": "custom", "content": {"event": "submit"}}},
                             "buffers": []})
    turn = chat.last_turn
    assert turn is not None
    turn.wait(WAIT)
    assert chat._input.value == ""
    assert chat.history[0] == {"role": "user", "content": "Sent with Enter"}


def submit(chat: ChatWidget, text: str) -> None:
    """What the box's view sends on Enter: the text, its box already emptied."""
    chat._input._handle_msg({"content": {"data": {"method": "custom", "content": {
        "event": "submit", "value": text}}}, "buffers": []})


def test_enter_sends_the_text_it_carries_not_the_kernels_older_copy(
        client: InferenceClient, chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    # A busy kernel: ipywidgets held back the last keystrokes' update, the submit came first.
    chat._input.value = "Two lines\nsecon"
    submit(chat, "Two lines\nsecond line")
    chat.last_turn.wait(WAIT)
    assert chat.history[0] == {"role": "user", "content": "Two lines\nsecond line"}
    assert chat._input.value == ""


def test_a_refused_enter_gives_the_text_back_to_the_box(
        client: InferenceClient, chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    to_view: list[object] = []
    chat._input.send = to_view.append  # type: ignore[method-assign]  # what reaches the view
    submit(chat, "   ")
    assert chat.last_turn is None or chat.last_turn.status == "refused"
    assert to_view == [{"do": "restore", "value": "   "}] and chat.history == []


def test_several_lines_and_the_send_button(client: InferenceClient,
                                           chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    assert isinstance(chat._input, ChatInput) and chat._input in chat._input_row.children
    chat._input.value = "first line\nsecond line"  # Shift+Enter in the browser adds the newline
    chat._send_button.click()
    chat.last_turn.wait(WAIT)
    assert chat.history[0]["content"] == "first line\nsecond line"
    assert chat.input_text == ""
    chat._send_button.click()  # nothing typed: nothing sent
    assert chat.last_turn.status == "refused" or len(chat.history) == 2


# -- images ---------------------------------------------------------------------------------


def test_image_is_described_and_exported_without_base64(
        client: InferenceClient, chat_factory: Callable[..., ChatWidget], tmp_path: Path) -> None:
    chat = chat_factory(client)
    path = tmp_path / "red.png"
    path.write_bytes(png())
    assert chat.attach(path)
    assert chat.attachments == ["64×64 PNG"]
    thumbs = [w for w in iter_widgets(chat._attachments) if isinstance(w, widgets.Image)]
    assert len(thumbs) == 1
    with Image.open(io.BytesIO(thumbs[0].value)) as thumb:
        assert max(thumb.size) <= 96 and thumb.format in ("PNG", "JPEG")
    turn = chat.send("What colour is this image?").wait(WAIT)
    assert turn.status == "done"
    assert "PNG" in turn.text and "red" in turn.text.lower()
    user = chat.history[0]
    assert user["content"][0] == {"type": "text", "text": "What colour is this image?"}
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert chat.attachments == []
    exported = chat.to_markdown()
    assert "[image: 64×64 PNG]" in exported
    assert "base64" not in exported
    assert "## User" in exported and "## Assistant" in exported


def test_images_from_code_bytes_and_pil(client: InferenceClient,
                                        chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    blue = Image.new("RGB", (32, 16), (0, 0, 255))
    turn = chat.send("Two images", images=[png((255, 0, 0), (20, 20)), blue]).wait(WAIT)
    assert turn.status == "done"
    assert "Image 2" in turn.text and "blue" in turn.text.lower()


def test_an_image_is_checked_once_however_many_turns_send_it(
        fake_server: Callable[..., FakeChatServer], chat_factory: Callable[..., ChatWidget],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server checks nothing (the sandbox, in this process, would check it too)."""
    from gpucloud_nb.media import images

    checks: list[int] = []
    check = images._check_image_bytes

    def counted(data: bytes, *args: Any, **kwargs: Any) -> Any:
        checks.append(len(data))
        return check(data, *args, **kwargs)

    monkeypatch.setattr(images, "_check_image_bytes", counted)
    server = fake_server(["Red."])
    chat = chat_factory(server.url, secret=server.secret)
    assert chat.send("What colour is this image?", images=[png()]).wait(WAIT).status == "done"
    assert chat.send("And now?").wait(WAIT).status == "done"  # the history sends it again
    sent = [body["messages"][0]["content"][1]["image_url"]["url"] for body in server.bodies]
    assert len(sent) == 2 and sent[0] == sent[1] and sent[0].startswith("data:image/png;base64,")
    assert checks == [len(png())]


def test_upload_attaches_checked_images(client: InferenceClient,
                                        chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    chat._image_upload.value = ({"name": "red.png", "type": "image/png", "size": 100,
                                 "content": memoryview(png()), "last_modified": NOW},)
    assert chat.attachments == ["64×64 PNG"]
    # The button reads "Image (n)" for the n entries of its value: one per waiting attachment.
    assert len(chat._image_upload.value) == 1
    assert not any(len(item["content"]) for item in chat._image_upload.value)  # bytes stay here
    chat._image_upload.value = ({"name": "notes.png", "type": "image/png", "size": 5,
                                 "content": memoryview(b"hello, not an image"), "last_modified": NOW},)
    assert chat.attachments == ["64×64 PNG"]
    assert chat.status.is_error and "notes.png" in chat.status.text
    assert len(chat._image_upload.value) == 1
    chat.attach(png((0, 0, 255)))
    assert len(chat._image_upload.value) == 2
    chat.clear_attachments()
    assert chat.attachments == [] and chat._image_upload.value == ()


def test_the_upload_button_counts_until_the_images_are_sent(
        client: InferenceClient, chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client)
    chat._image_upload.value = tuple(
        {"name": f"{n}.png", "type": "image/png", "size": 100, "content": memoryview(png()),
         "last_modified": NOW} for n in range(2))
    assert len(chat._image_upload.value) == 2 and len(chat.attachments) == 2
    turn = chat.send("What is in these?").wait(WAIT)
    assert turn.status == "done" and "Image 2" in turn.text
    assert chat._image_upload.value == () and chat.attachments == []


def test_the_style_sheet_uses_theme_colours_and_lets_bubbles_grow() -> None:
    from gpucloud_nb.widgets._chat_style import STYLE_SHEET

    assert not re.search(r"#[0-9a-fA-F]{3,6}\b|rgb\(", STYLE_SHEET)
    assert "opacity" not in STYLE_SHEET  # dimmed text is a theme colour, not a lighter blend
    rules = dict(re.findall(r"([^{}]+)\{([^}]*)\}", STYLE_SHEET.replace("\n", "")))
    assert "flex:none" in rules[".gpucloud-chat-message"]
    assert "overflow:visible" in rules[".gpucloud-chat-message"]
    assert "overflow-y:auto" in rules[".gpucloud-chat-messages"]


def test_max_tokens_says_zero_is_no_limit_and_the_transcript_follows(
        client: InferenceClient, chat_factory: Callable[..., ChatWidget]) -> None:
    from gpucloud_nb.widgets._chat_follow import FollowBottom

    chat = chat_factory(client)
    assert "0 = no limit" in chat._max_tokens.description
    assert sum(isinstance(w, FollowBottom) for w in iter_widgets(chat)) == 1


def test_refused_images_send_nothing(sandbox: Sandbox, client: InferenceClient,
                                     chat_factory: Callable[..., ChatWidget], tmp_path: Path) -> None:
    transport = CountingTransport()
    async_client = AsyncInferenceClient(sandbox.inference_url, sandbox.inference_secret,
                                        transport=transport)
    chat = chat_factory(client, async_client=async_client)
    text_file = tmp_path / "notes.png"
    text_file.write_text("this is text, not a picture\n")
    jpeg = io.BytesIO()
    Image.new("RGB", (200, 200), (0, 128, 0)).save(jpeg, format="JPEG")
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(jpeg.getvalue()[: len(jpeg.getvalue()) // 2])
    for bad in (text_file, truncated):
        assert chat.attach(bad) is False
        assert chat.status.is_error
        sentence = chat.status.text
        assert bad.name in sentence and sentence.endswith(".") and "\n" not in sentence
        turn = chat.send("Describe it", images=[bad])
        assert turn.status == "refused" and turn.done() and turn.error == sentence
    time.sleep(0.2)
    assert transport.requests == []
    assert chat.history == [] and chat.attachments == [] and chat.message_widgets == ()


# -- untrusted output -----------------------------------------------------------------------


EVIL = ("Here you go <script>alert('x')</script> and <img src=x onerror=alert(1)> and "
        "[click me](javascript:alert(document.cookie)) and [fine](https://example.com).\n\n"
        "```html\n<script>still text</script>\n```\n")


def test_malicious_reply_renders_inert(fake_server: Callable[..., FakeChatServer],
                                       chat_factory: Callable[..., ChatWidget]) -> None:
    tokens = re.findall(r"\s*\S+", EVIL)
    server = fake_server(tokens, tokens_per_second=300)
    chat = chat_factory(InferenceClient(server.url, server.secret))
    turn = chat.send("Say something nasty").wait(WAIT)
    assert turn.status == "done" and turn.text == "".join(tokens)
    shown = "".join(w.value for w in iter_widgets(assistant_boxes(chat)[0]) if isinstance(w, widgets.HTML))
    lowered = shown.lower()
    assert "<script" not in lowered and "<img" not in lowered
    assert not re.search(r"<[^>]*\son\w+\s*=", lowered)
    for href in re.findall(r'<a\s[^>]*href="([^"]*)"', shown):
        assert href.startswith("https://")
    assert "&lt;script&gt;alert('x')&lt;/script&gt;" in shown or "&lt;script&gt;alert(&#x27;x&#x27;)" in shown
    assert "<pre><code>&lt;script&gt;still text&lt;/script&gt;" in shown
    assert 'href="https://example.com"' in shown


# -- errors ---------------------------------------------------------------------------------


def test_wrong_secret_shows_an_error_line(sandbox: Sandbox,
                                          chat_factory: Callable[..., ChatWidget]) -> None:
    wrong = "sk-wrong-secret-0123456789abcdef"
    chat = chat_factory(InferenceClient(sandbox.inference_url, wrong))
    assert chat.errors  # the model list could not be read
    turn = chat.send("Hello").wait(WAIT)
    assert turn.status == "error"
    assert "401" in turn.error or "secret" in turn.error.lower() or "key" in turn.error.lower()
    lines = [w for w in chat.message_widgets if CSS_CLASSES["error"] in w._dom_classes]
    assert len(lines) == 2
    assert "Traceback" not in turn.error and wrong not in turn.error
    assert chat.history == []
    assert chat.input_text == "Hello"  # the failed message comes back to the text box
    for text in (all_state(chat), repr(chat), chat.to_markdown(), *chat.errors):
        assert wrong not in text


def test_unknown_model_shows_an_error_line(client: InferenceClient,
                                           chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client, model="no-such-model")
    assert chat.model == "no-such-model"
    turn = chat.send("Hello").wait(WAIT)
    assert turn.status == "error"
    assert "no-such-model" in turn.error and "not found" in turn.error.lower()
    assert chat.errors == [turn.error]


def test_rate_limit_says_when_to_try_again(sandbox_factory: Callable[..., Sandbox],
                                           chat_factory: Callable[..., ChatWidget]) -> None:
    sandbox = sandbox_factory(inference_rate_limit=0.2)  # one request per 5 s
    chat = chat_factory(InferenceClient(sandbox.inference_url, sandbox.inference_secret))
    turn = chat.send("Hello").wait(WAIT)  # the model list took this second's request
    assert turn.status == "error"
    assert re.search(r"try again in \d+ s", turn.error, re.IGNORECASE), turn.error
    assert chat.errors[-1] == turn.error


def test_server_error_shows_an_error_line(fake_server: Callable[..., FakeChatServer],
                                          chat_factory: Callable[..., ChatWidget]) -> None:
    server = fake_server(["never"], status=500)
    chat = chat_factory(InferenceClient(server.url, server.secret))
    turn = chat.send("Hello").wait(WAIT)
    assert turn.status == "error" and turn.error
    assert "\n" not in turn.error and "Traceback" not in turn.error
    assert chat.errors == [turn.error]
    assert CSS_CLASSES["error"] in chat.message_widgets[-1]._dom_classes


# -- conversation state ---------------------------------------------------------------------


def test_history_system_prompt_clear_and_markdown(client: InferenceClient,
                                                  chat_factory: Callable[..., ChatWidget]) -> None:
    chat = chat_factory(client, system_prompt="You are terse.", temperature=0.2, max_tokens=200)
    first = chat.send("First question").wait(WAIT)
    assert "1 message" not in first.text
    assert "plus 1 other (system or tool)" in first.text  # the system prompt was sent
    second = chat.send("Second question").wait(WAIT)
    assert "3 from you" not in second.text
    assert "2 from you and 1 from the assistant" in second.text  # the history was sent
    assert chat.request_messages()[0] == {"role": "system", "content": "You are terse."}
    assert [m["role"] for m in chat.history] == ["user", "assistant", "user", "assistant"]
    exported = chat.to_markdown()
    assert exported.index("## System") < exported.index("## User") < exported.index("## Assistant")
    assert "You are terse." in exported and "Second question" in exported
    chat.max_tokens = 5
    short = chat.send("Third").wait(WAIT)
    assert len(short.text.split()) <= 5
    chat._clear_button.click()
    assert chat.history == [] and chat.message_widgets == ()
    assert chat.system_prompt == "You are terse."
    chat.max_tokens = None
    again = chat.send("After clearing").wait(WAIT)
    assert "2 messages: 1 from you and 0 from the assistant" in again.text


# -- audio ----------------------------------------------------------------------------------


def speech_wav(tmp_path: Path, words: str) -> Path:
    if not (shutil.which("espeak-ng") and shutil.which("sox")):
        if os.environ.get("CI") == "true":
            pytest.fail("espeak-ng and sox are needed for the audio tests on CI")
        pytest.skip("espeak-ng or sox is missing")
    raw, wav = tmp_path / "raw.wav", tmp_path / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), words], check=True, capture_output=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)], check=True,
                   capture_output=True)
    return wav


def test_audio_upload_transcribes_into_the_text_box(
        client: InferenceClient, chat_factory: Callable[..., ChatWidget], tmp_path: Path) -> None:
    wav = speech_wav(tmp_path, "hello world")
    chat = chat_factory(client)
    chat._audio_upload.value = ({"name": "speech.wav", "type": "audio/wav", "size": wav.stat().st_size,
                                 "content": memoryview(wav.read_bytes()), "last_modified": NOW},)
    turn = chat.last_turn
    assert turn is not None and turn.kind == "transcribe"
    turn.wait(60)
    assert turn.status == "done", turn.error
    assert turn.text and turn.text.strip() == turn.text
    assert chat.input_text == turn.text
    assert chat.history == []  # nothing sent yet


def test_audio_sent_as_a_message(client: InferenceClient, chat_factory: Callable[..., ChatWidget],
                                 tmp_path: Path) -> None:
    wav = speech_wav(tmp_path, "yes")
    chat = chat_factory(client)
    turn = chat.send("Transcript follows:", audio=wav).wait(60)
    assert turn.status == "done", turn.error
    said = chat.history[0]["content"]
    assert said.startswith("Transcript follows:\n\n") and len(said) > len("Transcript follows:\n\n")
    assert chat.history[1]["role"] == "assistant"


def test_refused_audio_sends_nothing(client: InferenceClient, chat_factory: Callable[..., ChatWidget],
                                     tmp_path: Path) -> None:
    chat = chat_factory(client)
    notes = tmp_path / "notes.wav"
    notes.write_text("not audio")
    turn = chat.transcribe(notes)
    assert turn.status == "refused" and chat.status.is_error and "notes.wav" in turn.error


# -- secrets --------------------------------------------------------------------------------


def test_no_widget_state_holds_the_secret(sandbox_factory: Callable[..., Sandbox],
                                          chat_factory: Callable[..., ChatWidget]) -> None:
    secret = "sk-live-0123456789abcdef-very-secret"
    sandbox = sandbox_factory(inference_secret=secret)
    chat = chat_factory(InferenceClient(sandbox.inference_url, secret))
    chat.attach(png())
    chat.send(f"Please repeat {secret[:6]} only").wait(WAIT)
    chat.send("x", images=[b"not an image"])  # a refusal on the status line
    bad = ChatWidget(InferenceClient(sandbox.inference_url, secret + "-wrong"))
    try:
        bad.send("hi").wait(WAIT)
        for panel in (chat, bad):
            assert secret not in all_state(panel)
            assert secret not in repr(panel) and secret not in panel.to_markdown()
            assert all(secret not in error for error in panel.errors)
            assert all(secret not in repr(w) for w in iter_widgets(panel))
    finally:
        bad.close()


def test_close_leaves_no_live_widget_behind(sandbox: Sandbox, client: InferenceClient) -> None:
    from ipywidgets.widgets import widget as widget_module

    before = set(widget_module._instances)
    chat = ChatWidget(client)
    chat.attach(png())
    chat.send("one").wait(WAIT)
    chat.send("x", images=[b"not an image"])
    chat.clear()
    chat.send("two").wait(WAIT)
    bad = ChatWidget(InferenceClient(sandbox.inference_url, "wrong-secret-0123456789"))
    bad.send("hi").wait(WAIT)  # fails before any reply: no orphan reply widgets
    chat.close()
    bad.close()
    assert set(widget_module._instances) - before == set()


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpucloud-chat-loop"]


def test_the_loop_thread_ends_when_the_last_chat_closes(client: InferenceClient) -> None:
    import gc

    gc.collect()  # chats other tests dropped without closing are collected (and so released)
    for leftover in list(LoopThread._users):  # and those still open belong to finished tests
        leftover.close()
    first, second = ChatWidget(client), ChatWidget(client)
    assert first.send("Hello").wait(WAIT).status == "done"
    assert second.send("Hello").wait(WAIT).status == "done"
    assert _loop_threads()
    first.close()
    assert _loop_threads(), "another chat still needs the loop"
    second.close()
    wait_for(lambda: not _loop_threads())
    third = ChatWidget(client)  # a new chat starts a new loop
    try:
        assert third.send("Hello again").wait(WAIT).status == "done"
    finally:
        third.close()
    wait_for(lambda: not _loop_threads())


# -- bounded work: a long, fast reply with a stray mark ---------------------------------------


def blocks_in_order(widget: widgets.Widget) -> list[str]:
    """The HTML values under ``widget``, in the order the browser shows them."""
    if isinstance(widget, widgets.HTML):
        return [widget.value]
    return [value for child in getattr(widget, "children", ()) for value in blocks_in_order(child)]


def long_reply(chars: int) -> list[str]:
    """One paragraph of about ``chars`` characters, a stray ``*`` early, in ~40-char tokens."""
    tokens = [" A stray * star, then sentences."]
    while len(tokens) * 40 < chars:
        tokens.append(f" Sentence number {len(tokens):06d} has some words.")
    return tokens


def test_stop_ends_a_turn_whatever_has_streamed(
        fake_server: Callable[..., FakeChatServer], chat_factory: Callable[..., ChatWidget]) -> None:
    server = fake_server(long_reply(1_600_000), tokens_per_second=40_000)
    chat = chat_factory(InferenceClient(server.url, server.secret))
    turn = chat.send("Write at length.")
    wait_for(lambda: len(turn.text) >= 150_000 or turn.done(), timeout=60)
    chat.stop()
    wait_for(turn.done, timeout=60)  # "stopped", not "done": Stop was heard before the end
    assert turn.status == "stopped", turn
    kept = turn.text
    assert len(kept) >= 150_000
    shown = html_text("".join(blocks_in_order(assistant_boxes(chat)[-1])))
    assert " ".join(shown.split()) == " ".join(f"{kept} [stopped]".split())
    assert chat.history[-1] == {"role": "assistant", "content": kept}


def test_a_long_reply_streams_whole_with_the_tail_capped(
        fake_server: Callable[..., FakeChatServer], chat_factory: Callable[..., ChatWidget]) -> None:
    tokens = long_reply(400_000)
    server = fake_server(tokens, tokens_per_second=20_000)
    chat = chat_factory(InferenceClient(server.url, server.secret))
    turn = chat.send("Write at length.")
    assert turn.wait(WAIT).status == "done"
    assert turn.text == "".join(tokens)
    values = blocks_in_order(assistant_boxes(chat)[-1])
    assert " ".join(html_text("".join(values)).split()) == " ".join(turn.text.split())
    assert len(values) >= 2 and len(html_text(values[-1])) <= 600 + 1200  # the open tail stays
    # capped (MarkdownStream(min_chars=600, max_chars=1200)), the stray star notwithstanding


def test_a_reply_cut_off_before_its_end_is_marked_incomplete_in_one_line(
        fake_server: Callable[..., FakeChatServer], chat_factory: Callable[..., ChatWidget]) -> None:
    server = fake_server(["Once", " upon", " a", " time"], cut_off=True)
    chat = chat_factory(InferenceClient(server.url, server.secret))
    turn = chat.send("Tell me a story").wait(WAIT)
    assert turn.status == "error" and turn.text == "Once upon a time"
    assert turn.error is not None and turn.error.startswith("The reply was cut off before it finished")
    assert chat.errors == [turn.error]  # one line, under the reply
    assert "Once upon a time" in html_text("".join(blocks_in_order(assistant_boxes(chat)[-1])))
    assert chat.history[-1] == {"role": "assistant", "content": "Once upon a time"}
    assert chat.to_markdown().rstrip().endswith("Once upon a time\n[incomplete]")


def test_a_chat_collected_while_the_loop_starts_does_not_deadlock() -> None:
    """A widget's finalizer can run release() inside get() (garbage collection during
    Thread.start): it must not wait for the lock its own thread holds."""
    import threading

    from gpucloud_nb.widgets._chat_turn import LoopThread

    class User:
        pass

    user = User()
    LoopThread.use(user)

    def collected_inside_get() -> None:
        with LoopThread._lock:       # where get() is when the collector runs the finalizer
            LoopThread.release(user)

    worker = threading.Thread(target=collected_inside_get, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "release() inside get() deadlocked"
