"""The sandbox's inference instances (the appendix): catalogue, deploy, scale to zero and wake,
start, stop, delete, billing per container-hour; each endpoint served on loopback by the
sandbox's own inference app.

    >>> endpoints = Endpoints(config, user_of, store)  # doctest: +SKIP

Their routes and the app that serves each endpoint's address are
:mod:`gpucloud_nb.sandbox.inference_instance_routes`.

An instance's ``address`` is ``<sandbox>/inference/endpoints/<id>-<hash>/``: its ``/v1/models``
lists the deployed model alone; ``/v1/chat/completions`` and ``/v1/audio/transcriptions`` are
answered by :mod:`gpucloud_nb.sandbox.inference` (the request's key swapped for the owner's
inference secret). Choices where the appendix is silent:

- **The secret** of an endpoint is its owner's API key, in ``x-api-key``; any other is 401 (the
  OpenAI body, as the inference endpoint answers). Another key's instance is a 404 everywhere.
- **Life cycle.** A create is ``NEW`` and a start ``PENDING`` for the first tenth of
  ``launch_seconds``, then ``DEPLOYING``; the first region is ready after ``launch_seconds``, each
  further one half a launch later (``PARTIALLYDEPLOYED`` meanwhile), then ``ACTIVE``. ``stop``
  makes it ``DISABLED`` at once (its containers gone); ``delete`` makes it ``DELETING`` for
  ``delete_seconds``, then ``DELETED`` (still listed, as GPU instances are). A name ending in
  ``-sandbox-fail`` deploys to ``FAILED`` with an ``errorMessage``. ``start`` of a running one
  and ``stop`` of a stopped one answer 200 and change nothing; either on a deleted one is 400.
- **Scaling.** Each region deploys ``max(min, 1)`` containers. After ``cooldownPeriod`` seconds
  (300 when not given) with no request, each region drops to ``min`` (so to zero with
  ``min=0``). A request to an endpoint with no container starts one in its first region and
  waits ``cold_start_seconds`` (the sandbox's ``--cold-start-seconds``, 3) for it; a request
  that finds more requests in flight per ready container than the ``http`` trigger adds a
  container (up to ``max`` and the region's capacity) without waiting for it. A request before
  the first deploy is ready waits for it (up to 60 s), as a cold start does.
- ``/v1/models`` is answered without a container (the router knows the model), so listing
  the model never wakes an endpoint that scaled to zero; chat and transcription do.
- **Stopped.** A request to a ``DISABLED`` instance is 503 ``endpoint_stopped`` ("Inference
  instance X is stopped; start it to send requests."), one to a deleted one 404.
- **Billing** is per container-hour at the hardware's ``hourlyPrice`` (the sandbox's catalogue
  gives one), from a container's start (a cold start included) to its removal, times the
  sandbox's ``bill_factor``. Details carry the sandbox's own ``containerHours`` and ``spend``.
- **Capacity.** A region's capacity for a hardware is its catalogue figure less the containers
  of that hardware live in it now, over every account.
- **State**: each instance is one document of the sandbox's store (``kind`` ``endpoint``:
  its body, regions, containers with their start and ready times, what it has billed), written
  before each answer that changed it and whenever it scales, so with ``--state`` (the service
  always has one) a restarted sandbox carries on where it stopped, as for GPU instances: status,
  containers and billing kept (the time it was down counts as time, as for a GPU instance).
  Requests in flight are not kept. The SSH-key book is :mod:`gpucloud_nb.sandbox.ssh_key_book`.
- ``PATCH`` merges the given top-level fields (``autoScalingConfigurations`` whole, ``envs``
  whole), checks the result as a create and answers the details; new scaling applies at once
  (containers above the new ``max`` go, regions below ``min`` get containers). ``name``,
  ``modelId`` and ``hardwareName`` cannot change (400). ``/ai-inference/registries`` is 400:
  the sandbox has no private registries.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpucloud_nb.inference_records import InferenceHardware, InferenceModel, InferenceRegion
from gpucloud_nb.inference_rules import create_problem, merged
from gpucloud_nb.sandbox.http import Problem, now_ms

if TYPE_CHECKING:
    from gpucloud_nb.sandbox.config import SandboxConfig
    from gpucloud_nb.sandbox.store import Store

__all__ = ["ENDPOINTS_PREFIX", "HARDWARES", "MODELS", "REGIONS", "Endpoints"]

ENDPOINTS_PREFIX = "/inference/endpoints"
DEFAULT_COOLDOWN = 300.0
FIRST_DEPLOY_WAIT_MS = 60_000
FAIL_SUFFIX = "-sandbox-fail"
KIND = "endpoint"
"""The store's document kind of an inference instance."""

