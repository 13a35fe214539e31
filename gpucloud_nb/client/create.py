"""Create requests, built and checked in one place: the bodies the client sends and why not.

``instances.create`` and ``instances.check_create`` build the CreateInstance body here, and the
launch form builds it through the same functions, so the JSON a form checks is the JSON the
client sends. :func:`launch_problems` runs the spec's rules (:mod:`gpucloud_nb.rules`) and the
``max_hourly_cost`` cap (:mod:`gpucloud_nb.client.costcap`) over records, without the network.

    >>> body = instance_body(name="demo", cloud_provider="p1", instance_id="h100-1x",
    ...                      region="us-east-1", vm={"os": "ubuntu-22.04"})
    >>> launch_problems(body, offers, cap=None, running=[])  # doctest: +SKIP
    []
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpucloud_nb import rules
from gpucloud_nb.client import costcap
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance, InstanceOffer, Volume, VolumeOffer

__all__ = ["VmSpec", "encode_cloud_init", "instance_body", "launch_problems", "volume_body",
           "volume_problems"]

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


def _vm_body(vm: VmSpec) -> dict[str, Any]:
    if isinstance(vm, str):
        return {"os": vm}
    if not isinstance(vm, Mapping):
        raise InvalidInputError("vm must be a dict like {'os': 'ubuntu-22.04'}.")
    body: dict[str, Any] = {"os": vm.get("os")}
    encoded = vm.get("base64CloudInitScript", vm.get("base64_cloud_init_script"))
    script = vm.get("cloud_init", vm.get("cloudInit"))
    if script is not None and encoded is not None:
        raise InvalidInputError(
            "Give the cloud-init script once: as cloud_init or as base64CloudInitScript.")
    if script is not None:
        encoded = encode_cloud_init(_read_cloud_init(script))
    if encoded is not None:
        body["base64CloudInitScript"] = encoded
    return body


def _container_body(container: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(container, str):
        return {"image": container}
    if not isinstance(container, Mapping):
        raise InvalidInputError(
            "docker_container must be an image name or a dict like {'image': ...}.")
    return {"image": container.get("image")}


def instance_body(
    *, name: str, cloud_provider: str, instance_id: str, region: str,
    volume_id: str | None = None, vm: VmSpec | None = None,
    docker_container: Mapping[str, Any] | str | None = None,
    ssh_key_id: str | None = None, ssh_key: str | None = None,
) -> dict[str, Any]:
    """The CreateInstance JSON for ``instances.create``'s arguments (the cloud-init is encoded).

    Raises :class:`~gpucloud_nb.errors.InvalidInputError` for a ``vm`` or ``docker_container``
    of the wrong shape, or an unreadable cloud-init file.

        >>> instance_body(name="a", cloud_provider="p1", instance_id="x", region="r", vm="ubuntu")
        {'name': 'a', 'cloudProvider': 'p1', 'instanceId': 'x', 'region': 'r', 'vm': {'os': 'ubuntu'}}
    """
    body: dict[str, Any] = {
        "name": name, "cloudProvider": cloud_provider, "instanceId": instance_id, "region": region,
    }
    optional = {"volumeId": volume_id, "sshKeyId": ssh_key_id, "sshKey": ssh_key}
    body.update({key: value for key, value in optional.items() if value is not None})
    if vm is not None:
        body["vm"] = _vm_body(vm)
    if docker_container is not None:
        body["dockerContainer"] = _container_body(docker_container)
    return body


def launch_problems(body: Mapping[str, Any], offers: Iterable[InstanceOffer], *,
                    cap: float | None, running: Iterable[Instance],
                    volume: Volume | object | None = rules.UNCHECKED) -> list[str]:
    """Why the cloud would refuse ``body``, or the cap forbids it: ``[]`` when it may be sent.

    ``running`` is the instances as listed, for the cap; ``volume`` the volume ``volumeId`` names
    (``None``: no such volume), or leave it out to let the server check the volume.

        >>> launch_problems({"name": "a"}, [], cap=None, running=[])
        ['cloudProvider is required.']
    """
    offers = list(offers)
    problem = rules.instance_create_problem(body, offers, volume)
    if problem:
        return [problem]
    offer = rules.find_offer(offers, str(body["instanceId"]), str(body["cloudProvider"]))
    assert offer is not None  # the rules found it
    problem = costcap.cap_problem(cap, running, offer)
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
