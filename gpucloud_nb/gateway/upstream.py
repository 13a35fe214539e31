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
upstream passed on with its wait). A list goes through :meth:`Upstream.send_shared`: the lists
of one query that arrive together board one request, which leaves after each of them arrived
(:mod:`gpucloud_nb.gateway.flights`). Offers are cached for :data:`OFFERS_TTL` seconds (one request refreshes
them however many creates wait), as admission needs each create's hourly price.

Requests go through one ``aiohttp`` client session (keep-alive, up to :data:`CONNECTIONS`
connections, the certificate checks of httpx's SSL context), not an ``httpx.AsyncClient`` nor
``httpcore`` pools: a forwarded list or get is the gateway's commonest work, and the client is
most of what the extra hop costs. Against the sandbox on this machine, an empty pass-through proxy
on ``aiohttp`` spent 0.9-1.1 ms of CPU a request where the same proxy on ``httpcore`` spent
1.7-2.1 ms and on an ``httpx.AsyncClient`` 2.3-3.0 ms (two runs, load 14, all on uvicorn with
httptools; ``benchmarks/bench_gateway.py`` measures the first and the last in every run): its HTTP
parser is C, and it has no per-request layers the gateway does not use. Nothing the gateway needs
is lost: it follows no redirects, sends no cookies, reads no proxy settings from the environment
and asks for no compression (neither ``Accept-Encoding`` nor ``User-Agent`` is added).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import httpx
import msgspec
from yarl import URL

from gpucloud_nb._secrets import mask
from gpucloud_nb.gateway.flights import Answer, Flights
from gpucloud_nb.gateway.timing import UPSTREAM_SPENT

__all__ = ["CONNECTIONS", "OFFERS_TTL", "RETRY_AFTER", "Listed", "Upstream", "UpstreamUnreachable",
           "decode_listing"]

RETRY_AFTER: contextvars.ContextVar[str | None] = contextvars.ContextVar("retry_after",
                                                                         default=None)
"""The ``Retry-After`` of the upstream's last answer in this task (one request of the gateway's),
or ``None``: the gateway passes it on with the answer it relays."""

OFFERS_TTL = 30.0
TIMEOUT = 60.0
CONNECTIONS = 48


def decode(body: bytes) -> Any:
    """The JSON value of ``body``, or ``None`` if it is empty or not JSON."""
    if not body:
        return None
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None


class Listed(msgspec.Struct, rename={"id": "_id"}):
    """What the gateway's watchers read of one instance of the upstream's list; every other
    field is skipped unread (a list holds every instance the account ever had, deleted ones
    too: with 5,040 of them, reading only these took 0.32-0.33x the time of a whole decode;
    ``benchmarks/bench_meter.py``).
    A field the upstream left out, or sent as ``null``, is ``None``."""

    id: Any = None
    name: Any = None
    status: Any = None
    hourlyPrice: Any = None
    createdAt: Any = None
    deletedAt: Any = None
    ip: Any = None
    sshPort: Any = None
    sshUser: Any = None


_LISTED = msgspec.json.Decoder(list[Listed])


def decode_listing(body: bytes) -> dict[str, Listed] | None:
    """The instances of a list's ``body`` by id, or ``None`` if it is not a JSON list (an item
    that is not an object is left out, as a generic decode would).

        >>> decode_listing(b'[{"_id": "i-1", "status": "active", "region": {"x": 1}}, 3]')
        {'i-1': Listed(id='i-1', name=None, status='active', hourlyPrice=None, createdAt=None, \
deletedAt=None, ip=None, sshPort=None, sshUser=None)}
    """
    try:
        items = _LISTED.decode(body)
    except msgspec.ValidationError:  # an item that is not an object: read the rest
        data = decode(body)
        if not isinstance(data, list):
            return None
        items = [msgspec.convert(item, Listed) for item in data if isinstance(item, dict)]
    except msgspec.DecodeError:
        return None
    return {str(item.id): item for item in items}


class UpstreamUnreachable(Exception):
    """The upstream did not answer (connection refused, reset or timed out)."""


class Upstream:
    """An async client of the upstream at ``base_url`` (the spec's ``{base_url}``) with ``key``."""

    def __init__(self, base_url: str, key: str, *, timeout: float = TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        self._key = key
        self._session: aiohttp.ClientSession | None = None  # made in the serving loop, at first use
        self._headers = {"x-api-key": key, "accept": "application/json"}
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_connect=timeout,
                                              sock_read=timeout)
        self._offers: dict[tuple[Any, Any], dict[str, Any]] | None = None  # by (provider, id)
        self._offers_at = 0.0
        self._offers_lock = asyncio.Lock()
        self._endpoints: httpx.AsyncClient | None = None
        #: the lists boarding and in the air (:mod:`gpucloud_nb.gateway.flights`)
        self.flights = Flights()

    def __repr__(self) -> str:
        return f"Upstream({self.base_url!r}, key={mask(self._key)!r})"

    async def aclose(self) -> None:
        """Close the connections (a list in the air is cancelled first)."""
        await self.flights.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None
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

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONNECTIONS,
                                               ssl=httpx.create_ssl_context()),
                timeout=self._timeout, auto_decompress=False, trust_env=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent"))
        return self._session

    async def send(self, method: str, path: str, *, params: Any = None,
                   json: Any = None) -> tuple[int, bytes]:
        """``(status, body)`` of one request; :class:`UpstreamUnreachable`."""
        url = self.base_url + path
        if params:
            url += "?" + urlencode(params, quote_via=quote)
        headers, content = self._headers, None
        if json is not None:
            headers = {**headers, "content-type": "application/json"}
            content = msgspec.json.encode(json)
        spent, start = UPSTREAM_SPENT.get(), time.perf_counter()
        try:
            async with self._client().request(method, URL(url, encoded=True),
                                              headers=headers, data=content,
                                              allow_redirects=False) as response:
                status, body = response.status, await response.read()
                wait = response.headers.get("retry-after")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as error:
            raise UpstreamUnreachable(type(error).__name__) from None
        finally:
            if spent is not None:  # the request's Server-Timing (gateway.timing)
                spent[0] += time.perf_counter() - start
        RETRY_AFTER.set(None if wait is None else wait[:64])
        return status, body

    async def send_shared(self, path: str, *, params: Any = None) -> tuple[int, bytes]:
        """``(status, body)`` of ``GET path`` from a request that left after this call, boarded
        by the same calls that arrived with it (:mod:`gpucloud_nb.gateway.flights`); its
        ``Retry-After`` in :data:`RETRY_AFTER`; :class:`UpstreamUnreachable`."""
        query = urlencode(params, quote_via=quote) if params else ""

        async def fly() -> Answer:
            status, body = await self.send("GET", path + ("?" + query if query else ""))
            return status, body, RETRY_AFTER.get()

        status, body, wait = await self.flights.board((path, query), fly)
        RETRY_AFTER.set(wait)
        return status, body

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
                    self._offers = {}
                    for item in data:  # the first of an id, as a scan of the list finds it
                        cloud = item.get("cloud") if isinstance(item, dict) else None
                        if isinstance(cloud, dict):
                            self._offers.setdefault((cloud.get("_id"), item.get("instanceId")),
                                                    item)
                    self._offers_at = time.monotonic()
        return None if self._offers is None else self._offers.get((provider, offer_id))

    async def offer_price(self, provider: str, offer_id: str) -> float | None:
        """The hourly price of the offer ``offer_id`` of ``provider``, or ``None`` if none."""
        offer = await self.offer(provider, offer_id)
        try:
            return None if offer is None else float(offer.get("hourlyPrice"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
