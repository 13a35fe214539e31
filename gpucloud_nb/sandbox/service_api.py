"""Sandbox-only endpoints (not part of the cloud's interface) and the server's background timers.

    $ curl -H "x-api-key: $KEY" -X PUT $BASE/sandbox/instances/$ID/auto-delete \\
           -d '{"at": "2026-11-24T12:00:00Z"}'

Every path but the challenge needs ``x-api-key``, and each key sees only its own account:

- ``GET /sandbox/challenge?nonce=N`` (no key): ``{"proof"}``, the HMAC that proves this server is
  the home's service (:func:`gpucloud_nb.sandbox.service.challenge_proof` of the nonce, the pid
  and the port the request came in on, keyed by the home's challenge secret). ``connect()`` asks
  it before it sends any key; 400 for a nonce that is not 16 to 128 hex digits, 404 from a
  server that is not a home's service.
- ``GET /sandbox/service``: ``{"pid", "startedAt"}`` of the serving process.
- ``GET /sandbox/status``: ``pid``, ``startedAt``, ``instances`` (count by status), ``volumes``,
  ``autoDeletes`` and ``spend`` (dollars so far: hourly price × time active or deleting; a launch
  that ended in ``error`` costs nothing).
- ``GET /sandbox/inference``: ``{"url", "secret"}``, the inference endpoint's base (before
  ``/v1``) and this account's own inference secret (each ``--keys`` account has its own).
- ``GET /sandbox/auto-deletes``: ``[{"instanceId", "at"}]``, soonest first.
- ``PUT /sandbox/instances/{id}/auto-delete`` with ``{"at": ISO 8601}``: delete the instance at
  that time (a time past means at once); 200 with ``{"instanceId", "at"}``, 404 for an unknown
  instance, 400 for one already deleting or deleted or a bad ``at``. ``GET`` reads the timer
  (404 without one); ``DELETE`` cancels it (204, 404 without one).

Timers live in the SQLite state, so they outlive every kernel and a restart of the service; an
asyncio task started by the app's lifespan deletes each instance when it is due (at most a
second late). The deletion is recorded as of the due time, so a timer that fell due while the
service was down deletes at the restart but bills only up to when it was due (plus the usual
``deleting`` time), as if the service had never stopped; an ``at`` in the past is stored as the
time of the request. On the real cloud there is no such endpoint: timers stay in the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.sandbox.http import Handler, Problem, json_response, now_ms, read_json_object
from gpucloud_nb.sandbox.lifecycle import iso, status_of
from gpucloud_nb.sandbox.service import challenge_proof, challenge_secret
from gpucloud_nb.sandbox.store import Store

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["auto_delete_timers", "service_routes"]

log = logging.getLogger("uvicorn.error")  # the service log, next to uvicorn's own lines
_NONCE = re.compile(r"[0-9a-f]{16,128}")


def _at_ms(body: dict[str, Any]) -> int:
    text = body.get("at")
    try:
        if not isinstance(text, str):
            raise ValueError
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise Problem(400, "at must be an ISO 8601 date-time, such as "
                           "2026-11-24T12:00:00Z.") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def _spend(record: Any, now_ms: int) -> float:
    """Dollars so far: hourly price × hours active or deleting (see the module docstring)."""
    if record.fails:
        return 0.0
    status = status_of(record, now_ms)
    if status.name == "pending":
        return 0.0
    start = record.ready_ms if record.delete_ms is None else min(record.ready_ms, record.delete_ms)
    end = now_ms if status.deleted_ms is None else status.deleted_ms
    return max(end - start, 0) / 3_600_000 * float(record.doc.get("hourlyPrice") or 0.0)


def service_routes(route: Callable[[str, Mapping[str, Handler]], BaseRoute], store: Store, *,
                   home: str | os.PathLike[str] | None,
                   inference_secrets: Mapping[str, str]) -> list[BaseRoute]:
    """The sandbox-only routes over ``store``; ``route(path, handlers)`` checks the key first.

    ``home`` is the sandbox home whose service this is (``None``: not a service), and
    ``inference_secrets`` each account's (user id's) inference secret.
    """
    started = iso(now_ms())

    def wake(request: Request) -> None:
        event = getattr(request.app.state, "auto_delete_wake", None)
        if event is not None:
            event.set()

    async def challenge(request: Request) -> Response:
        nonce = request.query_params.get("nonce", "")
        try:
            if not _NONCE.fullmatch(nonce):
                raise Problem(400, "nonce must be 16 to 128 lowercase hex digits.")
            secret = challenge_secret(Path(home)) if home is not None else None
            server = request.scope.get("server")
            if secret is None or not server:
                raise Problem(404, "This sandbox is not the service of a sandbox home.")
        except Problem as problem:
            return problem.spec_response(request.url.path)
        return json_response({"proof": challenge_proof(secret, nonce, os.getpid(), int(server[1]))})

    async def service(request: Request) -> Response:
        return json_response({"pid": os.getpid(), "startedAt": started})

    async def status(request: Request) -> Response:
        user, now = request.state.user, now_ms()
        records = store.instances(user)
        counts: dict[str, int] = {}
        for record in records:
            name = status_of(record, now).name
            counts[name] = counts.get(name, 0) + 1
        return json_response({
            "pid": os.getpid(), "startedAt": started, "instances": counts,
            "volumes": len(store.volumes(user)), "autoDeletes": len(store.auto_deletes(user)),
            "spend": round(sum(_spend(record, now) for record in records), 6),
        })

    async def inference(request: Request) -> Response:
        return json_response({"url": f"{str(request.base_url).rstrip('/')}/inference",
                      "secret": inference_secrets[request.state.user]})

    async def timers(request: Request) -> Response:
        return json_response([{"instanceId": id_, "at": iso(at)}
                      for id_, at in store.auto_deletes(request.state.user).items()])

    async def set_timer(request: Request) -> Response:
        id_, user = request.path_params["id"], request.state.user
        at = max(_at_ms(await read_json_object(request)), now_ms())  # a time past means now
        if not store.set_auto_delete(user, id_, at):
            record = store.instance(user, id_)
            if record is None:
                raise Problem(404, f"Instance {id_} not found.")
            raise Problem(400, f"Instance {id_} is already {status_of(record, now_ms()).name}.")
        wake(request)
        return json_response({"instanceId": id_, "at": iso(at)})

    async def get_timer(request: Request) -> Response:
        id_ = request.path_params["id"]
        at = store.auto_deletes(request.state.user).get(id_)
        if at is None:
            raise Problem(404, f"Instance {id_} has no auto-delete timer.")
        return json_response({"instanceId": id_, "at": iso(at)})

    async def cancel_timer(request: Request) -> Response:
        id_ = request.path_params["id"]
        if not store.cancel_auto_delete(request.state.user, id_):
            raise Problem(404, f"Instance {id_} has no auto-delete timer.")
        wake(request)
        return Response(status_code=204)

    return [
        Route("/sandbox/challenge", challenge, methods=["GET"]),  # no key: it proves the server
        route("/sandbox/service", {"GET": service}),
        route("/sandbox/status", {"GET": status}),
        route("/sandbox/inference", {"GET": inference}),
        route("/sandbox/auto-deletes", {"GET": timers}),
        route("/sandbox/instances/{id}/auto-delete",
                         {"GET": get_timer, "PUT": set_timer, "DELETE": cancel_timer}),
    ]


async def _auto_delete(app: Starlette, wake: asyncio.Event) -> None:
    """Delete every instance whose timer is due; sleep until the next one (at most 1 s)."""
    store, config = app.state.store, app.state.config
    delete_ms = round(config.delete_seconds * 1000)
    while True:
        timeout = 1.0
        try:
            now = now_ms()
            for user, id_, at in store.due_auto_deletes(now):
                # Deleted as of when it was due: a timer that fell due while the service was
                # down does not bill the downtime.
                if store.delete_instance(user, id_, delete_ms=at, gone_ms=at + delete_ms):
                    log.info("Auto-deleted instance %s: its timer was due.", id_)
            due = store.next_auto_delete()
            if due is not None:
                timeout = min(max((due - now_ms()) / 1000, 0.0), 1.0)
        except Exception:  # a bug must not end the timers: log it and try again
            log.exception("The auto-delete timers failed; trying again in 1 s.")
        wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout)


@contextlib.asynccontextmanager
async def auto_delete_timers(app: Starlette) -> AsyncIterator[None]:
    """Run the auto-delete timers while the app is served (part of the app's lifespan)."""
    wake = asyncio.Event()
    app.state.auto_delete_wake = wake
    task = asyncio.create_task(_auto_delete(app, wake), name="gpucloud-nb-auto-delete")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
