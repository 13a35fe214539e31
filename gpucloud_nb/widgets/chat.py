"""A chat panel for an inference endpoint: streamed replies, images, audio, safe rendering.

    >>> from gpucloud_nb import connect
    >>> from gpucloud_nb.widgets import ChatWidget
    >>> chat = ChatWidget(connect().sandbox_inference())  # doctest: +SKIP
    >>> chat                                   # the panel; type and press Enter  # doctest: +SKIP
    >>> await chat.send("What colour is this?", images=["red.png"])   # or from code  # doctest: +SKIP
    >>> print(chat.to_markdown())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import copy
import html
import logging
import math
import re
import threading
import weakref
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle
from traitlets import Any as TraitAny
from traitlets import Bool, Unicode

from gpucloud_nb import media
from gpucloud_nb._secrets import mask_url, scrub, scrub_exception
from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient
from gpucloud_nb.errors import InvalidInputError, RateLimitError
from gpucloud_nb.widgets._chat_input import ChatInput
from gpucloud_nb.widgets._common import StatusLine, describe_error, iter_widgets
from gpucloud_nb.widgets._markdown import MarkdownStream, render_markdown
from gpucloud_nb.widgets._throttle import Throttle

__all__ = ["CSS_CLASSES", "ChatTurn", "ChatWidget"]

log = logging.getLogger("gpucloud_nb.widgets")

#: Every stable CSS class the panel puts on its parts (for browser tests and custom styling).
CSS_CLASSES = {
    "root": "gpucloud-chat",
    "model": "gpucloud-chat-model",
    "temperature": "gpucloud-chat-temperature",
    "max_tokens": "gpucloud-chat-max-tokens",
    "system": "gpucloud-chat-system",
    "clear": "gpucloud-chat-clear",
    "messages": "gpucloud-chat-messages",
    "message": "gpucloud-chat-message",
    "user": "gpucloud-chat-message-user",
    "assistant": "gpucloud-chat-message-assistant",
    "streaming": "gpucloud-chat-streaming",
    "stopped": "gpucloud-chat-stopped",
    "error": "gpucloud-chat-error",
    "input": "gpucloud-chat-input",
    "send": "gpucloud-chat-send",
    "stop": "gpucloud-chat-stop",
    "attachments": "gpucloud-chat-attachments",
    "attachment": "gpucloud-chat-attachment",
    "upload_image": "gpucloud-chat-upload-image",
    "upload_audio": "gpucloud-chat-upload-audio",
    "audio_send": "gpucloud-chat-audio-send",
    "upload_hint": "gpucloud-chat-upload-hint",
    "status": "gpucloud-chat-status",
    "style": "gpucloud-chat-style",
}

UPLOAD_HINT = ("Uploads travel over the notebook's websocket, which Jupyter servers cap at about "
               "10 MB by default (Binder, JupyterLab); for a larger image use chat.attach(path).")

FLUSH_INTERVAL = 0.1
"""Shortest time between two updates of a streaming reply: at most 10 updates a second."""

FLUSH_BYTES_PER_SECOND = 4000
"""About how many characters a second the streaming reply's updates may re-send.

Each update re-sends the open block; when it is long, updates come less often (at most
``FLUSH_MAX_INTERVAL`` apart), which keeps a fast reply's traffic near 2-3 times its length."""

FLUSH_MAX_INTERVAL = 0.5
"""Longest time new text waits before it is shown."""

THUMBNAIL_SIDE = 96
"""Longest side, in pixels, of an attachment's thumbnail."""

_GROUP_SIZE = 4  # block widgets per sub-box of a streamed reply (keeps each children update small)

# Our own style sheet, no script: an HTML widget may carry a <style> element.
_STYLE_SHEET = """<style>
.gpucloud-chat-messages{max-height:32em;overflow-y:auto}
.gpucloud-chat-message{border-radius:6px;padding:2px 10px;margin:4px 0}
.gpucloud-chat-message::before{font-size:0.75em;opacity:0.6}
.gpucloud-chat-message-user{background:var(--jp-layout-color2,#eef2f7);margin-left:12%}
.gpucloud-chat-message-user::before{content:"You"}
.gpucloud-chat-message-assistant{border:1px solid var(--jp-border-color2,#ddd);margin-right:6%}
.gpucloud-chat-message-assistant::before{content:"Assistant"}
.gpucloud-chat-streaming{border-style:dashed}
.gpucloud-chat-message .widget-html,.gpucloud-chat-error.widget-html{height:auto;margin:0}
.gpucloud-chat-message .widget-html-content,.gpucloud-chat-error .widget-html-content{
line-height:1.5;white-space:normal}
.gpucloud-chat-message p{margin:0.35em 0}
.gpucloud-chat-message pre{white-space:pre;overflow-x:auto;padding:6px;
background:var(--jp-layout-color2,#f5f5f5)}
.gpucloud-chat-message code{white-space:pre-wrap}
.gpucloud-chat-message pre code{white-space:pre}
.gpucloud-chat-error{color:#b00020}
.gpucloud-chat-upload-hint .widget-html-content{line-height:1.3;opacity:0.75}
.gpucloud-chat-stopped{opacity:0.7;font-style:italic}
</style>"""

_SPEECH_MODEL = re.compile(r"whisper|speech|transcri|asr|stt|audio", re.IGNORECASE)


# --------------------------------------------------------------------------- running turns


