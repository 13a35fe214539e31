"""The gateway's own routes: a person's budget, and the teacher's view, stops and audit.

    $ curl -H "x-api-key: $KEY" $GATEWAY/gateway/me
    {"name":"Ada","budget":20.0,"spend":1.25,"left":18.75,"period":"","perHour":2.0,"warning":false}

- ``GET /gateway/me`` (any key): ``{"name", "budget", "spend", "left", "period", "perHour",
  "warning", "spentAt", "deleted"}``; ``budget`` and ``left`` are ``null`` without a budget,
  ``warning`` is true from 80 % spent; once the budget is spent, ``spentAt`` is when the gateway
  deleted for it (ISO 8601, else ``null``) and ``deleted`` what it deleted then, ``[{"id",
  "name", "at"}]`` (in the current window of a ``/day`` or ``/week`` budget).
- Teacher keys only (any other key gets the 404 of a path that does not exist):
  ``GET /gateway/class`` → ``{"accounts": [row, ...]}``, one row per student in the keys file's
  order (on a hub, by hub group then name): ``{"account", "name", "group", "instances",
  "perHour", "spend", "budget", "left", "period", "unconfirmedDeletes", "idleMinutes"}``
  (``group`` is the JupyterHub group, ``""`` from a keys file; ``idleMinutes`` is how long the
  idlest of the student's instances has been idle by the gateway's own idle reader,
  :mod:`gpucloud_nb.gateway.idle`, in minutes to one decimal, or ``null`` when none of them is
  watched: the gateway reads the GPU use only of instances launched with ``delete_when_idle``,
  the ones it can reach over SSH); ``GET /gateway/audit`` → ``{"entries": [{"time",
  "account", "name", "action", "resource", "reason"}]}`` (``action`` is ``created``,
  ``deleted``, ``refused``, ``unconfirmed`` (a delete the upstream took and did not do),
  ``confirmed`` (done at last) or ``budget`` (a teacher changed a budget, see
  :mod:`gpucloud_nb.gateway.teacher_routes`));
  ``DELETE /gateway/class/accounts/{account}/instances`` stops one student and
  ``DELETE /gateway/class/instances`` the whole class, each 200 with ``{"deleted": [ids]}``
  (deletes are confirmed with the upstream by the watcher, see :mod:`gpucloud_nb.gateway.meter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.gateway import money
from gpucloud_nb.gateway.cloud_routes import Gate, PersonHandler
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.sandbox.http import Problem, json_response, now_ms
from gpucloud_nb.sandbox.lifecycle import iso

__all__ = ["WARN_SHARE", "budget_deletes", "gateway_routes", "person_row"]

WARN_SHARE = 0.8


def person_row(gate: Gate, person: Person, now: int) -> dict[str, Any]:
    """What the gateway knows of ``person``'s money now."""
    records = gate.store.live(person.account)  # a final record is neither live nor unconfirmed
    billed = gate.store.live_billed(person.account)  # volumes count in spend and $/h too
    spent = money.spent(gate.store, [person], now, {person.account: billed})[person.account]
    live = [r.id for r in records if r.deleted_ms is None
            and r.status not in money.BILLING_STOPPED and r.delete_asked_ms is None]
    idle = None if gate.meter.idle is None else gate.meter.idle.idle_seconds(live)
    return {
        "account": person.account, "name": person.name, "group": person.group,
        "instances": len(live),
        "perHour": round(money.per_hour(billed), 6),
        "spend": round(spent, 6),
        "budget": person.budget,
        "left": None if person.budget is None else round(max(person.budget - spent, 0.0), 6),
        "period": person.period,
        "unconfirmedDeletes": sum(1 for r in records if r.delete_asked_ms is not None
                                  and r.status not in ("deleting", "deleted") and not r.final),
        "idleMinutes": None if idle is None else round(idle / 60, 1),
    }


def budget_deletes(gate: Gate, person: Person, now: int) -> dict[str, Any]:
    """``{"spentAt", "deleted"}``: what the gateway deleted for ``person``'s spent budget."""
    since = money.window_start(person.period, now)
    deleted = gate.store.budget_spent_deletes(person.account, since)
    return {"spentAt": iso(deleted[0].delete_asked_ms or 0) if deleted else None,
            "deleted": [{"id": r.id, "name": r.name, "at": iso(r.delete_asked_ms or 0)}
                        for r in deleted]}


def gateway_routes(gate: Gate) -> list[BaseRoute]:
    """The ``/gateway/...`` routes of ``gate``."""

    def teacher_only(handler: PersonHandler) -> PersonHandler:
        async def endpoint(request: Request, person: Person) -> Response:
            if not person.teacher:
                raise Problem(404, f"There is no endpoint {request.method} {request.url.path}.")
            return await handler(request, person)
        return endpoint

    async def me(request: Request, person: Person) -> Response:
        row = person_row(gate, person, now_ms())
        budget = person.budget
        return json_response({
            "name": row["name"], "budget": budget, "spend": row["spend"], "left": row["left"],
            "period": row["period"], "perHour": row["perHour"],
            "warning": bool(budget is not None and row["spend"] >= WARN_SHARE * budget),
            **budget_deletes(gate, person, now_ms())})

    def students() -> list[Person]:
        return [p for p in gate.keyring.people if not p.teacher]

    async def class_view(request: Request, person: Person) -> Response:
        now = now_ms()
        return json_response({"accounts": [person_row(gate, p, now) for p in students()]})

    async def audit(request: Request, person: Person) -> Response:
        names = {p.account: p.name for p in gate.keyring.people}
        return json_response({"entries": [
            {"time": iso(entry.ms), "account": entry.account,
             "name": names.get(entry.account, entry.account), "action": entry.action,
             "resource": entry.resource, "reason": entry.reason}
            for entry in gate.store.audit_entries()]})

    async def stop(people: Sequence[Person], teacher: Person) -> list[str]:
        deleted = []
        for student in people:
            for record in gate.store.live(student.account):
                if record.status not in ("deleting", "deleted", "error") \
                        and record.delete_asked_ms is None:
                    await gate.meter.delete(record, "stopped by the teacher", teacher.name)
                    deleted.append(record.id)
        return deleted

    async def stop_student(request: Request, person: Person) -> Response:
        student = gate.keyring.by_account(request.path_params["account"])
        if student is None or student.teacher:
            raise Problem(404, f"Account {request.path_params['account']} not found.")
        return json_response({"deleted": await stop([student], person)})

    async def stop_class(request: Request, person: Person) -> Response:
        return json_response({"deleted": await stop(students(), person)})

    return [
        Route("/gateway/me", gate.route(me), methods=["GET"]),
        Route("/gateway/class", gate.route(teacher_only(class_view)), methods=["GET"]),
        Route("/gateway/audit", gate.route(teacher_only(audit)), methods=["GET"]),
        Route("/gateway/class/accounts/{account}/instances",
              gate.route(teacher_only(stop_student)), methods=["DELETE"]),
        Route("/gateway/class/instances", gate.route(teacher_only(stop_class)),
              methods=["DELETE"]),
    ]
