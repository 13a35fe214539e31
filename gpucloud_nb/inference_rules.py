"""The rules of an inference instance's create body, as pure functions shared by client and sandbox.

The client checks a create (or a scaling change) with :func:`create_problem` before anything is
sent; the sandbox answers 400 with the same sentence. A PATCH is checked as the whole body it
leaves (:func:`merged`).

    >>> create_problem({"name": "x", "modelId": "nope"}, models=[], hardwares=[], regions=[])
    "Unknown model 'nope': the catalogue has none."

Choices where the appendix gives no rule:

- A name is 1 to 255 characters. ``modelId`` must be a catalogue model (``registryId``, a private
  image, is passed on unchecked by the client; the sandbox has no registries and refuses it).
- ``hardwareName`` must name a catalogue hardware; ``autoScalingConfigurations`` must hold at
  least one region, each once.
- ``min`` and ``max`` are whole numbers with ``0 <= min <= max`` and ``max >= 1``;
  ``cooldownPeriod`` is seconds, zero or more; every trigger is a number, zero or more.
- ``min`` may be 0 only with an ``http`` trigger (the appendix's rule).
- A region must list capacity for the hardware: at least one container, and at least ``min``.
- ``envs`` maps names to strings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpucloud_nb.inference_records import InferenceHardware, InferenceModel, InferenceRegion

__all__ = ["MAX_NAME_LENGTH", "TRIGGERS", "create_problem", "merged", "public_key_problem",
           "scale_problem"]

MAX_NAME_LENGTH = 255
#: The trigger names of the appendix.
TRIGGERS = ("cpu", "gpuUtilization", "gpuMemory", "memory", "http")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def _whole(value: Any) -> bool:
    return _number(value) and float(value).is_integer()


def _names(values: Iterable[str]) -> str:
    names = [f"'{v}'" for v in values]
    return ", ".join(names) if names else "none"


def merged(current: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The body a PATCH leaves: ``current`` with the top-level fields ``patch`` gives.

        >>> merged({"name": "a", "envs": {"X": "1"}}, {"envs": {"Y": "2"}})
        {'name': 'a', 'envs': {'Y': '2'}}
    """
    return {**current, **patch}


def scale_problem(where: str, scale: Any) -> str | None:
    """Why one region's ``scale`` object would be refused (``where`` begins the sentence)."""
    if not isinstance(scale, Mapping):
        return f"{where}scale must be an object with min, max, cooldownPeriod and triggers."
    low: Any = scale.get("min")
    high: Any = scale.get("max")
    if not _whole(low) or low < 0:
        return f"{where}scale.min must be a whole number, zero or more."
    if not _whole(high) or high < 1:
        return f"{where}scale.max must be a whole number, one or more."
    if low > high:
        return f"{where}scale.min ({low:g}) is more than scale.max ({high:g})."
    cooldown = scale.get("cooldownPeriod")
    if cooldown is not None and (not _number(cooldown) or cooldown < 0):
        return f"{where}scale.cooldownPeriod must be a number of seconds, zero or more."
    triggers = scale.get("triggers")
    if triggers is None:
        triggers = {}
    if not isinstance(triggers, Mapping):
        return f"{where}scale.triggers must be an object such as {{\"http\": 10}}."
    for name, value in triggers.items():
        if name not in TRIGGERS:
            return f"{where}scale.triggers has no trigger {name!r}; use {_names(TRIGGERS)}."
        if value is not None and (not _number(value) or value < 0):
            return f"{where}scale.triggers.{name} must be a number, zero or more."
    if low == 0 and triggers.get("http") is None:
        return (f"{where}scale.min may be 0 only with an http trigger (a request wakes it); "
                "add triggers={'http': ...} or set min to 1.")
    return None


def create_problem(body: Mapping[str, Any], *, models: Iterable[InferenceModel],
                   hardwares: Iterable[InferenceHardware],
                   regions: Iterable[InferenceRegion]) -> str | None:
    """Why the cloud would refuse this create body, as one sentence, or ``None``.

        >>> create_problem({"name": ""}, models=[], hardwares=[], regions=[])
        'name must be 1 to 255 characters.'
    """
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        return f"name must be 1 to {MAX_NAME_LENGTH} characters."
    model_id, registry = body.get("modelId"), body.get("registryId")
    models = list(models)
    if registry is None or model_id is not None:
        if not isinstance(model_id, str) or not any(m.id == model_id for m in models):
            shown = model_id if isinstance(model_id, str) else None
            if shown is None:
                return "modelId is required: the id of a catalogue model (models())."
            return f"Unknown model {shown!r}: the catalogue has {_names(m.id for m in models)}."
    elif not isinstance(registry, str) or not registry:
        return "registryId must be the id of a private registry."
    hardwares = list(hardwares)
    hardware_name = body.get("hardwareName")
    hardware = next((h for h in hardwares if h.name == hardware_name), None)
    if hardware is None:
        shown = hardware_name if isinstance(hardware_name, str) else None
        if shown is None:
            return "hardwareName is required: the name of a catalogue hardware (hardwares())."
        return (f"Unknown hardware {shown!r}: the catalogue has "
                f"{_names(h.name for h in hardwares)}.")
    port = body.get("containerPort")
    if port is not None and (not _whole(port) or not 1 <= port <= 65535):
        return "containerPort must be a port number (1 to 65535)."
    envs = body.get("envs")
    if envs is not None and (not isinstance(envs, Mapping) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in envs.items())):
        return "envs must map names to strings."
    configurations = body.get("autoScalingConfigurations")
    if not isinstance(configurations, list) or not configurations:
        return "autoScalingConfigurations must list at least one region and its scaling."
    by_id = {r.id: r for r in regions}
    seen: set[str] = set()
    for item in configurations:
        if not isinstance(item, Mapping):
            return "Each autoScalingConfigurations item must be {regionId, scale}."
        region_id = item.get("regionId")
        region = by_id.get(region_id) if isinstance(region_id, str) else None
        if region is None:
            return (f"Unknown region {region_id!r}: the catalogue has "
                    f"{_names(by_id)}.")
        if region_id in seen:
            return f"Region {region_id!r} is given twice."
        seen.add(region.id)
        problem = scale_problem(f"In region {region_id}, ", item.get("scale"))
        if problem:
            return problem
        capacity = region.capacity_for(hardware.id)
        low = item["scale"]["min"]
        if capacity < max(1, low):
            return (f"Region {region_id!r} has no capacity for {hardware.name} "
                    f"({capacity} container{'s' if capacity != 1 else ''}"
                    f"{f', min is {low:g}' if low > 1 else ''}); choose another region "
                    "(regions() shows capacity).")
    return None


_KEY_LINE = re.compile(
    r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-[\w@.-]+)\s+[A-Za-z0-9+/]+={0,3}"
    r"(\s+.*)?$")


def public_key_problem(text: str) -> str | None:
    """Why ``text`` is not one OpenSSH public key line, or ``None``.

        >>> public_key_problem("-----BEGIN OPENSSH PRIVATE KEY-----")
        'That is a private key: give the public key (the .pub file), never the private one.'
    """
    if "PRIVATE KEY" in text:
        return "That is a private key: give the public key (the .pub file), never the private one."
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) != 1 or not _KEY_LINE.match(lines[0].strip()):
        return ("That is not an OpenSSH public key: give one line such as "
                "'ssh-ed25519 AAAA… me@laptop' (the .pub file).")
    return None
