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
import concurrent.futures
import contextlib
import html
import logging
import math
import re
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

import ipywidgets as widgets

from gpucloud_nb import media
from gpucloud_nb._secrets import mask_url, scrub, scrub_exception
from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient, is_speech_model
from gpucloud_nb.conversation import THUMBNAIL_SIDE, Attachment, Conversation, make_attachment
from gpucloud_nb.errors import InvalidInputError, RateLimitError
from gpucloud_nb.widgets._chat_attachments import PendingImages, is_count_entry
from gpucloud_nb.widgets._chat_client import PanelClient
from gpucloud_nb.widgets._chat_fields import UPLOAD_HINT, ChatFields
from gpucloud_nb.widgets._chat_reply import ErrorLine, ReplyView, notice, paced, user_message
from gpucloud_nb.widgets._chat_style import CSS_CLASSES
from gpucloud_nb.widgets._chat_turn import ChatTurn, LoopThread, running_loop
from gpucloud_nb.widgets._layout import close_tree, iter_widgets
from gpucloud_nb.widgets._status import describe_error

__all__ = ["CSS_CLASSES", "THUMBNAIL_SIDE", "UPLOAD_HINT", "ChatTurn", "ChatWidget"]

log = logging.getLogger("gpucloud_nb.widgets")