class _LoopThread:
    """One asyncio loop in a daemon thread, for when ``send()`` is called with no running loop.

    It lives while any chat widget does: the last one to close (or be garbage-collected) stops
    it, and so does Python's exit.
    """

    _lock = threading.Lock()
    _instance: _LoopThread | None = None
    _users: ClassVar[weakref.WeakSet[Any]] = weakref.WeakSet()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gpucloud-chat-loop",
                                       daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = cls()
            return cls._instance.loop

    @classmethod
    def use(cls, user: Any) -> None:
        """Count ``user`` (a chat widget) until :meth:`release` or its garbage collection."""
        with cls._lock:
            cls._users.add(user)
        weakref.finalize(user, cls.release, None)

    @classmethod
    def release(cls, user: Any) -> None:
        """Forget ``user``; stop the loop when no chat widget is left."""
        with cls._lock:
            if user is not None:
                cls._users.discard(user)
            if len(cls._users) or cls._instance is None:
                return
            instance, cls._instance = cls._instance, None
        instance.shutdown()

    def shutdown(self) -> None:
        """Stop the loop and wait (briefly) for its thread to end."""
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not threading.current_thread():
            self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


    @classmethod
    def stop_all(cls) -> None:
        """Stop the loop whoever still uses it (at interpreter exit)."""
        with cls._lock:
            instance, cls._instance = cls._instance, None
        if instance is not None:
            instance.shutdown()


atexit.register(_LoopThread.stop_all)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ChatTurn:
    """One request of a :class:`ChatWidget` (a message and its reply, or a transcription).

    ``send()`` returns at once with this handle while the reply streams in the background:

    - in a notebook (a running asyncio loop): ``await chat.send("Hi")``, or just let it stream;
    - in plain Python or pytest (no running loop): ``chat.send("Hi").wait(timeout=30)``.

    ``status`` is ``queued``, ``running``, ``done``, ``stopped``, ``error`` or ``refused``
    (checked and refused before anything was sent). ``text`` is the reply (or the transcript),
    ``error`` the one-sentence message shown in the panel, ``None`` if all went well.
    ``wait()`` and ``await`` return the turn itself; neither raises for a failed request.
    """

    def __init__(self, kind: str = "chat", loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.kind = kind
        self.status = "queued"
        self._text = ""
        self._live: Callable[[], str] | None = None  # the stream's text while it streams
        self.error: str | None = None
        self.future: concurrent.futures.Future[ChatTurn] = concurrent.futures.Future()
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None
        self._stop_requested = False
        self._cancelled = False

    @classmethod
    def refused(cls, sentence: str, kind: str = "chat") -> ChatTurn:
        turn = cls(kind)
        turn.finish("refused", error=sentence)
        return turn

    @property
    def text(self) -> str:
        """The reply so far (or the transcript)."""
        live = self._live
        return live() if live is not None else self._text

    @text.setter
    def text(self, value: str) -> None:
        self._text, self._live = value, None

    @property
    def stopped(self) -> bool:
        """True when Stop ended this turn (what had arrived is kept)."""
        return self.status == "stopped"

    def done(self) -> bool:
        """True once the turn has finished, whatever the outcome."""
        return self.future.done()

    def wait(self, timeout: float | None = None) -> ChatTurn:
        """Block until the turn finishes (not on the loop it runs on: ``await`` it there)."""
        if not self.done() and self._loop is not None and _running_loop() is self._loop:
            raise RuntimeError("This reply streams on the running event loop, so waiting for it "
                               "here would block it: use `await chat.send(...)` instead.")
        try:
            return self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"The {self.kind} turn did not finish within {timeout} s.") from None

    def __await__(self) -> Generator[Any, None, ChatTurn]:
        return asyncio.wrap_future(self.future).__await__()

    def stop(self) -> None:
        """End the turn: close the stream, keep what arrived. Safe from any thread, twice too."""
        self._stop_requested = True
        if self._loop is not None and not self.done():
            with contextlib.suppress(RuntimeError):  # loop closed: nothing runs any more
                self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done() and not self._cancelled:
            self._cancelled = True
            self._task.cancel()

    @property
    def stop_requested(self) -> bool:
        """True once :meth:`stop` was called, even before the turn started running."""
        return self._stop_requested

    def run_as(self, task: asyncio.Task[Any] | None) -> None:
        """Record the task that runs this turn, so :meth:`stop` can cancel it."""
        self._task = task

    def follow(self, text: Callable[[], str]) -> None:
        """Read :attr:`text` from ``text`` while the reply streams (joined when read)."""
        self._live = text

    def finish(self, status: str, error: str | None = None) -> None:
        """Settle the turn as ``status`` (with the sentence shown, if it failed)."""
        self.status = status
        if error is not None:
            self.error = error
        if not self.future.done():
            self.future.set_result(self)

    def __repr__(self) -> str:
        extra = f" error={self.error!r}" if self.error else ""
        return f"<ChatTurn {self.kind} {self.status} text={self.text[:40]!r}{extra}>"


# --------------------------------------------------------------------------- attachments


@dataclass(frozen=True)
class _Attachment:
    url: str                  # data: URL (checked) or an http(s):// address passed through
    note: str                 # "64×64 PNG", or the address
    thumbnail: bytes | None   # a small PNG/JPEG, None for an address
    thumbnail_format: str = "png"


def _thumbnail(data: bytes, side: int = THUMBNAIL_SIDE) -> tuple[bytes, str]:
    made = media.thumbnail(data, side)  # reduced decode: bounded memory for any image
    if made is None:
        raise ValueError("the image is too large for a thumbnail")
    return made


def _make_attachment(image: Any, name: str | None = None) -> _Attachment:
    """Check an image with :mod:`gpucloud_nb.media` (InvalidInputError when refused)."""
    if isinstance(image, str) and image[:8].lower().startswith(("http://", "https://")):
        return _Attachment(url=image, note=image, thumbnail=None)
    if isinstance(image, bytearray | memoryview):
        image = bytes(image)
    checked = media.check_image(image, name=name)
    try:
        thumb, fmt = _thumbnail(checked.data)
    except Exception:  # a thumbnail is a nicety: the checked image is what is sent
        log.debug("No thumbnail for an attachment", exc_info=True)
        thumb, fmt = None, "png"
    return _Attachment(url=checked.data_url(), note=f"{checked.width}×{checked.height} {checked.format}",
                       thumbnail=thumb, thumbnail_format=fmt)


