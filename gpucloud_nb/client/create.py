"""Create requests, built and checked in one place: the requests the client sends and why not.

``instances.create`` and ``instances.check_create`` turn their keywords into one
:class:`~gpucloud_nb.models.CreateInstance` here (:func:`create_request`); the launch form builds
the same record directly, and ``instances.create_from`` sends it, so the request a form checks
is the request the client sends. :func:`launch_problems` is the one place a create is checked
before it is sent: the client-only options (:func:`option_problem`), the spec's rules
(:mod:`gpucloud_nb.rules`) and the ``max_hourly_cost`` cap (:mod:`gpucloud_nb.client.costcap`),
over records, without the network; ``instances.create_from`` sends nothing while it finds a
reason.

Durations are one rule across the API: seconds (an ``int`` or ``float``) or a ``timedelta``
(``delete_after``, ``delete_when_idle``); :func:`create_request` turns a ``timedelta`` into
seconds and leaves every check to :func:`launch_problems`.

A new create-time option goes in three places: a field of
:class:`~gpucloud_nb.models.CreateInstance` (in ``_client_only`` when the client, not the cloud,
acts on it), a keyword of :func:`create_request` and of ``instances.create``, and its handling
in ``InstanceOps.create`` (``client/instances.py``), as ``delete_after`` is.

    >>> request = create_request(name="demo", cloud_provider="p1", instance_id="h100-1x",
    ...                          region="us-east-1", vm={"os": "ubuntu-22.04"})
    >>> launch_problems(request, offers, cap=None, running=[])  # doctest: +SKIP
    []
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpucloud_nb import rules
from gpucloud_nb.client import costcap
from gpucloud_nb.client.autodelete import seconds
from gpucloud_nb.client.budgets import budget_dollars
from gpucloud_nb.client.idle import idle_seconds
from gpucloud_nb.create_request import CreateInstance, DockerContainer, VirtualMachine
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance, InstanceOffer, Volume, VolumeOffer

__all__ = ["VmSpec", "create_request", "encode_cloud_init", "launch_problems", "option_problem",
           "volume_body", "volume_problems"]

#: ``vm=`` of ``instances.create``: the OS image name, or ``{"os": ..., "cloud_init": ...}``.
VmSpec = Mapping[str, Any] | str


def encode_cloud_init(text: str) -> str:
    """The cloud-init script as the spec's ``base64CloudInitScript``.

        >>> encode_cloud_init("#!/bin/sh\\necho hi\\n")
        'IyEvYmluL3NoCmVjaG8gaGkK'
    """
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _read_cloud_init(script: str | os.PathLike[str]) -> str:
    """The script's text: a path (``PathLike``, or a one-line string naming a file) is read."""
    looks_like_path = "\n" not in str(script) and len(str(script)) < 4096
    if not (isinstance(script, os.PathLike) or (looks_like_path and Path(script).is_file())):
        return str(script)
    path = Path(script)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(
            f"The cloud-init file {path} could not be read ({exc.strerror}).") from None


def _vm(vm: VmSpec | VirtualMachine) -> VirtualMachine:
    if isinstance(vm, VirtualMachine):
        return vm
    if isinstance(vm, str):
        return VirtualMachine(os=vm)
    if not isinstance(vm, Mapping):
        raise InvalidInputError("vm must be a dict like {'os': 'ubuntu-22.04'}.")
    encoded = vm.get("base64CloudInitScript", vm.get("base64_cloud_init_script"))
    script = vm.get("cloud_init", vm.get("cloudInit"))
    if script is not None and encoded is not None:
        raise InvalidInputError(
            "Give the cloud-init script once: as cloud_init or as base64CloudInitScript.")
    if script is not None:
        encoded = encode_cloud_init(_read_cloud_init(script))
    return VirtualMachine(os=vm.get("os"), base64_cloud_init_script=encoded)  # type: ignore[arg-type]


def _container(container: Mapping[str, Any] | str | DockerContainer) -> DockerContainer:
    if isinstance(container, DockerContainer):
        return container
    if isinstance(container, str):
        return DockerContainer(image=container)
    if not isinstance(container, Mapping):
        raise InvalidInputError(
            "docker_container must be an image name or a dict like {'image': ...}.")
    return DockerContainer(image=container.get("image"))  # type: ignore[arg-type]


