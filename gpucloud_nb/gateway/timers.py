"""``delete_after`` kept by the gateway: timers that fire with no kernel or JupyterLab running.

    $ curl -H "x-api-key: $KEY" -X PUT $GATEWAY/gateway/instances/$ID/auto-delete \\
           -d '{"at": "2026-11-24T12:00:00Z"}'

The sandbox's timer routes (:mod:`gpucloud_nb.sandbox.service_api`), mirrored under
``/gateway/``, so a client asks the gateway exactly as it asks the sandbox service (same bodies,
same answers); each key sees only its own instances (an inference instance's id is taken
as well):

- ``PUT /gateway/instances/{id}/auto-delete`` with ``{"at": ISO 8601}``: 200 with
  ``{"instanceId", "at"}``; 404 for an instance the key does not own, 400 for a bad ``at`` or an
  instance already deleting or deleted. ``GET`` reads the timer (404 without one), ``DELETE``
  cancels it (204; 404 without one).
- ``GET /gateway/auto-deletes``: ``[{"instanceId", "at"}]``, soonest first.

Timers live in the gateway's SQLite state; the watcher (:mod:`gpucloud_nb.gateway.meter`) deletes
each instance at its first pass after it is due (audit reason ``delete_after timer``) and confirms
the delete like any other. A time in the past means at the next pass.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.gateway.cloud_routes import Gate
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.meter import parse_ms
from gpucloud_nb.sandbox.http import Problem, json_response, read_json_object
from gpucloud_nb.sandbox.lifecycle import iso

__all__ = ["timer_routes"]


def timer_routes(gate: Gate) -> list[BaseRoute]:
    """The ``delete_after`` routes of ``gate``."""
    store = gate.store

    def owned(request: Request, person: Person) -> str:
        id = str(request.path_params["id"])
        if store.owner(id) != person.account:
            raise Problem(404, f"Instance {id} not found.")
        return id

    def timer_of(id: str) -> tuple[str, str, int]:
        found = next((timer for timer in store.timers() if timer[0] == id), None)
        if found is None:
            raise Problem(404, f"Instance {id} has no auto-delete timer.")
        return found

    async def put(request: Request, person: Person) -> Response:
        id = owned(request, person)
        body = await read_json_object(request)
        at = parse_ms(body.get("at"))
        if at is None:
            raise Problem(400, "The field at must be an ISO 8601 date-time.")
        record = store.find(id)
        assert record is not None  # owned above
        if record.status in ("deleting", "deleted") or record.delete_asked_ms is not None:
            raise Problem(400, f"Instance {id} is already deleted or being deleted.")
        store.set_timer(id, person.account, at)
        return json_response({"instanceId": id, "at": iso(at)})

    async def get(request: Request, person: Person) -> Response:
        id, _, at = timer_of(owned(request, person))
        return json_response({"instanceId": id, "at": iso(at)})

    async def cancel(request: Request, person: Person) -> Response:
        id = owned(request, person)
        if not store.drop_timer(id):
            raise Problem(404, f"Instance {id} has no auto-delete timer.")
        return Response(status_code=204)

    async def listing(request: Request, person: Person) -> Response:
        return json_response([{"instanceId": id, "at": iso(at)}
                              for id, _, at in store.timers(person.account)])

    return [
        Route("/gateway/instances/{id}/auto-delete", gate.route(put), methods=["PUT"]),
        Route("/gateway/instances/{id}/auto-delete", gate.route(get), methods=["GET"]),
        Route("/gateway/instances/{id}/auto-delete", gate.route(cancel), methods=["DELETE"]),
        Route("/gateway/auto-deletes", gate.route(listing), methods=["GET"]),
    ]