MODELS: list[dict[str, Any]] = [
    {"id": "sandbox-vision-1", "name": "Sandbox Vision 1 (chat and images)", "port": 8000,
     "defaultHardwareId": "a10-24gb", "features": ["chat", "image"]},
    {"id": "sandbox-speech-1", "name": "Sandbox Speech 1 (transcription)", "port": 8000,
     "defaultHardwareId": "t4-16gb", "features": ["transcription"]},
]
HARDWARES: list[dict[str, Any]] = [
    {"id": "t4-16gb", "name": "NVIDIA T4 16GB", "cpu": 4, "ram": 16,
     "gpu": {"model": "T4", "count": 1, "memory": 16}, "hourlyPrice": 0.35},
    {"id": "a10-24gb", "name": "NVIDIA A10 24GB", "cpu": 8, "ram": 32,
     "gpu": {"model": "A10", "count": 1, "memory": 24}, "hourlyPrice": 0.75},
    {"id": "a100-80gb", "name": "NVIDIA A100 80GB", "cpu": 16, "ram": 128,
     "gpu": {"model": "A100", "count": 1, "memory": 80}, "hourlyPrice": 1.89},
    {"id": "h100-80gb", "name": "NVIDIA H100 80GB", "cpu": 24, "ram": 192,
     "gpu": {"model": "H100", "count": 1, "memory": 80}, "hourlyPrice": 2.99},
]
REGIONS: list[dict[str, Any]] = [
    {"id": "eu-central-1", "name": "Frankfurt", "countryCode": "DE", "state": "Hesse",
     "capacities": [{"hardwareId": "t4-16gb", "capacity": 8},
                    {"hardwareId": "a10-24gb", "capacity": 6},
                    {"hardwareId": "a100-80gb", "capacity": 2},
                    {"hardwareId": "h100-80gb", "capacity": 0}]},
    {"id": "us-east-1", "name": "Virginia", "countryCode": "US", "state": "VA",
     "capacities": [{"hardwareId": "t4-16gb", "capacity": 8},
                    {"hardwareId": "a10-24gb", "capacity": 4},
                    {"hardwareId": "a100-80gb", "capacity": 4},
                    {"hardwareId": "h100-80gb", "capacity": 2}]},
]


@dataclass
class _Container:
    start_ms: int
    ready_ms: int


@dataclass
class _Region:
    id: str
    scale: dict[str, Any]
    containers: list[_Container] = field(default_factory=list)

    @property
    def min(self) -> int:
        return int(self.scale["min"])

    @property
    def max(self) -> int:
        return int(self.scale["max"])

    def ready(self, now: int) -> int:
        return sum(1 for c in self.containers if c.ready_ms <= now)


@dataclass
class _Endpoint:
    id: str
    user: str
    slug: str
    body: dict[str, Any]
    hardware: dict[str, Any]
    created_ms: int
    deploy_ms: int
    first_label: str  # NEW after a create, PENDING after a start
    regions: list[_Region]
    cooldown_ms: int
    state: str = "RUNNING"  # RUNNING, DISABLED, DELETING
    gone_ms: int = 0
    billed_ms: int = 0
    last_busy_ms: int = 0
    in_flight: int = 0
    fails: bool = False

    @property
    def name(self) -> str:
        return str(self.body["name"])

    def region_ready_ms(self, index: int, launch_ms: int) -> int:
        return self.deploy_ms + launch_ms + index * launch_ms // 2


