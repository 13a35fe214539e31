"""Forward inference requests to a real OpenAI-compatible server (vLLM, llama.cpp, Ollama).

    $ gpucloud-nb sandbox --upstream http://localhost:11434/v1      # Ollama
    $ GPUCLOUD_UPSTREAM_API_KEY=token gpucloud-nb sandbox --upstream http://gpu-box:8000

The sandbox still checks its own secret and rate limit; the request body goes to the upstream as it
came, and the upstream's status, body and (for streams) events come back as they are. The upstream
URL is its base, with or without ``/v1``. When ``GPUCLOUD_UPSTREAM_API_KEY`` is set, it is sent as
``Authorization: Bearer`` and ``x-api-key``; the sandbox's own secret is never forwarded. An
upstream that cannot be reached, or that refuses the sandbox's key (401/403), gives 502 with an
OpenAI-style error body, so a client never mistakes it for its own secret being wrong.

A user name and password in the URL (``http://user:pass@gpu-box:8000``) are sent as Basic auth
and shown nowhere: ``base``, reprs, errors and httpx's logs carry the URL without them. Every
body and event relayed back is scrubbed (:func:`gpucloud_nb._secrets.scrub`) of the upstream's
key, that password and the sandbox's own key and secret, so an upstream that echoes them in an
error shows only their masked forms.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping

import anyio
import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from gpucloud_nb._secrets import mask_url, scrub, without_userinfo

__all__ = ["UPSTREAM_KEY_VARIABLE", "Upstream", "UpstreamRefused", "UpstreamUnreachable", "upstream_base"]

UPSTREAM_KEY_VARIABLE = "GPUCLOUD_UPSTREAM_API_KEY"
_PASSED_RESPONSE_HEADERS = ("content-type", "retry-after", "retry-after-ms")
_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
_LONGEST_LINE = 1 << 20  # a relayed line longer than this is passed on in pieces


def upstream_base(url: str) -> str:
    """The upstream's base before ``/v1``: ``http://h:8000/v1/`` → ``http://h:8000``."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"The upstream URL must start with http:// or https://, not {mask_url(url)!r}.")
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    return url


class UpstreamUnreachable(Exception):
    """The upstream could not be reached or dropped the connection."""


class UpstreamRefused(Exception):
    """The upstream refused the sandbox's key (401 or 403): the user's secret was fine."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Upstream:
    """Forwards requests to ``base`` + path; one short-lived httpx client per request."""

    def __init__(self, url: str, api_key: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, hide: tuple[str, ...] = ()) -> None:
        full = httpx.URL(upstream_base(url))
        self.base = without_userinfo(str(full))
        self._basic = httpx.BasicAuth(full.username, full.password) if full.userinfo else None
        self._api_key = api_key if api_key is not None else os.environ.get(UPSTREAM_KEY_VARIABLE)
        self._transport = transport
        self._hidden = (self._api_key, full.password or None, *hide)

    def _scrub(self, data: bytes) -> bytes:
        """``data`` with every secret this relay knows masked (see the module docstring)."""
        text = data.decode("utf-8", "surrogateescape")
        clean = scrub(text, *self._hidden)
        return data if clean == text else clean.encode("utf-8", "surrogateescape")

    def _unreachable(self, exc: Exception) -> UpstreamUnreachable:
        return UpstreamUnreachable(scrub(str(exc), *self._hidden))

    def __repr__(self) -> str:
        return f"Upstream({self.base!r}, api_key={'set' if self._api_key else 'none'})"

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base, auth=self._basic, timeout=_TIMEOUT,
                                 transport=self._transport)

    def _headers(self, content_type: str | None, stream: bool = False) -> dict[str, str]:
        headers = {}
        if content_type:
            headers["content-type"] = content_type
        if stream:
            headers["accept"] = "text/event-stream"
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
            headers["x-api-key"] = self._api_key
        return headers

    @staticmethod
    def _response_headers(headers: Mapping[str, str]) -> dict[str, str]:
        return {name: headers[name] for name in _PASSED_RESPONSE_HEADERS if name in headers}

    async def request(self, method: str, path: str, body: bytes | None = None,
                      content_type: str | None = None) -> Response:
        """Forward one request and return the upstream's answer as it is."""
        try:
            async with self._client() as client:
                answer = await client.request(method, path, content=body,
                                              headers=self._headers(content_type))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if answer.status_code in (401, 403):
            raise UpstreamRefused(answer.status_code)
        return Response(self._scrub(answer.content), status_code=answer.status_code,
                        headers=self._response_headers(answer.headers))

    async def stream(self, path: str, body: bytes, content_type: str | None) -> Response:
        """Forward a streaming request; the upstream's events are passed on as they arrive."""
        client = self._client()
        try:
            upstream = await client.send(
                client.build_request("POST", path, content=body,
                                     headers=self._headers(content_type, stream=True)),
                stream=True,
            )
        except httpx.HTTPError as exc:
            await client.aclose()
            raise self._unreachable(exc) from None

        async def close() -> None:
            with anyio.CancelScope(shield=True):  # also when the client went away mid-stream
                await upstream.aclose()
                await client.aclose()

        if upstream.status_code >= 400 or "text/event-stream" not in upstream.headers.get(
                "content-type", ""):
            try:
                content = await upstream.aread()
            except httpx.HTTPError as exc:
                raise self._unreachable(exc) from None
            finally:
                await close()
            if upstream.status_code in (401, 403):
                raise UpstreamRefused(upstream.status_code)
            return Response(self._scrub(content), status_code=upstream.status_code,
                            headers=self._response_headers(upstream.headers))

        async def events() -> AsyncIterator[bytes]:
            pending = b""  # a line not yet complete: a secret may straddle two chunks
            try:
                async for chunk in upstream.aiter_bytes():
                    pending += chunk
                    end = pending.rfind(b"\n") + 1 if len(pending) < _LONGEST_LINE else len(pending)
                    if end:
                        yield self._scrub(pending[:end])
                        pending = pending[end:]
            except httpx.HTTPError:
                return  # the client sees the stream end without [DONE]: reported as cut off
            finally:
                await close()
            if pending:
                yield self._scrub(pending)

        return StreamingResponse(events(), status_code=upstream.status_code,
                                 headers={**self._response_headers(upstream.headers),
                                          "cache-control": "no-cache"},
                                 background=BackgroundTask(close))
