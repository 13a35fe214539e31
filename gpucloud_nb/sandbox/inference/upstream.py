"""Forward inference requests to a real OpenAI-compatible server (vLLM, llama.cpp, Ollama).

    $ gpucloud-nb sandbox --upstream http://localhost:11434/v1      # Ollama
    $ GPUCLOUD_UPSTREAM_API_KEY=token gpucloud-nb sandbox --upstream http://gpu-box:8000

The sandbox still checks its own secret and rate limit; the request body goes to the upstream as it
came, and the upstream's status, body and (for streams) events come back as they are. The upstream
URL is its base, with or without ``/v1``. When ``GPUCLOUD_UPSTREAM_API_KEY`` is set, it is sent as
``Authorization: Bearer`` and ``x-api-key``; the sandbox's own secret is never forwarded. An
upstream that cannot be reached, or that refuses the sandbox's key (401/403), gives 502 with an
OpenAI-style error body, so a client never mistakes it for its own secret being wrong.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping

import anyio
import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

__all__ = ["UPSTREAM_KEY_VARIABLE", "Upstream", "UpstreamRefused", "UpstreamUnreachable", "upstream_base"]

UPSTREAM_KEY_VARIABLE = "GPUCLOUD_UPSTREAM_API_KEY"
_PASSED_RESPONSE_HEADERS = ("content-type", "retry-after", "retry-after-ms")
_TIMEOUT = httpx.Timeout(300.0, connect=10.0)


def upstream_base(url: str) -> str:
    """The upstream's base before ``/v1``: ``http://h:8000/v1/`` → ``http://h:8000``."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"The upstream URL must start with http:// or https://, not {url!r}.")
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
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base = upstream_base(url)
        self._api_key = api_key if api_key is not None else os.environ.get(UPSTREAM_KEY_VARIABLE)
        self._transport = transport

    def __repr__(self) -> str:
        return f"Upstream({self.base!r}, api_key={'set' if self._api_key else 'none'})"

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base, timeout=_TIMEOUT, transport=self._transport)

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
            raise UpstreamUnreachable(str(exc)) from None
        if answer.status_code in (401, 403):
            raise UpstreamRefused(answer.status_code)
        return Response(answer.content, status_code=answer.status_code,
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
            raise UpstreamUnreachable(str(exc)) from None

        async def close() -> None:
            with anyio.CancelScope(shield=True):  # also when the client went away mid-stream
                await upstream.aclose()
                await client.aclose()

        if upstream.status_code >= 400 or "text/event-stream" not in upstream.headers.get(
                "content-type", ""):
            try:
                content = await upstream.aread()
            except httpx.HTTPError as exc:
                raise UpstreamUnreachable(str(exc)) from None
            finally:
                await close()
            if upstream.status_code in (401, 403):
                raise UpstreamRefused(upstream.status_code)
            return Response(content, status_code=upstream.status_code,
                            headers=self._response_headers(upstream.headers))

        async def events() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                return  # the client sees the stream end without [DONE]
            finally:
                await close()

        return StreamingResponse(events(), status_code=upstream.status_code,
                                 headers={**self._response_headers(upstream.headers),
                                          "cache-control": "no-cache"},
                                 background=BackgroundTask(close))
