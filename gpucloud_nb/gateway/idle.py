"""Idle deletes kept by the gateway: no kernel, no JupyterLab, the gateway alone watches.

    >>> watch = IdleWatch(store, GPUReader(key), meter.delete)  # doctest: +SKIP
    >>> await watch.step(listed)  # once per watcher pass  # doctest: +SKIP

At each pass of the watcher (:mod:`gpucloud_nb.gateway.meter`) every instance with an idle limit
(``create(..., delete_when_idle=)`` through the gateway, see
:mod:`gpucloud_nb.gateway.idle_routes`) is *in use* by the one rule,
:func:`gpucloud_nb.idle_rule.in_use`, when:

- it is not active yet (the upstream's list says so);
- a client reported use of it (``POST /gateway/instances/{id}/use``: a ``run``, a copy or a port
  forward the user opened, or a kernel executing code) that is still open, or that arrived
  since the last pass; an idle kernel is not use, and a client reports nothing for one;
- its busiest GPU is at :data:`~gpucloud_nb.idle_rule.THRESHOLD` % (5) or more, read by the
  gateway itself over SSH with its own key (:mod:`gpucloud_nb.gateway.gpu_reader`); unreadable
  is idle.

Once idle for its limit, it is deleted (audit reason ``idle``), and the delete is confirmed with
the upstream like every delete of the watcher. The warning starts
:func:`warn_seconds` before (5 minutes, or half a short limit), in
the idle state the client reads (``GET /gateway/idle``, the sandbox's shape).

Choices: the limits live in SQLite and outlive a restart; the idle clocks and reported use do
not: after a restart every clock starts again (an instance is never deleted early because the
gateway was down), as in the sandbox. The limit of an instance that is deleted goes with it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from gpucloud_nb.gateway.gpu_reader import GPUReader
from gpucloud_nb.gateway.store import Owned, Store
from gpucloud_nb.gateway.upstream import Listed
from gpucloud_nb.idle_rule import THRESHOLD, in_use
from gpucloud_nb.sandbox.http import Problem
from gpucloud_nb.sandbox.lifecycle import iso

__all__ = ["FIELD", "MAX_USE_SECONDS", "USE_SECONDS", "IdleWatch", "idle_seconds_of",
           "positive_seconds"]

log = logging.getLogger("uvicorn.error")
USE_SECONDS = 30.0
"""How long one report of use counts when it says nothing else (clients renew it sooner)."""
MAX_USE_SECONDS = 600.0
_GONE = ("deleting", "deleted", "error")
FIELD = "deleteWhenIdle"
"""The create body's field that hands ``delete_when_idle`` to the gateway (taken out before the
body goes on to the upstream)."""

WARN = 300.0  # seconds: the warning shows this long before an idle delete (or half the limit)


def warn_seconds(limit: float) -> float:
    """How long before an idle delete the warning shows: 5 minutes, or half a short limit.

        >>> warn_seconds(1800), warn_seconds(60)
        (300.0, 30.0)
    """
    return min(WARN, limit / 2)



def positive_seconds(value: Any, name: str) -> float:
    """``value`` as seconds, or a 400 :class:`~gpucloud_nb.sandbox.http.Problem` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value <= 0:
        raise Problem(400, f"{name} must be a positive number of seconds; nothing was launched."
                      if name == FIELD else f"{name} must be a positive number.")
    return float(value)


def idle_seconds_of(body: dict[str, Any]) -> float | None:
    """Take ``deleteWhenIdle`` out of a create's ``body``: its seconds, or ``None``; a 400
    :class:`~gpucloud_nb.sandbox.http.Problem` when it is there and not a positive number.

        >>> body = {"name": "job", "deleteWhenIdle": 1800}
        >>> idle_seconds_of(body), body
        (1800.0, {'name': 'job'})
    """
    if FIELD not in body:
        return None
    return positive_seconds(body.pop(FIELD), FIELD)


