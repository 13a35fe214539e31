"""The inference endpoint's records: models, chat completions and chunks, usage, transcriptions.

Each is read from the endpoint's JSON in the OpenAI shapes, tolerantly (missing fields become
empty), and keeps the JSON it came from in ``raw``.

    >>> ChatChunk.from_json({"choices": [{"delta": {"content": "Hi"}}]}).delta
    'Hi'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucloud_nb.errors import UnreadableResponseError

__all__ = [
    "CHAT_PATH",
    "MODELS_PATH",
    "TRANSCRIPTIONS_PATH",
    "ChatChunk",
    "ChatCompletion",
    "ChatMessage",
    "ChatRequest",
    "Choice",
    "ModelInfo",
    "Transcription",
    "Usage",
    "mapping_or_empty",
]

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def mapping_or_empty(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One entry of ``/v1/models``: ``id`` is what ``model=`` takes."""

    id: str
    owned_by: str = ""
    created: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelInfo:
        return cls(id=str(data.get("id", "")), owned_by=str(data.get("owned_by") or ""),
                   created=_int_or_none(data.get("created")), raw=data)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts the endpoint reported."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def from_json(cls, data: Any) -> Usage | None:
        if not isinstance(data, Mapping):
            return None
        return cls(prompt_tokens=_int_or_none(data.get("prompt_tokens")) or 0,
                   completion_tokens=_int_or_none(data.get("completion_tokens")) or 0,
                   total_tokens=_int_or_none(data.get("total_tokens")) or 0)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """A reply message: ``role`` (``assistant``) and its text ``content``."""

    role: str
    content: str | None


@dataclass(frozen=True, slots=True)
class Choice:
    """One alternative reply; there is one unless ``n=`` asked for more."""

    index: int
    message: ChatMessage
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ChatCompletion:
    """A whole chat reply. ``text`` is ``choices[0].message.content`` (``""`` when absent).

        >>> reply = chat.chat("Hi")  # doctest: +SKIP
        >>> reply.text == reply.choices[0].message.content  # doctest: +SKIP
        True
    """

    id: str
    model: str
    created: int | None
    choices: tuple[Choice, ...]
    usage: Usage | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def text(self) -> str:
        return (self.choices[0].message.content or "") if self.choices else ""

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None

    @classmethod
    def from_json(cls, data: Any) -> ChatCompletion:
        if not isinstance(data, Mapping) or not isinstance(data.get("choices"), list):
            raise UnreadableResponseError(
                "The endpoint's reply is not a chat completion (no choices).")
        choices = []
        for position, item in enumerate(data["choices"]):
            item = mapping_or_empty(item)
            message = mapping_or_empty(item.get("message"))
            content = message.get("content")
            choices.append(Choice(
                index=_int_or_none(item.get("index")) or position,
                message=ChatMessage(role=str(message.get("role") or "assistant"),
                                    content=None if content is None else str(content)),
                finish_reason=item.get("finish_reason"),
            ))
        return cls(id=str(data.get("id") or ""), model=str(data.get("model") or ""),
                   created=_int_or_none(data.get("created")), choices=tuple(choices),
                   usage=Usage.from_json(data.get("usage")), raw=data)


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One event of a streamed reply: ``delta`` is the new text (``""`` for none).

    ``finish_reason`` is set on the last chunk of a choice, ``usage`` on the chunk that carries
    the token counts (when the endpoint sends them, e.g. with
    ``stream_options={"include_usage": True}``).
    """

    delta: str
    finish_reason: str | None = None
    role: str | None = None
    index: int = 0
    usage: Usage | None = None
    id: str = ""
    model: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChatChunk:
        choices = data.get("choices")
        first = mapping_or_empty(choices[0]) if isinstance(choices, list) and choices else {}
        delta = mapping_or_empty(first.get("delta"))
        content = delta.get("content")
        role = delta.get("role")
        return cls(delta="" if content is None else str(content),
                   finish_reason=first.get("finish_reason"),
                   role=role if isinstance(role, str) else None,
                   index=_int_or_none(first.get("index")) or 0,
                   usage=Usage.from_json(data.get("usage")),
                   id=str(data.get("id") or ""), model=str(data.get("model") or ""), raw=data)


class Transcription(str):
    """The transcribed text: a ``str``, with ``.text`` (the same text) and ``.raw`` (the body)."""

    raw: Mapping[str, Any]

    def __new__(cls, text: str, raw: Mapping[str, Any] | None = None) -> Transcription:
        self = super().__new__(cls, text)
        self.raw = raw if raw is not None else {"text": text}
        return self

    @property
    def text(self) -> str:
        return str.__str__(self)


# messages -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    """A chat request ready to send: the model it names and its JSON body."""

    model: str
    body: dict[str, Any]
