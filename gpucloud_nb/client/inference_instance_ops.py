"""The inference-instance operations as sans-IO generators: catalogue, create, list, get, update,
start, stop, delete, wait.

Written once and run by :class:`~gpucloud_nb.client.inference_instances.InferenceInstances`
(sync) and its async twin, each with its driver.

    >>> ops = InferenceInstanceOps(core)  # doctest: +SKIP
    >>> core.driver.run(ops.get("chat"))  # doctest: +SKIP

Every method that takes an instance takes its ``_id`` or its name, as for GPU instances: tried as
an id first; on 404 (or 400) looked up by name with one list request, preferring instances not
deleted or being deleted.

Choices where the appendix is silent:

- ``create`` fills what the user leaves out: the hardware is the model's ``defaultHardwareId``,
  the region the first with capacity for it, ``containerPort`` the model's ``port``, and the
  triggers ``{"http": 10}`` (so that ``min=0`` wakes on a request). Hardware is named by id or
  name (the body carries its name, ``hardwareName``); a model by id or name.
- A name is held by one live endpoint at a time: ``create`` lists the endpoints first and
  refuses a name that one not ``DELETING`` or ``DELETED`` already has. The appendix gives an
  InferenceInstance no ``createdAt`` and says nothing of the order of ids or of the list, so
  when a create's answer is lost (see :mod:`gpucloud_nb.client.management`) the endpoint it
  made could not otherwise be told from an older live namesake; with this rule the one live
  endpoint of that name is the one just made. (Two kernels creating the same name within the same
  second can both pass the check: the appendix does not say the cloud refuses a duplicate.)
  It is also what "names wherever ids" needs: a name given to ``get``, ``stop`` or ``delete``
  then names one endpoint.
- ``update`` sends the whole ``autoScalingConfigurations`` (the current one, read first, with the
  changes), since a PATCH replaces a top-level field whole.
- The answers of ``PATCH``, ``start`` and ``stop`` are not shown: each is followed by a ``GET``,
  whose details it returns.
- The cost cap (``max_hourly_cost``) counts an inference instance at its worst: ``hourlyPrice``
  (per container-hour) times the most containers its scaling allows, whatever its status but
  ``DISABLED``, ``DELETING`` and ``DELETED``; a create is refused before it is sent when that,
  with the GPU instances pending or active, would pass the cap.
- ``delete_after`` and ``budget`` are handed to a gateway (its ``/gateway/instances/{id}/...``
  routes take an inference instance's id), which bills the instance per container-hour and
  deletes it when the time or the budget is up; without a gateway (the sandbox, or the real
  cloud with ``GPUCLOUD_GATEWAY=off``) they are refused before anything is sent: no kernel
  thread deletes endpoints.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Generic, TypeVar

from gpucloud_nb.client import changes
from gpucloud_nb.client._core import Core, D, json_list, path_id
from gpucloud_nb.client._ops import Call, Op
from gpucloud_nb.client.autodelete import seconds
from gpucloud_nb.client.budgets import budget_dollars
from gpucloud_nb.client.costcap import running_hourly
from gpucloud_nb.client.waiting import poll_until
from gpucloud_nb.display import per_hour
from gpucloud_nb.errors import (
    APIError,
    BadRequestError,
    InstanceFailedError,
    InvalidInputError,
    NotFoundError,
)
from gpucloud_nb.inference_records import (
    FAILED_STATUSES,
    InferenceHardware,
    InferenceInstance,
    InferenceInstanceDetails,
    InferenceModel,
    InferenceRegion,
)
from gpucloud_nb.inference_rules import TRIGGERS, create_problem, scale_problem
from gpucloud_nb.models import Instance

T = TypeVar("T")

__all__ = ["DEFAULT_TRIGGERS", "HARDWARES_PATH", "INSTANCES_PATH", "MODELS_PATH", "REGIONS_PATH",
           "EndpointProgress", "InferenceInstanceOps", "scale_json", "triggers_json"]

MODELS_PATH = "/ai-inference/models"
HARDWARES_PATH = "/ai-inference/hardwares"
REGIONS_PATH = "/ai-inference/regions"
INSTANCES_PATH = "/ai-inference/instances"
DEFAULT_TRIGGERS: dict[str, float] = {"http": 10}
#: Thresholds used when triggers are given by name only.
TRIGGER_DEFAULTS: dict[str, float] = {"cpu": 80, "gpuUtilization": 80, "gpuMemory": 80,
                                      "memory": 80, "http": 10}
#: Statuses that count against the cost cap.
NOT_BILLING = ("DISABLED", "DELETING", "DELETED")
EndpointProgress = Callable[[InferenceInstanceDetails, float], Any]
Triggers = Mapping[str, float] | Sequence[str]
Seconds = float | timedelta


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def triggers_json(triggers: Triggers | None) -> dict[str, float]:
    """The ``triggers`` object: names (snake or camel case) with thresholds, or names alone.

        >>> triggers_json(["http", "gpu_utilization"])
        {'http': 10, 'gpuUtilization': 80}
        >>> triggers_json({"http": 4})
        {'http': 4}
    """
    if triggers is None:
        return dict(DEFAULT_TRIGGERS)
    if isinstance(triggers, str):
        triggers = [triggers]
    items = (triggers.items() if isinstance(triggers, Mapping)
             else ((name, None) for name in triggers))
    out: dict[str, float] = {}
    for name, value in items:
        key = _camel(str(name))
        if key not in TRIGGERS:
            raise InvalidInputError(
                f"There is no trigger {name!r}; use {', '.join(TRIGGERS)}.")
        out[key] = TRIGGER_DEFAULTS[key] if value is None else value
    return out


def scale_json(min: int, max: int, cooldown: Seconds | None,
               triggers: Triggers | None) -> dict[str, Any]:
    """One region's ``scale`` object (``cooldown`` in seconds or a ``timedelta``).

        >>> scale_json(0, 2, timedelta(minutes=5), None)
        {'min': 0, 'max': 2, 'triggers': {'http': 10}, 'cooldownPeriod': 300.0}
    """
    scale: dict[str, Any] = {"min": min, "max": max, "triggers": triggers_json(triggers)}
    if cooldown is not None:
        scale["cooldownPeriod"] = cooldown.total_seconds() if isinstance(cooldown, timedelta) \
            else cooldown
    return scale


def _find(items: Sequence[Any], given: str, what: str, listing: str) -> Any:
    found = [item for item in items if given in (item.id, item.name)]
    if not found:
        known = ", ".join(f"'{item.id}'" for item in items) or "none"
        raise InvalidInputError(f"Unknown {what} {given!r}: {listing} has {known}.")
    return found[0]


def _refuse_a_live_namesake(endpoints: Sequence[InferenceInstance], name: str) -> None:
    """Refuse a create whose name an endpoint not being deleted already holds (see the module)."""
    live = [e for e in endpoints
            if e.name == name and e.status.upper() not in ("DELETING", "DELETED")]
    if live:
        held = live[0]
        raise InvalidInputError(
            f"An inference instance named {name!r} already exists ({held.id}, "
            f"{held.status.upper()}); give another name, or delete that one first. Nothing was "
            "deployed.")


class InferenceInstanceOps(Generic[D]):
    """The inference-instance operations, shared by the sync and async classes."""

    def __init__(self, core: Core[D]) -> None:
        self.core: Core[D] = core

    # the catalogue

    def models(self) -> Op[builtins.list[InferenceModel]]:
        return (yield from self.core.catalogue(MODELS_PATH, InferenceModel))

    def hardwares(self) -> Op[builtins.list[InferenceHardware]]:
        return (yield from self.core.catalogue(HARDWARES_PATH, InferenceHardware))

    def regions(self) -> Op[builtins.list[InferenceRegion]]:
        data = yield from self.core.send(Call("GET", REGIONS_PATH))  # capacity: never cached
        return [InferenceRegion.from_json(item) for item in json_list(data)]

    # create

    def create(self, name: str, model: str, hardware: str | None,
               region: str | Sequence[str] | None, min: int, max: int,
               cooldown: Seconds | None, triggers: Triggers | None,
               envs: Mapping[str, str] | None, startup_command: str | None,
               timeout: float | None, delete_after: Seconds | None = None,
               budget: float | None = None) -> Op[InferenceInstance]:
        after = None if delete_after is None else seconds(delete_after)
        dollars = None if budget is None else budget_dollars(budget)
        if (after is not None or dollars is not None) and not self.core.gateway:
            if self.core.gateway is None:
                yield from self.core.recognise_gateway()
            if not self.core.gateway:
                raise InvalidInputError(
                    "delete_after and budget of an inference instance are kept by a gateway, and "
                    "this cloud is not one (a sandbox, or the real cloud with "
                    "GPUCLOUD_GATEWAY=off); nothing was deployed: delete it yourself.")
        models = yield from self.models()
        hardwares = yield from self.hardwares()
        regions = yield from self.regions()
        chosen = _find(models, model, "model", "the catalogue (models())")
        hardware_record = _find(hardwares, hardware or chosen.default_hardware_id, "hardware",
                                "the catalogue (hardwares())")
        if region is None:
            able = [r.id for r in regions if r.capacity_for(hardware_record.id) >= builtins.max(1, min)]
            if not able:
                raise InvalidInputError(
                    f"No region has capacity for {hardware_record.name} now; try other hardware "
                    "(regions() shows capacity).")
            region_ids: list[str] = [able[0]]
        else:
            region_ids = [region] if isinstance(region, str) else builtins.list(region)
        scale = scale_json(min, max, cooldown, triggers)
        body: dict[str, Any] = {
            "name": name, "modelId": chosen.id, "hardwareName": hardware_record.name,
            "autoScalingConfigurations": [{"regionId": r, "scale": scale} for r in region_ids],
        }
        if chosen.port:
            body["containerPort"] = chosen.port
        if envs is not None:
            body["envs"] = dict(envs)
        if startup_command is not None:
            body["startupCommand"] = startup_command
        if timeout is not None:
            body["timeout"] = timeout
        problem = create_problem(body, models=models, hardwares=hardwares, regions=regions)
        if problem:
            raise InvalidInputError(problem)
        endpoints = yield from self.list()
        _refuse_a_live_namesake(endpoints, name)
        if self.core.max_hourly_cost is not None:
            yield from self._check_cap(hardware_record, body, endpoints)
        data = yield from self.core.create_once(INSTANCES_PATH, body, "inference instance",
                                                "deployed")
        endpoint = InferenceInstance.from_json(data)
        self._changed()
        if after is not None:
            self.core.auto_delete.schedule(endpoint.id, after)
        if dollars is not None:
            self.core.budgets.set(endpoint.id, dollars)
        return endpoint

    def _check_cap(self, hardware: InferenceHardware, body: Mapping[str, Any],
                   endpoints: Sequence[InferenceInstance]) -> Op[None]:
        cap = self.core.max_hourly_cost
        assert cap is not None
        containers = sum(c["scale"]["max"] for c in body["autoScalingConfigurations"])
        price = hardware.price
        if not math.isfinite(price) or price < 0:
            raise InvalidInputError(
                f"The catalogue shows no price for {hardware.name}, so the cap of "
                f"{per_hour(cap)} (max_hourly_cost) cannot be checked; nothing was deployed.")
        data = yield from self.core.send(Call("GET", "/gpu-cloud/instances"))
        gpus, problem = running_hourly(cap, (Instance.from_json(i) for i in json_list(data)))
        if problem:
            raise InvalidInputError(problem)
        held = yield from self._endpoints_hourly(endpoints)
        total = gpus + held + price * containers
        if total > cap + 1e-9:
            raise InvalidInputError(
                f"Deploying this ({per_hour(price)} × up to {containers} container"
                f"{'s' if containers != 1 else ''}) would bring instances and endpoints to "
                f"{per_hour(total)}, over the cap of {per_hour(cap)} (max_hourly_cost); "
                "nothing was deployed.")

    def _endpoints_hourly(self, endpoints: Sequence[InferenceInstance]) -> Op[float]:
        total = 0.0
        for endpoint in endpoints:
            if endpoint.status.upper() in NOT_BILLING:
                continue
            details = yield from self._get(endpoint.id)
            price = details.hourly_price
            total += (price if math.isfinite(price) else 0.0) * details.max_containers
        return total

    def hourly_worst(self) -> Op[float]:
        """The $/h of every endpoint at its most containers (what the cost cap counts)."""
        endpoints = yield from self.list()
        return (yield from self._endpoints_hourly(endpoints))

    # read

    def list(self) -> Op[builtins.list[InferenceInstance]]:
        data = yield from self.core.send(Call("GET", INSTANCES_PATH))
        return [InferenceInstance.from_json(item) for item in json_list(data)]

    def by_id_or_name(self, given: str, op: Callable[[str], Op[T]]) -> Op[T]:
        """``op(id)`` for the instance whose id or name is ``given`` (see the module docs)."""
        try:
            return (yield from op(path_id(given)))
        except (NotFoundError, BadRequestError) as missing:
            if isinstance(missing, BadRequestError) and missing.status_code != 400:
                raise
            id = yield from self._named(given, missing)
        return (yield from op(id))

    def _named(self, given: str, missing: APIError) -> Op[str]:
        endpoints = yield from self.list()
        if any(e.id == given for e in endpoints):
            raise missing
        named = [e for e in endpoints if e.name == given]
        chosen = [e for e in named if e.status.upper() not in ("DELETING", "DELETED")] or named
        if len(chosen) == 1:
            return chosen[0].id
        if chosen:
            raise InvalidInputError(
                f"{len(chosen)} inference instances are named {given!r} "
                f"({', '.join(e.id for e in chosen)}); give the id of the one you mean.")
        raise NotFoundError(
            f"Inference instance {given} not found: none has that id or name.",
            status_code=missing.status_code, path=missing.path, timestamp=missing.timestamp)

    def get(self, given: str) -> Op[InferenceInstanceDetails]:
        return (yield from self.by_id_or_name(given, self._get))

    def _get(self, id: str) -> Op[InferenceInstanceDetails]:
        data = yield from self.core.send(
            Call("GET", f"{INSTANCES_PATH}/{id}", what=f"Inference instance {id}"))
        return InferenceInstanceDetails.from_json(data)

    # change

    def update(self, given: str, min: int | None, max: int | None, cooldown: Seconds | None,
               triggers: Triggers | None, envs: Mapping[str, str] | None
               ) -> Op[InferenceInstanceDetails]:
        details = yield from self.get(given)
        patch: dict[str, Any] = {}
        if any(v is not None for v in (min, max, cooldown, triggers)):
            configurations = []
            for container in details.containers:
                now = container.scale
                old_triggers = {key: value for key, value in (
                    ("cpu", now.triggers.cpu), ("gpuUtilization", now.triggers.gpu_utilization),
                    ("gpuMemory", now.triggers.gpu_memory), ("memory", now.triggers.memory),
                    ("http", now.triggers.http)) if value is not None}
                scale = scale_json(
                    now.min if min is None else min, now.max if max is None else max,
                    (None if math.isnan(now.cooldown_period) else now.cooldown_period)
                    if cooldown is None else cooldown,
                    old_triggers if triggers is None else triggers)
                configurations.append({"regionId": container.region_id, "scale": scale})
            patch["autoScalingConfigurations"] = configurations
        if envs is not None:
            patch["envs"] = dict(envs)
        if not patch:
            raise InvalidInputError(
                "Nothing to change: give min, max, cooldown, triggers or envs.")
        for item in patch.get("autoScalingConfigurations", []):
            problem = scale_problem(f"In region {item['regionId']}, ", item["scale"])
            if problem:
                raise InvalidInputError(problem)
        yield from self.core.send(Call("PATCH", f"{INSTANCES_PATH}/{details.id}", json=patch,
                                       what=f"Inference instance {given}"))
        self._changed()
        return (yield from self._get(details.id))

    def start(self, given: str) -> Op[InferenceInstanceDetails]:
        return (yield from self.by_id_or_name(given, lambda id: self._act(id, "start")))

    def stop(self, given: str) -> Op[InferenceInstanceDetails]:
        return (yield from self.by_id_or_name(given, lambda id: self._act(id, "stop")))

    def _act(self, id: str, action: str) -> Op[InferenceInstanceDetails]:
        yield from self.core.send(Call("POST", f"{INSTANCES_PATH}/{id}/{action}",
                                       what=f"Inference instance {id}"))
        self._changed()
        return (yield from self._get(id))

    def delete(self, given: str) -> Op[None]:
        yield from self.by_id_or_name(given, self._delete)

    def _delete(self, id: str) -> Op[None]:
        yield from self.core.send(Call("DELETE", f"{INSTANCES_PATH}/{id}",
                                       what=f"Inference instance {id}"))
        self._changed()

    def _changed(self) -> None:
        """Touch the cloud's change stamp: the Lab sidebar shows the endpoint's change now."""
        changes.touch(str(self.core.driver.http.base_url))

    def wait_until_active(self, given: str, timeout: float,
                          on_progress: EndpointProgress | None, poll_interval: float,
                          max_poll_interval: float) -> Op[InferenceInstanceDetails]:
        details = yield from self.get(given)

        def settled(details: InferenceInstanceDetails) -> bool:
            status = details.status.upper()
            if status in FAILED_STATUSES:
                errors = "; ".join(c.error_message for c in details.containers if c.error_message)
                why = f" ({errors.rstrip('.')})" if errors else ""
                raise InstanceFailedError(f"Inference instance {details.name or details.id} is "
                                          f"{status}{why}; it will not become active.")
            return status == "ACTIVE"

        def late(details: InferenceInstanceDetails, timeout: float) -> str:
            return (f"Inference instance {details.name or details.id} is still "
                    f"{details.status.upper()} ({details.ready}/{details.total} containers "
                    f"ready) after {timeout:g} s; it may yet become active: wait again or check "
                    "inference_instances.get().")

        return (yield from poll_until(details, lambda d: self._get(d.id), settled, late,
                                      timeout=timeout, on_progress=on_progress,
                                      poll_interval=poll_interval,
                                      max_poll_interval=max_poll_interval))

