"""Spend budgets for sandbox instances and class accounts: the service deletes at the budget.

    $ curl -H "x-api-key: $KEY" -X PUT $BASE/sandbox/instances/$ID/budget -d '{"dollars": 5}'
    $ curl -H "x-api-key: $KEY" $BASE/sandbox/budgets

Spend is hourly price × hours ``active`` or ``deleting`` (pending and a failed launch cost
nothing), times the sandbox's ``bill_factor`` (1; more bills faster, to rehearse a budget in
seconds). Every ``POLL`` seconds (1) the service looks at every budget:

- **An instance's budget** (``budget=`` at create): once its spend reaches the budget it is
  deleted (so its final spend is the budget, plus at most one poll and its ``deleting`` time);
  at ``WARN_SHARE`` (80 %) its state says ``warning`` and the log says so, once.
- **A class account's budget** (``KEY 20`` in the ``--keys`` file): a create is refused with
  400 and one sentence naming what is left when the account's remaining budget cannot pay one
  more hour of what it runs now plus the new instance; once the account's spend (deleted
  instances included) reaches its budget, every instance of the account is deleted.

Sandbox-only routes (each key sees its own account):

- ``PUT /sandbox/instances/{id}/budget`` with ``{"dollars": D}``: 200 with its state; 404 for
  an unknown instance, 400 for one deleting or deleted, a bad ``dollars``, or a budget it has
  already spent. ``GET`` reads the state (404 without a budget), ``DELETE`` drops it (204/404).
- ``GET /sandbox/budgets``: ``{"account": {"budget", "spend", "left"} or null, "instances":
  [state, ...]}``.

A state is ``{"instanceId", "dollars", "spend", "left", "warning", "status"}``. Choices: the
budgets live in the SQLite state and the spend is derived from stored times, so both outlive a
restart of the service (a budget that ran out while it was down deletes at the restart). The
watcher reads every instance once, at its first poll; from then on only those that can still
bill and those whose deletion ended lately (``SETTLE_MARGIN`` seconds, 60, before its last poll),
keeping each account's final spend of the instances whose deletion has ended, so a class day's
deleted instances are not reread every second. On the real cloud nothing deletes on spend: the
kernel watches (see :mod:`gpucloud_nb.client.budgets`).
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

__all__ = ["POLL", "SETTLE_MARGIN", "WARN_SHARE", "Budgets", "budget_routes", "budget_watching",
           "spend"]

log = logging.getLogger("uvicorn.error")  # the service log, next to uvicorn's own lines
POLL = 1.0
WARN_SHARE = 0.8
SETTLE_MARGIN = 60.0


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


def _price(record: InstanceRecord) -> float:
    return float(record.doc.get("hourlyPrice") or 0.0)


class Budgets:
    """The budgets of one sandbox: what is left, what a create may cost, and the deletes.

    ``accounts`` maps each class account (user id) to its budget in dollars.
    """

    def __init__(self, store: Store, accounts: Mapping[str, float], *, factor: float = 1.0,
                 delete_seconds: float = 1.0) -> None:
        self.store = store
        self.accounts = dict(accounts)
        self.factor = factor
        self.delete_ms = round(delete_seconds * 1000)
        self._warned_accounts: set[str] = set()
        self._settled: dict[str, float] = {}  # user → final spend of instances gone
        self._settled_ids: dict[str, int] = {}  # those read lately → when they went
        self._read_until: int | None = None

    def account_spend(self, user: str, now: int) -> float:
        """Dollars every instance of ``user`` has cost, deleted ones included."""
        return sum(spend(record, now, self.factor) for record in self.store.instances(user))

    def left(self, user: str, now: int) -> float | None:
        """Dollars left of ``user``'s class budget, or ``None`` for an account without one."""
        budget = self.accounts.get(user)
        return None if budget is None else max(budget - self.account_spend(user, now), 0.0)

    def refusal(self, user: str, price: float, now: int) -> str | None:
        """Why ``user`` may not launch an instance at ``price`` $/h now, or ``None``."""
        budget = self.accounts.get(user)
        if budget is None:
            return None
        records = self.store.instances(user)  # read once, for the spend and what runs now
        left = max(budget - sum(spend(record, now, self.factor) for record in records), 0.0)
        running = sum(_price(record) for record in records
                      if record.delete_ms is None and not record.fails)
        if left >= running + price:  # one billed hour of all of it
            return None
        also = f" with {format_price(running)}/h already running" if running else ""
        return (f"Your class budget has {format_price(left)} left, less than one hour of this "
                f"instance at {format_price(price)}/h{also}; delete an instance or ask your "
                "teacher for more.")

    def state(self, id_: str, user: str, dollars: float, now: int) -> dict[str, Any]:
        """What the routes answer for the budget of instance ``id_``."""
        record = self.store.instance(user, id_)
        spent = 0.0 if record is None else spend(record, now, self.factor)
        return {"instanceId": id_, "dollars": dollars, "spend": round(spent, 6),
                "left": round(max(dollars - spent, 0.0), 6), "warning": spent >= WARN_SHARE * dollars,
                "status": "deleted" if record is None else status_of(record, now).name}

    def _delete(self, record: InstanceRecord, now: int) -> bool:
        return self.store.delete_instance(record.user, record.id, delete_ms=now,
                                          gone_ms=now + self.delete_ms) is not None

    def _billing(self, now: int) -> list[InstanceRecord]:
        """The instances whose deletion has not ended at ``now``; the final spend of each one
        whose deletion has is added to its account's, once."""
        after = -1 if self._read_until is None else self._read_until - round(SETTLE_MARGIN * 1000)
        self._read_until = now if self._read_until is None else max(self._read_until, now)
        for id_ in [i for i, gone in self._settled_ids.items() if gone <= after]:
            del self._settled_ids[id_]  # never read again
        billing = []
        for record in self.store.instances_gone_after(after):
            if record.gone_ms is None or record.gone_ms > now:
                billing.append(record)
            elif record.id not in self._settled_ids:
                self._settled_ids[record.id] = record.gone_ms
                self._settled[record.user] = (self._settled.get(record.user, 0.0)
                                              + spend(record, now, self.factor))
        return billing

    def step(self, now: int) -> list[str]:
        """Delete what has spent its budget and warn at 80 %; the ids deleted.

        One read of the instances that can still bill per step, and none while no budget is set.
        """
        budgets = self.store.budgets()
        if not budgets and not self.accounts:
            return []
        by_user: dict[str, list[InstanceRecord]] = {}
        by_id: dict[str, InstanceRecord] = {}
        for each in self._billing(now):
            by_user.setdefault(each.user, []).append(each)
            by_id[each.id] = each
        deleted: list[str] = []
        for id_, (_, dollars, warned) in budgets.items():
            record = by_id.get(id_)
            if record is None or record.delete_ms is not None:
                continue
            spent = spend(record, now, self.factor)
            if spent >= dollars:
                if self._delete(record, now):
                    deleted.append(id_)
                    log.info("Deleted instance %s: it has cost %s, its budget.", id_,
                             format_price(spent))
            elif spent >= WARN_SHARE * dollars and not warned:
                self.store.mark_budget_warned(id_)
                log.warning("Instance %s has cost %s, %d %% of its budget of %s.", id_,
                            format_price(spent), round(100 * spent / dollars), format_price(dollars))
        for user, budget in self.accounts.items():
            records = by_user.get(user, [])
            spent = self._settled.get(user, 0.0) + sum(spend(record, now, self.factor)
                                                       for record in records)
            live = [record for record in records
                    if record.delete_ms is None and record.id not in deleted]
            if spent >= budget:
                for record in live:
                    if self._delete(record, now):
                        deleted.append(record.id)
                        log.info("Deleted instance %s: its class account has spent its budget "
                                 "of %s.", record.id, format_price(budget))
            elif spent >= WARN_SHARE * budget and user not in self._warned_accounts and live:
                self._warned_accounts.add(user)
                log.warning("A class account has spent %s, %d %% of its budget of %s.",
                            format_price(spent), round(100 * spent / budget), format_price(budget))
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
        budget = budgets.accounts.get(user)
        account = None
        if budget is not None:
            spent = budgets.account_spend(user, now)
            account = {"budget": budget, "spend": round(spent, 6),
                       "left": round(max(budget - spent, 0.0), 6)}
        states = [budgets.state(id_, user, dollars, now)
                  for id_, (_, dollars, _) in store.budgets(user).items()]
        return json_response({"account": account, "instances": states})

    return [
        route("/sandbox/budgets", {"GET": listing}),
        route("/sandbox/instances/{id}/budget",
              {"GET": get_budget, "PUT": set_budget, "DELETE": cancel_budget}),
    ]
