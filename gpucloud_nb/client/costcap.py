"""The ``max_hourly_cost`` check, shared by ``instances.create`` and the launch form.

It fails closed: a running instance or an offer whose ``hourlyPrice`` is missing, not a number,
not finite or negative cannot be summed, so the launch is refused with one sentence naming it
rather than counted as $0 (a NaN would make every comparison false and let any launch through).

    >>> cap_problem(10.0, running=[Instance(name="a", status="active", hourly_price=2.5)],
    ...             offer=InstanceOffer(instance_id="h100-1x", hourly_price=9.0))
    'Launching this $9.00/h offer would bring pending and active instances to $11.50/h, ...'
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpucloud_nb.display import per_hour
from gpucloud_nb.models import Instance, InstanceOffer

__all__ = ["RUNNING", "cap_problem", "hourly_price", "running_hourly"]

#: Instance statuses that bill, and so count against the cap.
RUNNING = ("pending", "active")


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
                offer: InstanceOffer) -> str | None:
    """``None`` when launching ``offer`` keeps pending and active instances within ``cap``.

    ``running`` is the instances as listed (``cloud.instances.list()``). Otherwise one sentence:
    the total over the cap, or the instance or offer whose price is missing, non-finite or
    negative.
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
    total = used + price
    if total > cap + 1e-9:
        return (f"Launching this {per_hour(price)} offer would bring pending and active "
                f"instances to {per_hour(total)}, above the cap of {per_hour(cap)} "
                "(max_hourly_cost).")
    return None
