"""Spend so far: hourly price × time billed, from what the client has seen of each instance.

Billing runs while an instance is ``active`` or ``deleting`` — not while ``pending``, not for a
launch that ended in ``error``, and not after ``deletedAt``. The spec gives no activation time,
so the client records one the first time it sees an instance ``active`` (its ``updatedAt``, the
time of that transition). For an instance first seen already deleted, the start is unknown and
``createdAt`` is used instead: an upper bound, flagged ``estimated``.

    >>> ledger = Ledger()
    >>> ledger.observe(instance)          # every create, list and get passes through here  # doctest: +SKIP
    >>> ledger.bill(instance, now)  # doctest: +SKIP
    Bill(start=..., end=..., hours=0.25, spend=0.62, estimated=False)
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from datetime import datetime

from gpucloud_nb.models import Instance, InstanceDetails

__all__ = ["Bill", "Ledger"]

_BILLED = ("active", "deleting", "deleted")


@dataclass(frozen=True, slots=True)
class Bill:
    """What one instance has cost so far."""

    start: datetime | None
    end: datetime | None
    hours: float
    spend: float
    estimated: bool


class Ledger:
    """Activation times the client has seen, keyed by instance id; safe to share across threads."""

    def __init__(self) -> None:
        self._activated: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def observe(self, instance: Instance | InstanceDetails, now: datetime | None = None) -> None:
        """Record the activation time of an instance seen ``active`` for the first time."""
        if instance.status != "active" or not instance.id:
            return
        with self._lock:
            if instance.id not in self._activated:
                seen = instance.updated_at or now
                if seen is not None:
                    self._activated[instance.id] = seen

    def bill(self, instance: Instance | InstanceDetails, now: datetime) -> Bill:
        """The bill of one instance at ``now``."""
        self.observe(instance, now)
        price = 0.0 if math.isnan(instance.hourly_price) else instance.hourly_price
        if instance.status not in _BILLED:
            return Bill(None, None, 0.0, 0.0, False)
        with self._lock:
            start = self._activated.get(instance.id)
        estimated = start is None
        if start is None:
            start = instance.created_at or now
        end = (instance.deleted_at or now) if instance.status == "deleted" else now
        hours = max((end - start).total_seconds(), 0.0) / 3600
        return Bill(start, end, hours, hours * price, estimated)
