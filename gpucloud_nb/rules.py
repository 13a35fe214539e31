"""The spec's rules for create requests: a request body checked against the offers' records.

The client calls them to refuse a request before sending it (``cloud.instances.check_create``);
the sandbox calls them to answer 400. The body is the wire JSON about to be sent or just received;
offers and volumes are :mod:`gpucloud_nb.models` records. Each returns ``None`` when the request
is acceptable, else one plain sentence saying what is wrong.

    >>> instance_create_problem({"name": "a", ...}, offers)  # doctest: +SKIP
    "Offer 'h100-1x' has no OS image 'windows'; choose one of: ubuntu-22.04, ubuntu-24.04."

Rules the spec leaves "not shown", chosen here and documented once:

- ``vm`` and ``baremetal`` offers need a ``vm`` (with an ``os`` from the offer); a
  ``dockerContainer`` beside it is accepted (its image runs on the machine: ``dockerImage``).
  ``container`` offers need a ``dockerContainer``; a ``vm`` beside it is accepted, its ``os``
  checked when the offer lists images. This is the shape the cloud's own CLI sends:
  ``vm: {os}`` together with ``dockerContainer: {image}`` or ``null``.
- The region must be one of the offer's ``availability`` entries, and ``available`` there.
- A ``volumeId`` must name a volume of the same provider and region as the instance.
- A volume's region must be one of its offer's ``regions``; its size at least ``minSizeInGb``.
- A volume's name is one path segment: no ``/``, ``\\`` or NUL, and not ``.`` or ``..`` (the
  sandbox mounts a volume at ``/mnt/<name>``, and such a name would walk out of that folder).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

from gpucloud_nb.display import per_hour
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import InstanceOffer, Volume, VolumeOffer

__all__ = [
    "UNCHECKED",
    "find_offer",
    "instance_create_problem",
    "volume_create_problem",
    "volume_name_problem",
]

_MISSING = object()
#: ``volume=`` default of :func:`instance_create_problem`: leave the volume checks to the server.
UNCHECKED = object()


def _type_problem(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str,
                  *, required: bool, where: str = "") -> str | None:
    value = body.get(key, _MISSING)
    label = f"{where}{key}"
    if value is _MISSING or value is None:
        return f"{label} is required." if required else None
    if isinstance(value, bool) and kind is not bool:
        return f"{label} must be {what}."
    if not isinstance(value, kind):
        return f"{label} must be {what}."
    if isinstance(value, str) and required and not value.strip():
        return f"{label} must not be empty."
    return None


def _first(*problems: str | None) -> str | None:
    return next((p for p in problems if p), None)


def find_offer(offers: Iterable[InstanceOffer], instance_id: str, provider: str | None = None,
               *, choose: str = "provider=") -> InstanceOffer:
    """The offer with this ``instanceId``, sold by ``provider`` (its ``_id`` or name) when given.

    The one lookup of an offer, for the rules, the client, the launch form and the magics: it
    returns the offer or raises :class:`~gpucloud_nb.errors.InvalidInputError` with one sentence.
    Two providers may sell offers with the same ``instanceId``, so an id alone is enough only
    when one provider sells it; otherwise the sentence lists the sellers and asks for ``choose``
    (``provider=`` in Python, ``--provider`` in the magic). ``provider`` matches an ``_id``
    exactly or a name whatever its case.

        >>> find_offer([InstanceOffer(instance_id="h100-1x")], "h100-1x").instance_id
        'h100-1x'
        >>> find_offer([InstanceOffer(instance_id="h100-1x")], "a100-1x")
        Traceback (most recent call last):
        gpucloud_nb.errors.InvalidInputError: There is no offer with instanceId 'a100-1x'.
    """
    same = [o for o in offers if o.instance_id == instance_id]
    if not same:
        raise InvalidInputError(f"There is no offer with instanceId '{instance_id}'.")

    def sellers(among: Iterable[InstanceOffer]) -> str:
        return ", ".join(f"{o.cloud.name} ({o.cloud.id}) at {per_hour(o.hourly_price) or 'no price'}"
                         for o in among)

    if provider is not None:
        wanted = provider.casefold()
        match = ([o for o in same if o.cloud.id == provider]
                 or [o for o in same if o.cloud.name.casefold() == wanted])
        if len(match) == 1:
            return match[0]
        if not match:
            raise InvalidInputError(f"Provider '{provider}' sells no offer '{instance_id}'; "
                                    f"it is sold by: {sellers(same)}.")
        same = match
    if len(same) > 1:
        raise InvalidInputError(f"Offer '{instance_id}' is sold by {len(same)} providers: "
                                f"{sellers(same)}; choose one with {choose}.")
    return same[0]


def _names(values: Iterable[str]) -> str:
    listed = ", ".join(values)
    return listed or "none"


def instance_create_problem(
    body: Mapping[str, Any],
    offers: Iterable[InstanceOffer],
    volume: Volume | object | None = UNCHECKED,
) -> str | None:
    """Check a CreateInstance body against the offers; ``volume`` is the volume ``volumeId`` names.

    Pass ``volume=None`` when ``volumeId`` names no known volume, or leave it out to skip the
    volume checks (the client leaves them to the server).
    """
    if not isinstance(body, Mapping):
        return "The request body must be a JSON object."
    problem = _first(
        _type_problem(body, "name", str, "a string", required=True),
        _type_problem(body, "cloudProvider", str, "a string (the provider _id)", required=True),
        _type_problem(body, "instanceId", str, "a string (the offer instanceId)", required=True),
        _type_problem(body, "region", str, "a string", required=True),
        _type_problem(body, "volumeId", str, "a string", required=False),
        _type_problem(body, "sshKeyId", str, "a string", required=False),
        _type_problem(body, "sshKey", str, "a string", required=False),
        _type_problem(body, "vm", dict, "an object with os", required=False),
        _type_problem(body, "dockerContainer", dict, "an object with image", required=False),
    )
    if problem:
        return problem
    vm = body.get("vm")
    container = body.get("dockerContainer")
    if vm is not None:
        problem = _first(
            _type_problem(vm, "os", str, "a string", required=True, where="vm."),
            _type_problem(vm, "base64CloudInitScript", str, "a base64 string", required=False,
                          where="vm."),
        )
        if problem:
            return problem
        script = vm.get("base64CloudInitScript")
        if script is not None:
            try:
                base64.b64decode(script, validate=True)
            except (binascii.Error, ValueError):
                return "vm.base64CloudInitScript is not valid base64."
    if container is not None:
        problem = _type_problem(container, "image", str, "a string", required=True,
                                where="dockerContainer.")
        if problem:
            return problem

    instance_id, provider, region = body["instanceId"], body["cloudProvider"], body["region"]
    try:
        offer = find_offer(offers, instance_id, provider)
    except InvalidInputError as error:
        return error.message
    if offer.cloud.id != provider:
        return (f"cloudProvider is the provider's _id: '{offer.cloud.id}', "
                f"not its name '{provider}'.")

    here = [a for a in offer.availability if a.region == region]
    open_regions = list(offer.available_regions)
    if not here:
        return (f"Offer '{instance_id}' is not offered in region '{region}'; "
                f"it is available in: {_names(open_regions)}.")
    if not any(a.available for a in here):
        return (f"Offer '{instance_id}' is not available in region '{region}' right now; "
                f"it is available in: {_names(open_regions)}.")

    deployment = offer.deployment_type
    if deployment == "container":
        if container is None:
            return f"Offer '{instance_id}' is a container offer: dockerContainer.image is required."
    elif vm is None:
        return f"Offer '{instance_id}' is a {deployment} offer: vm.os is required."
    if vm is not None:
        images = list(offer.configuration.os)
        if vm["os"] not in images and (images or deployment != "container"):
            return (f"Offer '{instance_id}' has no OS image '{vm['os']}'; "
                    f"choose one of: {_names(images)}.")
        if vm.get("base64CloudInitScript") is not None and not offer.cloud_init_available:
            return f"Offer '{instance_id}' does not support cloud-init scripts."

    if volume is not UNCHECKED and body.get("volumeId") is not None:
        volume_id = body["volumeId"]
        if not isinstance(volume, Volume):
            return f"Volume {volume_id} not found."
        volume_provider = volume.cloud_provider.id if volume.cloud_provider else None
        if volume_provider and volume_provider != provider:
            return (f"Volume {volume_id} belongs to provider '{volume_provider}', "
                    f"not '{provider}'.")
        if volume.region != region:
            return (f"Volume {volume_id} is in region '{volume.region}'; "
                    f"the instance is being created in '{region}'.")
    return None


def volume_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a volume (one path segment), or ``None`` when it can.

        >>> volume_name_problem("../../tmp/x")
        "A volume name is one folder name: '../../tmp/x' contains '/'."
    """
    if not isinstance(name, str):
        return "name must be a string."
    shown = name if len(name) <= 40 else name[:37] + "…"
    for character, label in (("/", "'/'"), ("\\", "'\\'"), ("\0", "a NUL character")):
        if character in name:
            return f"A volume name is one folder name: {shown!r} contains {label}."
    if name.strip() in (".", ".."):
        return f"A volume name is one folder name, not {name.strip()!r}."
    return None


