"""The inference endpoint of an instance: list models, chat (streamed or not), transcribe audio.

    >>> chat = InferenceClient("https://abc-123.inference.example", secret="<SECRET>")
    >>> chat.models()
    ['llava-1.6']
    >>> chat.chat("Hello!").text
    'Hello! How can I help?'
    >>> chat.chat(["What is in this picture?", Path("cat.png")]).choices[0].message.content
    >>> with chat.chat("Tell me a story", stream=True) as stream:
    ...     for chunk in stream:
    ...         print(chunk.delta, end="")
    >>> chat.transcribe("meeting.wav").text

The endpoint follows the widely used chat-completion interface (``/v1/models``,
``/v1/chat/completions``, ``/v1/audio/transcriptions``); the instance secret goes in the
``x-api-key`` header of every request. Choices where the spec says "not shown", documented once:

- Response bodies are read in the OpenAI shapes (``choices[0].message.content``,
  ``choices[0].delta.content`` in ``chat.completion.chunk`` events, ``{"text": ...}`` for a
  transcription). Error bodies are read in the OpenAI shape ``{"error": {"message": ...}}`` or the
  management shape ``{"message": ...}``.
- ``model=None`` uses the endpoint's first listed model (the list is fetched once and cached;
  ``models()`` refreshes it). ``transcribe`` prefers a listed model whose id looks like a speech
  model (whisper, speech, transcribe, asr, stt, audio), else the first.
- A non-streamed chat and a transcription are safe to repeat, so they are retried on 429
  (honouring ``Retry-After``), 5xx and connection errors like reads. A stream is never retried:
  an error before it starts (such as a 429) raises at once. A stream that ends without a
  ``finish_reason`` or ``data: [DONE]`` was cut off (a proxy, a crashed server): iterating it
  raises :class:`ConnectionFailedError` ("The reply was cut off before it finished...") after
  the chunks that did arrive, rather than passing a truncated reply off as whole.
- Secrets never show: every error text (HTTP errors and error events inside a stream alike) is
  scrubbed of the secret with :func:`gpucloud_nb._secrets.scrub`. A user name and password in
  the endpoint URL (``http://user:pass@host``) are not sent (the secret authenticates) and show
  as ``http://***@host`` in reprs and errors; httpx never sees them, so its logs hold none.
- Images are checked and turned into ``data:`` URLs by :mod:`gpucloud_nb.media` before anything is
  sent, and audio is checked by ``media.check_audio``; ``http(s)://`` image URLs are passed
  through unchanged for the endpoint to fetch.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar, overload

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse

from gpucloud_nb._secrets import Secret, mask, mask_url, scrub, without_userinfo
from gpucloud_nb.client._auth import ApiKeyAuth
from gpucloud_nb.client._ops import (
    AsyncDriver,
    Call,
    Op,
    RetryPolicy,
    SyncDriver,
    _describe,
    error_from_response,
    run_async,
    run_sync,
    send,
)
from gpucloud_nb.errors import (
    APIError,
    ConnectionFailedError,
    InvalidInputError,
    NotFoundError,
    ServerError,
)

__all__ = [
    "AsyncChatStream",
    "AsyncInferenceClient",
    "ChatChunk",
    "ChatCompletion",
    "ChatMessage",
    "ChatStream",
    "Choice",
    "InferenceClient",
    "ModelInfo",
    "Transcription",
    "Usage",
    "normalize_messages",
]

D = TypeVar("D", SyncDriver, AsyncDriver)
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
_SPEECH_MODEL = re.compile(r"whisper|speech|transcri|asr|stt|audio", re.IGNORECASE)


# records ------------------------------------------------------------------------------------


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _mapping(value: Any) -> Mapping[str, Any]:
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

        >>> reply = chat.chat("Hi")
        >>> reply.text == reply.choices[0].message.content
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
            raise ServerError("The endpoint's reply is not a chat completion (no choices).",
                              status_code=200, path=CHAT_PATH)
        choices = []
        for position, item in enumerate(data["choices"]):
            item = _mapping(item)
            message = _mapping(item.get("message"))
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
        first = _mapping(choices[0]) if isinstance(choices, list) and choices else {}
        delta = _mapping(first.get("delta"))
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


def _is_pil_image(value: Any) -> bool:
    pil = sys.modules.get("PIL.Image")  # a PIL image exists only if Pillow was imported
    return pil is not None and isinstance(value, pil.Image)


def _is_image_source(value: Any) -> bool:
    """A path, bytes, binary file object or PIL image (a ``str`` is text, or a URL in a part)."""
    return (isinstance(value, bytes | bytearray | memoryview | os.PathLike)
            or _is_pil_image(value) or (hasattr(value, "read") and not isinstance(value, str)))


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _data_url(source: Any) -> str:
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

        >>> normalize_messages(["What colour?", Path("red.png")])
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


# operations shared by the sync and async clients -------------------------------------------


def _endpoint(url: str) -> str:
    if not isinstance(url, str) or not url.strip().startswith(("http://", "https://")):
        raise InvalidInputError(
            f"The endpoint URL must start with http:// or https://, not {mask_url(str(url))[:80]!r}."
        )
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    return url


def _secret(secret: str | Secret) -> Secret:
    if isinstance(secret, Secret):
        return secret
    if not isinstance(secret, str) or not secret:
        raise InvalidInputError(
            "No inference secret: pass the instance's secret (on its page in the web console)."
        )
    return Secret(secret)


def _reworded(error: APIError, message: str) -> APIError:
    return type(error)(message, status_code=error.status_code, path=error.path,
                       timestamp=error.timestamp, retry_after=error.retry_after)


@dataclass(frozen=True)
class _ChatRequest:
    model: str
    body: dict[str, Any]


#: Where ``InferenceClient()`` with no arguments finds its endpoint and secret.
URL_VARIABLE, SECRET_VARIABLE = "GPUCLOUD_INFERENCE_URL", "GPUCLOUD_INFERENCE_SECRET"


def _from_environment(endpoint_url: str | None,
                      secret: str | Secret | None) -> tuple[str, str | Secret]:
    """The endpoint and secret given, else ``GPUCLOUD_INFERENCE_URL`` / ``_SECRET``."""
    endpoint_url = endpoint_url or os.environ.get(URL_VARIABLE)
    secret = secret or os.environ.get(SECRET_VARIABLE)
    missing = [name for name, value in ((URL_VARIABLE, endpoint_url), (SECRET_VARIABLE, secret))
               if not value]
    if missing:
        raise InvalidInputError(
            f"No inference endpoint: pass endpoint_url and secret, or set {' and '.join(missing)}.")
    assert endpoint_url is not None and secret is not None
    return endpoint_url, secret


class _InferenceOps(Generic[D]):
    """State and operations of one client; the sync and async classes add the I/O."""

    _driver: D

    def _setup(self, endpoint_url: str | None, secret: str | Secret | None,
               max_retries: int) -> ApiKeyAuth:
        endpoint_url, secret = _from_environment(endpoint_url, secret)
        self.endpoint_url = _endpoint(endpoint_url)
        self._secret = _secret(secret)
        self._policy = RetryPolicy(max_retries=max_retries)
        self._models: list[ModelInfo] | None = None
        return ApiKeyAuth(self._secret)

    @property
    def secret_hint(self) -> str:
        """The secret, masked: at most its first 3 and last 4 characters."""
        return mask(self._secret.reveal())

    @property
    def shown_url(self) -> str:
        """``endpoint_url`` as it may be shown: a user name and password in it become ``***``."""
        return mask_url(self.endpoint_url)

    def _secrets(self) -> tuple[str]:
        return (self._secret.reveal(),)

    def _send(self, call: Call) -> Op[Any]:
        return send(call, self._policy, flavor="inference", secrets=self._secrets())

    def _model_error(self, error: APIError, model: str) -> APIError:
        """Say which model a 404 is about, or that the URL is wrong when it is not about one."""
        if not isinstance(error, NotFoundError):
            return error
        lowered = error.message.lower()
        if model.lower() in lowered or re.search(r"\bmodel\b", lowered):
            known = f" This endpoint serves: {', '.join(m.id for m in self._models)}." \
                if self._models else ""
            return _reworded(error, f"Model {model} not found.{known}")
        return _reworded(error, f"Nothing at {self.shown_url}{error.path or ''} (404); check "
                                "the endpoint URL (the instance's base address, before /v1).")

    def model_records(self) -> Op[list[ModelInfo]]:
        """The endpoint's models as :class:`ModelInfo` records (``id``, ``owned_by``, ``created``).

            >>> chat.model_records()[0].id
        """
        try:
            data = yield from self._send(Call("GET", MODELS_PATH))
        except NotFoundError as error:
            raise _reworded(error, f"No model list at {self.shown_url}{MODELS_PATH} (404); check "
                                   "the endpoint URL (the instance's base address, before /v1).") from None
        items = data.get("data") if isinstance(data, Mapping) else data
        if not isinstance(items, list):
            raise ServerError("The endpoint's model list is not in the expected shape ({'data': [...]}).",
                              status_code=200, path=MODELS_PATH)
        records = [ModelInfo.from_json(item) for item in items if isinstance(item, Mapping)]
        self._models = [record for record in records if record.id]
        return list(self._models)

    def models(self) -> Op[list[str]]:
        """The ids of the endpoint's models (also refreshes the cached list ``model=None`` uses).

            >>> chat.models()
            ['sandbox-vision-1', 'sandbox-speech-1']
        """
        records = yield from _InferenceOps.model_records(self)
        return [record.id for record in records]

    def _default_model(self, speech: bool = False) -> Op[str]:
        if self._models is None:
            yield from _InferenceOps.model_records(self)
        models = self._models or []
        if not models:
            raise InvalidInputError(f"The endpoint at {self.shown_url} lists no model; pass model=.")
        if speech:
            for record in models:
                if _SPEECH_MODEL.search(record.id):
                    return record.id
        return models[0].id

    def _chat_request(self, messages: Any, model: str | None, stream: bool,
                      images: Iterable[Any] | None, params: Mapping[str, Any]) -> Op[_ChatRequest]:
        body_messages = normalize_messages(messages, images)  # checked before anything is sent
        if model is None:
            model = yield from self._default_model()
        elif not isinstance(model, str) or not model:
            raise InvalidInputError("model must be a model id (see models()) or None.")
        body: dict[str, Any] = {"model": model, "messages": body_messages, **params}
        if stream:
            body["stream"] = True
        return _ChatRequest(model, body)

    def _complete(self, request: _ChatRequest) -> Op[ChatCompletion]:
        try:
            data = yield from self._send(Call("POST", CHAT_PATH, json=request.body))
        except APIError as error:
            raise self._model_error(error, request.model) from None
        return ChatCompletion.from_json(data)

    def transcribe(self, file: Any, model: str | None = None, *, filename: str | None = None,
                   **params: Any) -> Op[Transcription]:
        """Transcribe an audio file (path, bytes or binary file object) and return its text.

        The file is checked first (type and the 25 MB limit; nothing is sent on refusal).
        ``**params`` become form fields (``language``, ``prompt``, ``temperature``). The result
        is a ``str`` with ``.text`` and ``.raw``.

            >>> chat.transcribe("question.wav")
            'what is the capital of france'
        """
        from gpucloud_nb import media

        audio = media.check_audio(file, name=filename)
        response_format = params.get("response_format", "json")
        if response_format not in ("json", "verbose_json"):
            raise InvalidInputError("transcribe() reads JSON replies: response_format must be "
                                    "'json' or 'verbose_json'.")
        if model is None:
            model = yield from self._default_model(speech=True)
        fields = {key: value if isinstance(value, str) else json.dumps(value)
                  for key, value in params.items() if value is not None}
        fields["model"] = model
        call = Call("POST", TRANSCRIPTIONS_PATH, data=fields,
                    files={"file": (audio.name, audio.data, audio.mime)})
        try:
            data = yield from self._send(call)
        except APIError as error:
            raise self._model_error(error, model) from None
        if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
            raise ServerError("The endpoint's transcription has no text.", status_code=200,
                              path=TRANSCRIPTIONS_PATH)
        return Transcription(data["text"], data)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.shown_url!r} secret={self.secret_hint!r}>"


# streams ------------------------------------------------------------------------------------


_DONE = object()


class _StreamBase:
    """What the sync and async streams share: opening checks, event parsing, accumulated text."""

    def __init__(self, request: _ChatRequest, ops: _InferenceOps[Any]) -> None:
        self.model = request.model
        self._parts: list[str] = []          # the deltas, appended as they come
        self._joined: tuple[int, str] = (0, "")  # how many parts ``text`` last joined, and it
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.id = ""
        self.closed = False
        self.complete = False  # a finish_reason or [DONE] came: the reply was not cut off
        self._ops = ops

    @property
    def text(self) -> str:
        """The reply's text so far (joined when read, so a long reply streams in linear time)."""
        count, joined = self._joined
        end = len(self._parts)
        if end > count:
            joined += "".join(self._parts[count:end])
            self._joined = (end, joined)
        return joined

    def _error(self, response: httpx.Response) -> APIError:
        error = error_from_response(response, flavor="inference", secrets=self._ops._secrets())
        return self._ops._model_error(error, self.model)

    def _events_from_json(self, response: httpx.Response) -> Iterator[ServerSentEvent]:
        """An endpoint that answered a stream request with one JSON completion: one chunk."""
        try:
            completion = ChatCompletion.from_json(response.json())
        except ValueError:
            raise ServerError("The endpoint answered the stream request with neither events nor "
                              "JSON.", status_code=response.status_code, path=CHAT_PATH) from None
        chunk = {"id": completion.id, "model": completion.model, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": completion.text},
                              "finish_reason": completion.finish_reason or "stop"}],
                 "usage": completion.raw.get("usage")}
        return iter([ServerSentEvent(data=json.dumps(chunk)), ServerSentEvent(data="[DONE]")])

    @staticmethod
    def _is_event_stream(response: httpx.Response) -> bool:
        return "text/event-stream" in response.headers.get("content-type", "")

    @staticmethod
    def _cut_off() -> ConnectionFailedError:
        return ConnectionFailedError("The reply was cut off before it finished: the stream ended "
                                     "without a finish_reason or [DONE].")

    def _transport_error(self, exc: httpx.TransportError, started: bool) -> ConnectionFailedError:
        when = "while streaming the reply" if started else f"(POST {CHAT_PATH})"
        return ConnectionFailedError(f"The server {_describe(exc)} {when}.")

    def _parse(self, event: ServerSentEvent) -> ChatChunk | object | None:
        """A chunk, ``_DONE`` at ``[DONE]``, or ``None`` for an event to skip."""
        data = event.data.strip()
        if not data:
            return None
        if data == "[DONE]":
            self.complete = True
            return _DONE
        try:
            payload = json.loads(data)
        except ValueError:
            raise ServerError("The endpoint streamed an event that is not JSON.", status_code=200,
                              path=CHAT_PATH) from None
        if not isinstance(payload, Mapping):
            return None
        if "error" in payload or event.event == "error":
            detail = _mapping(payload.get("error")).get("message") or payload.get("message") or ""
            text = f"The endpoint failed while streaming: {detail}" if detail else \
                "The endpoint failed while streaming."
            raise ServerError(scrub(text.rstrip(".") + ".", *self._ops._secrets()), status_code=500,
                              path=CHAT_PATH)
        chunk = ChatChunk.from_json(payload)
        if chunk.delta:
            self._parts.append(chunk.delta)
        self.id = self.id or chunk.id
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
            self.complete = True
        if chunk.usage is not None:
            self.usage = chunk.usage
        return chunk

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} model={self.model!r} {state} text={self.text[:40]!r}>"