def _note_from_url(url: str) -> str:
    if url.startswith("data:"):
        kind = url[5:].split(";", 1)[0].split("/")[-1].upper() or "image"
        return kind
    return url


# --------------------------------------------------------------------------- the streamed reply


class _Block(widgets.HTML):
    """An ``HTML`` widget that syncs only ``value``, classes, layout and style.

    A streamed reply opens one of these per segment; leaving out the description, placeholder
    and tooltip traits (the front end's defaults are the same) makes each opening about 150
    bytes smaller.
    """

    description = Unicode("").tag(sync=False)
    description_allow_html = Bool(False).tag(sync=False)
    placeholder = Unicode("\u200b").tag(sync=False)
    tabbable = TraitAny(None).tag(sync=False)
    tooltip = TraitAny(None).tag(sync=False)


class _Group(widgets.VBox):
    """A ``VBox`` that syncs only its children, classes and layout (see :class:`_Block`)."""

    box_style = Unicode("").tag(sync=False)
    tabbable = TraitAny(None).tag(sync=False)
    tooltip = TraitAny(None).tag(sync=False)



class _ReplyView:
    """The assistant message being streamed.

    The reply's Markdown is cut into segments (:class:`MarkdownStream`): the segments that can
    no longer change by a flush are each rendered once, into that flush's own ``HTML`` widget,
    which is never touched again; only the last widget (the open tail, capped in size) is
    re-rendered, at most ``1 / FLUSH_INTERVAL`` times a second. So each update sends the tail,
    not the whole reply, let alone the conversation, and costs the same however long the reply.
    Segment widgets sit in sub-boxes of ``_GROUP_SIZE`` so that adding one re-sends a short
    ``children`` list. All block widgets share one layout and one style model.
    """

    def __init__(self, layout: widgets.Layout, style: HTMLStyle, box_layout: widgets.Layout) -> None:
        self._layout, self._style, self._box_layout = layout, style, box_layout
        self.markdown = MarkdownStream(min_chars=600, max_chars=1200)
        self._ready: list[str] = []  # HTML of pieces frozen between two flushes
        self.blocks: list[widgets.HTML] = []
        self.tail = self._block("")
        self._group = _Group([self.tail], layout=box_layout)
        self.box = widgets.VBox([self._group], layout=box_layout)
        for css in ("message", "assistant", "streaming"):
            self.box.add_class(CSS_CLASSES[css])
        self.updates = 0

    def _block(self, value: str) -> widgets.HTML:
        block = _Block(value=value, layout=self._layout, style=self._style)
        self.blocks.append(block)
        return block

    @property
    def text(self) -> str:
        return self.markdown.text

    def append(self, delta: str) -> None:
        """Add text; past a few blocks' worth, freeze what can be frozen now (shown at the next
        flush), so neither a flush nor the last update after Stop has a backlog to work off."""
        self.markdown.append(delta)
        if self.markdown.tail_chars > 4 * self.markdown.max_chars:
            self._ready.extend(render_markdown(piece) for piece in iter(self.markdown.settle, ""))

    def cost(self) -> float:
        """About what the next update sends: the open tail's length."""
        return self.markdown.tail_chars

    def _frozen(self) -> str:
        """The HTML of every piece that can no longer change (``""``: none), each rendered once."""
        self._ready.extend(render_markdown(piece) for piece in iter(self.markdown.settle, ""))
        ready, self._ready = "".join(self._ready), []
        return ready

    def _freeze(self, frozen: str) -> None:
        self._set(self.tail, frozen)  # its last update, ever
        self.tail = self._block("")
        if len(self._group.children) >= _GROUP_SIZE:
            self._group = _Group([self.tail], layout=self._box_layout)
            self.box.children = (*self.box.children, self._group)
        else:
            self._group.children = (*self._group.children, self.tail)

    def flush(self) -> None:
        """Show what arrived: freeze the finished pieces, re-render the open tail.

        The tail is capped (see :class:`MarkdownStream`), so a flush costs the same at the
        first kilobyte of a reply and at the last megabyte.
        """
        frozen = self._frozen()
        if frozen:
            self._freeze(frozen)
        self._set(self.tail, render_markdown(self.markdown.tail))

    def _set(self, block: widgets.HTML, value: str) -> None:
        if block.value != value:
            self.updates += 1
            block.value = value

    def finish(self, marker: str | None = None) -> None:
        """The last update: the rest of the text (and ``[stopped]``); then nothing changes."""
        self.markdown.finish()
        frozen = self._frozen()
        if frozen:
            self._freeze(frozen)
        value = render_markdown(self.markdown.tail)
        if marker:
            value += f'<p class="{CSS_CLASSES["stopped"]}">{html.escape(marker)}</p>'
        elif not self.markdown.text.strip():
            value = "<p><em>(no reply)</em></p>"
        self._set(self.tail, value)
        self.box.remove_class(CSS_CLASSES["streaming"])


# --------------------------------------------------------------------------- the widget


class _ErrorLine(widgets.HTML):
    """An error line in the message list (``errors`` finds them by their class)."""


