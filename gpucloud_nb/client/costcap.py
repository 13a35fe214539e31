"""The ``max_hourly_cost`` check, shared by ``instances.create`` and the launch form.

It fails closed: a running instance or an offer whose ``hourlyPrice`` is missing, not a number,
not finite or negative cannot be summed, so the launch is refused with one sentence naming it
rather than counted as $0 (a NaN would make every comparison false and let any launch through).

Concurrent creates of one client (threads, ``asyncio.gather``, Dask's ``adapt``) each list the
instances before they send, and none of those lists shows the others' creates yet. So a create
of a capped client checks and reserves its $/h in one step under a lock (:class:`Reservations`,
one per client): a reservation counts against the cap from before the POST until a listing
taken after the create was answered shows the instance. Chosen where nothing says otherwise: a
create the cloud refused (it answered with an error status) or that was never sent gives its
reservation back at once; one whose outcome is unknown (the answer was lost, the caller was
cancelled) keeps it for two minutes, as long as a lost create is looked for, and so does an
instance no listing shows (deleted and gone before one did), unless this client deleted it.

    >>> cap_problem(10.0, running=[Instance(name="a", status="active", hourly_price=2.5)],
    ...             offer=InstanceOffer(instance_id="h100-1x", hourly_price=9.0))
    'Launching this $9.00/h offer would bring pending and active instances to $11.50/h, ...'
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from gpucloud_nb.display import per_hour
from gpucloud_nb.models import Instance, InstanceOffer

__all__ = ["RUNNING", "Reservations", "cap_problem", "hourly_price", "running_hourly"]

#: Instance statuses that bill, and so count against the cap.
RUNNING = ("pending", "active")
#: How long a reservation no listing confirmed is kept (the create lookup's slack, 2 min).
UNCONFIRMED_SECONDS = 120.0


def hourly_price(value: float) -> float | None:
    """``value`` as a finite, non-negative price, or ``None`` when it is not one.

        >>> hourly_price(2.5), hourly_price(float("nan")), hourly_price(-1.0)
        (2.5, None, None)
    """
    return value if math.isfinite(value) and value >= 0 else None


def _shown(value: float) -> str:
    """The bad price as the sentence shows it: ``no usable hourlyPrice`` or ``hourlyPrice -100``.

    A missing, null or non-numeric price is read as NaN by the schema, so those read alike.
    """
    return "no usable hourlyPrice" if math.isnan(value) else f"hourlyPrice {value:g}"


def _why(cap: float) -> str:
    return f"so the cap of {per_hour(cap)} (max_hourly_cost) cannot be checked; nothing was launched"


def running_hourly(cap: float, instances: Iterable[Instance]) -> tuple[float, str | None]:
    """(hourly price of the pending and active ``instances``, the sentence refusing a launch)."""
    total = 0.0
    for item in instances:
        if item.status not in RUNNING:
            continue
        price = hourly_price(item.hourly_price)
        if price is None:
            name = item.name or "(no name)"
            return total, (f"Instance {name!r} ({item.id}) reports "
                           f"{_shown(item.hourly_price)}, {_why(cap)}.")
        total += price
    return total, None


def cap_problem(cap: float | None, running: Iterable[Instance],
                offer: InstanceOffer, count: int = 1, reserved: float = 0.0,
                endpoints: float = 0.0) -> str | None:
    """``None`` when launching ``count`` of ``offer`` keeps pending and active instances within
    ``cap`` (a cluster's instances count as one launch, checked before the first is sent).

    ``running`` is the instances as listed (``cloud.instances.list()``), ``reserved`` the $/h
    of creates under way that the listing does not show yet, ``endpoints`` the $/h of the
    inference instances at their most containers. Otherwise one sentence: the total
    over the cap, or the instance or offer whose price is missing, non-finite or negative.

        >>> cap_problem(10.0, [], InstanceOffer(instance_id="h100-1x", hourly_price=3.0), count=4)
        'Launching 4 × this $3.00/h offer would bring pending and active instances to $12.00/h, ...'
    """
    if cap is None:
        return None
    used, problem = running_hourly(cap, running)
    if problem:
        return problem
    price = hourly_price(offer.hourly_price)
    if price is None:
        seller = f" from {offer.cloud.name}" if offer.cloud.name else ""
        return (f"Offer {offer.instance_id!r}{seller} has "
                f"{_shown(offer.hourly_price)}, {_why(cap)}.")
    total = used + reserved + endpoints + count * price
    if total > cap + 1e-9:
        what = "this" if count == 1 else f"{count} × this"
        under_way = " and those being launched" if reserved else ""
        served = " and endpoints" if endpoints else ""
        return (f"Launching {what} {per_hour(price)} offer would bring pending and active "
                f"instances{under_way}{served} to {per_hour(total)}, above the cap of {per_hour(cap)} "
                "(max_hourly_cost).")
    return None


@dataclass
class _Hold:
    """The $/h one create reserved, and what became of it."""

    dollars: float
    instance_id: str | None = None
    answered: int = 0  # the clock when the create was answered (0: not yet)
    since: float = 0.0  # time.monotonic() then
    seen: bool = False  # a listing taken after the answer shows the instance


class Reservations:
    """The $/h of one client's creates under way, so that concurrent ones keep within the cap.

    :meth:`open` a ticket before listing the instances, then :meth:`reserve` with that listing:
    the check and the reservation are one step under the lock. Then :meth:`answered` with the
    instance's id, or :meth:`release` (refused, nothing made), or :meth:`unsure`.

        >>> holds, offer = Reservations(), InstanceOffer(instance_id="l4", hourly_price=0.45)
        >>> first, second, third = holds.open(), holds.open(), holds.open()
        >>> holds.reserve(first, 1.0, [], offer), holds.reserve(second, 1.0, [], offer)
        (None, None)
        >>> holds.reserve(third, 1.0, [], offer)
        'Launching this $0.45/h offer would bring pending and active instances and those being ...'
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = itertools.count(1)
        self._listing: set[int] = set()  # tickets whose listing is not yet checked
        self._holds: dict[int, _Hold] = {}

    def open(self) -> int:
        """A ticket, taken before the instances are listed for one check."""
        with self._lock:
            ticket = next(self._clock)
            self._listing.add(ticket)
            return ticket

    def reserve(self, ticket: int, cap: float, listed: Iterable[Instance],
                offer: InstanceOffer, count: int = 1, *, keep: bool = True,
                endpoints: float = 0.0) -> str | None:
        """:func:`cap_problem` for ``listed`` (listed after :meth:`open` gave ``ticket``) plus
        the creates under way that it does not show (and ``endpoints``: the inference instances'
        $/h at their most containers); when ``None`` and ``keep``, ``count`` ×
        the offer's price stays reserved under ``ticket``. A refused ticket is closed."""
        listed = list(listed)
        shown = {item.id for item in listed}
        with self._lock:
            self._prune(ticket, shown)  # this check's listing counts among those still open
            self._listing.discard(ticket)
            reserved = sum(hold.dollars for hold in self._holds.values()
                           if hold.instance_id is None or hold.instance_id not in shown)
            problem = cap_problem(cap, listed, offer, count, reserved=reserved,
                                  endpoints=endpoints)
            if problem is None and keep:
                self._holds[ticket] = _Hold(count * (hourly_price(offer.hourly_price) or 0.0))
            return problem

    def answered(self, ticket: int | None, instance_id: str) -> None:
        """The create under ``ticket`` made instance ``instance_id``: held until listed.
        ``None`` (a client without a cap reserves nothing) does nothing, here and below."""
        if ticket is None:
            return
        with self._lock:
            hold = self._holds.get(ticket)
            if hold is not None:
                hold.instance_id, hold.answered = instance_id, next(self._clock)
                hold.since = time.monotonic()

    def unsure(self, ticket: int | None) -> None:
        """The create under ``ticket`` may have made an instance: held for a while."""
        if ticket is None:
            return
        with self._lock:
            hold = self._holds.get(ticket)
            if hold is not None:
                hold.answered, hold.since = next(self._clock), time.monotonic()
                hold.instance_id = ""  # never shown by a listing: it waits out its time

    def release(self, ticket: int | None) -> None:
        """Nothing was made under ``ticket`` (or it never reserved): give it back."""
        if ticket is None:
            return
        with self._lock:
            self._listing.discard(ticket)
            self._holds.pop(ticket, None)

    def forget(self, instance_id: str) -> None:
        """This client deleted ``instance_id``: it bills no more, whatever a listing says."""
        with self._lock:
            for ticket, hold in list(self._holds.items()):
                if hold.instance_id == instance_id:
                    del self._holds[ticket]

    def _prune(self, ticket: int, shown: set[str]) -> None:
        """Drop the holds a listing no older than their answer confirmed (or too old), once no
        check still waits on a listing taken before that answer."""
        oldest = min(self._listing, default=math.inf)
        moment = time.monotonic()
        for key, hold in list(self._holds.items()):
            if not hold.answered:
                continue
            if hold.answered < ticket and hold.instance_id in shown:
                hold.seen = True
            done = hold.seen or moment - hold.since > UNCONFIRMED_SECONDS
            if done and oldest > hold.answered:
                del self._holds[key]
