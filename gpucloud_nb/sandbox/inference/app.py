"""The sandbox's inference endpoint: list models, chat completions (streamed or not), transcription.

Mounted at ``/inference`` by the sandbox, so ``inference_url`` is ``<management_url>/inference``
and the paths below it are the spec's: ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/audio/transcriptions``. Choices where the spec says "not shown":

- Bodies are OpenAI's: ``{"object": "list", "data": [{"id", "object": "model", "created",
  "owned_by"}]}``; a ``chat.completion`` with ``choices[].message`` and ``usage``; with
  ``"stream": true`` server-sent ``chat.completion.chunk`` events, one per word, the first with
  ``delta.role``, the last with ``finish_reason`` ``"stop"`` (``"length"`` when ``max_tokens`` cut
  it), then — with ``stream_options: {"include_usage": true}`` — a chunk with empty ``choices``
  and the ``usage``, then ``data: [DONE]``. A transcription is ``{"text": ...}``
  (``response_format`` ``json``, ``text``, ``verbose_json``, ``srt`` or ``vtt``).
- Error bodies are OpenAI's too: ``{"error": {"message", "type", "param", "code"}}``.
  401 ``invalid_api_key`` for a missing or wrong secret; 404 ``model_not_found`` ("The model 'x'
  does not exist.") and ``unknown_url``; 429 ``rate_limit_exceeded`` with ``Retry-After`` (whole
  seconds, rounded up) and ``retry-after-ms``; 400 for every malformed body, never a 5xx; 413
  "The file is too large (26.0 MB); the limit is 25 MB."; 400 "Unsupported file type: ...".
- The secret is read from ``x-api-key`` only, as the real endpoint documents. A request without
  it is 401 with a hint, even when it carries ``Authorization: Bearer <secret>``: code that works
  here must work on the cloud. A valid ``x-api-key`` is accepted whatever else comes with it (the
  ``openai`` SDK always sends an Authorization header: give it
  ``default_headers={"x-api-key": secret}``).
- Each account (management key) has its own secret (``config.inference_secret_for``; one when
  the sandbox has one key) and its own rate limit: ``config.inference_rate_limit`` requests per
  second per secret, a token bucket that allows bursts of one second's worth; every request
  counts, the stream as one. An account reads its secret at ``GET /sandbox/inference``.
- Sizes follow :mod:`gpucloud_nb.media`: 1 MB = 1,000,000 bytes, audio at most 25 MB, images at
  most 20 MB. A chat body may be up to 64 MB (a few images of 20 MB, base64-encoded).
- Images are checked like the client checks them (``media.check_image``: JPEG, PNG, WEBP or GIF
  by content, complete, at most 20 MB): 400 with media's sentence, 413 when too large. An
  ``http(s)://`` image is a 400 ``invalid_image_url`` unless the sandbox runs with
  ``allow_url_fetch`` (``--allow-url-fetch``); then it is downloaded (10 s timeout, 20 MB cap)
  from public addresses only, pinned to the checked address, redirects checked again, and any
  failure is 400 "could not fetch". Audio is checked by content with
  ``media.check_audio``.
- The models are deterministic (:mod:`gpucloud_nb.sandbox.vision` reads the prompt and each
  image's format, size and colours; :mod:`gpucloud_nb.sandbox.speech` is offline pocketsphinx).
  Both listed models answer both kinds of request. Token counts are words: images count 85 each.
- With ``config.upstream``, chat, transcription and the model list are forwarded to that
  OpenAI-compatible server instead (see :mod:`gpucloud_nb.sandbox.inference.upstream`).
"""

from __future__ import annotations

import asyncio
import copy
import hmac
import ipaddress
import json
import math
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gpucloud_nb.media import MAX_AUDIO_BYTES, MAX_IMAGE_BYTES, MB
from gpucloud_nb.sandbox.guards import json_object
from gpucloud_nb.sandbox.http import Problem, json_response
from gpucloud_nb.sandbox.inference.ratelimit import TokenBuckets
from gpucloud_nb.sandbox.inference.request_checks import (
    check_messages,
    check_number,
    positive_int,
    shown,
)
from gpucloud_nb.sandbox.inference.upstream import (
    UPSTREAM_KEY_VARIABLE,
    Upstream,
    UpstreamRefused,
    UpstreamUnreachable,
)

if TYPE_CHECKING:
    from gpucloud_nb.sandbox.config import SandboxConfig

__all__ = ["MAX_AUDIO_BYTES", "MAX_CHAT_BODY_BYTES", "create_inference_app"]

