"""The money rules: what a person has spent, what they run, and admitting a create against both.

    >>> window_start("day", 86_400_000 * 3 + 5)
    259200000

Spend is the upstream's hourly price × the time from the instance's ``createdAt`` to its
``deletedAt`` (or now), read from the upstream's records by :mod:`gpucloud_nb.gateway.meter`.
An inference instance bills per container-hour: its spans (the price per container × the
containers the upstream reports, each poll) are in its owner's spend like an instance's time
(:mod:`gpucloud_nb.gateway.endpoint_routes`).
Choices (the spec does not say when billing starts): pending time is billed, erring high so a
budget is never overshot; an instance in ``error`` costs nothing. A volume costs its offer's
``pricePerGbPerHour`` × its ``sizeInGb`` per hour, from its ``createdAt`` until it is deleted
through the gateway, in its owner's spend and budget like an instance; a volume create is refused
(402) when the budget left cannot hold it with what the person runs for ``reserve_hours``
(:func:`check_volume`). At 100 % the gateway deletes instances, not volumes (they hold the
student's data): a volume goes on billing until its owner deletes it. With a
``/day`` or ``/week`` budget only the time inside the current window (UTC days; weeks from Monday
00:00 UTC) counts, so a budget resets without any job having to run at midnight.

**What history costs is summed once.** A final record (deleted, or in ``error``) costs the same in a
window at every later moment, so :func:`spent` sums an account's final records once per window
and keeps the sum in memory; each later figure (the watcher's each pass, admission, ``/gateway/me``
and the teacher's view alike) adds only what is live. The sum is taken again when one of the
account's records becomes final (:class:`Store` counts those per account) or another process
writes the file (SQLite's ``data_version``); a final record whose end is still ahead of the clock
(an upstream's ``deletedAt`` later than the gateway's clock) is kept aside and costed each time.
It is :func:`spend` of :meth:`Store.billed`, read without the history.

**Held at launch.** :func:`admit` lets a create through only if the budget left covers the hourly
price of everything the person already runs (instances not deleted, inference instances at their
most containers (:func:`held`), and creates admitted but not answered yet) plus the new instance,
for ``reserve_hours``. Its read, check and insert are one ``BEGIN IMMEDIATE`` transaction, so
concurrent creates of one key never overshoot. A refusal is :class:`BudgetRefused`, answered 402
(Payment Required) with one sentence naming the dollars left.

**One name in flight.** Two people's creates of one name are never both admitted and unanswered:
the second waits until the first is answered (:class:`NameInFlight`). A create whose answer is
lost is found again by its name alone (:mod:`gpucloud_nb.gateway.meter`), so two of one name in
flight at once (both sent when the gateway was killed) could be adopted crosswise; one at a time
they cannot. Creates of one person are not held up: theirs are theirs either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpucloud_nb.display import format_price
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.store import Owned, Store

__all__ = ["BILLING_STOPPED", "BudgetRefused", "NameInFlight", "admit", "check_volume",
           "cost_of", "held", "left", "per_hour", "spend", "spent", "volume_price", "window_start"]

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
_MONDAY_OFFSET_MS = 3 * DAY_MS  # 1970-01-01 was a Thursday
BILLING_STOPPED = ("deleted", "error")


class BudgetRefused(Exception):
    """A create the budget cannot hold; ``str()`` is the sentence for the student."""


class NameInFlight(Exception):
    """Another person's create of the same name is admitted and not answered yet."""


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


def cost_of(store: Store, record: Owned, now: int) -> float:
    """Dollars ``record`` has cost by ``now``: an inference instance's its spans', any other
    its own (:func:`cost`)."""
    if record.kind == "endpoint":
        return sum(cost(span, now) for span in store.spans(record.id))
    return cost(record, now)


def spend(records: Iterable[Owned], now: int, period: str = "") -> float:
    """Dollars spent by ``records`` in the current window of ``period``."""
    since = window_start(period, now)
    return sum(cost(record, now, since) for record in records)


@dataclass(frozen=True)
class _Settled:
    """What an account's final records cost in one budget window: ``steady`` summed at ``at``
    (each a cost no later ``now`` changes), ``unsteady`` kept to be costed at each read."""

    stamp: tuple[int, int]
    since: int
    at: int
    steady: float
    unsteady: tuple[Owned, ...]


def _steady(record: Owned, at: int) -> bool:
    """True when :func:`cost` of the final ``record`` is the same at every ``now >= at``."""
    return record.status == "error" or (record.deleted_ms is not None and record.deleted_ms <= at)


def spent(store: Store, people: Iterable[Person], now: int,
          live: Mapping[str, list[Owned]] | None = None) -> dict[str, float]:
    """``{account: dollars}`` each of ``people`` has spent in the current window of their
    budget's period: :func:`spend` of :meth:`Store.billed`, read without its final records.

    A final record's :func:`cost` in a window never changes once its end is past (an ``error``
    one costs nothing), so those of an account are summed once per window and kept in
    ``store.settled_cache``, until one of its records becomes final (``store.settled_gen``) or
    another connection writes the file (``Store.data_version``). Each read then costs what is
    live (:meth:`Store.live_billed`, or ``live`` grouped by account if the caller read it),
    not the account's history.
    """
    people = list(people)
    version = store.data_version()
    if live is None:
        live = {}
        for person in people:
            live[person.account] = store.live_billed(person.account)
    stale = []
    for person in people:
        since = window_start(person.period, now)
        entry = store.settled_cache.get(person.account)
        if not isinstance(entry, _Settled) or entry.since != since or now < entry.at \
                or entry.stamp != (version, store.settled_gen.get(person.account, 0)):
            stale.append(person)
    if stale:
        stamps = {p.account: (version, store.settled_gen.get(p.account, 0)) for p in stale}
        final: dict[str, list[Owned]] = {}
        for record in store.settled_billed(stamps):
            final.setdefault(record.account, []).append(record)
        for person in stale:
            since = window_start(person.period, now)
            records = final.get(person.account, [])
            steady = [r for r in records if _steady(r, now)]
            store.settled_cache[person.account] = _Settled(
                stamps[person.account], since, now, sum(cost(r, now, since) for r in steady),
                tuple(r for r in records if not _steady(r, now)))
    out = {}
    for person in people:
        entry = store.settled_cache[person.account]
        out[person.account] = entry.steady + sum(
            cost(r, now, entry.since) for r in (*entry.unsteady, *live.get(person.account, ())))
    return out


