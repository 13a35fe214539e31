"""Chat messages as the endpoint takes them, from what a person writes: text, paths, images.

:func:`normalize_messages` turns a string, or ``{"role", "content"}`` dicts whose content mixes
text, ``Path``/``bytes``/PIL images and ``image_url`` parts, into the OpenAI message list; every
image is checked by :mod:`gpucloud_nb.media` first, so nothing invalid is sent.

A chat sends its whole history on every turn. The ``data:`` URLs that :mod:`gpucloud_nb.media`
makes of a checked image are :class:`~gpucloud_nb.media.results.CheckedURL` strings, sent as
they are rather than decoded by Pillow again: an image is checked once, not once per turn. Any
other ``data:`` URL is decoded and checked.

    >>> normalize_messages("Hello")
    [{'role': 'user', 'content': 'Hello'}]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpucloud_nb.errors import InvalidInputError

__all__ = ["normalize_messages"]


def _is_pil_image(value: Any) -> bool:
    pil = sys.modules.get("PIL.Image")  # a PIL image exists only if Pillow was imported
    return pil is not None and isinstance(value, pil.Image)


def _is_image_source(value: Any) -> bool:
    """A path, bytes, binary file object or PIL image (a ``str`` is text, or a URL in a part)."""
    return (isinstance(value, bytes | bytearray | memoryview | os.PathLike)
            or _is_pil_image(value) or (hasattr(value, "read") and not isinstance(value, str)))


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _checked_before(value: Any) -> bool:
    """True for a :class:`~gpucloud_nb.media.results.CheckedURL` (one exists only if media
    was imported)."""
    results = sys.modules.get("gpucloud_nb.media.results")
    return results is not None and isinstance(value, results.CheckedURL)


def _data_url(source: Any) -> str:
    """``source`` checked by :mod:`gpucloud_nb.media` as a ``data:`` URL."""
    if isinstance(source, str) and _checked_before(source):
        return source  # checked when it was made; sent as it is
    from gpucloud_nb import media

    if isinstance(source, bytearray | memoryview):
        source = bytes(source)
    return media.image_data_url(source)


def _checked_url(url: Any, where: str) -> str:
    """An image URL as it will be sent: http(s) unchanged; data: URLs and local paths checked."""
    if _is_image_source(url):
        return _data_url(url)
    if not isinstance(url, str) or not url.strip():
        raise InvalidInputError(f"{where}: an image_url needs a url (http(s)://, data: or a file path).")
    if url.startswith(("http://", "https://")):
        return url
    if not url.startswith("data:") and not Path(url).expanduser().is_file():
        raise InvalidInputError(
            f"{where}: {url[:60]!r} is neither an http(s):// or data: URL nor an existing image file."
        )
    return _data_url(url)  # a data: URL is decoded and its real format checked


def _content_part(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if _is_image_source(item):
        return _image_part(_data_url(item))
    if not isinstance(item, Mapping):
        raise InvalidInputError(
            f"{where}: a content part must be text, an image (path, bytes, PIL image) or a dict, "
            f"not {type(item).__name__}."
        )
    kind = item.get("type")
    if kind == "text":
        if not isinstance(item.get("text"), str):
            raise InvalidInputError(f"{where}: a text part needs a string 'text'.")
        return dict(item)
    if kind == "image_url":
        image = item.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        part = dict(item)
        part["image_url"] = {**(image if isinstance(image, Mapping) else {}),
                             "url": _checked_url(url, where)}
        return part
    if not isinstance(kind, str):
        raise InvalidInputError(f"{where}: a content part needs a 'type' (text or image_url).")
    return dict(item)  # another part type the endpoint may know: passed through


def _extra_image(image: Any, where: str) -> dict[str, Any]:
    if isinstance(image, Mapping):
        if image.get("type") != "image_url":
            raise InvalidInputError(f"{where}: images= takes images or image_url parts only.")
        return _content_part(image, where)
    return _image_part(_checked_url(image, where))


def _content(content: Any, where: str) -> Any:
    if content is None or isinstance(content, str):
        return content
    if _is_image_source(content):
        return [_content_part(content, f"{where}, part 0")]
    if isinstance(content, Mapping):
        return [_content_part(content, f"{where}, part 0")]
    if isinstance(content, Iterable):
        return [_content_part(item, f"{where}, part {i}") for i, item in enumerate(content)]
    raise InvalidInputError(f"{where}: content must be a string or a list of parts.")


def normalize_messages(messages: Any, images: Iterable[Any] | None = None) -> list[dict[str, Any]]:
    """The chat body's ``messages``, with every image checked and inlined as a ``data:`` URL.

    ``messages`` is a string (one user message), one message dict, or a list of message dicts
    (``{"role": ..., "content": ...}``) or of content parts (taken as one user message). Inside a
    content list, a ``str`` is a text part and a :class:`pathlib.Path`, ``bytes`` or PIL image is
    an image part. ``images`` are appended to the last user message. Raises
    :class:`InvalidInputError` (nothing sent) for a malformed message or a refused image.

        >>> normalize_messages(["What colour?", Path("red.png")])  # doctest: +SKIP
        [{'role': 'user', 'content': [
            {'type': 'text', 'text': 'What colour?'},
            {'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,...'}}]}]
    """
    if isinstance(messages, str) or _is_image_source(messages):
        items: list[Any] = [{"role": "user", "content": _content(messages, "message 0")}]
    elif isinstance(messages, Mapping):
        items = [messages]
    elif isinstance(messages, Iterable):
        items = list(messages)
        if items and not any(isinstance(item, Mapping) and "role" in item for item in items):
            items = [{"role": "user", "content": items}]  # a bare list of content parts
    else:
        raise InvalidInputError("messages must be a string or a list of {'role', 'content'} dicts.")
    result = []
    for index, message in enumerate(items):
        where = f"message {index}"
        if not isinstance(message, Mapping):
            raise InvalidInputError(f"{where}: a message must be a dict with 'role' and 'content'.")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidInputError(f"{where}: a message needs a 'role' such as 'user'.")
        normalized = dict(message)
        normalized["content"] = _content(message.get("content"), where)
        result.append(normalized)
    if images is None:
        extra: list[Any] = []
    elif isinstance(images, str | Mapping) or _is_image_source(images):
        extra = [images]
    else:
        extra = list(images)
    if extra:
        parts = [_extra_image(image, f"images[{i}]") for i, image in enumerate(extra)]
        users = [i for i, message in enumerate(result) if message["role"] == "user"]
        if not users:
            result.append({"role": "user", "content": parts})
        else:
            last = result[users[-1]]
            content = last["content"]
            if content is None or content == "":
                last["content"] = parts
            elif isinstance(content, str):
                last["content"] = [{"type": "text", "text": content}, *parts]
            else:
                last["content"] = [*content, *parts]
    if not result:
        raise InvalidInputError("messages is empty: give at least one message.")
    return result
