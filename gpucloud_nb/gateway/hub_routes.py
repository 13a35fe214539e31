"""A hub gateway's own parts: group budgets changed by a teacher, and the app's hub wiring.

    $ curl -X PUT -H "x-api-key: $TEACHER_HUB_TOKEN" -d '{"budget": "20/week"}' \\
           $HUB/services/gpucloud/gateway/hub/groups/physics-101/budget
    {"default":{"budget":10.0,"period":""},"teacherGroup":"teachers","groups":[...],"users":[...]}

Teachers only (hub admins and the teacher group; anyone else gets the 404 of a path that does
not exist):

- ``GET /gateway/hub/budgets``: ``{"default": {"budget", "period"}, "teacherGroup", "groups":
  [{"group", "budget", "period", "changed"}], "users": [{"user", "budget", "period"}]}``, the
  budgets file's entries and the group budgets changed at runtime (``changed`` true);
- ``PUT /gateway/hub/groups/{group}/budget`` with ``{"budget": B}`` (as the per-account route
  takes it: dollars, ``null`` or ``"-"`` for none, ``"20/day"``): the group's budget from now on,
  for every member, kept in the state file over the budgets file; 200 with the view above;
- ``DELETE /gateway/hub/groups/{group}/budget``: the budgets file's word again; 200 likewise.

One person's own budget changes through the gateway's usual
``PUT /gateway/class/accounts/{account}/budget`` (:mod:`gpucloud_nb.gateway.teacher_routes`,
``ClassView.set_budget``). Each change is in the audit (action ``budget``). The order in which
budgets apply is in :mod:`gpucloud_nb.gateway.hub_budgets`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.gateway.cloud_routes import Gate
from gpucloud_nb.gateway.config import GatewayConfig
from gpucloud_nb.gateway.hub import HubAuth
from gpucloud_nb.gateway.hub_budgets import Budget, HubBudgets
from gpucloud_nb.gateway.hub_people import Roster
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.store import Store
from gpucloud_nb.gateway.teacher_routes import budget_of
from gpucloud_nb.sandbox.http import Problem, json_response, now_ms, read_json_object

__all__ = ["hub_roster", "hub_routes"]


def hub_roster(config: GatewayConfig, store: Store) -> Roster:
    """The roster of ``config``'s hub over ``store`` (the hub asked with a client of its own)."""
    assert config.hub is not None
    return Roster(store, HubAuth(config.hub), config.hub_budgets or HubBudgets())


def _budget_json(budget: Budget) -> dict[str, Any]:
    return {"budget": budget[0], "period": budget[1]}


def hub_routes(gate: Gate, roster: Roster) -> list[BaseRoute]:
    """The ``/gateway/hub/...`` routes of a hub's ``gate``."""
    budgets = roster.budgets

    def view() -> dict[str, Any]:
        groups = [{"group": g, **_budget_json(b), "changed": False}
                  for g, b in budgets.groups.items() if g not in budgets.group_changes]
        groups += [{"group": g, **_budget_json(b), "changed": True}
                   for g, b in budgets.group_changes.items()]
        return {"default": _budget_json(budgets.default), "teacherGroup": budgets.teacher_group,
                "groups": groups,
                "users": [{"user": u, **_budget_json(b)} for u, b in budgets.users.items()]}

    def teacher(person: Person, request: Request) -> None:
        if not person.teacher:
            raise Problem(404, f"There is no endpoint {request.method} {request.url.path}.")

    async def show(request: Request, person: Person) -> Response:
        teacher(person, request)
        return json_response(view())

    async def set_group(request: Request, person: Person) -> Response:
        teacher(person, request)
        group = str(request.path_params["group"])
        budget = budget_of(await read_json_object(request))
        roster.set_group_budget(group, budget)
        text = "no budget" if budget[0] is None else f"${budget[0]:g}" + (
            f"/{budget[1]}" if budget[1] else "")
        gate.store.audit(now_ms(), person.account, "budget", f"group:{group}",
                         f"group {group}: {text} (by {person.name})")
        return json_response(view())

    async def drop_group(request: Request, person: Person) -> Response:
        teacher(person, request)
        group = str(request.path_params["group"])
        roster.set_group_budget(group, None)
        gate.store.audit(now_ms(), person.account, "budget", f"group:{group}",
                         f"group {group}: the budgets file's again (by {person.name})")
        return json_response(view())

    return [
        Route("/gateway/hub/budgets", gate.route(show), methods=["GET"]),
        Route("/gateway/hub/groups/{group}/budget", gate.route(set_group), methods=["PUT"]),
        Route("/gateway/hub/groups/{group}/budget", gate.route(drop_group), methods=["DELETE"]),
    ]
