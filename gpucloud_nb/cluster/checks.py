"""What a cluster checks before it rents anything: its arguments, the offer and region, the
cost cap and the budgets (see :class:`~gpucloud_nb.cluster.GPUCloudCluster`).

    >>> cluster_name("trio"), worker_count(3)
    ('trio', 3)
    >>> offer, region = choose_offer(cloud, None, 3, {"gpu_type": "H100"})  # doctest: +SKIP

Choices where nothing says otherwise:

- **Availability.** The interface says only whether an offer is available in a region, not how
  many: a region where it is available is taken to hold all ``n``. If a create is refused
  part-way, the instances already created are deleted and the refusal is raised.
- **Budgets.** Before any launch, through a class gateway whose keys file gives the key a budget
  (``cloud.budgets.account_left()``), the budget left must pay one hour of the ``n`` instances
  and of what the key already runs, as the gateway asks of every create; otherwise one
  sentence names what is left and what the cluster needs, and nothing is launched. ``scale``
  asks the same for the instances it adds.
  A cluster's ``budget=`` asks the same of every scale-up, one hour ahead (:func:`budget_room`).
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client.budgets import ServiceBudgets
from gpucloud_nb.client.costcap import RUNNING, cap_problem, hourly_price
from gpucloud_nb.display import format_price, per_hour
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance, InstanceOffer

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["ORPHAN_SECONDS", "budget_problem", "budget_room", "choose_offer", "cluster_name",
           "launch_problem", "orphan_seconds", "worker_count"]

#: How long a cluster's instances outlive the last cluster object that kept them (30 minutes).
ORPHAN_SECONDS = 1800.0
_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")


def cluster_name(name: object) -> str:
    """A cluster's name, checked (it goes into its instances' names), or a new random one."""
    if name is None:
        return f"cluster-{secrets.token_hex(3)}"
    if not isinstance(name, str) or not _NAME_OK.fullmatch(name):
        raise InvalidInputError(f"A cluster's name is 1 to 40 letters, digits, '.', '_' or '-' "
                                f"(starting with a letter or digit), not {name!r}.")
    return name


def orphan_seconds(value: object) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0 \
            or not math.isfinite(seconds):
        raise InvalidInputError("delete_when_orphaned must be a positive number of seconds, a "
                                f"timedelta or None, not {value!r}.")
    return float(seconds)


def worker_count(n: object, what: str = "A cluster") -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidInputError(f"{what} needs a whole number of instances, not {n!r}.")
    if n < 1:
        raise InvalidInputError(f"{what} needs at least 1 instance; n={n} was given.")
    return n


def choose_offer(cloud: GPUCloud, offer: InstanceOffer | str | None, n: int,
                 filters: dict[str, Any]) -> tuple[InstanceOffer, str]:
    """The offer and the one region the ``n`` instances go to, or one sentence why none can.

    ``offer`` is an offer, an offer's ``instanceId``, or ``None`` for the cheapest available
    vm or baremetal offer matching ``filters`` (``cloud.instances.offers`` filters).
    """
    region = filters.get("region")
    try:
        listed = cloud.instances.offers(**filters)
    except TypeError as error:
        raise InvalidInputError(f"GPUCloudCluster takes the filters of cloud.instances.offers "
                                f"(region, num_gpus, gpu_type, deployment_type): {error}.") from None
    if isinstance(offer, InstanceOffer):
        candidates = [o for o in listed if (o.cloud.id, o.instance_id)
                      == (offer.cloud.id, offer.instance_id)] or [offer]
    elif isinstance(offer, str):
        candidates = [o for o in listed if o.instance_id == offer]
        if not candidates:
            raise InvalidInputError(f"No offer {offer!r} matches; see cloud.instances.offers().")
    elif offer is None:
        candidates = sorted((o for o in listed if o.deployment_type in ("vm", "baremetal")),
                            key=lambda o: o.hourly_price)
        if not candidates:
            raise InvalidInputError("No vm or baremetal offer matches the filters "
                                    f"{filters or '(none)'}; a cluster needs instances with SSH.")
    else:
        raise InvalidInputError(f"offer must be an offer or an offer's instanceId, not "
                                f"{type(offer).__name__}.")
    for candidate in candidates:
        regions = [r for r in candidate.available_regions if region in (None, r)]
        if regions and candidate.deployment_type in ("vm", "baremetal"):
            return candidate, regions[0]
    first = candidates[0]
    if first.deployment_type not in ("vm", "baremetal"):
        raise InvalidInputError(f"Offer {first.instance_id!r} is a {first.deployment_type} "
                                "offer; a cluster needs vm or baremetal instances.")
    where = f"region {region!r}" if region else "any region"
    raise InvalidInputError(f"Offer {first.instance_id!r} is not available in {where}, so "
                            f"{n} instances of it cannot be rented in one region; see "
                            "cloud.instances.offers(available=True).")


def budget_problem(left: float | None, running: Iterable[Instance], offer: InstanceOffer,
                   count: int, what: str) -> str | None:
    """``None`` when ``left`` dollars (``None``: no class budget) pay one hour of ``count`` more
    instances of ``offer`` and of the pending and active ``running`` ones; else one sentence.

        >>> budget_problem(2.5, [], InstanceOffer(instance_id="a", hourly_price=1.0), 3,
        ...                "Cluster 'trio'")
        "Cluster 'trio' needs $3.00 for one hour of 3 × $1.00/h, but your class budget has ..."
    """
    if left is None:
        return None
    price = hourly_price(offer.hourly_price) or 0.0
    already = sum(hourly_price(i.hourly_price) or 0.0 for i in running if i.status in RUNNING)
    needed = count * price + already
    if left >= needed:
        return None
    also = f" and the {per_hour(already)} already running" if already else ""
    return (f"{what} needs {format_price(needed)} for one hour of {count} × {per_hour(price)}"
            f"{also}, but your class budget has {format_price(left)} left; nothing was launched.")


def launch_problem(cloud: GPUCloud, offer: InstanceOffer, count: int, what: str) -> str | None:
    """The cost cap's or the class budget's refusal of ``count`` more instances, or ``None``.

    The cap counts the inference endpoints at their most containers too, as a create does."""
    listed = cloud.instances.list()
    budgets = cloud.budgets
    left = budgets.account_left() if isinstance(budgets, ServiceBudgets) else None
    cap = cloud.max_hourly_cost
    endpoints = cloud.instances.endpoints_hourly() if cap is not None else 0.0
    return (cap_problem(cap, listed, offer, count=count, endpoints=endpoints)
            or budget_problem(left, listed, offer, count, what))


def budget_room(name: str, offer: InstanceOffer, spent: float, budget: float,
                count: int) -> str | None:
    """``None`` when a cluster's ``budget`` pays what it has ``spent`` and one more hour of
    ``count`` instances of ``offer``; else one sentence. Every scale-up asks it (``scale`` for
    all the workers it adds, each worker ``adapt`` starts for itself): the budget's own rule of
    one hour ahead, as a class budget's.

        >>> offer = InstanceOffer(instance_id="a", hourly_price=1.0)
        >>> budget_room("trio", offer, spent=0.5, budget=2.5, count=2) is None
        True
        >>> budget_room("trio", offer, spent=0.5, budget=2.5, count=3)
        "Cluster 'trio' has cost $0.50; one more hour of 3 × $1.00/h would bring it past ..."
    """
    price = hourly_price(offer.hourly_price) or 0.0
    if spent + count * price <= budget:
        return None
    return (f"Cluster {name!r} has cost {format_price(spent)}; one more hour of {count} "
            f"× {per_hour(price)} would bring it past its budget of "
            f"{format_price(budget)}, so no worker was added.")
