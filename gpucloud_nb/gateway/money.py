"""The money rules: what a person has spent, what they run, and admitting a create against both.

    >>> window_start("day", 86_400_000 * 3 + 5)
    259200000

Spend is the upstream's hourly price × the time from the instance's ``createdAt`` to its
``deletedAt`` (or now), read from the upstream's records by :mod:`gpucloud_nb.gateway.meter`.
Choices (the spec does not say when billing starts): pending time is billed, erring high so a
budget is never overshot; an instance in ``error`` costs nothing; volumes are not metered. With a
``/day`` or ``/week`` budget only the time inside the current window (UTC days; weeks from Monday
00:00 UTC) counts, so a budget resets without any job having to run at midnight.

**Held at launch.** :func:`admit` lets a create through only if the budget left covers the hourly
price of everything the person already runs (instances not deleted, and creates admitted but not
answered yet) plus the new instance, for ``reserve_hours``. Its read, check and insert are one
``BEGIN IMMEDIATE`` transaction, so concurrent creates of one key never overshoot. A refusal is
:class:`BudgetRefused`, answered 402 (Payment Required) with one sentence naming the dollars left.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpucloud_nb.display import format_price
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.store import Owned, Store

__all__ = ["BILLING_STOPPED", "BudgetRefused", "admit", "left", "per_hour", "spend",
           "window_start"]

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
_MONDAY_OFFSET_MS = 3 * DAY_MS  # 1970-01-01 was a Thursday
BILLING_STOPPED = ("deleted", "error")


class BudgetRefused(Exception):
    """A create the budget cannot hold; ``str()`` is the sentence for the student."""


def window_start(period: str, now: int) -> int:
    """The start (Unix ms) of the budget window of ``period`` at ``now``; 0 for no period."""
    if period == "day":
        return now - now % DAY_MS
    if period == "week":
        return now - (now + _MONDAY_OFFSET_MS) % (7 * DAY_MS)
    return 0


def cost(record: Owned, now: int, since: int = 0) -> float:
    """Dollars ``record`` has cost between ``since`` and ``now``."""
    if record.status == "error":
        return 0.0
    end = now if record.deleted_ms is None else min(record.deleted_ms, now)
    start = max(record.created_ms, since)
    return max(end - start, 0) / HOUR_MS * record.price


def spend(records: Iterable[Owned], now: int, period: str = "") -> float:
    """Dollars spent by ``records`` in the current window of ``period``."""
    since = window_start(period, now)
    return sum(cost(record, now, since) for record in records)


def per_hour(records: Iterable[Owned]) -> float:
    """Dollars per hour of the instances of ``records`` that still bill."""
    return sum(r.price for r in records if r.deleted_ms is None and r.status not in BILLING_STOPPED)


def left(person: Person, records: Iterable[Owned], now: int) -> float | None:
    """What ``person``'s budget has left now, or ``None`` without a budget."""
    if person.budget is None:
        return None
    return max(person.budget - spend(records, now, person.period), 0.0)


def admit(store: Store, person: Person, name: str, price: float, reserve_hours: float,
          now: int) -> int:
    """Reserve a create of ``name`` at ``price`` $/h for ``person``; the reservation's id.

    Raises :class:`BudgetRefused` when the budget left cannot hold what the person runs plus
    this instance for ``reserve_hours``; nothing is written then.
    """
    with store.transaction():
        if person.budget is not None:
            records = store.owned(person.account)
            remaining = left(person, records, now) or 0.0
            pending = sum(r.price for r in store.reservations(person.account))
            needed = (per_hour(records) + pending + price) * reserve_hours
            if needed > remaining + 1e-12:
                raise BudgetRefused(
                    f"Your budget has {format_price(remaining)} left, and this instance with what "
                    f"you already run needs {format_price(needed)} held for {reserve_hours:g} "
                    "hour(s); nothing was launched.")
        return store.reserve(person.account, name, price, now)
