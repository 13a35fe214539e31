"""The gateway's one door to the upstream cloud: requests with the upstream's key, answers scrubbed.

    >>> upstream = Upstream("http://127.0.0.1:8765", key)  # doctest: +SKIP
    >>> status, data = await upstream.call("GET", "/gpu-cloud/instances")  # doctest: +SKIP

The key goes only into the ``x-api-key`` header of requests to the upstream; ``repr`` masks it,
and :meth:`Upstream.scrub` replaces it in any text that comes back before the gateway answers
with it (an upstream that echoes a key in an error must not hand it to a student);
:meth:`Upstream.scrub_body` does the same to an answer's bytes, which the gateway can then pass on
without decoding them (a body with a JSON escape is decoded first: the key could hide in one). A
request the upstream did not answer raises :class:`UpstreamUnreachable`; an answer that is not
JSON gives ``None`` as its data. The ``Retry-After`` of an answer is kept in :data:`RETRY_AFTER`
for the request that made it, so the gateway's answer carries it too (a 429 or 503 of the
upstream passed on with its wait). Offers are cached for :data:`OFFERS_TTL` seconds (one request refreshes
them however many creates wait), as admission needs each create's hourly price.

Requests go through ``httpcore`` connection pools (keep-alive, httpx's certificate checks), not
an ``httpx.AsyncClient``: the client's own layers (URL merging, cookies, auth and redirect hooks,
response models) cost more CPU per request than a whole request costs the upstream sandbox, and
the gateway pays for them on every request it forwards (``benchmarks/bench_gateway.py``). Nothing
the gateway needs is lost: it follows no redirects, sends no cookies and asks for no compression.
There are :data:`POOLS` pools of :data:`POOL_SIZE` connections, a request going to the one with
the fewest in flight, rather than one pool of 48: a pool matches every waiting request against
every connection it holds (a ``poll`` of each idle socket each time), which with 40 creates at
once cost ~8 ms of the event loop per create.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any
from urllib.parse import quote, urlencode

import httpcore
import httpx
import msgspec

from gpucloud_nb._secrets import mask
from gpucloud_nb.gateway.timing import UPSTREAM_SPENT

__all__ = ["OFFERS_TTL", "POOLS", "POOL_SIZE", "RETRY_AFTER", "Upstream", "UpstreamUnreachable"]

RETRY_AFTER: contextvars.ContextVar[str | None] = contextvars.ContextVar("retry_after",
                                                                         default=None)
"""The ``Retry-After`` of the upstream's last answer in this task (one request of the gateway's),
or ``None``: the gateway passes it on with the answer it relays."""

OFFERS_TTL = 30.0
TIMEOUT = 60.0
POOLS = 6
POOL_SIZE = 8


def decode(body: bytes) -> Any:
    """The JSON value of ``body``, or ``None`` if it is empty or not JSON."""
    if not body:
        return None
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None


class UpstreamUnreachable(Exception):
    """The upstream did not answer (connection refused, reset or timed out)."""


class Upstream:
    """An async client of the upstream at ``base_url`` (the spec's ``{base_url}``) with ``key``."""

    def __init__(self, base_url: str, key: str, *, timeout: float = TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        self._key = key
        context = httpx.create_ssl_context()
        self._pools = [httpcore.AsyncConnectionPool(ssl_context=context, max_connections=POOL_SIZE)
                       for _ in range(POOLS)]
        self._inflight = [0] * POOLS
        self._headers = [(b"x-api-key", key.encode()), (b"accept", b"application/json")]
        self._timeouts = {"timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout)}
        self._offers: list[dict[str, Any]] | None = None
        self._offers_at = 0.0
        self._offers_lock = asyncio.Lock()
        self._endpoints: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"Upstream({self.base_url!r}, key={mask(self._key)!r})"

    async def aclose(self) -> None:
        """Close the connections."""
        for pool in self._pools:
            await pool.aclose()
        if self._endpoints is not None:
            await self._endpoints.aclose()

    async def endpoint(self, method: str, url: str, *, content: bytes,
                       content_type: str | None) -> httpx.Response:
        """A streamed request to an inference instance's endpoint at ``url`` (an ``address``
        the upstream gave) with the upstream's key as its secret; the caller closes the answer.
        :class:`UpstreamUnreachable` when it does not answer."""
        if self._endpoints is None:  # streamed answers: httpx's client, made at first use
            self._endpoints = httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT, read=600.0))
        headers = {"x-api-key": self._key}
        if content_type:
            headers["content-type"] = content_type
        request = self._endpoints.build_request(method, url, headers=headers, content=content)
        try:
            return await self._endpoints.send(request, stream=True)
        except httpx.TransportError as error:
            raise UpstreamUnreachable(type(error).__name__) from None

    def scrub(self, text: str) -> str:
        """``text`` with the upstream's key replaced by its masked form."""
        return text.replace(self._key, mask(self._key)) if self._key else text

    def scrub_body(self, body: bytes) -> bytes | None:
        """``body`` with the key masked, or ``None`` if it has a JSON escape (decode it then)."""
        if b"\\" in body:
            return None
        if not self._key:
            return body
        return body.replace(self._key.encode(), mask(self._key).encode())

    async def send(self, method: str, path: str, *, params: Any = None,
                   json: Any = None) -> tuple[int, bytes]:
        """``(status, body)`` of one request; :class:`UpstreamUnreachable`."""
        url = self.base_url + path
        if params:
            url += "?" + urlencode(params, quote_via=quote)
        headers, content = self._headers, None
        if json is not None:
            headers = [*headers, (b"content-type", b"application/json")]
            content = msgspec.json.encode(json)
        which = self._inflight.index(min(self._inflight))
        self._inflight[which] += 1
        spent, start = UPSTREAM_SPENT.get(), time.perf_counter()
        try:
            response = await self._pools[which].request(method, url, headers=headers,
                                                        content=content, extensions=self._timeouts)
        except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
                httpcore.UnsupportedProtocol, OSError) as error:
            raise UpstreamUnreachable(type(error).__name__) from None
        finally:
            self._inflight[which] -= 1
            if spent is not None:  # the request's Server-Timing (gateway.timing)
                spent[0] += time.perf_counter() - start
        wait = next((value for name, value in response.headers
                     if name.lower() == b"retry-after"), None)
        RETRY_AFTER.set(None if wait is None else wait.decode("latin-1")[:64])
        return response.status, response.content

    async def call(self, method: str, path: str, *, params: Any = None,
                   json: Any = None) -> tuple[int, Any]:
        """``(status, decoded JSON or None)`` of one request; :class:`UpstreamUnreachable`."""
        status, body = await self.send(method, path, params=params, json=json)
        return status, decode(body)

    async def offer(self, provider: str, offer_id: str) -> dict[str, Any] | None:
        """The offer ``offer_id`` of ``provider`` as the upstream lists it, or ``None``."""
        async with self._offers_lock:
            if self._offers is None or time.monotonic() - self._offers_at > OFFERS_TTL:
                status, data = await self.call("GET", "/gpu-cloud/instances/offers")
                if status == 200 and isinstance(data, list):
                    self._offers = [item for item in data if isinstance(item, dict)]
                    self._offers_at = time.monotonic()
        for offer in self._offers or []:
            cloud = offer.get("cloud")
            if offer.get("instanceId") == offer_id and isinstance(cloud, dict) \
                    and cloud.get("_id") == provider:
                return offer
        return None

    async def offer_price(self, provider: str, offer_id: str) -> float | None:
        """The hourly price of the offer ``offer_id`` of ``provider``, or ``None`` if none."""
        offer = await self.offer(provider, offer_id)
        try:
            return None if offer is None else float(offer.get("hourlyPrice"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