class IdleWatch:
    """The idle clocks of one gateway's instances, and what keeps them at zero."""

    def __init__(self, store: Store, reader: GPUReader,
                 delete: Callable[[Owned, str, str], Awaitable[bool]]) -> None:
        self.store, self.reader, self._delete = store, reader, delete
        self.since: dict[str, float] = {}
        self.used_until: dict[str, float] = {}
        self.reported_at: dict[str, float] = {}
        self.utils: dict[str, float | None] = {}
        self._last = time.time()

    def keep(self, id: str) -> None:
        """Start the idle clock of ``id`` again (the Keep button)."""
        self.since[id] = time.time()

    def idle_seconds(self, ids: Iterable[str]) -> float | None:
        """How long the idlest of ``ids`` has been idle, in seconds, among those whose clock runs
        (a limit, seen by a pass or asked for); ``None`` when none of them has one.

            >>> watch.idle_seconds(["i-1", "i-2"])  # doctest: +SKIP
            754.2
        """
        now = time.time()
        return max((max(now - self.since[id], 0.0) for id in ids if id in self.since),
                   default=None)

    def report(self, id: str, seconds: float = USE_SECONDS) -> float:
        """A client says ``id`` is in use for the next ``seconds``; when that ends (Unix s).
        ``0`` says what was open has ended: in use at the next pass only."""
        now = time.time()
        until = now if seconds <= 0 else \
            max(self.used_until.get(id, 0.0), now + min(seconds, MAX_USE_SECONDS))
        self.used_until[id] = until
        self.reported_at[id] = now
        return until

    def state(self, id: str, limit: float) -> dict[str, Any]:
        """The idle state of ``id`` as the routes answer it (see :mod:`gpucloud_nb.gateway.idle_routes`)."""
        now = time.time()
        since = self.since.setdefault(id, now)
        warn_at = since + limit - warn_seconds(limit)
        return {"instanceId": id, "seconds": limit, "idleSeconds": round(max(now - since, 0.0), 3),
                "deleteAt": iso(round((since + limit) * 1000)),
                "warnAt": iso(round(warn_at * 1000)), "warning": now >= warn_at,
                "gpuUtil": self.utils.get(id), "memoryMiB": None}

    async def step(self, listed: dict[str, Listed]) -> None:
        """One pass: read GPU use, advance each clock, delete what is idle past its limit."""
        limits = self.store.idle_limits()
        records = {record.id: record for record in self.store.find_many(limits)
                   if record.kind == "instance"}
        watched: dict[str, Owned] = {}
        for id in limits:
            record = records.get(id)
            if record is None or record.status in _GONE or record.delete_asked_ms is not None:
                self.store.cancel_idle(id)  # the limit ends with its instance
                continue
            watched[id] = record
        unlisted = Listed()
        active = {id for id in watched
                  if (listed.get(id, unlisted).status or watched[id].status) == "active"}
        reads = await asyncio.gather(*(self._read(id, listed.get(id, unlisted)) for id in active))
        self.utils = dict(zip(active, reads, strict=True))
        self.reader.keep_only(active)
        now = time.time()
        for id, record in watched.items():
            reported = self.used_until.get(id, 0.0) > now or self.reported_at.get(id, 0.0) >= self._last
            busy = in_use(active=id in active, open_uses=int(reported), kernel_busy=False,
                          gpu_util=self.utils.get(id))
            since = self.since.setdefault(id, now)
            if busy:
                self.since[id] = now
            elif now - since >= limits[id][1]:
                log.info("gateway: instance %s idle for %.0f s (no use reported, GPU under %g %%);"
                         " deleting it.", id, now - since, THRESHOLD)
                await self._delete(record, "idle", "gateway")
        self._last = now
        for table in (self.since, self.used_until, self.reported_at):
            for id in [id for id in table if id not in watched]:
                del table[id]

    async def _read(self, id: str, item: Listed) -> float | None:
        try:
            port = int(item.sshPort or 0)
        except (TypeError, ValueError):
            port = 0
        return await self.reader.read(id, str(item.ip or ""), port, str(item.sshUser or ""))