class ChatWidget(ChatFields):
    """A chat panel for an inference endpoint: model picker, streamed replies, images and audio.

    ``client`` is an :class:`~gpucloud_nb.client.inference.InferenceClient`, or the endpoint's
    URL (its base, before ``/v1``) with ``secret=``. ``model`` picks the model (default: the
    first listed chat model); ``system_prompt``, ``temperature`` and ``max_tokens`` fill the
    fields of the same names (``max_tokens`` 0 or ``None``: no limit). ``async_client`` is an
    optional :class:`~gpucloud_nb.client.inference.AsyncInferenceClient` that replies stream
    through (by default the panel opens one from the client's URL and secret at its first
    request, keeps its connection for the next ones, and closes it with the panel).
    How replies stream without freezing the kernel: :mod:`~gpucloud_nb.widgets._chat_turn`;
    how they stay small on the wire: :mod:`~gpucloud_nb.widgets._chat_reply`; Enter to send:
    :mod:`~gpucloud_nb.widgets._chat_input`; the stable CSS classes: :data:`CSS_CLASSES`.

    From code::

        turn = chat.send("Describe this", images=[Path("red.png")])   # returns at once
        await turn                     # in a notebook;  turn.wait(30) in plain Python
        chat.attach("big.jpg")         # next message's images (path, bytes, PIL image, URL)
        chat.transcribe("question.wav")            # transcript into the text box
        chat.stop(); chat.clear(); chat.history; chat.to_markdown()

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

    """

    def __init__(self, client: InferenceClient | str, model: str | None = None, *,
                 secret: str | None = None, system_prompt: str = "", temperature: float = 0.7,
                 max_tokens: int | None = None, async_client: AsyncInferenceClient | None = None,
                 **kwargs: Any) -> None:
        owned: list[InferenceClient] = []
        if isinstance(client, str):
            client = InferenceClient(client, secret)
            owned.append(client)
        elif secret is not None:
            raise InvalidInputError("Pass secret= only with an endpoint URL; an InferenceClient "
                                    "already holds its secret.")
        self._client = client
        self._owned_client = owned[0] if owned else None  # made here: closed with the panel
        self._async = PanelClient(client, async_client)
        self._lock = threading.RLock()
        self._conversation = Conversation()
        self._turns: list[ChatTurn] = []
        self._last_future: concurrent.futures.Future[Any] | None = None
        self._generation = 0    # bumped by clear(): a turn from before it leaves no trace
        LoopThread.use(self)

        super().__init__(system_prompt=system_prompt, temperature=temperature,
                         max_tokens=max_tokens, **kwargs)
        self._images = PendingImages(self._image_upload, self._attachments, self._shared())

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
        return self._conversation.history

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
        return self._images.notes

    def attach(self, image: Any, *, name: str | None = None) -> bool:
        """Check ``image`` (path, bytes, PIL image, data: URL, http(s) address) and attach it.

        Returns False and shows the one-sentence reason when the image is refused.
        """
        try:
            attachment = make_attachment(image, name)
        except InvalidInputError as error:
            self.status.error(error)
            return False
        except Exception as error:
            self.status.error(describe_error(error, mask=self._scrub))
            return False
        self._images.add(attachment)
        self.status.clear()
        return True

    def clear_attachments(self) -> None:
        """Drop the images waiting to be sent."""
        self._images.clear()

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
            extra = [make_attachment(image) for image in images]
            checked_audio = media.check_audio(audio) if audio is not None else None
        except InvalidInputError as error:
            self.status.error(error)
            return ChatTurn.refused(str(error))
        if not text.strip() and not self._images.notes and not extra and checked_audio is None:
            self.status.info("Type a message first.")
            return ChatTurn.refused("Type a message first.")
        attachments = self._images.take(extra)
        self._images.show()
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
            self._conversation.clear()
            old = self._messages.children
            self._messages.children = ()
        for child in old:
            close_tree(child, self._shared())
        self.status.clear()

    def to_markdown(self) -> str:
        """The conversation as Markdown: roles as headings, images as ``[image: 64×64 PNG]``."""
        return self._scrub(self._conversation.to_markdown(self._system.value))

    def request_messages(self) -> list[dict[str, Any]]:
        """The ``messages`` the next request sends: the system prompt (if any), then history."""
        return self._conversation.request_messages(self._system.value)

    def close(self) -> None:
        """Stop requests and close the panel, every widget in it and the clients it opened."""
        for turn in list(self._turns):
            turn.stop()
        self._async.close()  # before the shared loop may stop
        if self._owned_client is not None:
            self._owned_client.close()
        LoopThread.release(self)
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
                f"messages={len(self._conversation)}>")

    def _shared(self) -> tuple[widgets.Widget, ...]:
        return (self._block_layout, self._block_style, self._box_layout)

    # ------------------------------------------------------------------ models

    def _load_models(self, wanted: str | None) -> None:
        try:
            ids = list(self._client.models())
        except Exception as error:
            ids = []
            self._show_error(error)
        # Only models that chat are offered: a speech model answers transcriptions, not this
        # panel (the audio upload finds it by itself).
        ordered = [i for i in ids if not is_speech_model(i)]
        if ids and not ordered and not wanted:
            self._show_error(f"This endpoint lists no chat model, only {', '.join(ids)}.")
        if wanted and wanted not in ordered:
            ordered.insert(0, wanted)
        self._model.options = ordered
        if ordered:
            self._model.value = wanted or ordered[0]

    # ------------------------------------------------------------------ UI handlers

    def _on_input_message(self, _widget: Any, content: Mapping[str, Any], _buffers: Any) -> None:
        if isinstance(content, Mapping) and content.get("event") == "submit":
            typed = content.get("value")  # the box's text at Enter (see _chat_input)
            self._send_from_ui(typed if isinstance(typed, str) else None)

    def _send_from_ui(self, typed: str | None = None) -> ChatTurn | None:
        """Send ``typed`` (Enter: the view has emptied its box) or the box's value (Send)."""
        box = self._current_input()
        turn = None
        try:
            turn = self.send(box.value if typed is None else typed)
            if turn.status != "refused":
                box.value = ""
                with contextlib.suppress(Exception):
                    box.send({"do": "focus"})
            return turn
        except Exception as error:  # a click handler never raises
            self.status.error(describe_error(error, mask=self._scrub))
            return None
        finally:
            if typed and (turn is None or turn.status == "refused"):
                with contextlib.suppress(Exception):  # nothing typed is lost
                    box.send({"do": "restore", "value": typed})

    def _on_image_upload(self, change: Mapping[str, Any]) -> None:
        files = [item for item in change["new"] if not is_count_entry(item)]
        if not files:
            return
        try:
            for item in files:
                self.attach(bytes(item["content"]), name=item.get("name") or None)
        finally:
            self._images.show()  # the button counts what is attached, not this upload

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

    # ------------------------------------------------------------------ running requests

    def _start(self, kind: str, body: Callable[[ChatTurn, int], Coroutine[Any, Any, None]]) -> ChatTurn:
        loop = running_loop()
        onrunning_loop = loop is not None
        if loop is None:
            loop = LoopThread.get()
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

        if onrunning_loop:
            turn.run_as(loop.create_task(run()))
        else:
            asyncio.run_coroutine_threadsafe(run(), loop)
        return turn

    def _after_turn(self, finished: ChatTurn) -> None:
        if not any(not t.done() for t in self._turns if t is not finished):
            self._stop_button.disabled = True
            if self.status.kind == "info":
                self.status.clear()

    def _open_client(self) -> contextlib.AbstractAsyncContextManager[AsyncInferenceClient]:
        """The panel's one async client (see :class:`~gpucloud_nb.widgets._chat_client.PanelClient`)."""
        return self._async.open()

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
                         attachments: list[Attachment], audio: media.CheckedAudio | None) -> None:
        model = self._model.value or None
        async with self._open_client() as client:
            if audio is not None:
                self.status.info(f"Transcribing {audio.name}…")
                transcript = str(await client.transcribe(audio.data, filename=audio.name)).strip()
                text = f"{text.rstrip()}\n\n{transcript}" if text.strip() else transcript
            with self._lock:
                if generation != self._generation:
                    return  # cleared while transcribing
                message = self._conversation.add_user(text, attachments)
            self._append(self._user_widget(text, attachments), generation)
            self.status.info(f"Waiting for {model or 'the model'}…")
            await self._say_if_waking()
            stream = reply = throttle = None
            marker, failed = None, False
            try:
                stream = await client.chat(self.request_messages(), model=model, stream=True,
                                           **self._params())
                reply = ReplyView(self._block_layout, self._block_style, self._box_layout)
                throttle = paced(reply)
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
                                self._conversation.add_reply(
                                    turn.text, stopped=marker is not None, incomplete=failed)
                    elif marker:
                        self._forget_last_user(message, None)
                elif marker:
                    self._append(notice("[stopped]"), generation)
                    self._forget_last_user(message, None)

    async def _say_if_waking(self) -> None:
        """An inference instance's client (``chat_client``) tells whether the endpoint must
        start a container first: say so, since its first reply then waits."""
        waking = getattr(self._client, "waking", None)
        if not callable(waking):
            return
        try:
            asleep = await asyncio.to_thread(waking)
        except Exception:  # only a courtesy: the request itself says what is wrong
            return
        if asleep:
            name = getattr(self._client, "endpoint_name", "The endpoint")
            self.status.info(f"Waking up {name}: it had scaled to zero, so the first reply "
                             "waits for a container to start…")

    def _forget_last_user(self, message: dict[str, Any], restore: str | None) -> None:
        self._conversation.forget(message)
        if restore and not self._current_input().value:
            self._current_input().value = restore

    # ------------------------------------------------------------------ message widgets

    def _append(self, widget: widgets.Widget, generation: int | None = None) -> None:
        """Add a message to the list; one from before a ``clear()`` is closed instead."""
        with self._lock:
            if generation is None or generation == self._generation:
                self._messages.children = (*self._messages.children, widget)
                return
        close_tree(widget, self._shared())

    def _user_widget(self, text: str, attachments: list[Attachment]) -> widgets.Widget:
        return user_message(text, attachments, self._block_layout, self._block_style,
                            self._box_layout)

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
        line = ErrorLine(f"<span>⚠ {html.escape(sentence)}</span>",
                          _dom_classes=(CSS_CLASSES["error"],))
        self._append(line)

    @property
    def errors(self) -> list[str]:
        """The error lines shown in the panel, oldest first."""
        found = []
        for child in self._messages.children:
            if isinstance(child, ErrorLine):
                found.append(html.unescape(re.sub(r"<[^>]+>", "", child.value)).removeprefix("⚠ "))
        return found
