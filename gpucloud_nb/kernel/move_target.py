"""The instance a move goes to: one named, or one launched from the cheapest offer that fits.

    >>> target, launched = await find_or_launch(client, {"gpu": "H100"}, reply, ...)  # doctest: +SKIP

A named instance must be active (a pending one is waited for). Filters (``gpu``,
``max_price``) launch the cheapest available VM offer that fits, through the client, so the
cost cap and budget apply. Choice (the issue leaves it open): a launched instance is named
``<old name>-<gpu model>`` plus four random letters. A launch whose wait is cut deletes the
instance it created.
"""

from __future__ import annotations

import asyncio
import secrets
import string
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gpucloud_nb.errors import GPUCloudError, NotFoundError
from gpucloud_nb.kernel.carry import MoveFailed

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.kernel.agent import Reply
    from gpucloud_nb.models import InstanceDetails

__all__ = ["delete_quietly", "find_or_launch", "label"]


async def find_or_launch(client: GPUCloud, request: dict[str, Any], reply: Reply,
                         instance_id: str, instance_name: str,
                         cancellable: Callable[[Reply, Any], Awaitable[Any]]
                         ) -> tuple[InstanceDetails, InstanceDetails | None]:
    """The move's target (the kernel now runs on ``instance_id``), and the instance launched
    for it (``None`` when the target was named); ``cancellable`` stops a wait when the cell is
    interrupted."""
    named = request.get("target")
    if named:
        try:
            details = await asyncio.to_thread(client.instances.get, str(named))
        except NotFoundError:
            raise MoveFailed(f"there is no instance {named!r}") from None
        if details.id == instance_id:
            raise MoveFailed(f"the kernel already runs on {label(details)}")
        if details.status == "pending":
            reply.progress(f"Waiting for {label(details)} to be active…")
            details = await cancellable(reply, asyncio.to_thread(
                client.instances.wait_until_active, details.id))
        if details.status != "active":
            raise MoveFailed(f"instance {label(details)} is {details.status}")
        return details, None
    gpu, price = request.get("gpu"), request.get("max_price")
    offers = await asyncio.to_thread(client.instances.offers, gpu_type=gpu, available=True,
                                     sort="price", deployment_type="vm")
    fitting = [offer for offer in offers if offer.configuration.os and offer.available_regions
               and (price is None or offer.hourly_price <= float(price))]
    if not fitting:
        wanted = " ".join(part for part in (
            f"GPU {gpu}" if gpu else "", f"at most ${float(price):g}/h" if price else "") if part)
        raise MoveFailed(f"no available offer fits {wanted}")
    offer = fitting[0]
    suffix = "".join(secrets.choice(string.ascii_lowercase) for _ in range(4))
    base = (instance_name or "kernel")[:40]
    model = "".join(c if c.isalnum() else "-" for c in (gpu or offer.gpu_name or "gpu"))
    name = f"{base}-{model.lower().strip('-')}-{suffix}"  # "L4 24GB": no space in a name
    reply.progress(f"Launching {name}: {offer.gpu_name} × {offer.gpu_count} at "
                   f"${offer.hourly_price:g}/h ({offer.cloud.id}, "
                   f"{offer.available_regions[0]})…")
    created = await asyncio.to_thread(
        client.instances.create, name=name, cloud_provider=offer.cloud.id,
        instance_id=offer.instance_id, region=offer.available_regions[0],
        vm={"os": offer.configuration.os[0]})
    try:
        details = await cancellable(reply, asyncio.to_thread(
            client.instances.wait_until_active, created.id))
    except BaseException:
        await asyncio.to_thread(delete_quietly, client, created.id)
        raise
    return details, details


def label(details: InstanceDetails) -> str:
    """How messages name an instance: ``name (id)``, or its id."""
    return f"{details.name} ({details.id})" if details.name else details.id


def delete_quietly(client: GPUCloud, instance_id: str) -> bool:
    """Delete the instance; True once the cloud says it is deleting or gone."""
    try:
        client.instances.delete(instance_id)
        return client.instances.get(instance_id).status in ("deleting", "deleted")
    except NotFoundError:
        return True
    except GPUCloudError:
        return False
