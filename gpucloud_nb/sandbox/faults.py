"""Fault injection for the sandbox: rehearse what a real cloud and a real network do to a client.

    >>> from gpucloud_nb.sandbox import Sandbox
    >>> from gpucloud_nb.sandbox.faults import Faults
    >>> faults = Faults(error_every=3, rate_limit_every=4, retry_after=0.1, drop_create_every=1,
    ...                 extra_fields=True)
    >>> with Sandbox(faults=faults) as sandbox:  # doctest: +SKIP
    ...     ...                                  # every 3rd request 500, every 4th 429, and so on

    $ gpucloud-nb sandbox --faults "error_every=3,rate_limit_every=4,slow_every=2,extra_fields"

:class:`FaultInjector` is a plain ASGI middleware put in front of the sandbox app (by
:func:`gpucloud_nb.sandbox.app.create_app` when ``SandboxConfig.faults`` is set). It only touches
requests whose path starts with ``Faults.prefix`` (the management API, ``/gpu-cloud/``), and the
inference instances' creates (``POST /ai-inference/instances``, so that a deploy's answer can be
lost too), and counts them from 1 in arrival order; request number ``n`` then meets, in this order:

- ``slow_every``: when ``n`` is a multiple, ``slow_seconds`` (200 ms) pass before anything else;
- ``error_every``: when ``n`` is a multiple, a 500 with the spec's error body, and nothing done;
- ``rate_limit_every``: when ``n`` is a multiple, a 429 with ``Retry-After: <retry_after>``
  (seconds, written as a decimal when not whole; RFC 9110 wants whole seconds, which ``1`` is);
- ``drop_create_every``: creates (``POST`` of ``/gpu-cloud/instances``, ``/gpu-cloud/volumes``
  or ``/ai-inference/instances``)
  are counted on their own; when that count is a multiple, the sandbox makes the resource, then
  closes the TCP connection without sending a byte of the answer. The client sees the connection
  drop (``httpx.RemoteProtocolError``), never a status: exactly the "did my create happen?" case.
  A create the sandbox refuses (400) is answered normally.
- ``deaf_deletes``: the first ``deaf_deletes`` deletes of instances (``DELETE`` of
  ``/gpu-cloud/instances/{id}``) are answered 204 and not performed: a cloud that takes a delete
  and goes on billing (what a gateway must notice and retry).
- ``fail_names``: an ``fnmatch`` pattern; an instance created with a name it matches goes from
  ``pending`` to ``error`` instead of ``active`` (as a name ending in ``-sandbox-fail`` does),
  for rehearsing one failed machine among several (``fail_names=dask-trio-2``). It counts no
  request and needs no middleware: the create reads it.
- ``unreachable_names``: an ``fnmatch`` pattern; an instance whose name matches turns
  ``active`` but its SSH server never opens (nothing listens on its ``sshPort``): a machine the
  cloud calls ready that nobody can reach.
- ``extra_fields``: every JSON object in every JSON answer, at every depth, gains fields the spec
  does not name (a string, a number, an object and a list of objects), as a newer cloud might send.

The connection is dropped by closing the asyncio transport under uvicorn's ``send`` (found on the
request-response cycle that ``send`` is a method of). Served by anything else, the injector falls
back to starting the answer and then failing, which also cuts the connection mid-answer.
``FaultInjector.stats`` counts what was injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["EXTRA_FIELDS", "ConnectionDropped", "FaultInjector", "FaultStats", "Faults"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CREATE_PATHS = ("/gpu-cloud/instances", "/gpu-cloud/volumes", "/ai-inference/instances")

EXTRA_FIELDS: dict[str, Any] = {
    "xSandboxUnknown": "a field this client has never heard of",
    "xSandboxNumber": 42.5,
    "xSandboxObject": {"nested": True, "label": "unknown"},
    "xSandboxList": [{"kind": "unknown", "n": 1}, {"kind": "unknown", "n": 2}],
}
"""What ``extra_fields`` adds to every JSON object of an answer (fresh copies each time)."""


@dataclass(frozen=True)
class Faults:
    """Which faults to inject; every ``*_every`` is 0 (off) or a positive whole number.

    :meth:`parse` reads the CLI form, ``"error_every=3,retry_after=0.5,extra_fields"``.
    """

    error_every: int = 0
    rate_limit_every: int = 0
    retry_after: float = 1.0
    slow_every: int = 0
    slow_seconds: float = 0.2
    drop_create_every: int = 0
    deaf_deletes: int = 0
    extra_fields: bool = False
    fail_names: str = ""
    unreachable_names: str = ""
    prefix: str = "/gpu-cloud/"

    def __post_init__(self) -> None:
        for name in ("error_every", "rate_limit_every", "slow_every", "drop_create_every",
                     "deaf_deletes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number, zero (off) or more.")
        for name in ("retry_after", "slow_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
                raise ValueError(f"{name} must be a number of seconds, zero or more.")

    @property
    def active(self) -> bool:
        """True when at least one fault is switched on."""
        return bool(self.error_every or self.rate_limit_every or self.slow_every
                    or self.drop_create_every or self.deaf_deletes or self.extra_fields)

    def fails(self, name: str) -> bool:
        """Whether an instance created with ``name`` is to fail (``fail_names``).

            >>> Faults(fail_names="dask-*-2").fails("dask-trio-2")
            True
        """
        return bool(self.fail_names) and fnmatch.fnmatchcase(name, self.fail_names)

    def unreachable(self, name: str) -> bool:
        """Whether the SSH server of an instance named ``name`` is never to open.

            >>> Faults(unreachable_names="dask-*-1").unreachable("dask-trio-1")
            True
        """
        return bool(self.unreachable_names) and fnmatch.fnmatchcase(name, self.unreachable_names)

    @classmethod
    def parse(cls, text: str) -> Faults:
        """Read ``"name=value,name=value,flag"`` (the ``--faults`` option); a bare name means true.

            >>> Faults.parse("error_every=3, slow_every=2, slow_seconds=0.2, extra_fields")
            Faults(error_every=3, ..., slow_every=2, slow_seconds=0.2, ..., extra_fields=True, ...)
        """
        types = {f.name: f.type for f in fields(cls)}
        options: dict[str, Any] = {}
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            name, has_value, value = (part.strip() for part in item.partition("="))
            name = name.replace("-", "_")
            if name not in types:
                raise ValueError(f"Unknown fault {name!r}; choose from {', '.join(types)}.")
            kind = types[name]
            try:
                if kind == "bool":
                    options[name] = (value.lower() in ("1", "true", "yes", "on")) if has_value else True
                elif kind == "int":
                    options[name] = int(value)
                elif kind == "float":
                    options[name] = float(value)
                else:
                    options[name] = value
            except ValueError:
                raise ValueError(f"The fault {name} needs a {kind} value, not {value!r}.") from None
        return cls(**options)

    def __str__(self) -> str:
        default = Faults()
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                parts.append(f.name if value is True else f"{f.name}={value}")
        return ",".join(parts)


@dataclass
class FaultStats:
    """How many requests the injector saw, and what it did to them."""

    requests: int = 0
    creates: int = 0
    slowed: int = 0
    errors: int = 0
    rate_limited: int = 0
    dropped: int = 0
    deaf: int = 0
    rewritten: int = 0


class ConnectionDropped(Exception):
    """Raised, when no transport can be closed, to make the server cut the connection."""


def _seconds_text(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _error_body(status: int, path: str, message: str) -> bytes:
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    return json.dumps({"statusCode": status, "timestamp": stamp, "path": path,
                       "message": message}).encode()


def add_extra_fields(value: Any) -> Any:
    """``value`` with :data:`EXTRA_FIELDS` added to every object in it, at every depth."""
    if isinstance(value, dict):
        out = {key: add_extra_fields(item) for key, item in value.items()}
        for key, extra in EXTRA_FIELDS.items():
            out.setdefault(key, json.loads(json.dumps(extra)))
        return out
    if isinstance(value, list):
        return [add_extra_fields(item) for item in value]
    return value


def _header(message: Message, name: bytes) -> bytes | None:
    for key, value in message.get("headers", []):
        if key.lower() == name:
            return bytes(value)
    return None


class FaultInjector:
    """ASGI middleware injecting :class:`Faults` into the requests under ``faults.prefix``.

    Other attributes (``state``, ``routes``, ...) are those of the wrapped app, so whoever served
    the plain app can serve this one.
    """

    def __init__(self, app: ASGIApp, faults: Faults) -> None:
        self.app = app
        self.faults = faults
        self.stats = FaultStats()

    def __getattr__(self, name: str) -> Any:
        if name == "app":  # not set yet (during unpickling or a failed __init__)
            raise AttributeError(name)
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        faults = self.faults
        is_create = scope["type"] == "http" and scope["method"] == "POST" \
            and scope["path"].rstrip("/") in CREATE_PATHS
        if not is_create and (scope["type"] != "http"
                              or not scope["path"].startswith(faults.prefix)):
            await self.app(scope, receive, send)
            return
        stats = self.stats
        stats.requests += 1
        n = stats.requests
        if is_create:
            stats.creates += 1
        if faults.slow_every and n % faults.slow_every == 0:
            stats.slowed += 1
            await asyncio.sleep(faults.slow_seconds)
        if faults.error_every and n % faults.error_every == 0:
            stats.errors += 1
            await self._answer(send, 500, scope["path"], "Injected fault: the server failed.")
            return
        if faults.rate_limit_every and n % faults.rate_limit_every == 0:
            stats.rate_limited += 1
            wait = _seconds_text(faults.retry_after)
            await self._answer(send, 429, scope["path"], "Too many requests; slow down.",
                               [(b"retry-after", wait.encode())])
            return
        if faults.deaf_deletes and stats.deaf < faults.deaf_deletes and scope["method"] == "DELETE" \
                and scope["path"].startswith("/gpu-cloud/instances/"):
            stats.deaf += 1
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        drop = is_create and faults.drop_create_every and stats.creates % faults.drop_create_every == 0
        if not (drop or faults.extra_fields):
            await self.app(scope, receive, send)
            return

        messages: list[Message] = []

        async def capture(message: Message) -> None:
            messages.append(message)

        await self.app(scope, receive, capture)
        start = next((m for m in messages if m["type"] == "http.response.start"), None)
        if start is None:  # the app failed to answer; let the server say so
            return
        if drop and start["status"] < 300:
            stats.dropped += 1
            await self._drop(receive, send, start)
            return
        if faults.extra_fields:
            messages = self._rewrite(messages, start)
        for message in messages:
            await send(message)

    async def _answer(self, send: Send, status: int, path: str, message: str,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
        body = _error_body(status, path, message)
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *(headers or []),
        ]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    def _rewrite(self, messages: list[Message], start: Message) -> list[Message]:
        content_type = (_header(start, b"content-type") or b"").split(b";")[0].strip()
        if content_type != b"application/json":
            return messages
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
        try:
            data = json.loads(body)
        except ValueError:
            return messages
        new_body = json.dumps(add_extra_fields(data), separators=(",", ":")).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(new_body)).encode()))
        self.stats.rewritten += 1
        return [{**start, "headers": headers},
                {"type": "http.response.body", "body": new_body, "more_body": False}]

    async def _drop(self, receive: Receive, send: Send, start: Message) -> None:
        cycle = getattr(send, "__self__", None)
        transport = getattr(cycle, "transport", None)
        if transport is not None and callable(getattr(transport, "close", None)):
            transport.close()  # FIN without a byte of the answer
            # Wait until the server has seen the connection go, so it neither answers nor logs.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._until_disconnect(receive), timeout=2.0)
            return
        await send(start)  # not uvicorn: start the answer, then fail, which cuts it short
        raise ConnectionDropped("Injected fault: the connection was dropped after the create.")

    @staticmethod
    async def _until_disconnect(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
