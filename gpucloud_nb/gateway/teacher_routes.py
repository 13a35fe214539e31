"""A teacher changes a budget while the class runs, and exports the class as CSV.

    $ curl -X PUT -H "x-api-key: $TEACHER_KEY" -d '{"budget": "30/day"}' \\
           $GATEWAY/gateway/class/accounts/$ACCOUNT/budget
    {"account":"3f2a...","name":"Ada","budget":30.0,"period":"day",...}

Teacher keys only (any other key gets the 404 of a path that does not exist):

- ``PUT /gateway/class/accounts/{account}/budget`` with ``{"budget": B}``, ``B`` a number of
  dollars, ``null`` (no budget), or a keys-file budget (``"20"``, ``"-"``, ``"20/day"``,
  ``"20/week"``): 200 with the student's row of ``/gateway/class``. It takes effect at once:
  the next create is admitted against it, and a budget now spent deletes the student's
  instances at the watcher's next pass. The audit gets ``budget`` with the old and new budget.
- ``GET /gateway/class.csv``: the rows of ``/gateway/class`` as CSV (``text/csv``, a header, the
  keys file's order; an empty cell for no budget).

**How the keys file and a change combine.** The keys file stays the only source of keys: a
person is added or removed only there, and the gateway reads it at each start. A budget changed
at runtime is kept in the state file (table ``budget_changes``) with the budget the keys file gave
that person then. At each start a change still applies while the keys file gives that person the
same budget as when the change was made; once someone edits that line's budget, the file is the
newer word and wins (the change is dropped). Changes of keys no longer in the file are dropped.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.display import format_price
from gpucloud_nb.gateway.cloud_routes import Gate
from gpucloud_nb.gateway.gateway_routes import person_row
from gpucloud_nb.gateway.keys import Person, parse_budget
from gpucloud_nb.gateway.store import Store
from gpucloud_nb.sandbox.http import Problem, json_response, now_ms, read_json_object

__all__ = ["CSV_COLUMNS", "budget_of", "effective_people", "teacher_routes",
           "user_budget_changes"]

CSV_COLUMNS = ("name", "account", "instances", "perHour", "spend", "budget", "left", "period",
               "unconfirmedDeletes", "idleMinutes")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budget_changes (account TEXT PRIMARY KEY, budget REAL,
    period TEXT NOT NULL, file_budget REAL, file_period TEXT NOT NULL, ms INTEGER NOT NULL);
"""


def _changes(store: Store) -> dict[str, tuple[float | None, str, float | None, str]]:
    store.db.executescript(_SCHEMA)
    rows = store.db.execute("SELECT account, budget, period, file_budget, file_period "
                            "FROM budget_changes").fetchall()
    return {str(row[0]): (row[1], str(row[2]), row[3], str(row[4])) for row in rows}


def user_budget_changes(store: Store) -> dict[str, tuple[float | None, str]]:
    """The budgets teachers changed at runtime, by account: ``(dollars or None, period)``."""
    return {account: (change[0], change[1]) for account, change in _changes(store).items()}


def effective_people(store: Store, people: Sequence[Person]) -> list[Person]:
    """``people`` of the keys file with the budget changes of ``store`` that still apply.

    Drops (from the store) the changes whose line's budget was edited in the keys file since.
    """
    changes = _changes(store)
    out, stale = [], []
    by_account = {person.account: person for person in people}
    for account, (_, _, file_budget, file_period) in changes.items():
        person = by_account.get(account)
        if person is None or person.teacher or (person.budget, person.period) != (file_budget,
                                                                                 file_period):
            stale.append(account)
    if stale:
        with store.transaction() as db:
            db.executemany("DELETE FROM budget_changes WHERE account=?", [(a,) for a in stale])
    for person in people:
        change = changes.get(person.account)
        if change is not None and person.account not in stale:
            person = dataclasses.replace(person, budget=change[0], period=change[1])
        out.append(person)
    return out


def budget_of(body: dict[str, Any]) -> tuple[float | None, str]:
    """The ``budget`` of a teacher's request body (dollars, ``null``, ``"20/day"``), or a 400."""
    if "budget" not in body:
        raise Problem(400, "The field budget is required: dollars, null for none, or '20/day'.")
    value = body["budget"]
    if value is None:
        return None, ""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise Problem(400, "The field budget must be dollars, null, or a text like '20/day'.")
    try:
        return parse_budget(str(value).strip())
    except ValueError as error:
        raise Problem(400, f"The field budget: {error}.") from None


def _budget_text(budget: float | None, period: str) -> str:
    if budget is None:
        return "no budget"
    return format_price(budget) + (f"/{period}" if period else "")


def teacher_routes(gate: Gate) -> list[BaseRoute]:
    """The teacher's budget-change and CSV routes of ``gate``."""
    store, keyring = gate.store, gate.keyring

    def teacher(person: Person, request: Request) -> None:
        if not person.teacher:
            raise Problem(404, f"There is no endpoint {request.method} {request.url.path}.")

    async def set_budget(request: Request, person: Person) -> Response:
        teacher(person, request)
        account = str(request.path_params["account"])
        student = keyring.by_account(account)
        if student is None or student.teacher:
            raise Problem(404, f"Account {account} not found.")
        budget, period = budget_of(await read_json_object(request))
        file_person = next((p for p in gate.config.people if p.account == account), student)
        _changes(store)
        with store.transaction() as db:
            db.execute("INSERT OR REPLACE INTO budget_changes VALUES (?, ?, ?, ?, ?, ?)",
                       (account, budget, period, file_person.budget, file_person.period,
                        now_ms()))
            db.execute("UPDATE people SET budget=?, period=? WHERE account=?",
                       (budget, period, account))
        changed = dataclasses.replace(student, budget=budget, period=period)
        keyring.people = tuple(changed if p.account == account else p for p in keyring.people)
        store.audit(now_ms(), account, "budget", account,
                    f"{_budget_text(student.budget, student.period)} → "
                    f"{_budget_text(budget, period)} (by {person.name})")
        return json_response(person_row(gate, changed, now_ms()))

    async def class_csv(request: Request, person: Person) -> Response:
        teacher(person, request)
        now = now_ms()
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore",
                                lineterminator="\n")
        writer.writeheader()
        for student in keyring.people:
            if not student.teacher:
                writer.writerow(person_row(gate, student, now))
        return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": 'attachment; filename="class.csv"'})

    return [
        Route("/gateway/class/accounts/{account}/budget", gate.route(set_budget),
              methods=["PUT"]),
        Route("/gateway/class.csv", gate.route(class_csv), methods=["GET"]),
    ]
