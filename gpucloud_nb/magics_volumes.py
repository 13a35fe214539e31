"""``%gpucloud volumes``: list, offers, create (choosing the provider), get, and delete (refused
while an instance holds the volume). ``magics`` calls these with the session's client.

    vols = %gpucloud volumes
    %gpucloud volumes create "my data" --size 100 --region us-east-1 --provider Nimbus
    %gpucloud volumes delete 6650f0c2a1b2c3d4e5f60718 --yes

Chosen: without ``--provider``, ``create`` takes the cheapest provider selling volumes in the
region whose minimum size allows the size asked for, and says which it took and why.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpucloud_nb.display import format_price
from gpucloud_nb.errors import BadRequestError, InvalidInputError
from gpucloud_nb.magics_output import confirm, gb, label, names, say
from gpucloud_nb.magics_parse import Stop
from gpucloud_nb.models import Volume, VolumeOffer

if TYPE_CHECKING:
    import pandas

    from gpucloud_nb.client.management import GPUCloud

__all__ = ["HOLDING_STATUSES", "create", "delete", "get", "list_volumes", "offers", "provider_for"]

#: Instance statuses that still hold their volumes (the sandbox refuses a delete then).
HOLDING_STATUSES = ("pending", "active", "error")



def list_volumes(cloud: GPUCloud, args: argparse.Namespace) -> pandas.DataFrame:
    """``%gpucloud volumes [list]``: your volumes as a DataFrame, newest first."""
    from gpucloud_nb import frames

    return frames.volumes_frame(cloud.volumes.list())


def offers(cloud: GPUCloud, args: argparse.Namespace) -> pandas.DataFrame:
    """``%gpucloud volumes offers``: volume offers as a DataFrame."""
    from gpucloud_nb import frames

    return frames.volume_offers_frame(cloud.volumes.offers())


def create(cloud: GPUCloud, args: argparse.Namespace) -> Volume:
    """``%gpucloud volumes create NAME --size GB --region R [--provider ID]``."""
    listed = cloud.volumes.offers()
    provider = provider_for(listed, args.region, args.provider, args.size)
    volume = cloud.volumes.create(name=args.name, cloud_provider=provider,
                                  region=args.region, size_in_gb=args.size)
    chosen = ""
    if args.provider is None:
        here = [o for o in listed if not o.regions or args.region in o.regions]
        selling = [o for o in here if not o.min_size_in_gb > args.size]
        if len(here) > 1:
            offer = next(o for o in here if o.cloud_provider.id == provider)
            among = (f"{len(here)} providers there" if len(selling) == len(here) else
                     f"the {len(selling)} of {len(here)} providers there selling "
                     f"{gb(args.size)}")
            chosen = (f" with {offer.cloud_provider.display_name}, the cheapest of {among} "
                      f"({format_price(offer.price_per_gb_per_hour)}/GB/h; choose another with "
                      "--provider)")
    say(f"Created volume {label(volume.name, volume.id)} in {volume.region or args.region}"
        f"{chosen}, {gb(volume.size_in_gb)}.")
    return volume


def provider_for(offers: Sequence[VolumeOffer], region: str, given: str | None,
                 size: float = 0.0) -> str:
    """The provider ``_id`` to create a volume with in ``region``.

    ``given`` may be a provider ``_id``, its display name, or a unique part of the name.
    Without it, the cheapest provider (``pricePerGbPerHour``) that offers ``region`` and
    whose ``minSizeInGb`` allows ``size`` (the cheapest in the region if none does, so the
    refusal names its minimum).
    """
    here = [o for o in offers if not o.regions or region in o.regions]

    def choices(among: Sequence[VolumeOffer]) -> str:
        return names(f"{o.cloud_provider.id} ({o.cloud_provider.display_name})" for o in among)

    if given is not None:
        wanted = given.casefold()
        match = [o for o in offers if wanted in (o.cloud_provider.id.casefold(),
                                                 o.cloud_provider.display_name.casefold())]
        match = match or [o for o in offers if wanted in o.cloud_provider.display_name.casefold()]
        if len(match) == 1:
            return match[0].cloud_provider.id
        if match:
            raise InvalidInputError(f"'{given}' matches several volume providers: "
                                    f"{choices(match)}; give one's _id with --provider.")
        raise InvalidInputError(f"No volume provider is called '{given}'; choose one of: "
                                f"{choices(here or offers)}.")
    if not here:
        regions = sorted({r for o in offers for r in o.regions})
        raise InvalidInputError(f"No provider offers volumes in region '{region}'; "
                                f"choose one of: {names(regions)}.")
    fitting = [o for o in here if not o.min_size_in_gb > size] or here
    cheapest = min(fitting, key=lambda o: (not math.isfinite(o.price_per_gb_per_hour),
                                           o.price_per_gb_per_hour))
    return cheapest.cloud_provider.id


def get(cloud: GPUCloud, args: argparse.Namespace) -> Volume:
    """``%gpucloud volumes get ID``."""
    return cloud.volumes.get(args.id)


def delete(cloud: GPUCloud, args: argparse.Namespace) -> None:
    """``%gpucloud volumes delete ID [--yes]``: refused while an instance holds the volume."""
    volume = cloud.volumes.get(args.id)
    shown = label(volume.name, volume.id)
    holders = [i for i in cloud.instances.list()
               if i.status in HOLDING_STATUSES and i.holds_volume(volume.id)]
    if holders:
        users = names(f"{label(i.name, i.id)}, which is {i.status}" for i in holders)
        raise Stop(f"Volume {shown} is attached to instance {users}; delete the instance "
               f"first (%gpucloud delete {holders[0].id}).")
    if not args.yes and not confirm(
        f"Delete volume {shown}, {gb(volume.size_in_gb)}, and all the data on it?",
        f"Could not ask for confirmation here; add --yes to delete volume {shown}.",
    ):
        say(f"Cancelled: volume {shown} was not deleted.")
        return None
    try:
        cloud.volumes.delete(volume.id)
    except BadRequestError as error:
        if "attached to instance" in str(error):
            raise Stop(f"{error} Delete the instance first; the volume was not deleted.") \
                from None
        raise
    say(f"Deleted volume {shown}.")
    return None
