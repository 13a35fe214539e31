"""What the sandbox's inference endpoint accepts in a request, and the errors it answers.

Every check raises a :class:`~gpucloud_nb.sandbox.http.Problem` that names the field at fault
(``messages[0].content[1].type`` in ``param``); the endpoint answers it in OpenAI's shape.

    >>> check_messages([{"role": "user", "content": "Hello there"}])
    (2, 0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucloud_nb.sandbox.http import Problem

__all__ = ["ROLES", "check_messages", "check_number", "positive_int", "shown"]

ROLES = ("system", "developer", "user", "assistant", "tool")


def shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_part(part: Any, where: str) -> int:
    """Check one content part; return the number of images in it (0 or 1)."""
    if not isinstance(part, dict):
        raise Problem(400, f"{where} must be an object with a 'type'.", param=where)
    kind = part.get("type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise Problem(400, f"{where}.text must be a string.", param=f"{where}.text")
        return 0
    if kind == "image_url":
        image = part.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str) or not image["url"]:
            raise Problem(400, f"{where}.image_url must be an object with a 'url' string.",
                          param=f"{where}.image_url")
        return 1
    raise Problem(400, f"{where}.type must be 'text' or 'image_url', not {shown(kind)!r}.",
                  param=f"{where}.type")


def check_messages(messages: Any) -> tuple[int, int]:
    """Check the messages; return (words of text, images) for the usage counts."""
    if not isinstance(messages, list) or not messages:
        raise Problem(400, "'messages' must be a non-empty array of messages.", param="messages")
    words = images = 0
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise Problem(400, f"{where} must be an object with 'role' and 'content'.", param=where)
        role = message.get("role")
        if role not in ROLES:
            raise Problem(400, f"{where}.role must be one of {', '.join(ROLES)}, not "
                               f"{shown(role)!r}.", param=f"{where}.role")
        content = message.get("content")
        if isinstance(content, str):
            words += len(content.split())
        elif isinstance(content, list):
            for number, part in enumerate(content):
                images += check_part(part, f"{where}.content[{number}]")
                if part.get("type") == "text":
                    words += len(part["text"].split())
        elif not (content is None and role == "assistant"):
            raise Problem(400, f"{where}.content must be a string or an array of parts.",
                          param=f"{where}.content")
    return words, images


def positive_int(body: Mapping[str, Any], name: str, limit: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise Problem(400, f"'{name}' must be a whole number from 1 to {limit}.", param=name)
    return value


def check_number(body: Mapping[str, Any], name: str, low: float, high: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise Problem(400, f"'{name}' must be a number from {low:g} to {high:g}.", param=name)
