"""Idle deletes for sandbox instances: the service deletes an instance nobody uses any more.

    $ curl -H "x-api-key: $KEY" -X PUT $BASE/sandbox/instances/$ID/idle-delete -d '{"seconds": 1800}'
    $ curl -H "x-api-key: $KEY" -X POST $BASE/sandbox/instances/$ID/keep     # idle clock to 0

Every ``POLL`` seconds (1) the service measures every process of each active instance
(:mod:`gpucloud_nb.sandbox.gpu_use`: CPU share for GPU utilisation, RSS for memory; found by the
marker in their environment, however they were started) and hands it to the instance's
``nvidia-smi``. An instance with an idle limit is *in use* at a measure by the one rule of every
idle watcher, :func:`gpucloud_nb.idle_rule.in_use`: an SSH session (a shell, a command, SFTP or
scp) or a forwarded connection is open or opened or closed since the last measure, or its GPU
utilisation is ``THRESHOLD`` % (5) or more. A Jupyter kernel on it that executes code is CPU among its
processes, so it counts; an idle kernel is not use, and neither is bookkeeping: a session whose
client marked it so (a watcher's ``nvidia-smi`` measure, a kernel provisioner's ``kill -0``
poll; see :mod:`gpucloud_nb.sandbox.ssh`) counts neither as a session nor, while open, as CPU.
A forwarded connection marked as bookkeeping (a kernel's channels, a cluster's scheduler and
dashboard) does not count either; one through a forward the user opened does. Once an instance
has been idle for its limit, the service deletes it, at most one measure late, and the log says
so.

Sandbox-only routes (each key sees its own account's instances):

- ``PUT /sandbox/instances/{id}/idle-delete`` with ``{"seconds": N}``: delete it once idle
  for ``N`` seconds (replaces an earlier limit; the idle clock starts again). 200 with its
  state, 404 for an unknown instance, 400 for one deleting or deleted or a bad ``seconds``.
  ``GET`` reads the state (404 without a limit), ``DELETE`` drops the limit (204, or 404).
- ``POST /sandbox/instances/{id}/keep``: the idle clock starts again (the "Keep" button); 200
  with the state, 404 without a limit.
- ``GET /sandbox/idle``: the state of every limit of this account, soonest delete first.

A state is ``{"instanceId", "seconds", "idleSeconds", "deleteAt", "warnAt", "warning",
"gpuUtil", "memoryMiB"}``: the limit, how long it has been idle, when it will be deleted if it
stays idle and when the warning starts (ISO 8601), whether it has, and the last measure.
The warning starts ``WARN`` seconds (5 minutes) before the delete, or half-way for a limit
under 10 minutes.

Choices: the limits live in the SQLite state, so they outlive a restart of the service; the idle
clock does not, and starts again at the restart (an instance is never deleted early because the
service was down). On the real cloud there is no such endpoint: the JupyterLab server extension
watches while JupyterLab runs, else the kernel that set the limit (see
:mod:`gpucloud_nb.client.idle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from gpucloud_nb.idle_rule import THRESHOLD, in_use
from gpucloud_nb.sandbox.gpu_use import ProcessTable, TreeMeter, Use
from gpucloud_nb.sandbox.http import Handler, Problem, json_response, now_ms, read_json_object
from gpucloud_nb.sandbox.lifecycle import iso, status_of

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from gpucloud_nb.sandbox.ssh import _InstanceServer
    from gpucloud_nb.sandbox.store import Store

__all__ = ["POLL", "THRESHOLD", "WARN", "IdleWatcher", "idle_routes", "idle_watching",
           "warn_seconds"]

log = logging.getLogger("uvicorn.error")  # the service log, next to uvicorn's own lines
POLL = 1.0
WARN = 300.0


def warn_seconds(limit: float) -> float:
    """How long before an idle delete the warning shows: 5 minutes, or half a short limit.

        >>> warn_seconds(1800), warn_seconds(60)
        (300.0, 30.0)
    """
    return min(WARN, limit / 2)


class IdleWatcher:
    """Measures the instances of one sandbox and deletes those idle past their limit."""

    def __init__(self, app: Starlette, poll: float = POLL) -> None:
        self.store = app.state.store
        self.servers = app.state.ssh
        self.delete_seconds = float(app.state.config.delete_seconds)
        self.poll = poll
        self.since: dict[str, float] = {}
        self.uses: dict[str, Use] = {}
        self._meters: dict[str, TreeMeter] = {}
        self._table = ProcessTable()
        self._last = time.time()

    def keep(self, instance_id: str) -> None:
        """Start the idle clock of ``instance_id`` again."""
        self.since[instance_id] = time.time()

    def state(self, instance_id: str, limit_ms: int) -> dict[str, Any]:
        """What the routes answer for one limit."""
        limit = limit_ms / 1000
        since = self.since.setdefault(instance_id, time.time())
        idle = max(time.time() - since, 0.0)
        use = self.uses.get(instance_id)
        warn_at = since + limit - warn_seconds(limit)
        return {
            "instanceId": instance_id, "seconds": limit, "idleSeconds": round(idle, 3),
            "deleteAt": iso(round((since + limit) * 1000)), "warnAt": iso(round(warn_at * 1000)),
            "warning": time.time() >= warn_at,
            "gpuUtil": None if use is None else use.util,
            "memoryMiB": None if use is None else round(use.memory_mib, 1),
        }

    def _measure(self, running: dict[str, _InstanceServer]) -> dict[str, Use]:
        snapshot = self._table.snapshot()
        return {id_: self._meters.setdefault(id_, TreeMeter()).sample(server.processes(snapshot))
                for id_, server in running.items()}

    async def step(self) -> None:
        """Measure every running instance once; delete those idle past their limit."""
        running = self.servers.running()
        uses = await asyncio.to_thread(self._measure, running)
        for id_, use in uses.items():
            with contextlib.suppress(OSError):
                running[id_].write_use(use.util, use.memory_mib)
        self.uses = uses
        now = time.time()
        moment = round(now * 1000)
        limits = self.store.idle_deletes()
        for id_, (user, limit_ms) in limits.items():
            record = self.store.instance(user, id_)
            server = running.get(id_)
            measured = uses.get(id_)
            opened = server is not None and (server.sessions > 0 or server.session_at >= self._last)
            busy = in_use(active=record is not None and status_of(record, moment).name == "active",
                          open_uses=int(opened), kernel_busy=False,  # a busy kernel is its CPU
                          gpu_util=None if measured is None else measured.util)
            since = self.since.setdefault(id_, now)
            if busy:
                self.since[id_] = now
            elif now - since >= limit_ms / 1000:
                gone = moment + round(self.delete_seconds * 1000)
                if self.store.delete_instance(user, id_, delete_ms=moment, gone_ms=gone):
                    log.info("Idle-deleted instance %s: idle for %.0f s (no session, GPU under "
                             "%g %%).", id_, now - since, THRESHOLD)
        self._last = now
        for gone_id in [i for i in self.since if i not in limits]:
            del self.since[gone_id]
        for gone_id in [i for i in self._meters if i not in running]:
            del self._meters[gone_id]


async def _watch(watcher: IdleWatcher) -> None:
    while True:
        try:
            await watcher.step()
        except Exception:  # a bug must not end the watching: log it and try again
            log.exception("The idle watcher failed; trying again.")
        await asyncio.sleep(watcher.poll)


@contextlib.asynccontextmanager
async def idle_watching(app: Starlette) -> AsyncIterator[None]:
    """Run the idle watcher while the app is served (part of the app's lifespan)."""
    watcher = IdleWatcher(app)
    app.state.idle_watcher = watcher
    task = asyncio.create_task(_watch(watcher), name="gpucloud-nb-idle")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def idle_routes(route: Callable[[str, Mapping[str, Handler]], BaseRoute],
                store: Store) -> list[BaseRoute]:
    """The sandbox-only idle routes over ``store``; ``route(path, handlers)`` checks the key."""

    def watcher(request: Request) -> IdleWatcher:
        found = getattr(request.app.state, "idle_watcher", None)
        if found is None:
            raise Problem(503, "The sandbox's idle watcher is not running.")
        return found

    def limit_of(request: Request) -> int:
        id_ = request.path_params["id"]
        limit = store.idle_deletes(request.state.user).get(id_)
        if limit is None:
            raise Problem(404, f"Instance {id_} has no idle delete.")
        return int(limit[1])

    async def set_limit(request: Request) -> Response:
        id_, user = request.path_params["id"], request.state.user
        seconds = (await read_json_object(request)).get("seconds")
        if (isinstance(seconds, bool) or not isinstance(seconds, int | float)
                or not math.isfinite(seconds) or seconds <= 0):
            raise Problem(400, "seconds must be a positive number.")
        limit_ms = max(round(seconds * 1000), 1)
        if not store.set_idle_delete(user, id_, limit_ms):
            record = store.instance(user, id_)
            if record is None:
                raise Problem(404, f"Instance {id_} not found.")
            raise Problem(400, f"Instance {id_} is already {status_of(record, now_ms()).name}.")
        watched = watcher(request)
        watched.keep(id_)
        return json_response(watched.state(id_, limit_ms))

    async def get_limit(request: Request) -> Response:
        return json_response(watcher(request).state(request.path_params["id"], limit_of(request)))

    async def cancel_limit(request: Request) -> Response:
        if not store.cancel_idle_delete(request.state.user, request.path_params["id"]):
            raise Problem(404, f"Instance {request.path_params['id']} has no idle delete.")
        return Response(status_code=204)

    async def keep(request: Request) -> Response:
        limit_ms = limit_of(request)
        watched = watcher(request)
        watched.keep(request.path_params["id"])
        return json_response(watched.state(request.path_params["id"], limit_ms))

    async def listing(request: Request) -> Response:
        watched = watcher(request)
        states = [watched.state(id_, limit)
                  for id_, (_, limit) in store.idle_deletes(request.state.user).items()]
        return json_response(sorted(states, key=lambda state: state["deleteAt"]))

    return [
        route("/sandbox/idle", {"GET": listing}),
        route("/sandbox/instances/{id}/idle-delete",
              {"GET": get_limit, "PUT": set_limit, "DELETE": cancel_limit}),
        route("/sandbox/instances/{id}/keep", {"POST": keep}),
    ]
