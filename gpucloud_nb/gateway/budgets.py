"""An instance's own budget (``create(..., budget=)``) kept by the gateway, with no kernel running.

    $ curl -H "x-api-key: $KEY" -X PUT $GATEWAY/gateway/instances/$ID/budget -d '{"dollars": 5}'

The sandbox's budget routes (:mod:`gpucloud_nb.sandbox.budgets`), mirrored under ``/gateway/``,
so a client asks the gateway exactly as it asks the sandbox service; each key sees only its own
instances (an inference instance's id is taken as well, its cost its container-hours):

- ``PUT /gateway/instances/{id}/budget`` with ``{"dollars": D}``: 200 with its state; 404 for an
  instance the key does not own, 400 for a bad ``dollars``, an instance already deleting or
  deleted, or a budget it has already spent. ``GET`` reads the state (404 without a budget),
  ``DELETE`` drops it (204; 404 without one).
- ``GET /gateway/budgets``: ``{"account": {"budget", "spend", "left"} or null, "instances":
  [state, ...]}``; a state is ``{"instanceId", "dollars", "spend", "left", "warning",
  "status"}``.

The watcher (:mod:`gpucloud_nb.gateway.meter`) deletes an instance at its first pass after its
spend (the gateway's metering, :func:`gpucloud_nb.gateway.money.cost`) reaches its budget (audit
reason ``instance budget spent``) and confirms the delete like any other. Choices: the budget
stays after the delete, so its state reads ``deleting``/``deleted`` with what it cost; the
warning is at :data:`~gpucloud_nb.gateway.gateway_routes.WARN_SHARE` (80 %), as the key's own.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.display import format_price
from gpucloud_nb.gateway import money
from gpucloud_nb.gateway.cloud_routes import Gate
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.store import Owned, Store
from gpucloud_nb.sandbox.http import Problem, json_response, now_ms, read_json_object

__all__ = ["WARN_SHARE", "budget_routes", "instance_state"]

WARN_SHARE = 0.8
GONE = ("deleting", "deleted")


def instance_state(store: Store, record: Owned, dollars: float, now: int) -> dict[str, Any]:
    """Where ``record`` stands against its budget of ``dollars``, as the sandbox answers it.

        >>> from gpucloud_nb.gateway.store import Owned, Store
        >>> r = Owned("i-1", "instance", "a", "job", 2.0, 0, None, "active", False, None, None)
        >>> instance_state(Store(":memory:"), r, 1.0, 1_800_000)["warning"]
        True
    """
    spent = money.cost_of(store, record, now)
    status = "deleting" if record.delete_asked_ms is not None and record.status not in GONE \
        else record.status
    return {"instanceId": record.id, "dollars": dollars, "spend": round(spent, 6),
            "left": round(max(dollars - spent, 0.0), 6), "warning": spent >= WARN_SHARE * dollars,
            "status": status}


def budget_routes(gate: Gate) -> list[BaseRoute]:
    """The instance-budget routes of ``gate``."""
    store = gate.store

    def owned(request: Request, person: Person) -> Owned:
        id = str(request.path_params["id"])
        found = store.find(id)
        if found is None or found.account != person.account or found.kind == "volume":
            raise Problem(404, f"Instance {id} not found.")
        return found

    def dollars_of(record: Owned) -> float:
        found = next((d for i, _, d in store.budgets(record.account) if i == record.id), None)
        if found is None:
            raise Problem(404, f"Instance {record.id} has no budget.")
        return found

    async def put(request: Request, person: Person) -> Response:
        record = owned(request, person)
        dollars = (await read_json_object(request)).get("dollars")
        if isinstance(dollars, bool) or not isinstance(dollars, int | float) \
                or not math.isfinite(dollars) or not dollars > 0:
            raise Problem(400, "The field dollars must be a positive number.")
        if record.status in GONE or record.delete_asked_ms is not None:
            raise Problem(400, f"Instance {record.id} is already deleted or being deleted.")
        now = now_ms()
        spent = money.cost_of(store, record, now)
        if spent >= dollars:
            raise Problem(400, f"Instance {record.id} has already cost {format_price(spent)}, "
                               f"more than a budget of {format_price(float(dollars))}.")
        store.set_budget(record.id, person.account, float(dollars))
        return json_response(instance_state(store, record, float(dollars), now))

    async def get(request: Request, person: Person) -> Response:
        record = owned(request, person)
        return json_response(instance_state(store, record, dollars_of(record), now_ms()))

    async def cancel(request: Request, person: Person) -> Response:
        record = owned(request, person)
        if not store.drop_budget(record.id):
            raise Problem(404, f"Instance {record.id} has no budget.")
        return Response(status_code=204)

    async def listing(request: Request, person: Person) -> Response:
        now = now_ms()
        budgets = store.budgets(person.account)
        records = {r.id: r for r in store.find_many(id for id, _, _ in budgets)
                   if r.account == person.account and r.kind in ("instance", "endpoint")}
        account = None
        if person.budget is not None:
            spent = money.spent(store, [person], now)[person.account]
            account = {"budget": person.budget, "spend": round(spent, 6),
                       "left": round(max(person.budget - spent, 0.0), 6)}
        return json_response({"account": account, "instances": [
            instance_state(store, records[id], dollars, now)
            for id, _, dollars in budgets if id in records]})

    return [
        Route("/gateway/instances/{id}/budget", gate.route(put), methods=["PUT"]),
        Route("/gateway/instances/{id}/budget", gate.route(get), methods=["GET"]),
        Route("/gateway/instances/{id}/budget", gate.route(cancel), methods=["DELETE"]),
        Route("/gateway/budgets", gate.route(listing), methods=["GET"]),
    ]