def volume_create_problem(body: Mapping[str, Any],
                          volume_offers: Iterable[VolumeOffer]) -> str | None:
    """Check a CreateVolume body against the volume offers."""
    if not isinstance(body, Mapping):
        return "The request body must be a JSON object."
    problem = _first(
        _type_problem(body, "cloudProvider", str, "a string (the provider _id)", required=True),
        _type_problem(body, "region", str, "a string", required=True),
        _type_problem(body, "name", str, "a string", required=True),
        _type_problem(body, "sizeInGb", (int, float), "a number", required=True),
    )
    if problem:
        return problem
    problem = volume_name_problem(body["name"])
    if problem:
        return problem
    provider, region, size = body["cloudProvider"], body["region"], body["sizeInGb"]
    if size <= 0:
        return f"sizeInGb must be a positive number of GB; {size} was given."
    offer = next((o for o in volume_offers if o.cloud_provider.id == provider), None)
    if offer is None:
        return f"Provider '{provider}' offers no volumes."
    regions = list(offer.regions)
    if regions and region not in regions:
        return (f"Provider '{provider}' offers no volumes in region '{region}'; "
                f"choose one of: {_names(regions)}.")
    minimum = offer.min_size_in_gb if offer.min_size_in_gb > 0 else 0
    if size < minimum:
        return (f"A volume from '{provider}' must be at least {minimum:g} GB; "
                f"{size:g} GB was asked for.")
    return None
