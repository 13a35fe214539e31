"""The HTML the launch form shows, built from records: title, volume facts, cost, result.

Pure functions of :mod:`gpucloud_nb.models` records and numbers, so the words and figures a
person reads are tested without a widget; every value from the cloud is HTML-escaped.

    >>> cost_html(offer, volume=None, volume_offer=None, delete_after=None, cap=None,  # doctest: +SKIP
    ...           used_hourly=None, over_cap=False)
    '<b>Cost</b>: $2.49/h · $59.76/day'
"""

from __future__ import annotations

from gpucloud_nb.display import format_duration, per_hour
from gpucloud_nb.models import InstanceDetails, InstanceOffer, Volume, VolumeOffer
from gpucloud_nb.widgets._format import escape, join_nonempty, money, per_day
from gpucloud_nb.widgets._status import ERROR, HINT, hint

__all__ = ["cost_html", "result_html", "title_html", "volume_info_html"]


def title_html(offer: InstanceOffer | None) -> str:
    """The form's heading: what will be launched, or an invitation to choose."""
    if offer is None:
        return "<b>Launch a GPU instance</b>"
    return (f"<b>Launch {escape(offer.gpu_name)} ×{offer.gpu_count}</b> · "
            f"{escape(offer.deployment_type)} · {escape(offer.cloud.name)} · "
            f"<code>{escape(offer.instance_id)}</code>")


def volume_info_html(offer: InstanceOffer | None, region: str | None,
                     volume_offer: VolumeOffer | None, size: int) -> str:
    """What a new volume here would cost, or why none can be created."""
    if offer is None or region is None:
        info = "Choose an offer and a region to create a volume there."
    elif volume_offer is None:
        info = f"{escape(offer.cloud.name)} sells no volumes."
    else:
        size = max(size, 0)
        hourly = size * volume_offer.price_per_gb_per_hour
        info = (f"{escape(volume_offer.cloud_provider.display_name or offer.cloud.name)} "
                f"volumes: at least <b>{volume_offer.min_size_in_gb:g} GB</b>, "
                f"{escape(money(volume_offer.price_per_gb_per_hour))}/GB/h — "
                f"{size} GB ≈ {escape(per_hour(hourly))} ({escape(per_day(hourly))}).")
    return hint(info)


def cost_html(offer: InstanceOffer | None, *, volume: Volume | None,
              volume_offer: VolumeOffer | None, delete_after: float | None,
              cap: float | None,
              used_hourly: float | None, over_cap: bool, kept_by: str = "nobody",
              budget: float = 0.0, budget_by: str = "nobody", endpoints: float = 0.0) -> str:
    """The cost preview: per hour and day, the volume's share, auto-delete's ceiling, the
    budget, the cap.

    ``used_hourly`` is the $/h of the pending and active instances and ``endpoints`` that of
    the inference endpoints at their most containers; the cap counts both.

    ``kept_by`` is who keeps the auto-delete timer (``cloud.auto_delete.where``) and
    ``budget_by`` who watches a ``budget`` in dollars (``cloud.budgets.where``): a gateway
    deletes even if the kernel stops; ``nobody`` (the cloud or sandbox without a gateway)
    refuses either. ``delete_after`` is in seconds.
    """
    if offer is None:
        return ""
    parts = [f"<b>Cost</b>: {escape(per_hour(offer.hourly_price))} · "
             f"{escape(per_day(offer.hourly_price))}"]
    if volume is not None and volume_offer is not None:
        hourly = volume.size_in_gb * volume_offer.price_per_gb_per_hour
        parts.append(f" + volume {escape(volume.name)} {escape(per_hour(hourly))} (billed "
                     "while it exists)")
    if delete_after and kept_by == "nobody":
        parts.append("<br>" + hint("Auto-delete needs a gateway to keep it; this cloud is not "
                                   "one, so the launch is refused.", ERROR))
    elif delete_after:
        keeper = f"by the {escape(kept_by)}, even if this kernel stops"
        lasts = format_duration(delete_after, precise=delete_after % 60 != 0)
        parts.append(f"<br>Auto-deletes after {escape(lasts)}, {keeper}: "
                     f"at most {escape(money(offer.hourly_price * delete_after / 3600))}.")
    if budget and budget_by == "nobody":
        parts.append("<br>" + hint("A budget needs a gateway to keep it; this cloud is not "
                                   "one, so the launch is refused.", ERROR))
    elif budget:
        keeper = f"by the {escape(budget_by)}, even if this kernel stops"
        hours = budget / offer.hourly_price if offer.hourly_price > 0 else float("inf")
        about = "" if hours == float("inf") else f" (about {hours:.3g} h at this price)"
        parts.append(f"<br>Deleted once it has cost {escape(money(budget))}{about}, {keeper}; "
                     "a warning at 80 %.")
    if cap is not None and used_hourly is not None:
        used = used_hourly + endpoints
        after = used + offer.hourly_price
        served = " and by endpoints (at their most containers)" if endpoints else ""
        parts.append("<br>" + hint(
            f"Cap {escape(per_hour(cap))} (max_hourly_cost): "
            f"{escape(per_hour(used))} already used by pending and active "
            f"instances{served}; {escape(per_hour(after))} after this launch.",
            ERROR if over_cap else HINT))
    return "".join(parts)


def result_html(details: InstanceDetails) -> str:
    """One line of facts about a launched instance, then its volumes."""
    facts = join_nonempty([
        f"<b>{escape(details.name)}</b> is <b>{escape(details.status)}</b>",
        f"IP {escape(details.ip)}" if details.ip else "",
        escape(details.region_id),
        f"{escape(per_hour(details.hourly_price))} ({escape(per_day(details.hourly_price))})",
        f"ports {escape(', '.join(map(str, details.port_forwards)))}"
        if details.port_forwards else "",
        f"id <code>{escape(details.id)}</code>",
    ])
    volumes = ", ".join(escape(" at ".join(map(str, v)) if isinstance(v, list | tuple) else v)
                        for v in details.volumes)
    return facts + (f"<br>Volumes: {volumes}" if volumes else "")