class ChatStream(_StreamBase):
    """A streamed chat reply: iterate for :class:`ChatChunk` records; ``text`` accumulates.

    ``close()`` (or leaving the ``with`` block) stops reading and releases the connection; the
    client stays usable. An error status before the stream starts raises from ``chat()``; a
    stream cut off before its ``finish_reason`` or ``[DONE]`` raises
    :class:`~gpucloud_nb.errors.ConnectionFailedError` at its end (``text`` keeps what came,
    ``complete`` stays False).

        >>> with chat.chat("Count to ten", stream=True) as stream:
        ...     for chunk in stream:
        ...         print(chunk.delta, end="", flush=True)
        >>> stream.text, stream.finish_reason
    """

    def __init__(self, http: httpx.Client, request: _ChatRequest, ops: _InferenceOps[Any]) -> None:
        super().__init__(request, ops)
        self._context = connect_sse(http, "POST", CHAT_PATH, json=request.body)
        try:
            source = self._context.__enter__()
        except httpx.TransportError as exc:
            raise self._transport_error(exc, started=False) from None
        try:
            response = source.response
            if response.status_code >= 300:  # a redirect is an error too
                response.read()
                raise self._error(response)
            if self._is_event_stream(response):
                self._events: Iterator[ServerSentEvent] = source.iter_sse()
            else:
                response.read()
                self._events = self._events_from_json(response)
        except httpx.TransportError as exc:
            self._release()
            raise self._transport_error(exc, started=False) from None
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        self.closed = True
        close = getattr(self._events, "close", None) if hasattr(self, "_events") else None
        try:
            if close is not None:
                close()
        finally:
            self._context.__exit__(None, None, None)

    def close(self) -> None:
        """Stop reading the reply and release its connection. Safe to call twice."""
        if not self.closed:
            self._release()

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> ChatChunk:
        while not self.closed:
            try:
                event = next(self._events)
                chunk = self._parse(event)
            except StopIteration:
                self.close()
                if not self.complete:
                    raise self._cut_off() from None
                break
            except httpx.TransportError as exc:
                self.close()
                raise self._transport_error(exc, started=True) from None
            except BaseException:
                self.close()
                raise
            if chunk is _DONE:
                break
            if isinstance(chunk, ChatChunk):
                return chunk
        self.close()
        raise StopIteration

    def read(self) -> str:
        """Read the rest of the reply and return the whole text."""
        for _ in self:
            pass
        return self.text

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class AsyncChatStream(_StreamBase):
    """The asyncio twin of :class:`ChatStream`: ``async for``, ``aclose()``, ``async with``.

        >>> async with await chat.chat("Count to ten", stream=True) as stream:
        ...     async for chunk in stream:
        ...         print(chunk.delta, end="")
    """

    _events: AsyncIterator[ServerSentEvent] | Iterator[ServerSentEvent]

    def __init__(self, request: _ChatRequest, ops: _InferenceOps[Any]) -> None:
        super().__init__(request, ops)

    @classmethod
    async def open(cls, http: httpx.AsyncClient, request: _ChatRequest,
                   ops: _InferenceOps[Any]) -> AsyncChatStream:
        self = cls(request, ops)
        self._context = aconnect_sse(http, "POST", CHAT_PATH, json=request.body)
        try:
            source = await self._context.__aenter__()
        except httpx.TransportError as exc:
            raise self._transport_error(exc, started=False) from None
        try:
            response = source.response
            if response.status_code >= 300:  # a redirect is an error too
                await response.aread()
                raise self._error(response)
            if self._is_event_stream(response):
                self._events = source.aiter_sse()
            else:
                await response.aread()
                self._events = self._events_from_json(response)
        except httpx.TransportError as exc:
            await self._release()
            raise self._transport_error(exc, started=False) from None
        except BaseException:
            await self._release()
            raise
        return self

    async def _release(self) -> None:
        self.closed = True
        events = getattr(self, "_events", None)
        try:
            if hasattr(events, "aclose"):
                await events.aclose()  # type: ignore[union-attr]
        finally:
            await self._context.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Stop reading the reply and release its connection. Safe to call twice."""
        if not self.closed:
            await self._release()

    def __aiter__(self) -> AsyncChatStream:
        return self

    async def __anext__(self) -> ChatChunk:
        while not self.closed:
            try:
                if isinstance(self._events, Iterator):
                    event = next(self._events)
                else:
                    event = await self._events.__anext__()
                chunk = self._parse(event)
            except (StopIteration, StopAsyncIteration):
                await self.aclose()
                if not self.complete:
                    raise self._cut_off() from None
                break
            except httpx.TransportError as exc:
                await self.aclose()
                raise self._transport_error(exc, started=True) from None
            except BaseException:
                await self.aclose()
                raise
            if chunk is _DONE:
                break
            if isinstance(chunk, ChatChunk):
                return chunk
        await self.aclose()
        raise StopAsyncIteration

    async def read(self) -> str:
        """Read the rest of the reply and return the whole text."""
        async for _ in self:
            pass
        return self.text

    async def __aenter__(self) -> AsyncChatStream:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()


# the clients --------------------------------------------------------------------------------


class InferenceClient(_InferenceOps[SyncDriver]):
    """A client for one inference instance's endpoint.

    ``endpoint_url`` is the instance's base address, before ``/v1`` (a trailing ``/`` or ``/v1``
    is tolerated); ``secret`` is the instance secret, sent as ``x-api-key`` and never shown.
    Without them, ``GPUCLOUD_INFERENCE_URL`` and ``GPUCLOUD_INFERENCE_SECRET`` are read (as
    openai's client reads ``OPENAI_BASE_URL``).

        >>> chat = InferenceClient(instance_url, secret)
        >>> chat = InferenceClient()        # from GPUCLOUD_INFERENCE_URL / _SECRET
        >>> chat.chat([{"role": "system", "content": "Be brief."},
        ...            {"role": "user", "content": ["What is this?", Path("cat.jpg")]}]).text
    """

    def __init__(self, endpoint_url: str | None = None, secret: str | Secret | None = None, *,
                 timeout: float = 60.0,
                 max_retries: int = 3, transport: httpx.BaseTransport | None = None) -> None:
        auth = self._setup(endpoint_url, secret, max_retries)
        self._timeout = timeout
        self._http = httpx.Client(base_url=without_userinfo(self.endpoint_url), auth=auth,
                                  timeout=timeout,
                                  transport=transport)
        self._driver = SyncDriver(self._http)

    models = run_sync(_InferenceOps.models)
    model_records = run_sync(_InferenceOps.model_records)
    transcribe = run_sync(_InferenceOps.transcribe)

    @overload
    def chat(self, messages: Any, model: str | None = ..., stream: Literal[False] = ..., *,
             images: Iterable[Any] | None = ..., **params: Any) -> ChatCompletion: ...

    @overload
    def chat(self, messages: Any, model: str | None = ..., stream: Literal[True] = ..., *,
             images: Iterable[Any] | None = ..., **params: Any) -> ChatStream: ...

    def chat(self, messages: Any, model: str | None = None, stream: bool = False, *,
             images: Iterable[Any] | None = None, **params: Any) -> ChatCompletion | ChatStream:
        """Send a chat and return the reply, or with ``stream=True`` a :class:`ChatStream`.

        ``messages``: a string, or ``{"role", "content"}`` dicts whose content is a string or a
        list of parts (text, ``image_url`` parts, or conveniences: ``str`` text, ``Path``/``bytes``/
        PIL images). ``images=`` attaches images to the last user message. ``**params`` go into
        the body as they are (``temperature``, ``max_tokens``, ...).

            >>> chat.chat("Name three rivers.", temperature=0).text
        """
        request = self._driver.run(self._chat_request(messages, model, stream, images, params))
        if stream:
            return ChatStream(self._http, request, self)
        return self._driver.run(self._complete(request))

    def to_async(self) -> AsyncInferenceClient:
        """An :class:`AsyncInferenceClient` for the same endpoint and secret (the secret stays hidden).

            >>> async with chat.to_async() as achat:
            ...     stream = await achat.chat("Hi", stream=True)
        """
        twin = AsyncInferenceClient(self.endpoint_url, self._secret, timeout=self._timeout,
                                    max_retries=self._policy.max_retries)
        twin._models = None if self._models is None else list(self._models)
        return twin

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncInferenceClient(_InferenceOps[AsyncDriver]):
    """The asyncio twin of :class:`InferenceClient`: the same methods as coroutines.

        >>> async with AsyncInferenceClient(url, secret) as chat:
        ...     stream = await chat.chat("Hello", stream=True)
        ...     async for chunk in stream:
        ...         print(chunk.delta, end="")
    """

    def __init__(self, endpoint_url: str | None = None, secret: str | Secret | None = None, *,
                 timeout: float = 60.0,
                 max_retries: int = 3, transport: httpx.AsyncBaseTransport | None = None,
                 max_connections: int = 100) -> None:
        auth = self._setup(endpoint_url, secret, max_retries)
        self._http = httpx.AsyncClient(base_url=without_userinfo(self.endpoint_url), auth=auth,
                                       timeout=timeout,
                                       transport=transport,
                                       limits=httpx.Limits(max_connections=max_connections))
        self._driver = AsyncDriver(self._http)

    models = run_async(_InferenceOps.models)
    model_records = run_async(_InferenceOps.model_records)
    transcribe = run_async(_InferenceOps.transcribe)

    @overload
    async def chat(self, messages: Any, model: str | None = ..., stream: Literal[False] = ..., *,
                   images: Iterable[Any] | None = ..., **params: Any) -> ChatCompletion: ...

    @overload
    async def chat(self, messages: Any, model: str | None = ..., stream: Literal[True] = ..., *,
                   images: Iterable[Any] | None = ..., **params: Any) -> AsyncChatStream: ...

    async def chat(self, messages: Any, model: str | None = None, stream: bool = False, *,
                   images: Iterable[Any] | None = None,
                   **params: Any) -> ChatCompletion | AsyncChatStream:
        """Like :meth:`InferenceClient.chat`; with ``stream=True`` an :class:`AsyncChatStream`."""
        request = await self._driver.run(self._chat_request(messages, model, stream, images, params))
        if stream:
            return await AsyncChatStream.open(self._http, request, self)
        return await self._driver.run(self._complete(request))

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncInferenceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