def _to_doc(endpoint: _Endpoint) -> dict[str, Any]:
    """``endpoint`` as the store's JSON document (requests in flight are not kept)."""
    return {
        "id": endpoint.id, "user": endpoint.user, "slug": endpoint.slug, "body": endpoint.body,
        "hardware": endpoint.hardware, "createdMs": endpoint.created_ms,
        "deployMs": endpoint.deploy_ms, "firstLabel": endpoint.first_label,
        "regions": [{"id": r.id, "scale": r.scale,
                     "containers": [[c.start_ms, c.ready_ms] for c in r.containers]}
                    for r in endpoint.regions],
        "cooldownMs": endpoint.cooldown_ms, "state": endpoint.state, "goneMs": endpoint.gone_ms,
        "billedMs": endpoint.billed_ms, "lastBusyMs": endpoint.last_busy_ms,
        "fails": endpoint.fails,
    }


def _from_doc(doc: dict[str, Any]) -> _Endpoint:
    """The endpoint a :func:`_to_doc` document holds."""
    regions = [_Region(r["id"], r["scale"], [_Container(int(start), int(ready))
                                             for start, ready in r["containers"]])
               for r in doc["regions"]]
    return _Endpoint(id=doc["id"], user=doc["user"], slug=doc["slug"], body=doc["body"],
                     hardware=doc["hardware"], created_ms=doc["createdMs"],
                     deploy_ms=doc["deployMs"], first_label=doc["firstLabel"], regions=regions,
                     cooldown_ms=doc["cooldownMs"], state=doc["state"], gone_ms=doc["goneMs"],
                     billed_ms=doc["billedMs"], last_busy_ms=doc["lastBusyMs"],
                     fails=doc["fails"])


def _trigger(region: _Region, name: str) -> float | None:
    value = (region.scale.get("triggers") or {}).get(name)
    return None if value is None else float(value)


