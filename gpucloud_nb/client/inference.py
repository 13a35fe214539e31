"""The inference endpoint of an instance: list models, chat (streamed or not), transcribe audio.

    >>> chat = InferenceClient("https://abc-123.inference.example", secret="<SECRET>")
    >>> chat.models()  # doctest: +SKIP
    ['llava-1.6']
    >>> chat.chat("Hello!").text  # doctest: +SKIP
    'Hello! How can I help?'
    >>> chat.chat(["What is in this picture?", Path("cat.png")]).choices[0].message.content  # doctest: +SKIP
    >>> with chat.chat("Tell me a story", stream=True) as stream:  # doctest: +SKIP
    ...     for chunk in stream:
    ...         print(chunk.delta, end="")
    >>> chat.transcribe("meeting.wav").text  # doctest: +SKIP

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
from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

import httpx

from gpucloud_nb._secrets import Secret, mask, mask_url, scrub, without_userinfo
from gpucloud_nb.client._auth import ApiKeyAuth
from gpucloud_nb.client._ops import (
    AsyncDriver,
    Call,
    Op,
    RetryPolicy,
    SyncDriver,
    send,
)
from gpucloud_nb.client.inference_types import (
    CHAT_PATH,
    MODELS_PATH,
    TRANSCRIPTIONS_PATH,
    ChatChunk,
    ChatCompletion,
    ChatMessage,
    ChatRequest,
    Choice,
    ModelInfo,
    Transcription,
    Usage,
)
from gpucloud_nb.client.messages import normalize_messages
from gpucloud_nb.client.streaming import AsyncChatStream, ChatStream
from gpucloud_nb.errors import (
    APIError,
    InvalidInputError,
    NotFoundError,
    UnreadableResponseError,
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
    "InferenceOps",
    "ModelInfo",
    "Transcription",
    "Usage",
    "is_speech_model",
    "normalize_messages",
]

_SPEECH_MODEL = re.compile(r"whisper|speech|transcri|asr|stt|audio", re.IGNORECASE)


def is_speech_model(model_id: str) -> bool:
    """Whether a model id looks like a speech model's (it transcribes; it does not chat).

        >>> is_speech_model("openai/whisper-large-v3"), is_speech_model("sandbox-vision-1")
        (True, False)
    """
    return _SPEECH_MODEL.search(model_id) is not None


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


class InferenceOps:
    """The state and sans-I/O operations of one inference client (endpoint, secret, retry
    policy, the cached model list); :class:`InferenceClient` and :class:`AsyncInferenceClient`
    each hold one and run its operations with their driver, as the management resources hold
    an ``InstanceOps``.

        >>> ops = InferenceOps("http://127.0.0.1:8000", "secret", max_retries=3)  # doctest: +SKIP
        >>> SyncDriver(http).run(ops.model_ids())  # doctest: +SKIP
    """

    def __init__(self, endpoint_url: str | None, secret: str | Secret | None,
                 max_retries: int) -> None:
        endpoint_url, secret = _from_environment(endpoint_url, secret)
        self.endpoint_url = _endpoint(endpoint_url)
        self.secret = _secret(secret)
        self.policy = RetryPolicy(max_retries=max_retries)
        self.models: list[ModelInfo] | None = None

    def auth(self) -> ApiKeyAuth:
        """The ``x-api-key`` auth of this client's requests."""
        return ApiKeyAuth(self.secret)

    @property
    def shown_url(self) -> str:
        """``endpoint_url`` as it may be shown: a user name and password in it become ``***``."""
        return mask_url(self.endpoint_url)

    def secrets(self) -> tuple[str]:
        """The secrets to mask in anything shown."""
        return (self.secret.reveal(),)

    def _send(self, call: Call) -> Op[Any]:
        return send(call, self.policy, flavor="inference", secrets=self.secrets())

    def model_error(self, error: APIError, model: str) -> APIError:
        """Say which model a 404 is about, or that the URL is wrong when it is not about one."""
        if not isinstance(error, NotFoundError):
            return error
        lowered = error.message.lower()
        if model.lower() in lowered or re.search(r"\bmodel\b", lowered):
            known = f" This endpoint serves: {', '.join(m.id for m in self.models)}." \
                if self.models else ""
            return _reworded(error, f"Model {model} not found.{known}")
        return _reworded(error, f"Nothing at {self.shown_url}{error.path or ''} (404); check "
                                "the endpoint URL (the instance's base address, before /v1).")

    def model_records(self) -> Op[list[ModelInfo]]:
        """The endpoint's models as :class:`ModelInfo` records (``id``, ``owned_by``, ``created``).

            >>> chat.model_records()[0].id  # doctest: +SKIP
        """
        try:
            data = yield from self._send(Call("GET", MODELS_PATH))
        except NotFoundError as error:
            raise _reworded(error, f"No model list at {self.shown_url}{MODELS_PATH} (404); check "
                                   "the endpoint URL (the instance's base address, before /v1).") from None
        items = data.get("data") if isinstance(data, Mapping) else data
        if not isinstance(items, list):
            raise UnreadableResponseError(
                "The endpoint's model list is not in the expected shape ({'data': [...]}).")
        records = [ModelInfo.from_json(item) for item in items if isinstance(item, Mapping)]
        self.models = [record for record in records if record.id]
        return list(self.models)

    def model_ids(self) -> Op[list[str]]:
        """The ids of the endpoint's models (also refreshes the cached list ``model=None`` uses).

            >>> chat.models()  # doctest: +SKIP
            ['sandbox-vision-1', 'sandbox-speech-1']
        """
        records = yield from self.model_records()
        return [record.id for record in records]

    def default_model(self, speech: bool = False) -> Op[str]:
        if self.models is None:
            yield from self.model_records()
        models = self.models or []
        if not models:
            raise InvalidInputError(f"The endpoint at {self.shown_url} lists no model; pass model=.")
        if speech:
            for record in models:
                if is_speech_model(record.id):
                    return record.id
        return models[0].id

    def chat_request(self, messages: Any, model: str | None, stream: bool,
                      images: Iterable[Any] | None, params: Mapping[str, Any]) -> Op[ChatRequest]:
        body_messages = normalize_messages(messages, images)  # checked before anything is sent
        if model is None:
            model = yield from self.default_model()
        elif not isinstance(model, str) or not model:
            raise InvalidInputError("model must be a model id (see models()) or None.")
        body: dict[str, Any] = {"model": model, "messages": body_messages, **params}
        if stream:
            body["stream"] = True
        return ChatRequest(model, body)

    def complete(self, request: ChatRequest) -> Op[ChatCompletion]:
        try:
            data = yield from self._send(Call("POST", CHAT_PATH, json=request.body))
        except APIError as error:
            raise self.model_error(error, request.model) from None
        return ChatCompletion.from_json(data)

    def transcribe(self, file: Any, model: str | None = None, *,
                       filename: str | None = None, **params: Any) -> Op[Transcription]:
        """Transcribe an audio file (path, bytes or binary file object) and return its text.

        The file is checked first (type and the 25 MB limit; nothing is sent on refusal).
        ``**params`` become form fields (``language``, ``prompt``, ``temperature``). The result
        is a ``str`` with ``.text`` and ``.raw``.

            >>> chat.transcribe("question.wav")  # doctest: +SKIP
            'what is the capital of france'
        """
        from gpucloud_nb import media

        audio = media.check_audio(file, name=filename)
        response_format = params.get("response_format", "json")
        if response_format not in ("json", "verbose_json"):
            raise InvalidInputError("transcribe() reads JSON replies: response_format must be "
                                    "'json' or 'verbose_json'.")
        if model is None:
            model = yield from self.default_model(speech=True)
        fields = {key: value if isinstance(value, str) else json.dumps(value)
                  for key, value in params.items() if value is not None}
        fields["model"] = model
        call = Call("POST", TRANSCRIPTIONS_PATH, data=fields,
                    files={"file": (audio.name, audio.data, audio.mime)})
        try:
            data = yield from self._send(call)
        except APIError as error:
            raise self.model_error(error, model) from None
        if not isinstance(data, Mapping) or not isinstance(data.get("text"), str):
            raise UnreadableResponseError("The endpoint's transcription has no text.")
        return Transcription(data["text"], data)

