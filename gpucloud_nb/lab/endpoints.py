"""The sidebar's endpoints: the cloud's inference instances, read with each poll, and the start,
stop and delete sent from their rows.

Each poll lists the inference instances (``GET /ai-inference/instances``) and reads the details
of every one not ``DELETED`` (the list has no containers), all at once on the event loop. A row
(``snapshot["endpoints"]``) carries ``id``, ``name``, ``status`` (the appendix's, upper case),
``ready`` and ``total`` (containers, from ``deployStatus`` over every region), ``maxContainers``,
``hourlyPrice`` (per container), ``hourly`` (what its containers cost now: price × containers,
the sandbox's billing and the gateway's meter alike count a container from its start, ready or
not), ``hardwareName``, ``address`` and ``problem`` (a region's ``errorMessage``, or ``None``).

Choices, written down once:

- Deleted endpoints leave the list, as deleted GPU instances do.
- An endpoint list that fails (a cloud without inference instances) costs the sidebar one
  sentence in ``snapshot["endpointsError"]``; the GPU instances are still shown.
- While any endpoint is deploying, starting or deleting (``NEW``, ``PENDING``, ``DEPLOYING``,
  ``PARTIALLYDEPLOYED``, ``DELETING``) or has containers, the poller keeps its ``fast`` interval.
- A start, stop or delete from the sidebar shows at once: the row takes the status the cloud
  answered (``DELETING`` for a delete) until the next poll.

    >>> rows = EndpointRows()
    >>> await rows.read(cloud)  # doctest: +SKIP
    >>> rows.snapshot()["endpoints"][0]["ready"]  # doctest: +SKIP
    1
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Literal

from gpucloud_nb.client.management import AsyncGPUCloud
from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.inference_records import InferenceInstanceDetails

__all__ = ["ACTIONS", "EndpointRows"]

Action = Literal["start", "stop", "delete"]
ACTIONS: tuple[Action, ...] = ("start", "stop", "delete")
MOVING = ("NEW", "PENDING", "DEPLOYING", "PARTIALLYDEPLOYED", "DELETING")


def _price(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


def endpoint_row(details: InferenceInstanceDetails) -> dict[str, Any]:
    """One endpoint as the sidebar shows it (no key or secret: the address is public).

        >>> endpoint_row(InferenceInstanceDetails(name="chat", status="ACTIVE"))["ready"]
        0
    """
    price = details.hourly_price
    problem = next((c.error_message for c in details.containers if c.error_message), None)
    return {
        "id": details.id, "name": details.name, "status": details.status.upper(),
        "ready": details.ready, "total": details.total, "maxContainers": details.max_containers,
        "hourlyPrice": _price(price),
        "hourly": _price(price * details.total) if math.isfinite(price) else None,
        "hardwareName": details.hardware_name, "address": details.address, "problem": problem,
    }


class EndpointRows:
    """The endpoints of the latest poll, and the actions sent from the sidebar."""

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []
        self._error: str | None = None

    def snapshot(self) -> dict[str, Any]:
        """``{"endpoints": [...], "endpointsError": sentence or None}`` for the poller's snapshot."""
        return {"endpoints": [dict(row) for row in self._rows], "endpointsError": self._error}

    def busy(self) -> bool:
        """True while an endpoint is changing or has containers (the poller polls fast)."""
        return any(row["status"] in MOVING or row["total"] for row in self._rows)

    async def read(self, cloud: AsyncGPUCloud) -> None:
        """List the endpoints and read each one's details; a failure is one sentence."""
        endpoints = cloud.inference_instances
        try:
            listed = [e for e in await endpoints.list() if e.status.upper() != "DELETED"]
            details = await asyncio.gather(*(endpoints.get(e.id) for e in listed),
                                           return_exceptions=True)
        except GPUCloudError as error:
            self._error = cloud.scrub(f"The endpoints could not be read: {error}")
            return
        rows = []
        for found in details:
            if isinstance(found, GPUCloudError):  # gone between the list and the get
                continue
            if isinstance(found, BaseException):
                raise found
            if found.status.upper() != "DELETED":
                rows.append(endpoint_row(found))
        self._rows, self._error = rows, None

    async def act(self, cloud: AsyncGPUCloud, endpoint_id: str, action: Action) -> None:
        """Start, stop or delete ``endpoint_id``; its row shows the outcome at once."""
        endpoints = cloud.inference_instances
        if action == "delete":
            await endpoints.delete(endpoint_id)
            self._set(endpoint_id, {"status": "DELETING"})
            return
        details = await (endpoints.start(endpoint_id) if action == "start"
                         else endpoints.stop(endpoint_id))
        self._set(endpoint_id, endpoint_row(details))

    def _set(self, endpoint_id: str, fields: dict[str, Any]) -> None:
        for row in self._rows:
            if row["id"] == endpoint_id:
                row.update(fields)