class ChatWidget(widgets.VBox):
    """A chat panel for an inference endpoint: model picker, streamed replies, images and audio.

    ``client`` is an :class:`~gpucloud_nb.client.inference.InferenceClient`, or the endpoint's
    URL (its base, before ``/v1``) with ``secret=``. ``model`` picks the model (default: the
    first listed chat model); ``system_prompt``, ``temperature`` and ``max_tokens`` fill the
    fields of the same names (``max_tokens`` 0 or ``None``: no limit). ``async_client`` is an
    optional :class:`~gpucloud_nb.client.inference.AsyncInferenceClient` that replies stream
    through (by default one is opened per request from the client's URL and secret).

    From code::

        turn = chat.send("Describe this", images=[Path("red.png")])   # returns at once
        await turn                     # in a notebook;  turn.wait(30) in plain Python
        chat.attach("big.jpg")         # next message's images (path, bytes, PIL image, URL)
        chat.transcribe("question.wav")            # transcript into the text box
        chat.stop(); chat.clear(); chat.history; chat.to_markdown()

    **Enter to send.** The kernel cannot tell Enter from Shift+Enter, so the text box is a tiny
    anywidget (:class:`~gpucloud_nb.widgets._chat_input.ChatInput`) whose view sends a ``submit``
    message on Enter and lets Shift+Enter start a new line; no HTML or script is injected into
    the page. The Send button always works too.

    **Streaming without freezing the kernel.** ``send()`` schedules the request as an asyncio
    task and returns a :class:`ChatTurn` at once. In a kernel that task runs on the kernel's own
    running loop (``asyncio.get_running_loop()``), between cell executions and widget messages,
    so the notebook stays usable and the Stop button is heard; ``await chat.send(...)`` waits
    for the reply in a cell (``turn.wait()`` would block that loop, so it refuses there, and a
    cell that blocks, such as ``time.sleep``, pauses the stream until it ends). With no running
    loop (plain Python, pytest) the task runs on one shared daemon thread's loop instead and
    ``turn.wait(timeout)`` blocks the caller only. Requests of one panel run one after another
    (a message sent while a reply streams waits for it). Replies stream through
    :class:`~gpucloud_nb.client.inference.AsyncInferenceClient`; the secret stays inside the
    client and is never put in a widget trait.

    **Few, small updates.** Streamed text is buffered and shown at most 10 times a second, and
    less often while the open block is long (about ``FLUSH_BYTES_PER_SECOND`` re-sent characters
    a second, and never more than ``FLUSH_MAX_INTERVAL`` late). A streamed reply is one message
    box holding ``HTML`` block widgets: a block is cut at a Markdown block boundary (see
    :class:`~gpucloud_nb.widgets._markdown.MarkdownStream`), rendered one last time and then
    frozen, so an update re-sends only the open block, never the whole reply or conversation.
    A finished message is never updated again. Stop closes the stream, keeps what arrived and
    marks it ``[stopped]``.

    **Untrusted output.** Replies (and your own text) are rendered as Markdown with raw HTML
    disabled and sanitised by an allow-list (see :mod:`gpucloud_nb.widgets._markdown`);
    ``<script>``, event handlers and ``javascript:`` links come out as inert text.

    **Images and audio.** Images are checked by :mod:`gpucloud_nb.media` (real format JPEG, PNG,
    WEBP or GIF, at most 20 MB, complete) before they are attached; a refused one shows its
    one-sentence reason and is neither attached nor sent. An ``http(s)://`` address is passed
    through for the endpoint to fetch. Audio (mp3, mp4, mpeg, mpga, m4a, wav, webm; 25 MB) is
    transcribed into the text box, or sent as a message when "Send transcript as a message" is
    ticked. Uploads travel over the notebook's websocket, which Tornado caps at about 10 MB by
    default (Binder, JupyterLab): for larger images pass a path to :meth:`attach` or ``send``.

    **Errors** (401 wrong secret, 404 unknown model, 429 with "try again in N s", 500, no
    connection) show as an error line in the panel, never a traceback. A reply that breaks off
    (the connection drops, or the stream ends without a ``finish_reason`` or ``[DONE]``) keeps
    what arrived, with one line under it: "The reply was cut off before it finished..."; it is
    kept in :attr:`history` and marked ``[incomplete]`` in :meth:`to_markdown`. A request that failed
    before any reply leaves no trace in :attr:`history` and its text goes back to the input box.

    **History.** :attr:`history` holds the OpenAI-style messages (images as ``data:`` URLs) that
    the next request sends after the system prompt; only turns that got reply text are kept.

    **CSS classes** (``_dom_classes``): ``gpucloud-chat`` (the panel), ``gpucloud-chat-model``,
    ``gpucloud-chat-temperature``, ``gpucloud-chat-max-tokens``, ``gpucloud-chat-system``,
    ``gpucloud-chat-clear``, ``gpucloud-chat-messages`` (the message list),
    ``gpucloud-chat-message`` with ``gpucloud-chat-message-user`` or
    ``gpucloud-chat-message-assistant`` (each message; its text is in the ``HTML`` widgets inside),
    ``gpucloud-chat-streaming`` (the reply still streaming),
    ``gpucloud-chat-stopped`` (the ``[stopped]`` mark), ``gpucloud-chat-error`` (an error line),
    ``gpucloud-chat-input`` (the text box; its ``<textarea>`` is inside), ``gpucloud-chat-send``,
    ``gpucloud-chat-stop``,
    ``gpucloud-chat-attachments`` / ``gpucloud-chat-attachment``,
    ``gpucloud-chat-upload-image``, ``gpucloud-chat-upload-audio``, ``gpucloud-chat-audio-send``,
    ``gpucloud-chat-upload-hint``, ``gpucloud-chat-status``, ``gpucloud-chat-style``.
    """

    def __init__(self, client: InferenceClient | str, model: str | None = None, *,
                 secret: str | None = None, system_prompt: str = "", temperature: float = 0.7,
                 max_tokens: int | None = None, async_client: AsyncInferenceClient | None = None,
                 **kwargs: Any) -> None:
        if isinstance(client, str):
            client = InferenceClient(client, secret)
        elif secret is not None:
            raise InvalidInputError("Pass secret= only with an endpoint URL; an InferenceClient "
                                    "already holds its secret.")
        self._client = client
        self._async_client = async_client
        self._lock = threading.RLock()
        self._history: list[dict[str, Any]] = []
        self._meta: list[dict[str, Any]] = []        # per history entry: stopped flag
        self._notes: dict[str, str] = {}               # image URL -> "64×64 PNG"
        self._pending: list[_Attachment] = []
        self._turns: list[ChatTurn] = []
        self._last_future: concurrent.futures.Future[Any] | None = None
        self._generation = 0    # bumped by clear(): a turn from before it leaves no trace
        _LoopThread.use(self)

        self._block_layout = widgets.Layout()
        self._block_style = HTMLStyle()
        self._box_layout = widgets.Layout()

        self._style = widgets.HTML(_STYLE_SHEET, _dom_classes=(CSS_CLASSES["style"],))
        self._model = widgets.Dropdown(description="Model", options=[],
                                       _dom_classes=(CSS_CLASSES["model"],),
                                       style={"description_width": "initial"})
        self._temperature = widgets.BoundedFloatText(
            value=float(temperature), min=0.0, max=2.0, step=0.1, description="Temperature",
            _dom_classes=(CSS_CLASSES["temperature"],), style={"description_width": "initial"},
            layout=widgets.Layout(width="170px"))
        self._max_tokens = widgets.BoundedIntText(
            value=int(max_tokens or 0), min=0, max=1_000_000, description="Max tokens",
            tooltip="0: no limit", _dom_classes=(CSS_CLASSES["max_tokens"],),
            style={"description_width": "initial"}, layout=widgets.Layout(width="170px"))
        self._clear_button = widgets.Button(description="Clear", icon="trash",
                                            tooltip="Forget the conversation",
                                            _dom_classes=(CSS_CLASSES["clear"],),
                                            layout=widgets.Layout(width="auto"))
        self._system = widgets.Textarea(value=system_prompt, placeholder="System prompt (optional)",
                                        rows=2, _dom_classes=(CSS_CLASSES["system"],),
                                        layout=widgets.Layout(width="100%"))
        self._messages = widgets.VBox([], _dom_classes=(CSS_CLASSES["messages"],))
        self._attachments = widgets.HBox([], _dom_classes=(CSS_CLASSES["attachments"],))
        self._input = ChatInput(placeholder="Message — Enter sends, Shift+Enter adds a line",
                                _dom_classes=(CSS_CLASSES["input"],),
                                layout=widgets.Layout(flex="1 1 auto", width="auto"))
        self._send_button = widgets.Button(description="Send", button_style="primary", icon="paper-plane",
                                           _dom_classes=(CSS_CLASSES["send"],),
                                           layout=widgets.Layout(width="auto"))
        self._stop_button = widgets.Button(description="Stop", icon="stop", disabled=True,
                                           _dom_classes=(CSS_CLASSES["stop"],),
                                           layout=widgets.Layout(width="auto"))
        self._image_upload = widgets.FileUpload(accept="image/*", multiple=True, description="Image",
                                                _dom_classes=(CSS_CLASSES["upload_image"],))
        self._audio_upload = widgets.FileUpload(accept="audio/*", multiple=False, description="Audio",
                                                _dom_classes=(CSS_CLASSES["upload_audio"],))
        self._audio_sends = widgets.Checkbox(value=False, description="Send transcript as a message",
                                             indent=False, _dom_classes=(CSS_CLASSES["audio_send"],),
                                             layout=widgets.Layout(width="auto"))
        self._hint = widgets.HTML(f"<small>{html.escape(UPLOAD_HINT)}</small>",
                                  _dom_classes=(CSS_CLASSES["upload_hint"],))
        self.status = StatusLine(CSS_CLASSES["status"])

        self._input_row = widgets.HBox([self._input, self._send_button, self._stop_button])
        settings = widgets.HBox([self._model, self._temperature, self._max_tokens,
                                 self._clear_button], layout=widgets.Layout(flex_flow="row wrap"))
        uploads = widgets.HBox([self._image_upload, self._audio_upload, self._audio_sends],
                               layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([self._style, settings, self._system, self._messages, self._attachments,
                          self._input_row, uploads, self._hint, self.status], **kwargs)
        self.add_class(CSS_CLASSES["root"])

        self._input.on_msg(self._on_input_message)
        self._send_button.on_click(lambda _: self._send_from_ui())
        self._stop_button.on_click(lambda _: self.stop())
        self._clear_button.on_click(lambda _: self.clear())
        self._image_upload.observe(self._on_image_upload, names="value")
        self._audio_upload.observe(self._on_audio_upload, names="value")
        self._load_models(model)

    # ------------------------------------------------------------------ public API

    @property
    def history(self) -> list[dict[str, Any]]:
        """The conversation as OpenAI-style message dicts (a copy; system prompt not included)."""
        with self._lock:
            return copy.deepcopy(self._history)

    @property
    def model(self) -> str | None:
        """The model chosen in the picker."""
        return self._model.value

    @model.setter
    def model(self, value: str) -> None:
        if value not in self._model.options:
            self._model.options = [*self._model.options, value]
        self._model.value = value

    @property
    def system_prompt(self) -> str:
        return self._system.value

    @system_prompt.setter
    def system_prompt(self, value: str) -> None:
        self._system.value = value

    @property
    def temperature(self) -> float:
        return self._temperature.value

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature.value = value

    @property
    def max_tokens(self) -> int | None:
        return self._max_tokens.value or None

    @max_tokens.setter
    def max_tokens(self, value: int | None) -> None:
        self._max_tokens.value = int(value or 0)

    @property
    def input_text(self) -> str:
        """What the text box holds."""
        return self._current_input().value

    @input_text.setter
    def input_text(self, value: str) -> None:
        self._current_input().value = value

    @property
    def last_turn(self) -> ChatTurn | None:
        """The most recent request started (by code, Enter, Send or an upload), if any."""
        with self._lock:
            return self._turns[-1] if self._turns else None

    @property
    def busy(self) -> bool:
        """True while a request is queued or running."""
        return any(not turn.done() for turn in self._turns)

    @property
    def message_widgets(self) -> tuple[widgets.Widget, ...]:
        """The widgets of the message list, oldest first (messages and error lines)."""
        return tuple(self._messages.children)

    @property
    def attachments(self) -> list[str]:
        """Notes on the images waiting to go with the next message ("64×64 PNG", an address)."""
        return [attachment.note for attachment in self._pending]

    def attach(self, image: Any, *, name: str | None = None) -> bool:
        """Check ``image`` (path, bytes, PIL image, data: URL, http(s) address) and attach it.

        Returns False and shows the one-sentence reason when the image is refused.
        """
        try:
            attachment = _make_attachment(image, name)
        except InvalidInputError as error:
            self.status.error(error)
            return False
        except Exception as error:
            self.status.error(describe_error(error, mask=self._scrub))
            return False
        with self._lock:
            self._pending.append(attachment)
        self._show_attachments()
        self.status.clear()
        return True

    def clear_attachments(self) -> None:
        """Drop the images waiting to be sent."""
        with self._lock:
            self._pending.clear()
        self._show_attachments()

    def send(self, text: str = "", images: Iterable[Any] = (), audio: Any = None) -> ChatTurn:
        """Send a message (and the attached images); the reply streams into the panel.

        ``images``: paths, bytes, PIL images, data: URLs or http(s) addresses, checked before
        anything is sent (a refusal shows its reason and sends nothing). ``audio``: a recording
        that is transcribed first; the transcript is the message, or is added after ``text``.
        Returns a :class:`ChatTurn` at once (``await`` it, or ``.wait(timeout)``).
        """
        text = "" if text is None else str(text)
        if isinstance(images, str | bytes | bytearray | memoryview) or not isinstance(images, Iterable):
            images = [images]
        try:
            extra = [_make_attachment(image) for image in images]
            checked_audio = media.check_audio(audio) if audio is not None else None
        except InvalidInputError as error:
            self.status.error(error)
            return ChatTurn.refused(str(error))
        with self._lock:
            attachments = [*self._pending, *extra]
            if not text.strip() and not attachments and checked_audio is None:
                self.status.info("Type a message first.")
                return ChatTurn.refused("Type a message first.")
            self._pending.clear()
        self._show_attachments()
        self.status.clear()
        return self._start("chat", lambda turn, generation: self._chat_turn(
            turn, generation, text, attachments, checked_audio))

    def transcribe(self, audio: Any, *, name: str | None = None, send: bool = False) -> ChatTurn:
        """Transcribe a recording into the text box (``send=True``: send it as a message)."""
        try:
            checked = media.check_audio(audio, name=name)
        except InvalidInputError as error:
            self.status.error(error)
            return ChatTurn.refused(str(error), kind="transcribe")
        if send:
            return self._start("chat", lambda turn, generation: self._chat_turn(
                turn, generation, "", [], checked))
        return self._start("transcribe", lambda turn, generation: self._transcribe_turn(
            turn, generation, checked))

    def stop(self) -> None:
        """Stop the reply that is streaming (what arrived is kept, marked ``[stopped]``)."""
        for turn in list(self._turns):
            if turn.status == "running":
                turn.stop()

    def clear(self) -> None:
        """Stop every request and forget the conversation (the system prompt stays)."""
        for turn in list(self._turns):
            turn.stop()
        with self._lock:
            self._generation += 1
            self._history.clear()
            self._meta.clear()
            self._notes.clear()
            old = self._messages.children
            self._messages.children = ()
        for child in old:
            _close_tree(child, self._shared())
        self.status.clear()

    def to_markdown(self) -> str:
        """The conversation as Markdown: roles as headings, images as ``[image: 64×64 PNG]``."""
        lines: list[str] = []
        if self._system.value.strip():
            lines += ["## System", "", self._system.value.strip(), ""]
        with self._lock:
            entries = list(zip(self._history, self._meta, strict=False))
        for message, meta in entries:
            lines += [f"## {str(message.get('role', '')).capitalize()}", ""]
            content = message.get("content")
            if isinstance(content, str):
                lines.append(content)
            elif isinstance(content, list):
                for part in content:
                    if part.get("type") == "text":
                        lines.append(part.get("text", ""))
                    elif part.get("type") == "image_url":
                        url = (part.get("image_url") or {}).get("url", "")
                        lines.append(f"[image: {self._notes.get(url) or _note_from_url(url)}]")
            if meta.get("stopped"):
                lines.append("[stopped]")
            elif meta.get("incomplete"):
                lines.append("[incomplete]")
            lines.append("")
        return self._scrub("\n".join(lines).rstrip() + "\n")

    def request_messages(self) -> list[dict[str, Any]]:
        """The ``messages`` the next request sends: the system prompt (if any), then history."""
        system = self._system.value.strip()
        with self._lock:
            history = copy.deepcopy(self._history)
        return ([{"role": "system", "content": system}] if system else []) + history

    def close(self) -> None:
        """Stop requests and close the panel and every widget in it."""
        for turn in list(self._turns):
            turn.stop()
        _LoopThread.release(self)
        roots = [self, self._input, *self._shared()]
        found: dict[int, widgets.Widget] = {}
        for root in roots:
            for widget in iter_widgets(root):
                found.setdefault(id(widget), widget)
        for widget in found.values():
            if widget is not self:
                widget.close()
        super().close()

    def __repr__(self) -> str:
        url = mask_url(str(getattr(self._client, "endpoint_url", "?")))
        hint = getattr(self._client, "secret_hint", "…")
        return (f"<ChatWidget endpoint={url!r} secret={hint!r} model={self._model.value!r} "
                f"messages={len(self._history)}>")

    def _shared(self) -> tuple[widgets.Widget, ...]:
        return (self._block_layout, self._block_style, self._box_layout)

    # ------------------------------------------------------------------ models

    def _load_models(self, wanted: str | None) -> None:
        try:
            ids = list(self._client.models())
        except Exception as error:
            ids = []
            self._show_error(error)
        chat_ids = [i for i in ids if not _SPEECH_MODEL.search(i)]
        ordered = chat_ids + [i for i in ids if i not in chat_ids]
        if wanted and wanted not in ordered:
            ordered.insert(0, wanted)
        self._model.options = ordered
        if ordered:
            self._model.value = wanted or ordered[0]

    # ------------------------------------------------------------------ UI handlers

    def _current_input(self) -> ChatInput:
        return self._input

    def _on_input_message(self, _widget: Any, content: Mapping[str, Any], _buffers: Any) -> None:
        if isinstance(content, Mapping) and content.get("event") == "submit":
            self._send_from_ui()

    def _send_from_ui(self) -> ChatTurn | None:
        try:
            box = self._current_input()
            text = box.value
            turn = self.send(text)
            if turn.status != "refused":
                box.value = ""
                with contextlib.suppress(Exception):
                    box.send({"do": "focus"})
            return turn
        except Exception as error:  # a click handler never raises
            self.status.error(describe_error(error, mask=self._scrub))
            return None

    def _on_image_upload(self, change: Mapping[str, Any]) -> None:
        files = change["new"]
        if not files:
            return
        try:
            for item in files:
                self.attach(bytes(item["content"]), name=item.get("name") or None)
        finally:
            self._image_upload.value = ()

    def _on_audio_upload(self, change: Mapping[str, Any]) -> None:
        files = change["new"]
        if not files:
            return
        try:
            item = files[0]
            self.transcribe(bytes(item["content"]), name=item.get("name") or None,
                            send=self._audio_sends.value)
        except Exception as error:
            self.status.error(describe_error(error, mask=self._scrub))
        finally:
            self._audio_upload.value = ()

    def _show_attachments(self) -> None:
        with self._lock:
            pending = list(self._pending)
        old = self._attachments.children
        self._attachments.children = tuple(self._attachment_widget(i, a) for i, a in enumerate(pending))
        for child in old:
            _close_tree(child, self._shared())

    def _attachment_widget(self, index: int, attachment: _Attachment) -> widgets.Widget:
        if attachment.thumbnail is not None:
            preview: widgets.Widget = widgets.Image(value=attachment.thumbnail,
                                                    format=attachment.thumbnail_format,
                                                    layout=widgets.Layout(max_width="64px",
                                                                          max_height="64px"))
        else:
            preview = widgets.HTML(f"<small>{html.escape(attachment.note[:40])}</small>")
        remove = widgets.Button(description="×", tooltip=f"Remove ({attachment.note})",
                                layout=widgets.Layout(width="28px", height="22px", padding="0"))

        def drop(_: Any, attachment: _Attachment = attachment) -> None:
            with self._lock:
                if attachment in self._pending:
                    self._pending.remove(attachment)
            self._show_attachments()

        remove.on_click(drop)
        return widgets.VBox([preview, remove], _dom_classes=(CSS_CLASSES["attachment"],),
                            layout=widgets.Layout(align_items="center", margin="0 4px"))

    # ------------------------------------------------------------------ running requests

    def _start(self, kind: str, body: Callable[[ChatTurn, int], Coroutine[Any, Any, None]]) -> ChatTurn:
        loop = _running_loop()
        on_running_loop = loop is not None
        if loop is None:
            loop = _LoopThread.get()
        turn = ChatTurn(kind, loop)
        with self._lock:
            previous = self._last_future
            self._last_future = turn.future
            self._turns = [t for t in self._turns[:-1] if not t.done()] + self._turns[-1:] + [turn]
        self._stop_button.disabled = False

        generation = self._generation

        async def run() -> None:
            turn.run_as(asyncio.current_task())
            outcome, sentence = "done", None
            try:
                if previous is not None and not previous.done():
                    await asyncio.wrap_future(previous)
                if turn.stop_requested:
                    raise asyncio.CancelledError
                turn.status = "running"
                await body(turn, generation)
            except asyncio.CancelledError:
                outcome = "stopped"
            except BaseException as error:  # never a traceback in the notebook
                log.debug("A chat request failed:\n%s", self._scrub(scrub_exception(error)))
                outcome, sentence = "error", self._sentence(error)
                if generation == self._generation:
                    self._show_error(sentence)
            finally:
                self._after_turn(turn)
                turn.finish(outcome, sentence)

        if on_running_loop:
            turn.run_as(loop.create_task(run()))
        else:
            asyncio.run_coroutine_threadsafe(run(), loop)
        return turn

    def _after_turn(self, finished: ChatTurn) -> None:
        if not any(not t.done() for t in self._turns if t is not finished):
            self._stop_button.disabled = True
            if self.status.kind == "info":
                self.status.clear()

    def _open_client(self) -> contextlib.AbstractAsyncContextManager[Any]:
        if self._async_client is not None:
            return contextlib.nullcontext(self._async_client)
        # The async twin shares the client's Secret object: the secret never sits in a widget.
        return self._client.to_async()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": float(self._temperature.value)}
        if self._max_tokens.value:
            params["max_tokens"] = int(self._max_tokens.value)
        return params

    async def _transcribe_turn(self, turn: ChatTurn, generation: int, audio: media.CheckedAudio) -> None:
        self.status.info(f"Transcribing {audio.name}…")
        async with self._open_client() as client:
            transcript = str(await client.transcribe(audio.data, filename=audio.name)).strip()
        turn.text = transcript
        if generation != self._generation:
            return
        box = self._current_input()
        box.value = f"{box.value.rstrip()} {transcript}".strip() if box.value.strip() else transcript
        self.status.success(f"Transcribed {audio.name} into the text box.")

    async def _chat_turn(self, turn: ChatTurn, generation: int, text: str,
                         attachments: list[_Attachment], audio: media.CheckedAudio | None) -> None:
        model = self._model.value or None
        async with self._open_client() as client:
            if audio is not None:
                self.status.info(f"Transcribing {audio.name}…")
                transcript = str(await client.transcribe(audio.data, filename=audio.name)).strip()
                text = f"{text.rstrip()}\n\n{transcript}" if text.strip() else transcript
            message = self._user_message(text, attachments)
            with self._lock:
                if generation != self._generation:
                    return  # cleared while transcribing
                self._history.append(message)
                self._meta.append({})
            self._append(self._user_widget(text, attachments), generation)
            self.status.info(f"Waiting for {model or 'the model'}…")
            stream = reply = throttle = None
            marker, failed = None, False
            try:
                stream = await client.chat(self.request_messages(), model=model, stream=True,
                                           **self._params())
                reply = _ReplyView(self._block_layout, self._block_style, self._box_layout)
                throttle = Throttle(FLUSH_INTERVAL, reply.flush, cost=reply.cost,
                                    bytes_per_second=FLUSH_BYTES_PER_SECOND,
                                    max_interval=FLUSH_MAX_INTERVAL)
                self._append(reply.box, generation)
                self.status.clear()
                turn.follow(lambda: stream.text)  # joined when read, not once per chunk
                async for chunk in stream:
                    if chunk.delta:
                        reply.append(chunk.delta)
                        throttle.poke()
            except asyncio.CancelledError:
                marker = "[stopped]"
                raise
            except BaseException:  # shown as an error line under what arrived (cut off, dropped)
                failed = True
                if reply is None or not reply.text:
                    self._forget_last_user(message, text if generation == self._generation else None)
                raise
            finally:
                if throttle is not None:
                    throttle.cancel()
                if stream is not None:
                    with contextlib.suppress(BaseException):  # a second Stop must not skip the rest
                        await stream.aclose()
                    turn.text = stream.text
                if reply is not None:
                    reply.finish(marker)
                    if reply.text:
                        with self._lock:
                            if generation == self._generation:
                                self._history.append({"role": "assistant", "content": turn.text})
                                self._meta.append({"stopped": marker is not None,
                                                   "incomplete": failed})
                    elif marker:
                        self._forget_last_user(message, None)
                elif marker:
                    self._append(self._notice("[stopped]"), generation)
                    self._forget_last_user(message, None)

    def _forget_last_user(self, message: dict[str, Any], restore: str | None) -> None:
        with self._lock:
            for index in range(len(self._history) - 1, -1, -1):
                if self._history[index] is message:
                    del self._history[index]
                    del self._meta[index]
                    break
        if restore and not self._current_input().value:
            self._current_input().value = restore

    def _user_message(self, text: str, attachments: list[_Attachment]) -> dict[str, Any]:
        if not attachments:
            return {"role": "user", "content": text}
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
        for attachment in attachments:
            parts.append({"type": "image_url", "image_url": {"url": attachment.url}})
            with self._lock:
                self._notes[attachment.url] = attachment.note
        return {"role": "user", "content": parts}

    # ------------------------------------------------------------------ message widgets

    def _append(self, widget: widgets.Widget, generation: int | None = None) -> None:
        """Add a message to the list; one from before a ``clear()`` is closed instead."""
        with self._lock:
            if generation is None or generation == self._generation:
                self._messages.children = (*self._messages.children, widget)
                return
        _close_tree(widget, self._shared())

    def _user_widget(self, text: str, attachments: list[_Attachment]) -> widgets.Widget:
        children: list[widgets.Widget] = []
        if text.strip():
            children.append(_Block(value=render_markdown(text), layout=self._block_layout,
                                   style=self._block_style))
        thumbs = []
        for attachment in attachments:
            if attachment.thumbnail is not None:
                thumbs.append(widgets.Image(value=attachment.thumbnail,
                                            format=attachment.thumbnail_format,
                                            layout=widgets.Layout(max_width="96px")))
            else:
                thumbs.append(widgets.HTML(f"<small>[image: {html.escape(attachment.note)}]</small>"))
        if thumbs:
            children.append(widgets.HBox(thumbs))
        box = widgets.VBox(children, layout=self._box_layout)
        box.add_class(CSS_CLASSES["message"])
        box.add_class(CSS_CLASSES["user"])
        return box

    def _notice(self, text: str) -> widgets.HTML:
        return widgets.HTML(f'<p class="{CSS_CLASSES["stopped"]}">{html.escape(text)}</p>',
                            _dom_classes=(CSS_CLASSES["message"], CSS_CLASSES["assistant"]))

    def _sentence(self, error: BaseException) -> str:
        sentence = describe_error(error, mask=self._scrub)
        if isinstance(error, RateLimitError) and "try again" not in sentence.lower():
            if error.retry_after is not None:
                sentence = f"{sentence.rstrip('.')}. Try again in {max(1, math.ceil(error.retry_after))} s."
            else:
                sentence = f"{sentence.rstrip('.')}. Try again in a few seconds."
        return self._scrub(sentence)

    def _scrub(self, text: str) -> str:
        """``text`` with the client's secret and any URL's password masked."""
        return self._client.scrub(scrub(text))

    def _show_error(self, error: BaseException | str) -> None:
        sentence = error if isinstance(error, str) else self._sentence(error)
        line = _ErrorLine(f"<span>⚠ {html.escape(sentence)}</span>",
                          _dom_classes=(CSS_CLASSES["error"],))
        self._append(line)

    @property
    def errors(self) -> list[str]:
        """The error lines shown in the panel, oldest first."""
        found = []
        for child in self._messages.children:
            if isinstance(child, _ErrorLine):
                found.append(html.unescape(re.sub(r"<[^>]+>", "", child.value)).removeprefix("⚠ "))
        return found


def _close_tree(widget: widgets.Widget, keep: Iterable[widgets.Widget] = ()) -> None:
    """Close a widget and everything under it, except the shared ``keep`` (layouts, styles)."""
    kept = {id(k) for k in keep}
    for child in list(iter_widgets(widget)):
        if id(child) not in kept:
            child.close()