def create_request(
    *, name: str, cloud_provider: str, instance_id: str, region: str,
    volume_id: str | None = None, vm: VmSpec | VirtualMachine | None = None,
    docker_container: Mapping[str, Any] | str | DockerContainer | None = None,
    ssh_key_id: str | None = None, ssh_key: str | None = None,
    delete_after: float | timedelta | None = None, budget: float | None = None,
    delete_when_idle: float | timedelta | None = None,
) -> CreateInstance:
    """The :class:`~gpucloud_nb.models.CreateInstance` for ``instances.create``'s keywords.

    The cloud-init script is read and encoded; ``delete_after`` and ``delete_when_idle``
    (seconds or a ``timedelta``) become seconds; ``budget`` is dollars. Raises
    :class:`~gpucloud_nb.errors.InvalidInputError` for a ``vm`` or ``docker_container`` of the
    wrong shape or an unreadable cloud-init file; the values themselves are checked by
    :func:`launch_problems`.

        >>> create_request(name="a", cloud_provider="p1", instance_id="x", region="r",
        ...                vm="ubuntu").body()
        {'name': 'a', 'cloudProvider': 'p1', 'instanceId': 'x', 'region': 'r', 'vm': {'os': 'ubuntu'}}
    """
    return CreateInstance(
        name=name, cloud_provider=cloud_provider, instance_id=instance_id, region=region,
        volume_id=volume_id, ssh_key_id=ssh_key_id, ssh_key=ssh_key,
        vm=None if vm is None else _vm(vm),
        docker_container=None if docker_container is None else _container(docker_container),
        delete_after=_seconds(delete_after), budget=budget,
        delete_when_idle=_seconds(delete_when_idle),
    )


def _seconds(value: float | timedelta | None) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else value


def option_problem(request: CreateInstance) -> str | None:
    """Why a client-only option of ``request``, or its ``volumeId``, cannot be used, or ``None``.

        >>> option_problem(CreateInstance(name="a", cloud_provider="p1", instance_id="x",
        ...                               region="r", delete_when_idle=-5))
        'delete_when_idle must be a positive number of seconds or a timedelta, not -5.'
    """
    checks = ((request.delete_after, seconds), (request.budget, budget_dollars),
              (request.delete_when_idle, idle_seconds))
    for value, check in checks:
        if value is not None:
            try:
                check(value)
            except InvalidInputError as error:
                return error.message
    if request.volume_id is not None and (not isinstance(request.volume_id, str)
                                          or not request.volume_id.strip()):
        return f"volume_id must be the _id of a volume, not {request.volume_id!r}."
    return None


def launch_problems(request: CreateInstance, offers: Iterable[InstanceOffer], *,
                    cap: float | None, running: Iterable[Instance],
                    volume: Volume | object | None = rules.UNCHECKED,
                    endpoints: float = 0.0) -> list[str]:
    """Why ``request`` cannot be sent: a client-only option that is not one
    (:func:`option_problem`), a rule the cloud would refuse it by, or the cap: ``[]`` when it may
    be sent.

    ``running`` is the instances as listed and ``endpoints`` the inference endpoints' $/h at
    their most containers (``instances.endpoints_hourly()``), for the cap; ``volume`` the
    volume ``volumeId`` names (``None``: no such volume), or leave it out to let the server
    check the volume.

        >>> launch_problems(create_request(name="a", cloud_provider="p1", instance_id="x",
        ...                                region="r", vm="ubuntu"), [], cap=None, running=[])
        ["There is no offer with instanceId 'x'."]
    """
    offers = list(offers)
    problem = option_problem(request) or rules.instance_create_problem(request.body(), offers,
                                                                        volume)
    if problem:
        return [problem]
    offer = rules.find_offer(offers, request.instance_id, request.cloud_provider)
    problem = costcap.cap_problem(cap, running, offer, endpoints=endpoints)
    return [problem] if problem else []


def volume_body(*, name: str, cloud_provider: str, region: str,
                size_in_gb: float) -> dict[str, Any]:
    """The CreateVolume JSON for ``volumes.create``'s arguments.

        >>> volume_body(name="data", cloud_provider="p1", region="r", size_in_gb=100)
        {'cloudProvider': 'p1', 'region': 'r', 'name': 'data', 'sizeInGb': 100}
    """
    return {"cloudProvider": cloud_provider, "region": region, "name": name,
            "sizeInGb": size_in_gb}


def volume_problems(body: Mapping[str, Any], offers: Iterable[VolumeOffer]) -> list[str]:
    """Why the cloud would refuse this CreateVolume ``body``: ``[]`` when it may be sent."""
    problem = rules.volume_create_problem(body, offers)
    return [problem] if problem else []
