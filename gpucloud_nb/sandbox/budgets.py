"""An instance's spend budget in the sandbox: the service deletes it at the budget.

    $ curl -H "x-api-key: $KEY" -X PUT $BASE/sandbox/instances/$ID/budget -d '{"dollars": 5}'
    $ curl -H "x-api-key: $KEY" $BASE/sandbox/budgets

Spend is hourly price × hours ``active`` or ``deleting`` (pending and a failed launch cost
nothing), times the sandbox's ``bill_factor`` (1; more bills faster, to rehearse a budget in
seconds). Every ``POLL`` seconds (1) the service looks at every budget (``budget=`` at create):
once an instance's spend reaches it, the instance is deleted (so its final spend is the budget,
plus at most one poll and its ``deleting`` time); at ``WARN_SHARE`` (80 %) its state says
``warning`` and the log says so, once. A class's budgets per person, held at launch, and the
teacher's view are the gateway's (``gpucloud-nb gateway --keys FILE`` in front of the sandbox,
see :mod:`gpucloud_nb.gateway.money`), as they would be in front of the real cloud.

Sandbox-only routes (each key sees its own instances):

- ``PUT /sandbox/instances/{id}/budget`` with ``{"dollars": D}``: 200 with its state; 404 for
  an unknown instance, 400 for one deleting or deleted, a bad ``dollars``, or a budget it has
  already spent. ``GET`` reads the state (404 without a budget), ``DELETE`` drops it (204/404).
- ``GET /sandbox/budgets``: ``{"instances": [state, ...]}``.

A state is ``{"instanceId", "dollars", "spend", "left", "warning", "status"}``. Choices: the
budgets live in the SQLite state and the spend is derived from stored times, so both outlive a
restart of the service (a budget that ran out while it was down deletes at the restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from gpucloud_nb.display import format_price
from gpucloud_nb.sandbox.http import Handler, Problem, json_response, now_ms, read_json_object
from gpucloud_nb.sandbox.lifecycle import status_of
from gpucloud_nb.sandbox.store import InstanceRecord, Store

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["POLL", "WARN_SHARE", "Budgets", "budget_routes", "budget_watching",
           "spend"]

log = logging.getLogger("uvicorn.error")  # the service log, next to uvicorn's own lines
POLL = 1.0
WARN_SHARE = 0.8


def spend(record: InstanceRecord, now: int, factor: float = 1.0) -> float:
    """Dollars ``record`` has cost at ``now`` (Unix ms): price × hours active or deleting × factor.

        >>> from gpucloud_nb.sandbox.store import InstanceRecord
        >>> record = InstanceRecord(1, "i", "u", "vm", None, 0, 1000, False, None, None,
        ...                         {"hourlyPrice": 2.0})
        >>> spend(record, 1000 + 1_800_000)   # half an hour active at $2/h
        1.0
    """
    if record.fails:
        return 0.0
    status = status_of(record, now)
    if status.name == "pending":
        return 0.0
    start = record.ready_ms if record.delete_ms is None else min(record.ready_ms, record.delete_ms)
    end = now if status.deleted_ms is None else status.deleted_ms
    return max(end - start, 0) / 3_600_000 * float(record.doc.get("hourlyPrice") or 0.0) * factor


class Budgets:
    """The instance budgets of one sandbox: their states and the deletes at the budget."""

    def __init__(self, store: Store, *, factor: float = 1.0, delete_seconds: float = 1.0) -> None:
        self.store = store
        self.factor = factor
        self.delete_ms = round(delete_seconds * 1000)

    def state(self, id_: str, user: str, dollars: float, now: int) -> dict[str, Any]:
        """What the routes answer for the budget of instance ``id_``."""
        record = self.store.instance(user, id_)
        spent = 0.0 if record is None else spend(record, now, self.factor)
        return {"instanceId": id_, "dollars": dollars, "spend": round(spent, 6),
                "left": round(max(dollars - spent, 0.0), 6), "warning": spent >= WARN_SHARE * dollars,
                "status": "deleted" if record is None else status_of(record, now).name}

    def step(self, now: int) -> list[str]:
        """Delete what has spent its budget and warn at 80 %; the ids deleted.

        One read of each instance that has a budget and is not being deleted, per step.
        """
        deleted: list[str] = []
        for id_, (user, dollars, warned) in self.store.budgets().items():
            record = self.store.instance(user, id_)
            if record is None or record.delete_ms is not None:
                continue
            spent = spend(record, now, self.factor)
            if spent >= dollars:
                if self.store.delete_instance(user, id_, delete_ms=now,
                                              gone_ms=now + self.delete_ms) is not None:
                    deleted.append(id_)
                    log.info("Deleted instance %s: it has cost %s, its budget.", id_,
                             format_price(spent))
            elif spent >= WARN_SHARE * dollars and not warned:
                self.store.mark_budget_warned(id_)
                log.warning("Instance %s has cost %s, %d %% of its budget of %s.", id_,
                            format_price(spent), round(100 * spent / dollars), format_price(dollars))
        return deleted


async def _watch(budgets: Budgets, poll: float) -> None:
    while True:
        try:
            budgets.step(now_ms())
        except Exception:  # a bug must not end the watching: log it and try again
            log.exception("The budget watcher failed; trying again.")
        await asyncio.sleep(poll)


@contextlib.asynccontextmanager
async def budget_watching(app: Starlette, poll: float = POLL) -> AsyncIterator[None]:
    """Watch ``app.state.budgets`` while the app is served (part of the app's lifespan)."""
    task = asyncio.create_task(_watch(app.state.budgets, poll), name="gpucloud-nb-budgets")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _dollars(body: dict[str, Any]) -> float:
    dollars = body.get("dollars")
    if (isinstance(dollars, bool) or not isinstance(dollars, int | float)
            or not math.isfinite(dollars) or dollars <= 0):
        raise Problem(400, "dollars must be a positive number.")
    return float(dollars)


def budget_routes(route: Callable[[str, Mapping[str, Handler]], BaseRoute],
                  budgets: Budgets) -> list[BaseRoute]:
    """The sandbox-only budget routes; ``route(path, handlers)`` checks the key first."""
    store = budgets.store

    def budget_of(request: Request) -> float:
        id_ = request.path_params["id"]
        found = store.budgets(request.state.user).get(id_)
        if found is None:
            raise Problem(404, f"Instance {id_} has no budget.")
        return found[1]

    async def set_budget(request: Request) -> Response:
        id_, user, now = request.path_params["id"], request.state.user, now_ms()
        dollars = _dollars(await read_json_object(request))
        record = store.instance(user, id_)
        if record is None:
            raise Problem(404, f"Instance {id_} not found.")
        spent = spend(record, now, budgets.factor)
        if record.delete_ms is None and spent >= dollars:
            raise Problem(400, f"Instance {id_} has already cost {format_price(spent)}; give a "
                               "budget above that.")
        if not store.set_budget(user, id_, dollars):
            raise Problem(400, f"Instance {id_} is already {status_of(record, now).name}.")
        return json_response(budgets.state(id_, user, dollars, now))

    async def get_budget(request: Request) -> Response:
        return json_response(budgets.state(request.path_params["id"], request.state.user,
                                           budget_of(request), now_ms()))

    async def cancel_budget(request: Request) -> Response:
        if not store.cancel_budget(request.state.user, request.path_params["id"]):
            raise Problem(404, f"Instance {request.path_params['id']} has no budget.")
        return Response(status_code=204)

    async def listing(request: Request) -> Response:
        user, now = request.state.user, now_ms()
        return json_response({"instances": [budgets.state(id_, user, dollars, now)
                                            for id_, (_, dollars, _) in store.budgets(user).items()]})

    return [
        route("/sandbox/budgets", {"GET": listing}),
        route("/sandbox/instances/{id}/budget",
              {"GET": get_budget, "PUT": set_budget, "DELETE": cancel_budget}),
    ]
