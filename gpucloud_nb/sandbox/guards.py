"""What the sandbox checks before any route sees a request: the ``Host`` header and body sizes.

The sandbox is a network service on this machine, so a web page the user opens could reach it
through a DNS name that points at 127.0.0.1 (DNS rebinding). :class:`Guard` answers 421 to any
request whose ``Host`` is not the bound address or a loopback name (a server bound to every
address, for a class, accepts any name: it needs a custom key anyway), and counts body bytes as they
arrive: once a body passes its path's limit, it answers 413 at once and reads no further, chunked
or not (before, a 210 MB chunked upload was spooled in full before its 413).

    >>> app = Guard(app, hosts=allowed_hosts("127.0.0.1"), limits=[("/inference", 64 * MB)],  # doctest: +SKIP
    ...             error=lambda status, message, path: Response(...))

:func:`json_depth_problem` is the check both apps run on a parsed JSON body: nesting deeper than
:data:`MAX_JSON_DEPTH` levels is a 400, where it used to reach a recursive copy and give a 500.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MAX_JSON_DEPTH", "Guard", "allowed_hosts", "json_depth_problem"]

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a JSON body (a chat needs about 6)."""

ErrorResponse = Callable[[int, str, str], Response]
"""``error(status, message, path)``: the error body of the app that owns ``path``."""

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


#: Binding to every address: a class server that students reach by the teacher's name or IP.
WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def allowed_hosts(bound: str) -> frozenset[str] | None:
    """The ``Host`` names (without port, lowercase) accepted by a server bound to ``bound``.

    ``None`` (any name) for a wildcard bind: that server is meant to be reached from other
    machines by whatever name they know it by, and it only runs with a custom key and secret.

        >>> sorted(allowed_hosts("127.0.0.1"))
        ['127.0.0.1', '[::1]', 'localhost']
    """
    bound = bound.strip().lower()
    if bound in WILDCARDS:
        return None
    names = set(_LOOPBACK_NAMES)
    if bound:
        names.add(f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound)
    return frozenset(names)


def _host_name(value: str) -> str:
    """The host of a ``Host`` header, lowercase and without its port."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end != -1 else value
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class _TooLarge(Exception):
    """Raised into the app from ``receive`` when a body passes its limit."""


class Guard:
    """ASGI middleware: refuse a foreign ``Host`` (421) and stop reading an oversize body (413).

    ``limits`` are ``(path prefix, max bytes, message)``; the first prefix that matches wins, and a
    path that matches none has no limit here. ``error`` builds the error answer in the body style
    of the app that owns the path.
    """

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str] | None,
                 limits: Sequence[tuple[str, int, str]], error: ErrorResponse) -> None:
        self.app = app
        self.hosts = None if hosts is None else frozenset(hosts)
        self.limits = list(limits)
        self.error = error

    def __getattr__(self, name: str) -> Any:  # pass ``state`` and the like on to the app
        if name == "app":  # not set yet (during unpickling or a failed __init__)
            raise AttributeError(name)
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        host = next((value.decode("latin-1") for key, value in scope.get("headers", ())
                     if key == b"host"), None)
        if self.hosts is not None and (host is None or _host_name(host) not in self.hosts):
            shown = "missing" if host is None else repr(host[:60])
            await self.error(421, f"The Host header ({shown}) does not name this sandbox; use "
                                  "http://127.0.0.1 or http://localhost.", path)(
                scope, receive, send)
            return
        limit = next(((size, message) for prefix, size, message in self.limits
                      if path.startswith(prefix)), None)
        if limit is None:
            await self.app(scope, receive, send)
            return
        await self._limited(scope, receive, send, *limit)

    async def _limited(self, scope: Scope, receive: Receive, send: Send, limit: int,
                       message: str) -> None:
        received = 0
        over = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > limit:
                    over = True
                    raise _TooLarge
            return event

        async def tracking_send(event: Message) -> None:
            nonlocal started
            if over:  # the app's own answer to the exception it saw: ours goes instead
                return
            if event["type"] == "http.response.start":
                started = True
            await send(event)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, counting_receive, tracking_send)
        if over and not started:
            await self.error(413, message, scope.get("path", ""))(scope, receive, send)


def json_object(raw: bytes | str, **loads: Any) -> dict[str, Any]:
    """A request body as a JSON object, or :class:`ValueError` with the sentence to answer 400.

    ``loads`` go to :func:`json.loads` (``parse_float=...``); too deep a body is refused too.

        >>> json_object(b"[1]")
        Traceback (most recent call last):
        ValueError: The request body must be a JSON object.
    """
    try:
        body = json.loads(raw, **loads)
    except (ValueError, RecursionError):
        raise ValueError("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ValueError("The request body must be a JSON object.")
    deep = json_depth_problem(body)
    if deep:
        raise ValueError(deep)
    return body


def json_depth_problem(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """A sentence when ``value`` nests arrays and objects deeper than ``limit`` levels, else None.

        >>> json_depth_problem([[[1]]], limit=2)
        'The request body nests arrays and objects more than 2 levels deep.'
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return f"The request body nests arrays and objects more than {limit} levels deep."
        stack.extend((child, depth + 1) for child in children)
    return None
