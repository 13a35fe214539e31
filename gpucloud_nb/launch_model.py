"""The launch form's model: what was chosen, the create request it makes, and why not.

No widgets here. :class:`LaunchChoice` holds the values of a launch form (offer, name, region,
OS image or container image, cloud-init script, volume, SSH key); :meth:`LaunchChoice.problem`
says in one sentence why it cannot launch yet — the form's own checks first, then the client's
(:func:`gpucloud_nb.client.create.launch_problems`: the spec's rules and the cost cap), over the
records the form loaded, so no request is made while someone types. The widget
(:class:`~gpucloud_nb.widgets.launch_form.LaunchForm`) binds its fields to a choice.

    >>> choice = LaunchChoice(  # doctest: +SKIP
    ...     offer=offer, name="train-1", region="us-east-1", os="ubuntu-22.04")
    >>> choice.problem(volumes=[], cap=None, running=[]) is None  # doctest: +SKIP
    True
    >>> cloud.instances.create_from(choice.request())  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpucloud_nb import rules
from gpucloud_nb.client import create as creating
from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.create_request import CreateInstance, DockerContainer, VirtualMachine
from gpucloud_nb.display import per_hour
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance, InstanceOffer, Volume, VolumeOffer

__all__ = ["DEFAULT_EXPECTED_LAUNCH_SECONDS", "DEFAULT_IMAGE", "LaunchChoice", "as_offer",
           "expected_launch_seconds", "offer_label", "script_text",
           "usable_volumes", "volume_offer_for", "volume_problem"]

#: The container image a container offer's form starts with: the model server lesson 07 uses.
#: It is the field's value, not a grey placeholder, so the offer launches as shown.
DEFAULT_IMAGE = "vllm/vllm-openai:latest"

#: The spec: "about 5 minutes to launch for a VM with a model-serving image".
DEFAULT_EXPECTED_LAUNCH_SECONDS = 300.0


def offer_label(offer: InstanceOffer) -> str:
    """One line for a dropdown: GPU × count · type · provider · price (instanceId).

        >>> offer_label(offer)  # doctest: +SKIP
        'H100 SXM5 ×1 · vm · Cheap Cloud · $2.49/h (h100-1x)'
    """
    return (f"{offer.gpu_name} ×{offer.gpu_count} · {offer.deployment_type} · {offer.cloud.name} · "
            f"{per_hour(offer.hourly_price)} ({offer.instance_id})")


def as_offer(offer: object) -> InstanceOffer:
    """An :class:`InstanceOffer` from a record or its wire JSON; anything else is one sentence."""
    if isinstance(offer, InstanceOffer):
        return offer
    if isinstance(offer, Mapping):
        return InstanceOffer.from_json(offer)
    raise InvalidInputError(
        f"offer must be an InstanceOffer, its JSON or an instanceId, not {type(offer).__name__}."
    )


def expected_launch_seconds(cloud: GPUCloud) -> float:
    """How long a launch should take: the sandbox's ``launch_seconds``, else the spec's 5 min."""
    info = cloud.sandbox_info
    if info is not None and info.launch_seconds > 0:
        return info.launch_seconds
    return DEFAULT_EXPECTED_LAUNCH_SECONDS


def script_text(script: str | bytes | os.PathLike[str] | None) -> str:
    """A cloud-init script given as text, UTF-8 bytes or a path, as text."""
    if script is None:
        return ""
    if isinstance(script, bytes):
        try:
            return script.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError("The cloud-init script is not UTF-8 text.") from None
    if isinstance(script, os.PathLike):
        try:
            return Path(script).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidInputError(f"The cloud-init file {script} could not be read "
                                    f"({getattr(error, 'strerror', None) or error}).") from None
    return str(script)


def volume_offer_for(offer: InstanceOffer | None,
                     volume_offers: Sequence[VolumeOffer]) -> VolumeOffer | None:
    """The volume offer of ``offer``'s provider, if it sells volumes."""
    if offer is None:
        return None
    return next((v for v in volume_offers if v.cloud_provider.id == offer.cloud.id), None)


def usable_volumes(offer: InstanceOffer | None, region: str | None,
                   volumes: Sequence[Volume]) -> list[Volume]:
    """The volumes an instance of ``offer`` in ``region`` can use: same region and provider."""
    if offer is None or region is None:
        return []
    return [v for v in volumes if v.region == region
            and (v.cloud_provider is None or v.cloud_provider.id == offer.cloud.id)]


