"""``delete_when_idle`` kept by the gateway: its routes, and the create's hand-over.

    $ curl -H "x-api-key: $KEY" -X POST $GATEWAY/gpu-cloud/instances \\
           -d '{"name": "job", ..., "vm": {"os": "ubuntu-22.04"}, "deleteWhenIdle": 1800}'
    $ curl -H "x-api-key: $KEY" -X POST $GATEWAY/gateway/instances/$ID/use -d '{"seconds": 30}'

**At create.** A create through the gateway may carry ``deleteWhenIdle`` (seconds, a positive
number): the gateway takes it out of the body, adds its own SSH key to the VM's cloud-init
(:mod:`gpucloud_nb.gateway.cloud_init`), sends the spec's body on, and keeps the limit in SQLite
once the upstream answers. A ``deleteWhenIdle`` that is not a positive number is a 400; so is one
on an offer without cloud-init (``cloudInitAvailable`` false: every container offer), in one
sentence, before anything is admitted or sent: the gateway could not read such an instance's
GPU, and a limit it cannot watch must not be taken quietly.

**Routes** (under ``/gateway/``; each key sees only its own instances, another's is a 404):

- ``PUT /gateway/instances/{id}/idle-delete`` with ``{"seconds": N}``: 200 with its state;
  400 for a bad ``seconds``, an instance deleting or deleted, or one launched without
  ``deleteWhenIdle`` (the gateway has no key on it; the limit is set at create). ``GET`` reads
  the state (404 without a limit), ``DELETE`` drops it (204, or 404).
- ``POST /gateway/instances/{id}/keep``: the idle clock starts again; 200 with the state.
- ``GET /gateway/idle``: the states of this key's limits, soonest delete first. A state is
  ``{"instanceId", "seconds", "idleSeconds", "deleteAt", "warnAt", "warning", "gpuUtil",
  "memoryMiB"}``; ``warning`` is true from ``warnAt`` on.
- ``POST /gateway/instances/{id}/use`` with ``{"seconds": S}`` (optional; 30 by default, at most
  600): a client says the instance is in use for the next ``S`` seconds (a run, a copy, a forward
  or an executing kernel of its own is open); 200 with ``{"instanceId", "until"}``.
  ``{"seconds": 0}`` says what was open has ended: the instance counts as in use at the next
  pass only, as a session closed since the last measure does, not for the rest of the ``S``
  seconds an earlier report gave. Choice: one report of an end ends every report of that
  instance; another client still holding something open tells again within its 10 s, so only
  a limit under that could see a gap.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.gateway.cloud_routes import Gate
from gpucloud_nb.gateway.idle import USE_SECONDS, IdleWatch, positive_seconds
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.sandbox.http import Problem, json_response, read_json_object
from gpucloud_nb.sandbox.lifecycle import iso

__all__ = ["idle_routes"]


def idle_routes(gate: Gate, watch: IdleWatch) -> list[BaseRoute]:
    """The idle routes of ``gate``."""
    store = gate.store

    def owned(request: Request, person: Person) -> str:
        id = str(request.path_params["id"])
        if store.owner(id) != person.account:
            raise Problem(404, f"Instance {id} not found.")
        return id

    def limit_of(id: str) -> float:
        found = store.idle_limits().get(id)
        if found is None:
            raise Problem(404, f"Instance {id} has no idle delete.")
        return found[1]

    async def put(request: Request, person: Person) -> Response:
        id = owned(request, person)
        seconds = positive_seconds((await read_json_object(request)).get("seconds"), "seconds")
        record = store.find(id)
        assert record is not None  # owned() found it
        if record.status in ("deleting", "deleted") or record.delete_asked_ms is not None:
            raise Problem(400, f"Instance {id} is already deleted or being deleted.")
        if not store.idle_keyed(id):
            raise Problem(400, f"Instance {id} was launched without delete_when_idle, so the "
                               "gateway has no key on it to read its GPU use; give "
                               "delete_when_idle when you launch it.")
        store.set_idle(id, person.account, seconds)
        watch.keep(id)
        return json_response(watch.state(id, seconds))

    async def get(request: Request, person: Person) -> Response:
        id = owned(request, person)
        return json_response(watch.state(id, limit_of(id)))

    async def cancel(request: Request, person: Person) -> Response:
        id = owned(request, person)
        if not store.cancel_idle(id):
            raise Problem(404, f"Instance {id} has no idle delete.")
        return Response(status_code=204)

    async def keep(request: Request, person: Person) -> Response:
        id = owned(request, person)
        limit = limit_of(id)
        watch.keep(id)
        return json_response(watch.state(id, limit))

    async def listing(request: Request, person: Person) -> Response:
        states = [watch.state(id, seconds)
                  for id, (_, seconds) in store.idle_limits(person.account).items()]
        return json_response(sorted(states, key=lambda state: state["deleteAt"]))

    async def use(request: Request, person: Person) -> Response:
        id = owned(request, person)
        body = await read_json_object(request) if await request.body() else {}
        seconds = body.get("seconds", USE_SECONDS)
        ended = seconds == 0 and not isinstance(seconds, bool)
        until = watch.report(id, 0.0 if ended else positive_seconds(seconds, "seconds"))
        return json_response({"instanceId": id, "until": iso(round(until * 1000))})

    return [
        Route("/gateway/idle", gate.route(listing), methods=["GET"]),
        Route("/gateway/instances/{id}/idle-delete", gate.route(put), methods=["PUT"]),
        Route("/gateway/instances/{id}/idle-delete", gate.route(get), methods=["GET"]),
        Route("/gateway/instances/{id}/idle-delete", gate.route(cancel), methods=["DELETE"]),
        Route("/gateway/instances/{id}/keep", gate.route(keep), methods=["POST"]),
        Route("/gateway/instances/{id}/use", gate.route(use), methods=["POST"]),
    ]