MAX_CHAT_BODY_BYTES = 64 * MB
MULTIPART_SLACK = 1 * MB  # form fields and boundaries around the file
IMAGE_TOKENS = 85
IMAGE_FETCH_TIMEOUT = 10.0
Handler = Callable[[Request], Awaitable[Response]]


def _sse(data: Any) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


def _megabytes(size: int, limit: int = MAX_AUDIO_BYTES) -> str:
    """A size in MB, or in bytes when one decimal would not show that it is over ``limit``."""
    shown = f"{size / MB:.1f}"
    return f"{shown} MB" if float(shown) > limit / MB else f"{size:,} bytes"


def _model_records() -> list[dict[str, Any]]:
    from gpucloud_nb.sandbox import speech, vision

    return [dict(record) for record in (*vision.MODELS, *speech.MODELS)]


def _model_ids() -> list[str]:
    return [record["id"] for record in _model_records()]


# -- images -----------------------------------------------------------------------------------


def _image_parts(messages: list[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, part)`` for every image part of already checked messages."""
    for index, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            for number, part in enumerate(content):
                if part.get("type") == "image_url":
                    yield f"messages[{index}].content[{number}]", part


def _is_web(url: str) -> bool:
    return url[:8].lower().startswith(("http://", "https://"))


_NO_FETCH = ("The sandbox does not fetch image URLs; send the image itself as a data: URL "
             "(gpucloud_nb.media.image_data_url makes one), or start the sandbox with "
             "--allow-url-fetch.")
_MAX_REDIRECTS = 5


class _CouldNotFetch(Exception):
    """Any failure to fetch an image URL; the answer says only "could not fetch"."""


def _public_address(text: str) -> bool:
    """Whether an IP address is one the sandbox may connect to (not private, loopback, ...)."""
    address = ipaddress.ip_address(text.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (address.is_private or address.is_loopback
                                       or address.is_link_local or address.is_reserved
                                       or address.is_multicast or address.is_unspecified)


async def _checked_address(url: httpx.URL) -> str:
    """Resolve ``url``'s host and return an address to pin, if every address is public."""
    if url.scheme not in ("http", "https") or not url.host:
        raise _CouldNotFetch
    try:
        return url.host if _public_address(url.host) else ""
    except ValueError:
        pass  # a name, not a literal address
    if url.host.rstrip(".").lower() == "localhost" or url.host.endswith(".localhost"):
        raise _CouldNotFetch
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(url.host, url.port or (443 if url.scheme == "https" else 80),
                                       type=socket.SOCK_STREAM)
    except OSError:
        raise _CouldNotFetch from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses or not all(_public_address(a) for a in addresses):
        raise _CouldNotFetch
    return addresses[0]


async def _fetch_one(client: httpx.AsyncClient, url: str) -> bytes:
    """GET ``url`` pinned to a checked public address, following redirects by hand."""
    target = httpx.URL(url)
    for _ in range(_MAX_REDIRECTS + 1):
        address = await _checked_address(target)
        if not address:
            raise _CouldNotFetch
        host = target.host
        pinned = target.copy_with(host=address)
        request = client.build_request(
            "GET", pinned, headers={"Host": target.netloc.decode("ascii")},
            extensions={"sni_hostname": host} if target.scheme == "https" else {})
        answer = await client.send(request, stream=True)
        try:
            if answer.is_redirect and "location" in answer.headers:
                target = target.join(answer.headers["location"])
                continue
            if answer.status_code >= 400:
                raise _CouldNotFetch
            data = bytearray()
            async for chunk in answer.aiter_bytes():
                data += chunk
                if len(data) > MAX_IMAGE_BYTES:
                    raise _CouldNotFetch
            return bytes(data)
        finally:
            await answer.aclose()
    raise _CouldNotFetch


async def _fetch_images(messages: list[Any], allowed: bool) -> dict[str, bytes]:
    """Download every http(s) image when ``allowed`` (at most 20 MB each, public addresses only).

    Off by default (``SandboxConfig.allow_url_fetch``): a client's URL is a 400 that says how to
    send the image instead. When on, every address the host resolves to must be public (not
    private, loopback, link-local or reserved), the connection goes to the checked address, and
    each redirect is checked again; any failure is 400 "could not fetch", saying nothing of what
    is at the address.
    """
    urls = list(dict.fromkeys(part["image_url"]["url"] for _, part in _image_parts(messages)
                              if _is_web(part["image_url"]["url"])))
    fetched: dict[str, bytes] = {}
    if not urls:
        return fetched
    if not allowed:
        raise Problem(400, _NO_FETCH, code="invalid_image_url")
    async with httpx.AsyncClient(timeout=IMAGE_FETCH_TIMEOUT, follow_redirects=False,
                                 trust_env=False) as client:
        for url in urls:
            try:
                fetched[url] = await _fetch_one(client, url)
            except (_CouldNotFetch, httpx.HTTPError, ValueError):
                raise Problem(400, f"The image at {shown(url)} could not be fetched.",
                              code="invalid_image_url") from None
    return fetched


def _reply(messages: list[Any], fetched: Mapping[str, bytes]) -> str:
    """Check every image against the spec's limits (inlined as data: URLs), then answer."""
    from gpucloud_nb import media
    from gpucloud_nb.sandbox import vision

    messages = copy.deepcopy(messages)
    for where, part in _image_parts(messages):
        url = part["image_url"]["url"]
        if _is_web(url):
            data = fetched[url]
        elif url[:5].lower() == "data:":
            try:
                _, data = media.parse_data_url(url)
            except ValueError as exc:
                raise Problem(400, f"{where}: {exc}", param=where) from None
        else:
            raise Problem(400, f"{where}.image_url.url must be an http(s):// or data: URL.",
                          param=where)
        if len(data) > MAX_IMAGE_BYTES:
            size = _megabytes(len(data), MAX_IMAGE_BYTES)
            raise Problem(413, f"The image in {where} is too large ({size}); the limit is "
                               f"{MAX_IMAGE_BYTES // MB} MB.", code="image_too_large", param=where)
        try:
            checked = media.check_image(data, name=f"The image in {where}")
        except ValueError as exc:
            if _is_web(url):  # say nothing of what is at someone else's address
                raise Problem(400, f"The image at {shown(url)} could not be fetched.",
                              code="invalid_image_url", param=where) from None
            raise Problem(400, str(exc), code="invalid_image", param=where) from None
        part["image_url"] = {**part["image_url"], "url": checked.data_url()}
    return vision.describe(messages)


# -- the app ----------------------------------------------------------------------------------


class _Inference:
    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        keys = (config.api_key, *config.keys)
        secrets = [config.inference_secret_for(key) for key in keys]
        self.secrets = [secret.encode() for secret in secrets]  # one per account
        rate = config.inference_rate_limit
        self.limiter = TokenBuckets(rate) if rate else None
        self.upstream = (Upstream(config.upstream, hide=(*secrets, *keys))
                         if config.upstream else None)
        rate = config.stream_tokens_per_second
        self.token_delay = 1.0 / rate if rate and rate > 0 and math.isfinite(rate) else 0.0

    # checks shared by every endpoint

    def _admit(self, request: Request) -> None:
        given = request.headers.get("x-api-key")
        if given is None:
            bearer = request.headers.get("authorization", "").lower().startswith("bearer ")
            hint = (" (an Authorization: Bearer token is not read; with the openai SDK pass "
                    "default_headers={'x-api-key': secret})") if bearer else ""
            raise Problem(401, f"The x-api-key header is missing: send the instance's secret "
                               f"in it{hint}.", code="invalid_api_key")
        sent = given.encode("latin-1")
        accounts = [n for n, secret in enumerate(self.secrets) if hmac.compare_digest(sent, secret)]
        if not accounts:
            raise Problem(401, "Invalid API secret: send the instance's secret in the x-api-key "
                               "header.", code="invalid_api_key")
        if self.limiter is not None:
            wait = self.limiter.take(f"account {accounts[0]}")
            if wait > 0:
                raise Problem(429, f"Rate limit reached: at most {self.limiter.rate:g} requests "
                                   f"per second; try again in {wait:.2f} s.",
                              type="requests", code="rate_limit_exceeded",
                              headers={"Retry-After": str(max(1, math.ceil(wait))),
                                       "retry-after-ms": str(max(1, math.ceil(wait * 1000)))})

    def endpoint(self, handler: Handler) -> Handler:
        async def run(request: Request) -> Response:
            try:
                self._admit(request)
                return await handler(request)
            except Problem as problem:
                return problem.openai_response()
            except UpstreamUnreachable as exc:
                return Problem(502, f"The upstream server {self.upstream.base if self.upstream else ''} "
                                    f"could not be reached ({shown(exc)}).",
                               type="server_error", code="upstream_unreachable").openai_response()
            except UpstreamRefused as exc:
                return Problem(502, f"The upstream server {self.upstream.base if self.upstream else ''} "
                                    f"refused the sandbox's key ({exc.status}); set "
                                    f"{UPSTREAM_KEY_VARIABLE} to its key.",
                               type="server_error", code="upstream_refused").openai_response()
            except ClientDisconnect:
                return Response(status_code=400)

        return run

    @staticmethod
    def _known(model: Any, param: str = "model") -> str:
        if not isinstance(model, str) or not model:
            raise Problem(400, "You must provide a model parameter (see GET /v1/models).",
                          param=param)
        if model not in _model_ids():
            raise Problem(404, f"The model '{shown(model)}' does not exist.",
                          code="model_not_found", param=param)
        return model

    @staticmethod
    async def _body(request: Request, limit: int) -> bytes:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            raise Problem(413, f"The request body is too large ({int(length) / MB:.1f} MB); the "
                               f"limit is {limit // MB} MB.", code="request_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise Problem(413, f"The request body is too large (over {limit // MB} MB); the "
                                   f"limit is {limit // MB} MB.", code="request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    # GET /v1/models

    async def models(self, request: Request) -> Response:
        if self.upstream is not None:
            return await self.upstream.request("GET", "/v1/models")
        return json_response({"object": "list", "data": _model_records()})

    # POST /v1/chat/completions

    async def chat(self, request: Request) -> Response:
        raw = await self._body(request, MAX_CHAT_BODY_BYTES)
        try:
            body = json_object(raw)
        except ValueError as problem:
            raise Problem(400, str(problem)) from None
        stream = body.get("stream", False)
        if not isinstance(stream, bool) and stream is not None:
            raise Problem(400, "'stream' must be true or false.", param="stream")
        if self.upstream is not None:
            content_type = request.headers.get("content-type", "application/json")
            if stream:
                return await self.upstream.stream("/v1/chat/completions", raw, content_type)
            return await self.upstream.request("POST", "/v1/chat/completions", raw, content_type)

        words, images = check_messages(body.get("messages"))
        model = self._known(body.get("model"))
        max_tokens = positive_int(body, "max_completion_tokens", 1_000_000)
        if max_tokens is None:
            max_tokens = positive_int(body, "max_tokens", 1_000_000)
        n = positive_int(body, "n", 16) or 1
        check_number(body, "temperature", 0, 2)
        check_number(body, "top_p", 0, 1)
        options = body.get("stream_options")
        if options is not None and (not stream or not isinstance(options, dict)):
            raise Problem(400, "'stream_options' is an object, allowed only with stream: true.",
                          param="stream_options")
        include_usage = bool(options and options.get("include_usage"))

        from gpucloud_nb.sandbox import vision

        fetched = await _fetch_images(body["messages"], self.config.allow_url_fetch)
        text = await run_in_threadpool(_reply, body["messages"], fetched)
        tokens = vision.tokens(text)
        finish = "stop"
        if max_tokens is not None and len(tokens) > max_tokens:
            tokens, finish = tokens[:max_tokens], "length"
            text = "".join(tokens)
        prompt_tokens = words + IMAGE_TOKENS * images
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens) * n,
                 "total_tokens": prompt_tokens + len(tokens) * n}
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if not stream:
            choices = [{"index": i, "message": {"role": "assistant", "content": text},
                        "logprobs": None, "finish_reason": finish} for i in range(n)]
            return json_response({"id": completion_id, "object": "chat.completion", "created": created,
                          "model": model, "choices": choices, "usage": usage})
        head = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": model}
        if include_usage:
            head["usage"] = None
        return StreamingResponse(self._events(head, tokens, n, finish, usage, include_usage),
                                 media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    async def _events(self, head: dict[str, Any], tokens: list[str], n: int, finish: str,
                      usage: dict[str, int], include_usage: bool) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], reason: str | None) -> bytes:
            choices = [{"index": i, "delta": delta, "logprobs": None, "finish_reason": reason}
                       for i in range(n)]
            return _sse({**head, "choices": choices})

        yield chunk({"role": "assistant", "content": ""}, None)
        for token in tokens:
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            else:
                await asyncio.sleep(0)
            yield chunk({"content": token}, None)
        yield chunk({}, finish)
        if include_usage:
            yield _sse({**head, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    # POST /v1/audio/transcriptions

    async def transcriptions(self, request: Request) -> Response:
        content_type = request.headers.get("content-type", "")
        if not content_type.lower().startswith("multipart/form-data"):
            raise Problem(400, "The request must be multipart/form-data with parts 'file' and "
                               "'model'.")
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > MAX_AUDIO_BYTES + MULTIPART_SLACK:
            raise Problem(413, f"The file is too large ({_megabytes(int(length))}); the limit is "
                               f"{MAX_AUDIO_BYTES // MB} MB.", code="file_too_large", param="file")
        if self.upstream is not None:
            raw = await self._body(request, MAX_AUDIO_BYTES + MULTIPART_SLACK)
            return await self.upstream.request("POST", "/v1/audio/transcriptions", raw, content_type)
        try:
            data, size, filename, model, response_format = await self._read_form(request)
        except HTTPException as exc:
            raise Problem(400, f"The multipart body could not be read ({exc.detail}).") from None
        if size > MAX_AUDIO_BYTES:
            raise Problem(413, f"The file is too large ({_megabytes(size)}); the limit is "
                               f"{MAX_AUDIO_BYTES // MB} MB.", code="file_too_large", param="file")
        duration = self._check_audio(data, filename)

        from gpucloud_nb.sandbox import speech

        try:
            text = await run_in_threadpool(speech.transcribe, data, filename)
        except ValueError as exc:
            raise Problem(400, f"The audio could not be decoded: {exc}", param="file") from None
        if response_format == "text":
            return PlainTextResponse(text + "\n")
        if response_format == "verbose_json":
            return json_response({"task": "transcribe", "language": "english", "duration": duration,
                          "text": text, "segments": [], "model": model})
        if response_format in ("srt", "vtt"):
            end = time.strftime("%H:%M:%S", time.gmtime(duration or 0))
            if response_format == "srt":
                return PlainTextResponse(f"1\n00:00:00,000 --> {end},000\n{text}\n")
            return PlainTextResponse(f"WEBVTT\n\n00:00:00.000 --> {end}.000\n{text}\n")
        return json_response({"text": text})

    async def _read_form(self, request: Request) -> tuple[bytes, int, str, str, str]:
        async with request.form(max_files=1, max_fields=20) as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise Problem(400, "The 'file' part (an audio file) is missing.", param="file")
            model = self._known(form.get("model"))
            response_format = form.get("response_format") or "json"
            if response_format not in ("json", "text", "verbose_json", "srt", "vtt"):
                raise Problem(400, "'response_format' must be json, text, verbose_json, srt or vtt.",
                              param="response_format")
            data = await upload.read(MAX_AUDIO_BYTES + 1)
            size = max(len(data), upload.size or 0)
            return data, size, upload.filename or "audio", model, str(response_format)

    @staticmethod
    def _check_audio(data: bytes, filename: str) -> float | None:
        """The type by content (the spec's formats), as the client's media checks do."""
        from gpucloud_nb import media

        _, dot, extension = filename.rpartition(".")
        extension = extension.lower() if dot else ""
        try:
            audio = media.check_audio(data, name=filename)
        except ValueError as exc:
            message = str(exc)
            if "supported format" in message or "empty" in message:
                shown = f"'{extension}'" if extension else "unknown"
                raise Problem(400, f"Unsupported file type ({shown}): {message}",
                              code="unsupported_file_type", param="file") from None
            raise Problem(400, message, param="file") from None
        return audio.duration_seconds

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self.endpoint(self.models), methods=["GET"]),
            Route("/v1/chat/completions", self.endpoint(self.chat), methods=["POST"]),
            Route("/v1/audio/transcriptions", self.endpoint(self.transcriptions), methods=["POST"]),
        ]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return Problem(404, f"Unknown request URL: {request.method} {request.url.path}.",
                       code="unknown_url").openai_response()
    if exc.status_code == 405:
        return Problem(405, f"Method {request.method} is not allowed on {request.url.path}.",
                       code="method_not_allowed", headers=exc.headers).openai_response()
    return Problem(exc.status_code, str(exc.detail)).openai_response()


async def _server_error(request: Request, exc: Exception) -> Response:
    return Problem(500, "The sandbox's inference endpoint failed to handle this request.",
                   type="server_error", code="internal_error").openai_response()


def create_inference_app(config: SandboxConfig) -> Starlette:
    """The inference endpoint as an ASGI app, to mount at ``/inference``.

        >>> Mount("/inference", app=create_inference_app(SandboxConfig()))  # doctest: +SKIP
    """
    inference = _Inference(config)
    app = Starlette(routes=inference.routes(),
                    exception_handlers={HTTPException: _http_error, Exception: _server_error})
    app.state.config = config
    return app