def volume_problem(offer: InstanceOffer | None, region: str | None,
                   volume_offers: Sequence[VolumeOffer], name: str, size_gb: float) -> str | None:
    """``None`` when a volume ``name`` of ``size_gb`` can be created beside the offer, else why."""
    if offer is None or region is None:
        return "Choose an offer and a region first."
    volume_offer = volume_offer_for(offer, volume_offers)
    if volume_offer is None:
        return f"{offer.cloud.name} sells no volumes."
    if not name.strip():
        return "Give the volume a name."
    if size_gb < volume_offer.min_size_in_gb:
        return (f"A {offer.cloud.name} volume must be at least "
                f"{volume_offer.min_size_in_gb:g} GB; {size_gb} GB was asked for.")
    body = creating.volume_body(name=name.strip(), cloud_provider=offer.cloud.id, region=region,
                                size_in_gb=size_gb)
    problems = creating.volume_problems(body, volume_offers)
    return problems[0] if problems else None


@dataclass(frozen=True)
class LaunchChoice:
    """The values of a launch form; blank text means "not given".

        >>> LaunchChoice(offer=None).problem(volumes=[], cap=None, running=[])
        'Choose an offer to launch.'
    """

    offer: InstanceOffer | None
    name: str = ""
    region: str | None = None
    os: str | None = None
    image: str = ""
    cloud_init: str = ""
    volume_id: str | None = None
    ssh_key: str = ""
    ssh_key_id: str = ""

    def request(self, delete_after: float | None = None,
                budget: float | None = None,
                delete_when_idle: float | None = None) -> CreateInstance:
        """The create request for this choice (the cloud-init base64-encoded), for
        ``cloud.instances.create_from``; ``delete_after`` and ``delete_when_idle`` are in
        seconds, ``budget`` in dollars.

        Raises :class:`~gpucloud_nb.errors.InvalidInputError` without an offer or region.
        """
        offer = self.offer
        if offer is None or self.region is None:
            raise InvalidInputError("Choose an offer and a region to launch.")
        vm, container = None, None
        if offer.deployment_type == "container":
            container = DockerContainer(image=self.image.strip())
        else:
            script = self.cloud_init
            vm = VirtualMachine(os=self.os,  # type: ignore[arg-type]  # None: the rules say so
                                base64_cloud_init_script=(creating.encode_cloud_init(script)
                                                          if script.strip() else None))
        return CreateInstance(
            name=self.name.strip(), cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
            region=self.region, volume_id=self.volume_id, vm=vm, docker_container=container,
            ssh_key=self.ssh_key.strip() or None, ssh_key_id=self.ssh_key_id.strip() or None,
            delete_after=delete_after, budget=budget, delete_when_idle=delete_when_idle)

    def problem(self, *, volumes: Sequence[Volume], cap: float | None,
                running: Sequence[Instance], endpoints: float = 0.0) -> str | None:
        """``None`` when this choice can launch, else one sentence saying what to fix.

        ``volumes`` are the account's volumes (a ``volume_id`` not among them is refused),
        ``cap`` the client's ``max_hourly_cost``, ``running`` the instances it counts and
        ``endpoints`` the inference endpoints' $/h at their most containers
        (``cloud.instances.endpoints_hourly()``), which it counts too.
        """
        offer = self.offer
        if offer is None:
            return "Choose an offer to launch."
        if not self.name.strip():
            return "Give the instance a name."
        if self.region is None:
            if not offer.available_regions:
                return f"Offer '{offer.instance_id}' is not available in any region right now."
            return "Choose a region."
        if offer.deployment_type == "container":
            if not self.image.strip():
                return f"Give the container image to run, for example {DEFAULT_IMAGE}."
            if self.cloud_init.strip():
                return "Container offers run no cloud-init script; clear it or choose a vm offer."
        elif self.os is None:
            return f"Choose an OS image for this {offer.deployment_type} offer."
        try:
            request = self.request()
        except InvalidInputError as error:
            return error.message
        volume: Volume | object | None = rules.UNCHECKED
        if self.volume_id is not None:  # same provider and region (None: not one of ours)
            volume = next((v for v in volumes if v.id == self.volume_id), None)
        problems = creating.launch_problems(request, [offer], cap=cap, running=running, volume=volume,
                                            endpoints=endpoints)
        return problems[0] if problems else None