class Endpoints:
    """Every account's inference instances, kept in ``store`` (see the module docs)."""

    def __init__(self, config: SandboxConfig, user_of: Callable[[str], str],
                 store: Store | None = None) -> None:
        self.config = config
        self.launch_ms = round(config.launch_seconds * 1000)
        self.delete_ms = round(config.delete_seconds * 1000)
        self.cold_ms = round(config.cold_start_seconds * 1000)
        self.factor = config.bill_factor
        self.endpoints: dict[str, _Endpoint] = {}
        self.by_slug: dict[str, _Endpoint] = {}
        self.store = store
        #: user id → (API key bytes, inference secret) of each account.
        self.accounts = {user_of(key): (key.encode("utf-8"), config.inference_secret_for(key))
                         for key in config.account_keys}
        self.models = [InferenceModel.from_json(m) for m in MODELS]
        self.hardwares = [InferenceHardware.from_json(h) for h in HARDWARES]
        for _, _, doc in store.documents(KIND) if store is not None else []:
            endpoint = _from_doc(doc)
            self.endpoints[endpoint.id] = endpoint
            self.by_slug[endpoint.slug] = endpoint

    def save(self, endpoint: _Endpoint) -> None:
        """Write ``endpoint`` to the store (nothing without one)."""
        if self.store is not None:
            self.store.put_document(KIND, endpoint.id, endpoint.user, _to_doc(endpoint))

    # -- time ------------------------------------------------------------------------------

    def advance(self, endpoint: _Endpoint, now: int) -> None:
        """Apply what happened by ``now``: regions ready, scaling down after the cooldown."""
        if endpoint.state != "RUNNING" or endpoint.fails:
            return
        if endpoint.in_flight:
            return
        idle_from = endpoint.last_busy_ms
        for index in range(len(endpoint.regions)):
            idle_from = max(idle_from, endpoint.region_ready_ms(index, self.launch_ms))
        due = idle_from + endpoint.cooldown_ms
        if now < due:
            return
        for region in endpoint.regions:
            extra = len(region.containers) - region.min
            if extra > 0:
                # newest first; billed up to the moment the cooldown ran out
                for container in region.containers[-extra:]:
                    endpoint.billed_ms += max(0, due - container.start_ms)
                del region.containers[-extra:]
                self.save(endpoint)

    def status(self, endpoint: _Endpoint, now: int) -> str:
        if endpoint.state == "DELETING":
            return "DELETING" if now < endpoint.gone_ms else "DELETED"
        if endpoint.state == "DISABLED":
            return "DISABLED"
        if now < endpoint.deploy_ms + max(1, self.launch_ms // 10):
            return endpoint.first_label
        ready = [now >= endpoint.region_ready_ms(i, self.launch_ms)
                 for i in range(len(endpoint.regions))]
        if all(ready):
            return "FAILED" if endpoint.fails else "ACTIVE"
        if endpoint.fails:
            return "DEPLOYING"
        return "PARTIALLYDEPLOYED" if any(ready) else "DEPLOYING"

    def _deploy(self, endpoint: _Endpoint, now: int, label: str) -> None:
        endpoint.deploy_ms, endpoint.first_label = now, label
        endpoint.last_busy_ms = 0
        for index, region in enumerate(endpoint.regions):
            ready = endpoint.region_ready_ms(index, self.launch_ms)
            region.containers = [] if endpoint.fails else [
                _Container(now, ready) for _ in range(max(region.min, 1))]

    def _drop_containers(self, endpoint: _Endpoint, now: int) -> None:
        for region in endpoint.regions:
            for container in region.containers:
                endpoint.billed_ms += max(0, now - container.start_ms)
            region.containers = []

    def live(self, hardware_id: str, region_id: str, now: int) -> int:
        """Containers of ``hardware_id`` live in ``region_id`` now, over every account."""
        count = 0
        for endpoint in self.endpoints.values():
            self.advance(endpoint, now)
            if endpoint.hardware["id"] != hardware_id or endpoint.state != "RUNNING":
                continue
            count += sum(len(r.containers) for r in endpoint.regions if r.id == region_id)
        return count

    def regions_json(self, now: int) -> list[dict[str, Any]]:
        out = []
        for region in REGIONS:
            capacities = [{"hardwareId": c["hardwareId"],
                           "capacity": max(0, c["capacity"] - self.live(c["hardwareId"],
                                                                          region["id"], now))}
                          for c in region["capacities"]]
            out.append({**region, "capacities": capacities})
        return out

    def spend_hours(self, endpoint: _Endpoint, now: int) -> float:
        live = sum(max(0, now - c.start_ms) for r in endpoint.regions for c in r.containers)
        return (endpoint.billed_ms + live) / 3_600_000 * self.factor

    # -- bodies ----------------------------------------------------------------------------

    def instance_json(self, endpoint: _Endpoint, now: int, base_url: str) -> dict[str, Any]:
        self.advance(endpoint, now)
        model = next(m for m in MODELS if m["id"] == endpoint.body["modelId"])
        return {
            "_id": endpoint.id, "name": endpoint.name, "status": self.status(endpoint, now),
            "hourlyPrice": endpoint.hardware["hourlyPrice"], "features": model["features"],
            "address": f"{base_url.rstrip('/')}{ENDPOINTS_PREFIX}/{endpoint.slug}/",
        }

    def details_json(self, endpoint: _Endpoint, now: int, base_url: str) -> dict[str, Any]:
        doc = self.instance_json(endpoint, now, base_url)
        containers = []
        for index, region in enumerate(endpoint.regions):
            failed = endpoint.fails and now >= endpoint.region_ready_ms(index, self.launch_ms)
            containers.append({
                "regionId": region.id, "scale": region.scale,
                "deployStatus": {"total": len(region.containers), "ready": region.ready(now)},
                "errorMessage": ("The container exited during start-up (the sandbox fails "
                                 f"names ending in {FAIL_SUFFIX})." if failed else ""),
            })
        hours = self.spend_hours(endpoint, now)
        doc.update({
            "containers": containers, "podLifetime": None,
            "hardwareName": endpoint.body["hardwareName"], "envs": endpoint.body.get("envs", {}),
            "modelId": endpoint.body["modelId"],
            # The sandbox's own fields: what this instance has cost so far.
            "containerHours": hours, "spend": hours * float(endpoint.hardware["hourlyPrice"]),
        })
        return doc

    # -- changes ---------------------------------------------------------------------------

    def _problem(self, body: Mapping[str, Any], now: int,
                 own: _Endpoint | None = None) -> str | None:
        if body.get("registryId") is not None and body.get("modelId") is None:
            return ("The sandbox has no private registries; deploy a catalogue model "
                    "(modelId).")
        regions = self.regions_json(now)
        if own is not None:  # its own containers do not count against it
            for region in regions:
                for capacity in region["capacities"]:
                    if capacity["hardwareId"] == own.hardware["id"]:
                        capacity["capacity"] += sum(len(r.containers) for r in own.regions
                                                    if r.id == region["id"])
        return create_problem(body, models=self.models, hardwares=self.hardwares,
                              regions=[InferenceRegion.from_json(r) for r in regions])

    def create(self, user: str, body: dict[str, Any], now: int) -> _Endpoint:
        problem = self._problem(body, now)
        if problem:
            raise Problem(400, problem)
        hardware = next(h for h in HARDWARES if h["name"] == body["hardwareName"])
        id_ = secrets.token_hex(12)
        slug = f"{id_}-{hashlib.sha256(id_.encode()).hexdigest()[:8]}"
        regions = [_Region(item["regionId"], dict(item["scale"]))
                   for item in body["autoScalingConfigurations"]]
        endpoint = _Endpoint(id=id_, user=user, slug=slug, body=dict(body), hardware=hardware,
                             created_ms=now, deploy_ms=now, first_label="NEW", regions=regions,
                             cooldown_ms=self._cooldown_ms(regions),
                             fails=str(body["name"]).endswith(FAIL_SUFFIX))
        self._deploy(endpoint, now, "NEW")
        self.endpoints[id_] = endpoint
        self.by_slug[slug] = endpoint
        self.save(endpoint)
        return endpoint

    @staticmethod
    def _cooldown_ms(regions: list[_Region]) -> int:
        periods = [r.scale.get("cooldownPeriod") for r in regions]
        seconds = max((float(p) for p in periods if p is not None), default=DEFAULT_COOLDOWN)
        return round(seconds * 1000)

    def find(self, user: str, id_: str) -> _Endpoint:
        endpoint = self.endpoints.get(id_)
        if endpoint is None or endpoint.user != user:
            raise Problem(404, f"Inference instance {id_} not found.")
        return endpoint

    def update(self, endpoint: _Endpoint, patch: dict[str, Any], now: int) -> None:
        for fixed in ("name", "modelId", "hardwareName", "registryId"):
            if fixed in patch and patch[fixed] != endpoint.body.get(fixed):
                raise Problem(400, f"{fixed} cannot change; deploy a new instance instead.")
        if endpoint.state == "DELETING":
            raise Problem(400, f"Inference instance {endpoint.id} is deleted.")
        body = merged(endpoint.body, patch)
        problem = self._problem(body, now, own=endpoint)
        if problem:
            raise Problem(400, problem)
        self.advance(endpoint, now)
        old = {r.id: r for r in endpoint.regions}
        regions = []
        for index, item in enumerate(body["autoScalingConfigurations"]):
            region = old.pop(item["regionId"], None) or _Region(item["regionId"], {})
            region.scale = dict(item["scale"])
            if endpoint.state == "RUNNING" and not endpoint.fails:
                while len(region.containers) > region.max:
                    gone = region.containers.pop()
                    endpoint.billed_ms += max(0, now - gone.start_ms)
                ready = max(now + self.cold_ms, endpoint.region_ready_ms(index, self.launch_ms))
                while len(region.containers) < region.min:
                    region.containers.append(_Container(now, ready))
            regions.append(region)
        for gone_region in old.values():  # regions no longer listed lose their containers
            for container in gone_region.containers:
                endpoint.billed_ms += max(0, now - container.start_ms)
        endpoint.regions = regions
        endpoint.cooldown_ms = self._cooldown_ms(regions)
        endpoint.body = body
        self.save(endpoint)

    def start(self, endpoint: _Endpoint, now: int) -> None:
        if endpoint.state == "DELETING":
            raise Problem(400, f"Inference instance {endpoint.id} is deleted; it cannot start.")
        if endpoint.state == "DISABLED":
            endpoint.state = "RUNNING"
            self._deploy(endpoint, now, "PENDING")
            self.save(endpoint)

    def stop(self, endpoint: _Endpoint, now: int) -> None:
        if endpoint.state == "DELETING":
            raise Problem(400, f"Inference instance {endpoint.id} is deleted; it cannot stop.")
        if endpoint.state == "RUNNING":
            self.advance(endpoint, now)
            self._drop_containers(endpoint, now)
            endpoint.state = "DISABLED"
            self.save(endpoint)

    def delete(self, endpoint: _Endpoint, now: int) -> None:
        if endpoint.state == "DELETING":
            return
        self.advance(endpoint, now)
        self._drop_containers(endpoint, now)
        endpoint.state, endpoint.gone_ms = "DELETING", now + self.delete_ms
        self.save(endpoint)

    # -- requests to an endpoint -------------------------------------------------------------

    async def admit(self, endpoint: _Endpoint) -> None:
        """Wait until a container of ``endpoint`` is ready for one more request (waking it),
        or raise the Problem a stopped or deleted endpoint gives; counts the request in flight
        (the caller calls :meth:`done`)."""
        now = now_ms()
        self.advance(endpoint, now)
        self.refuse_if_down(endpoint, now)
        endpoint.in_flight += 1
        try:
            deadline = now + FIRST_DEPLOY_WAIT_MS + self.cold_ms
            while True:
                now = now_ms()
                self.refuse_if_down(endpoint, now)
                containers = [c for r in endpoint.regions for c in r.containers]
                if not containers:  # scaled to zero: a cold start in the first region
                    first = endpoint.regions[0]
                    first.containers.append(_Container(now, now + self.cold_ms))
                    self.save(endpoint)
                    continue
                ready = sum(r.ready(now) for r in endpoint.regions)
                if ready:
                    self._scale_up(endpoint, now, ready)
                    return
                if now >= deadline:
                    raise Problem(503, f"Inference instance {endpoint.name} did not become ready "
                                       "in time; try again.", type="server_error",
                                  code="endpoint_not_ready")
                soonest = min(c.ready_ms for c in containers)
                await asyncio.sleep(min(max(soonest - now, 1), 200) / 1000)
        except BaseException:
            endpoint.in_flight -= 1
            endpoint.last_busy_ms = now_ms()
            raise

    def done(self, endpoint: _Endpoint) -> None:
        endpoint.in_flight -= 1
        endpoint.last_busy_ms = now_ms()
        self.save(endpoint)  # its cooldown runs from here, after a restart too

    def _scale_up(self, endpoint: _Endpoint, now: int, ready: int) -> None:
        for region in endpoint.regions:
            threshold = _trigger(region, "http")
            if threshold is None or threshold <= 0:
                continue
            if endpoint.in_flight > threshold * max(ready, 1) and len(region.containers) < region.max:
                free = self._capacity(endpoint, region.id, now)
                if free > 0:
                    region.containers.append(_Container(now, now + self.cold_ms))
                    self.save(endpoint)
                return

    def _capacity(self, endpoint: _Endpoint, region_id: str, now: int) -> int:
        base = next((c["capacity"] for r in REGIONS if r["id"] == region_id
                     for c in r["capacities"] if c["hardwareId"] == endpoint.hardware["id"]), 0)
        return int(base) - self.live(endpoint.hardware["id"], region_id, now)

    def refuse_if_down(self, endpoint: _Endpoint, now: int) -> None:
        status = self.status(endpoint, now)
        if status in ("DELETING", "DELETED"):
            raise Problem(404, f"Inference instance {endpoint.name} is deleted.",
                          code="endpoint_not_found")
        if status == "DISABLED":
            raise Problem(503, f"Inference instance {endpoint.name} is stopped; start it to send "
                               "requests.", type="server_error", code="endpoint_stopped")
        if status == "FAILED":
            raise Problem(503, f"Inference instance {endpoint.name} failed to deploy.",
                          type="server_error", code="endpoint_failed")

    def authenticate(self, endpoint: _Endpoint, given: str | None) -> str:
        """The owner's inference secret when ``given`` is the owner's API key, else a 401."""
        key, secret = self.accounts[endpoint.user]
        if given is None:
            raise Problem(401, "The x-api-key header is missing: send your API key (the "
                               "endpoint's secret) in it.", code="invalid_api_key")
        if not hmac.compare_digest(given.encode("latin-1"), key):
            raise Problem(401, "Invalid API secret: send your API key in the x-api-key header.",
                          code="invalid_api_key")
        return secret