# the clients --------------------------------------------------------------------------------


class _InferenceBase:
    """What both clients show without I/O: the endpoint, the masked secret, ``scrub``."""

    _ops: InferenceOps

    @property
    def endpoint_url(self) -> str:
        """The endpoint's base address, before ``/v1``."""
        return self._ops.endpoint_url

    @property
    def secret_hint(self) -> str:
        """The secret, masked: at most its first 3 and last 4 characters."""
        return mask(self._ops.secret.reveal())

    @property
    def shown_url(self) -> str:
        """``endpoint_url`` as it may be shown: a user name and password in it become ``***``."""
        return self._ops.shown_url

    def scrub(self, text: str) -> str:
        """``text`` with this client's secret and any URL's password masked: for showing or logging.

            >>> chat.scrub(f"failed with {secret}")  # doctest: +SKIP
            'failed with sk-…a1b2'
        """
        return scrub(text, *self._ops.secrets())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.shown_url!r} secret={self.secret_hint!r}>"


class InferenceClient(_InferenceBase):
    """A client for one inference instance's endpoint.

    ``endpoint_url`` is the instance's base address, before ``/v1`` (a trailing ``/`` or ``/v1``
    is tolerated); ``secret`` is the instance secret, sent as ``x-api-key`` and never shown.
    Without them, ``GPUCLOUD_INFERENCE_URL`` and ``GPUCLOUD_INFERENCE_SECRET`` are read (as
    openai's client reads ``OPENAI_BASE_URL``).

        >>> chat = InferenceClient(instance_url, secret)  # doctest: +SKIP
        >>> chat = InferenceClient()        # from GPUCLOUD_INFERENCE_URL / _SECRET  # doctest: +SKIP
        >>> chat.chat([{"role": "system", "content": "Be brief."},  # doctest: +SKIP
        ...            {"role": "user", "content": ["What is this?", Path("cat.jpg")]}]).text
    """

    def __init__(self, endpoint_url: str | None = None, secret: str | Secret | None = None, *,
                 timeout: float = 60.0,
                 max_retries: int = 3, transport: httpx.BaseTransport | None = None) -> None:
        self._ops = InferenceOps(endpoint_url, secret, max_retries)
        self._timeout = timeout
        self._http = httpx.Client(base_url=without_userinfo(self.endpoint_url), auth=self._ops.auth(),
                                  timeout=timeout,
                                  transport=transport)
        self._driver = SyncDriver(self._http)

    def models(self) -> list[str]:
        """The ids of the endpoint's models (also refreshes the cached list ``model=None`` uses).

            >>> chat.models()  # doctest: +SKIP
            ['sandbox-vision-1', 'sandbox-speech-1']
        """
        return self._driver.run(self._ops.model_ids())

    def model_records(self) -> list[ModelInfo]:
        """The endpoint's models as :class:`ModelInfo` records (``id``, ``owned_by``, ``created``).

            >>> chat.model_records()[0].id  # doctest: +SKIP
        """
        return self._driver.run(self._ops.model_records())

    def transcribe(self, file: Any, model: str | None = None, *, filename: str | None = None,
                   **params: Any) -> Transcription:
        """Transcribe an audio file (path, bytes or binary file object) and return its text.

        The file is checked first (type and the 25 MB limit; nothing is sent on refusal).
        ``**params`` become form fields (``language``, ``prompt``, ``temperature``). The result
        is a ``str`` with ``.text`` and ``.raw``.

            >>> chat.transcribe("question.wav")  # doctest: +SKIP
            'what is the capital of france'
        """
        return self._driver.run(self._ops.transcribe(file, model, filename=filename, **params))

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

            >>> chat.chat("Name three rivers.", temperature=0).text  # doctest: +SKIP
        """
        request = self._driver.run(self._ops.chat_request(messages, model, stream, images, params))
        if stream:
            return ChatStream(self._http, request, self._ops.secrets(), self._ops.model_error)
        return self._driver.run(self._ops.complete(request))

    def to_async(self) -> AsyncInferenceClient:
        """An :class:`AsyncInferenceClient` for the same endpoint and secret (the secret stays hidden).

            >>> async with chat.to_async() as achat:  # doctest: +SKIP
            ...     stream = await achat.chat("Hi", stream=True)
        """
        return AsyncInferenceClient(self.endpoint_url, self._ops.secret, timeout=self._timeout,
                                    max_retries=self._ops.policy.max_retries)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncInferenceClient(_InferenceBase):
    """The asyncio twin of :class:`InferenceClient`: the same methods as coroutines.

        >>> async with AsyncInferenceClient(url, secret) as chat:  # doctest: +SKIP
        ...     stream = await chat.chat("Hello", stream=True)
        ...     async for chunk in stream:
        ...         print(chunk.delta, end="")
    """

    def __init__(self, endpoint_url: str | None = None, secret: str | Secret | None = None, *,
                 timeout: float = 60.0,
                 max_retries: int = 3, transport: httpx.AsyncBaseTransport | None = None,
                 max_connections: int = 100) -> None:
        self._ops = InferenceOps(endpoint_url, secret, max_retries)
        self._http = httpx.AsyncClient(base_url=without_userinfo(self.endpoint_url),
                                       auth=self._ops.auth(),
                                       timeout=timeout,
                                       transport=transport,
                                       limits=httpx.Limits(max_connections=max_connections))
        self._driver = AsyncDriver(self._http)

    async def models(self) -> list[str]:
        """Like :meth:`InferenceClient.models`."""
        return await self._driver.run(self._ops.model_ids())

    async def model_records(self) -> list[ModelInfo]:
        """Like :meth:`InferenceClient.model_records`."""
        return await self._driver.run(self._ops.model_records())

    async def transcribe(self, file: Any, model: str | None = None, *,
                         filename: str | None = None, **params: Any) -> Transcription:
        """Like :meth:`InferenceClient.transcribe`."""
        return await self._driver.run(self._ops.transcribe(file, model, filename=filename,
                                                          **params))

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
        request = await self._driver.run(
            self._ops.chat_request(messages, model, stream, images, params))
        if stream:
            return await AsyncChatStream.open(self._http, request, self._ops.secrets(),
                                              self._ops.model_error)
        return await self._driver.run(self._ops.complete(request))

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncInferenceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
