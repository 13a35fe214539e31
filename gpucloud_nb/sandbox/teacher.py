"""The teacher's view of a class sandbox: every account's use, and stopping a student or the class.

    $ GPUCLOUD_TEACHER_KEY="$TEACHER_KEY" gpucloud-nb sandbox --keys class.txt
    $ curl -H "x-api-key: $TEACHER_KEY" $BASE/sandbox/class

Sandbox-only routes, answered only for the teacher's key (``GPUCLOUD_TEACHER_KEY`` or
``--teacher-key-file``); any other key (a student's), a wrong key or none gets the same 404 as a
path that does not exist, so a student cannot tell the route is there. Without a teacher's key
the routes do not exist.

- ``GET /sandbox/class``: ``{"accounts": [row, ...]}`` in the order of the keys file, one row
  per account (the teacher's own is not one): ``{"account"`` (its id, as on its volumes'
  ``user``), ``"name"`` (from the keys file, else ``account N``), ``"key"`` (masked),
  ``"instances"`` (not deleted yet), ``"perHour"`` (dollars per hour billing now: active and
  deleting instances), ``"spend"`` (dollars so far, deleted instances included), ``"budget"``
  and ``"left"`` (``null`` without a class budget), ``"idleMinutes"`` (minutes since the
  account last called the management API, its sidebar or its kernel; ``null`` if never)``}``.
- ``DELETE /sandbox/class/accounts/{account}/instances``: delete every instance of that account
  ("stop all of this student"); 200 with ``{"deleted": [ids]}``, 404 for an unknown account.
- ``DELETE /sandbox/class/instances``: the same for every account ("stop the whole class").
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb._secrets import mask
from gpucloud_nb.sandbox.budgets import Budgets, spend
from gpucloud_nb.sandbox.http import Problem, json_response, now_ms
from gpucloud_nb.sandbox.lifecycle import status_of

__all__ = ["class_rows", "teacher_routes"]

_BILLING = ("active", "deleting")


def class_rows(budgets: Budgets, accounts: Sequence[tuple[str, str, str]],
               last_seen: Mapping[str, int], now: int) -> list[dict[str, Any]]:
    """One row per ``(user id, name, masked key)`` of ``accounts``, as ``GET /sandbox/class``."""
    by_user: dict[str, list[Any]] = {user: [] for user, _, _ in accounts}
    for record in budgets.store.every_instance():
        if record.user in by_user:
            by_user[record.user].append(record)
    rows = []
    for user, name, key in accounts:
        records = by_user[user]
        spent = sum(spend(record, now, budgets.factor) for record in records)
        budget = budgets.accounts.get(user)
        seen = last_seen.get(user)
        rows.append({
            "account": user, "name": name, "key": key,
            "instances": sum(1 for record in records if status_of(record, now).name != "deleted"),
            "perHour": round(sum(float(record.doc.get("hourlyPrice") or 0.0) for record in records
                                 if not record.fails
                                 and status_of(record, now).name in _BILLING), 6),
            "spend": round(spent, 6),
            "budget": budget,
            "left": None if budget is None else round(max(budget - spent, 0.0), 6),
            "idleMinutes": None if seen is None else round(max(now - seen, 0) / 60_000, 1),
        })
    return rows


def teacher_routes(teacher_key: str, budgets: Budgets, keys: Sequence[str],
                   names: Mapping[str, str], user_id: Any,
                   last_seen: Mapping[str, int]) -> list[BaseRoute]:
    """The teacher's routes over ``budgets.store`` for the accounts of ``keys``.

    ``user_id(key)`` is an account's id, ``names`` the names from the keys file (by key), and
    ``last_seen`` when each account last called the API (Unix ms).
    """
    store = budgets.store
    secret = teacher_key.encode("utf-8")
    accounts = [(user_id(key), names.get(key) or f"account {number}", mask(key))
                for number, key in enumerate(keys, start=1)]
    known = {user for user, _, _ in accounts}

    def teacher_only(handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            sent = request.headers.get("x-api-key", "").encode("latin-1")
            try:
                if not hmac.compare_digest(sent, secret):
                    raise Problem(404, f"There is no endpoint {request.method} "
                                       f"{request.url.path}.")
                return await handler(request)
            except Problem as problem:
                return problem.spec_response(request.url.path)
        return endpoint

    def stop(users: Sequence[str]) -> list[str]:
        now = now_ms()
        deleted = []
        for user in users:
            for record in store.instances(user):
                if record.delete_ms is None and store.delete_instance(
                        user, record.id, delete_ms=now, gone_ms=now + budgets.delete_ms):
                    deleted.append(record.id)
        return deleted

    async def view(request: Request) -> Response:
        return json_response({"accounts": class_rows(budgets, accounts, last_seen, now_ms())})

    async def stop_student(request: Request) -> Response:
        account = request.path_params["account"]
        if account not in known:
            raise Problem(404, f"Account {account} not found.")
        return json_response({"deleted": stop([account])})

    async def stop_class(request: Request) -> Response:
        return json_response({"deleted": stop([user for user, _, _ in accounts])})

    return [
        Route("/sandbox/class", teacher_only(view), methods=["GET"]),
        Route("/sandbox/class/accounts/{account}/instances", teacher_only(stop_student),
              methods=["DELETE"]),
        Route("/sandbox/class/instances", teacher_only(stop_class), methods=["DELETE"]),
    ]
