"""``Server-Timing`` on every answer of the gateway: its own time and the upstream's, per request.

    $ curl -si -H "x-api-key: $KEY" $GATEWAY/gpu-cloud/instances | grep -i server-timing
    server-timing: app;dur=1.42, upstream;dur=0.97

``app`` is the time in milliseconds from the moment the gateway's app got the request (uvicorn
has read and parsed it) to the start of its answer; ``upstream`` the part of it spent waiting for
the upstream's answers (:meth:`gpucloud_nb.gateway.upstream.Upstream.send` adds to
:data:`UPSTREAM_SPENT`); a create's answer has ``admit`` too, the part spent admitting it against
the budget (:data:`ADMIT_SPENT`: the transaction, and any wait for another person's create of
the same name). ``app - upstream`` is the gateway's own work, and what a client
measured beyond ``app`` was spent outside the app: waiting for the gateway's event loop, the
network, the client itself. That is how ``benchmarks/bench_class.py`` and
``benchmarks/bench_gateway.py`` tell where a slow answer's time went. The header is not in the
spec; clients ignore it (it is the W3C's, shown by browsers' developer tools), and it says
nothing a caller could not time itself.

    >>> format_timing(0.00142, 0.00097)
    b'app;dur=1.42, upstream;dur=0.97'
    >>> format_timing(0.00142, 0.00097, 0.0002)
    b'app;dur=1.42, upstream;dur=0.97, admit;dur=0.20'
"""

from __future__ import annotations

import contextvars
import time
from typing import Any

__all__ = ["ADMIT_SPENT", "UPSTREAM_SPENT", "ServerTiming", "format_timing"]

UPSTREAM_SPENT: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "upstream_spent", default=None)
"""Seconds this request has waited for the upstream, as a one-item list (a task the request
starts shares it); ``None`` outside a request (the watcher's own calls)."""


ADMIT_SPENT: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "admit_spent", default=None)
"""Seconds this request has spent in admission, as a one-item list; ``None`` outside one."""


def format_timing(app: float, upstream: float, admit: float = 0.0) -> bytes:
    """The header's value for ``app``, ``upstream`` and (when any) ``admit`` seconds."""
    value = f"app;dur={app * 1e3:.2f}, upstream;dur={upstream * 1e3:.2f}"
    if admit:
        value += f", admit;dur={admit * 1e3:.2f}"
    return value.encode("ascii")


class ServerTiming:
    """ASGI middleware: a ``Server-Timing`` header on each HTTP answer of ``app``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:  # ``state`` and the like are the app's
        if name == "app":
            raise AttributeError(name)
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        spent, admitting = [0.0], [0.0]
        token, admit_token = UPSTREAM_SPENT.set(spent), ADMIT_SPENT.set(admitting)

        async def timed_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                value = format_timing(time.perf_counter() - start, spent[0], admitting[0])
                message = {**message, "headers": [*message.get("headers", ()),
                                                  (b"server-timing", value)]}
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            UPSTREAM_SPENT.reset(token)
            ADMIT_SPENT.reset(admit_token)