def per_hour(records: Iterable[Owned]) -> float:
    """Dollars per hour of the instances of ``records`` that still bill."""
    return sum(r.price for r in records if r.deleted_ms is None and r.status not in BILLING_STOPPED)


def held(store: Store, account: str, records: Iterable[Owned]) -> float:
    """Dollars per hour held against ``account``'s budget: what bills now (``records``, from
    :meth:`Store.billed` or its live part, :meth:`Store.live_billed`: final ones bill no more),
    an inference instance that is not stopped or deleted at its most containers (its record's
    ``price``) rather than the ones it runs now."""
    worst = {r.id: r.price for r in store.live(account, "endpoint")
             if r.delete_asked_ms is None
             and r.status not in ("disabled", "deleting", "deleted", "failed")}
    now = per_hour(r for r in records if r.kind != "span")
    spans: dict[str, float] = {}
    for span in records:
        if span.kind == "span" and span.deleted_ms is None:
            spans[span.id] = spans.get(span.id, 0.0) + span.price
    return now + sum(max(worst.get(id, 0.0), spans.get(id, 0.0)) for id in {*worst, *spans})


def left(person: Person, records: Iterable[Owned], now: int) -> float | None:
    """What ``person``'s budget has left now, or ``None`` without a budget."""
    if person.budget is None:
        return None
    return max(person.budget - spend(records, now, person.period), 0.0)


def _left(store: Store, person: Person, live: list[Owned], now: int) -> float:
    """What ``person``'s budget (not ``None``) has left now: :func:`left` by :func:`spent`."""
    assert person.budget is not None
    return max(person.budget - spent(store, [person], now, {person.account: live})[
        person.account], 0.0)


def admit(store: Store, person: Person, name: str, price: float, reserve_hours: float,
          now: int) -> int:
    """Reserve a create of ``name`` at ``price`` $/h for ``person``; the reservation's id.

    Raises :class:`BudgetRefused` when the budget left cannot hold what the person runs plus
    this instance for ``reserve_hours``, and :class:`NameInFlight` while another person's
    create of the same ``name`` is admitted and unanswered; nothing is written then.
    """
    with store.transaction():
        if store.name_in_flight(name, person.account):
            raise NameInFlight(name)
        if person.budget is not None:
            records = store.live_billed(person.account)
            remaining = _left(store, person, records, now)
            pending = sum(r.price for r in store.reservations(person.account))
            needed = (held(store, person.account, records) + pending + price) * reserve_hours
            if needed > remaining + 1e-12:
                raise BudgetRefused(
                    f"Your budget has {format_price(remaining)} left, and this instance with what "
                    f"you already run needs {format_price(needed)} held for {reserve_hours:g} "
                    "hour(s); nothing was launched.")
        return store.reserve(person.account, name, price, now)


def volume_price(offers: object, provider: str, size_gb: object) -> float | None:
    """Dollars per hour of a volume of ``size_gb`` GB from ``provider``, read from the upstream's
    volume offers (``pricePerGbPerHour`` is a decimal number as text); ``None`` if unknown.

        >>> volume_price([{"cloudProvider": {"_id": "p1"}, "pricePerGbPerHour": "0.0002"}], "p1", 50)
        0.01
    """
    if not isinstance(offers, list) or isinstance(size_gb, bool) \
            or not isinstance(size_gb, int | float):
        return None
    for offer in offers:
        cloud = offer.get("cloudProvider") if isinstance(offer, dict) else None
        if isinstance(cloud, dict) and cloud.get("_id") == provider:
            try:
                return round(float(offer["pricePerGbPerHour"]) * float(size_gb), 12)
            except (KeyError, TypeError, ValueError):
                return None
    return None


def check_volume(store: Store, person: Person, price: float, reserve_hours: float,
                 now: int, what: str = "this volume", done: str = "created") -> None:
    """Raise :class:`BudgetRefused` when ``person``'s budget left cannot hold a new volume of
    ``price`` $/h with what they run, for ``reserve_hours`` (``what`` names the volume, or an
    inference instance's added containers, in the sentence; ``done`` what did not happen)."""
    if person.budget is None:
        return
    records = store.live_billed(person.account)
    remaining = _left(store, person, records, now)
    pending = sum(r.price for r in store.reservations(person.account))
    needed = (held(store, person.account, records) + pending + price) * reserve_hours
    if needed > remaining + 1e-12:
        raise BudgetRefused(
            f"Your budget has {format_price(remaining)} left, and {what} with what you "
            f"already run needs {format_price(needed)} held for {reserve_hours:g} hour(s); "
            f"nothing was {done}.")
