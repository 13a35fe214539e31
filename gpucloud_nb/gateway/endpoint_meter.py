"""Inference instances metered by the gateway: their containers × the price per container.

    >>> await meter_endpoints(store, upstream, now_ms())  # doctest: +SKIP

Each pass of the watcher (:mod:`gpucloud_nb.gateway.meter`) reads, for every inference instance
created through the gateway and not yet final, its details from the upstream (``GET
/ai-inference/instances/{id}``): the containers its regions report (``deployStatus .total``, ready
or starting) times its ``hourlyPrice`` is what it bills per hour from then on, kept as a span
(:meth:`gpucloud_nb.gateway.store.Store.bill_at`). Choices where the appendix is silent: a
container bills from the pass that first sees it (a container started and gone between two passes
is not seen; the poll is a second); ``DISABLED`` (stopped) and the instance being deleted bill
nothing; a 404 or ``DELETED`` is final. The store's ``price`` of an inference instance is its worst
$/h (per container × the most containers its scaling allows), which admission holds
(:func:`gpucloud_nb.gateway.money.held`); the spans carry what it bills. The status is stored in
lower case, so the money rules read ``deleting`` and ``deleted`` as for GPU instances.
"""

from __future__ import annotations

import math
from typing import Any

from gpucloud_nb.gateway.store import Store
from gpucloud_nb.gateway.upstream import Upstream

__all__ = ["ENDPOINT", "INSTANCES", "containers", "meter_endpoints", "per_container",
           "upstream_path"]

ENDPOINT = "endpoint"
"""The kind of an inference instance in the gateway's store."""
INSTANCES = "/ai-inference/instances"
_NOT_BILLING = ("disabled", "deleting", "deleted", "failed", "error")


def upstream_path(id: str) -> str:
    """The upstream's path of inference instance ``id``."""
    return f"{INSTANCES}/{id}"


def containers(details: Any) -> int:
    """The containers an inference instance's details report, over its regions.

        >>> containers({"containers": [{"deployStatus": {"total": 2, "ready": 1}},
        ...                            {"deployStatus": {"total": 1}}]})
        3
    """
    total = 0
    for item in details.get("containers") or [] if isinstance(details, dict) else []:
        status = item.get("deployStatus") if isinstance(item, dict) else None
        count = status.get("total") if isinstance(status, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            total += count
    return total


def per_container(details: Any) -> float | None:
    """An inference instance's ``hourlyPrice`` (per container), or ``None`` when it has none.

        >>> per_container({"hourlyPrice": 0.75}), per_container({"hourlyPrice": "x"})
        (0.75, None)
    """
    price = details.get("hourlyPrice") if isinstance(details, dict) else None
    if isinstance(price, bool) or not isinstance(price, int | float) or not math.isfinite(price) \
            or price < 0:
        return None
    return float(price)


async def meter_endpoints(store: Store, upstream: Upstream, now: int) -> None:
    """One pass over the inference instances not final (see the module docs)."""
    for record in store.live(kind=ENDPOINT):
        status, details = await upstream.call("GET", upstream_path(record.id))
        if status == 404:
            store.bill_at(record.id, record.account, 0.0, now)
            store.update_owned(record.id, price=record.price, created_ms=record.created_ms,
                               status="deleted", deleted_ms=record.delete_asked_ms or now,
                               final=True)
            continue
        if status != 200 or not isinstance(details, dict):
            continue
        state = str(details.get("status") or record.status).lower()
        each = per_container(details)
        running = 0 if state in _NOT_BILLING or each is None else containers(details)
        store.bill_at(record.id, record.account, round((each or 0.0) * running, 12), now)
        final = state == "deleted"
        deleted = (record.deleted_ms or now) if final else None
        if (state, deleted, final) != (record.status, record.deleted_ms, record.final):
            store.update_owned(record.id, price=record.price, created_ms=record.created_ms,
                               status=state, deleted_ms=deleted, final=final)
