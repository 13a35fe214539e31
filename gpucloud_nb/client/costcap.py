"""The ``max_hourly_cost`` check, shared by ``instances.create`` and the launch form.

It fails closed: a running instance or an offer whose ``hourlyPrice`` is missing, not a number,
not finite or negative cannot be summed, so the launch is refused with one sentence naming it
rather than counted as $0 (a NaN would make every comparison false and let any launch through).

    >>> cap_problem(10.0, running=[{"name": "a", "status": "active", "hourlyPrice": 2.5}],
    ...             offer={"instanceId": "h100-1x", "hourlyPrice": 9.0})
    'Launching this $9.00/h offer would bring pending and active instances to $11.50/h, ...'
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["RUNNING", "cap_problem", "hourly_price", "running_hourly"]

#: Instance statuses that bill, and so count against the cap.
RUNNING = ("pending", "active")


def hourly_price(value: Any) -> float | None:
    """``value`` as a finite, non-negative price, or ``None`` when it is not one.

        >>> hourly_price(2.5), hourly_price("2.5"), hourly_price("NaN"), hourly_price(-1)
        (2.5, 2.5, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _shown(value: Any) -> str:
    """The bad price as the sentence shows it: ``no hourlyPrice`` or ``hourlyPrice 'NaN'``."""
    if value is None:
        return "no hourlyPrice"
    text = repr(value)
    return f"hourlyPrice {text if len(text) <= 30 else text[:29] + '…'}"


def _why(cap: float) -> str:
    return f"so the cap of ${cap:,.2f}/h (max_hourly_cost) cannot be checked; nothing was launched"


def running_hourly(cap: float, instances: Iterable[Mapping[str, Any]]) -> tuple[float, str | None]:
    """(hourly price of the pending and active ``instances``, the sentence refusing a launch)."""
    total = 0.0
    for item in instances:
        if not isinstance(item, Mapping) or item.get("status") not in RUNNING:
            continue
        price = hourly_price(item.get("hourlyPrice"))
        if price is None:
            name = item.get("name") or "(no name)"
            return total, (f"Instance {str(name)!r} ({item.get('_id')}) reports "
                           f"{_shown(item.get('hourlyPrice'))}, {_why(cap)}.")
        total += price
    return total, None


def cap_problem(cap: float | None, running: Iterable[Mapping[str, Any]],
                offer: Mapping[str, Any]) -> str | None:
    """``None`` when launching ``offer`` keeps pending and active instances within ``cap``.

    ``running`` is the wire JSON of the instances (``GET /gpu-cloud/instances``), ``offer`` the
    offer's. Otherwise one sentence: the total over the cap, or the instance or offer whose price
    is missing, non-finite or negative.
    """
    if cap is None:
        return None
    used, problem = running_hourly(cap, running)
    if problem:
        return problem
    price = hourly_price(offer.get("hourlyPrice"))
    if price is None:
        provider = (offer.get("cloud") or {}).get("name") if isinstance(offer.get("cloud"), Mapping) \
            else None
        seller = f" from {provider}" if provider else ""
        return (f"Offer {str(offer.get('instanceId'))!r}{seller} has "
                f"{_shown(offer.get('hourlyPrice'))}, {_why(cap)}.")
    total = used + price
    if total > cap + 1e-9:
        return (f"Launching this ${price:,.2f}/h offer would bring pending and active instances "
                f"to ${total:,.2f}/h, above the cap of ${cap:,.2f}/h (max_hourly_cost).")
    return None
