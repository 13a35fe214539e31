"""A chat's conversation without a widget: history, the messages a request sends, Markdown.

:class:`Conversation` keeps the user and assistant messages in the OpenAI shape, with what the
panel showed about each (stopped, incomplete) and a short note per attached image;
:func:`make_attachment` checks an image with :mod:`gpucloud_nb.media` before it can be added.

    >>> talk = Conversation()
    >>> message = talk.add_user("Hello")
    >>> talk.add_reply("Hi!", stopped=False, incomplete=False)
    >>> talk.request_messages("Be brief.")[0]
    {'role': 'system', 'content': 'Be brief.'}
    >>> print(talk.to_markdown(""))
    ## User
    <BLANKLINE>
    Hello
    <BLANKLINE>
    ## Assistant
    <BLANKLINE>
    Hi!
    <BLANKLINE>
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpucloud_nb import media
from gpucloud_nb.client.messages import normalize_messages

__all__ = ["THUMBNAIL_SIDE", "Attachment", "Conversation", "make_attachment", "note_from_url"]

log = logging.getLogger("gpucloud_nb.widgets")

THUMBNAIL_SIDE = 96
"""Longest side, in pixels, of an attachment's thumbnail."""


@dataclass(frozen=True)
class Attachment:
    url: str                  # data: URL (checked) or an http(s):// address passed through
    note: str                 # "64×64 PNG", or the address
    thumbnail: bytes | None   # a small PNG/JPEG, None for an address
    thumbnail_format: str = "png"


def _thumbnail(data: bytes, side: int = THUMBNAIL_SIDE) -> tuple[bytes, str]:
    made = media.thumbnail(data, side)  # reduced decode: bounded memory for any image
    if made is None:
        raise ValueError("the image is too large for a thumbnail")
    return made


def make_attachment(image: Any, name: str | None = None) -> Attachment:
    """Check an image with :mod:`gpucloud_nb.media` (InvalidInputError when refused)."""
    if isinstance(image, str) and image[:8].lower().startswith(("http://", "https://")):
        return Attachment(url=image, note=image, thumbnail=None)
    if isinstance(image, bytearray | memoryview):
        image = bytes(image)
    checked = media.check_image(image, name=name)
    try:
        thumb, fmt = _thumbnail(checked.data)
    except Exception:  # a thumbnail is a nicety: the checked image is what is sent
        log.debug("No thumbnail for an attachment", exc_info=True)
        thumb, fmt = None, "png"
    return Attachment(url=checked.data_url(), note=f"{checked.width}×{checked.height} {checked.format}",
                       thumbnail=thumb, thumbnail_format=fmt)


def note_from_url(url: str) -> str:
    if url.startswith("data:"):
        kind = url[5:].split(";", 1)[0].split("/")[-1].upper() or "image"
        return kind
    return url


class Conversation:
    """The messages of one chat, oldest first; safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._history: list[dict[str, Any]] = []
        self._meta: list[dict[str, Any]] = []  # per message: stopped / incomplete flags
        self._notes: dict[str, str] = {}       # image URL -> "64×64 PNG"

    @property
    def history(self) -> list[dict[str, Any]]:
        """The messages as OpenAI-style dicts (a copy; the system prompt is not included)."""
        with self._lock:
            return copy.deepcopy(self._history)

    def __len__(self) -> int:
        return len(self._history)

    def add_user(self, text: str, attachments: Sequence[Attachment] = ()) -> dict[str, Any]:
        """Append a user message with ``text`` and images; returns it (for :meth:`forget`).

        The message is built once, as the endpoint takes it
        (:func:`~gpucloud_nb.client.messages.normalize_messages`), so later turns that send the
        history again do not check its images again.
        """
        content: str | list[Any] = text
        if attachments:
            content = [text] if text.strip() else []
            content += [{"type": "image_url", "image_url": {"url": a.url}} for a in attachments]
        message = normalize_messages([{"role": "user", "content": content}])[0]
        with self._lock:
            for attachment in attachments:
                self._notes[attachment.url] = attachment.note
            self._history.append(message)
            self._meta.append({})
        return message

    def add_reply(self, text: str, *, stopped: bool, incomplete: bool) -> None:
        """Append the assistant's reply, marked when Stop or an error cut it short."""
        with self._lock:
            self._history.append({"role": "assistant", "content": text})
            self._meta.append({"stopped": stopped, "incomplete": incomplete})

    def forget(self, message: dict[str, Any]) -> None:
        """Remove ``message`` (a request that never got a reply), if it is still there."""
        with self._lock:
            for index in range(len(self._history) - 1, -1, -1):
                if self._history[index] is message:
                    del self._history[index]
                    del self._meta[index]
                    return

    def clear(self) -> None:
        """Forget every message."""
        with self._lock:
            self._history.clear()
            self._meta.clear()
            self._notes.clear()

    def request_messages(self, system: str) -> list[dict[str, Any]]:
        """The ``messages`` the next request sends: ``system`` (if any), then the history."""
        system = system.strip()
        return ([{"role": "system", "content": system}] if system else []) + self.history

    def to_markdown(self, system: str) -> str:
        """The conversation as Markdown: roles as headings, images as ``[image: 64×64 PNG]``."""
        lines: list[str] = []
        if system.strip():
            lines += ["## System", "", system.strip(), ""]
        with self._lock:
            entries = list(zip(self._history, self._meta, strict=False))
            notes = dict(self._notes)
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
                        lines.append(f"[image: {notes.get(url) or note_from_url(url)}]")
            if meta.get("stopped"):
                lines.append("[stopped]")
            elif meta.get("incomplete"):
                lines.append("[incomplete]")
            lines.append("")
        return "\n".join(lines).rstrip() + "\n"
