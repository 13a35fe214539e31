"""The sandbox's management API: every endpoint of the spec as a Starlette app over SQLite state.

    >>> app = create_app(SandboxConfig(launch_seconds=1.0))  # doctest: +SKIP
    >>> uvicorn.run(app, port=8765)     # or Sandbox(...).start(), or `gpucloud-nb sandbox`  # doctest: +SKIP

Statuses: 200, 201 (create), 204 with no body (delete). Every error has the spec's body
``{statusCode, timestamp, path, message}`` with a one-sentence ``message``. Choices where the spec
says "not shown":

- 403 for a missing or wrong ``x-api-key`` on every management endpoint; 404 for an unknown id
  ("Instance <id> not found.") and, with the same body, for an unknown path; 405 for a wrong
  method (with ``Allow``).
- 400 for every validation failure, with the messages of :mod:`gpucloud_nb.rules`, for a body
  that is not a JSON object, and for bad query values (``available`` true|false, ``sort`` price,
  ``deploymentType`` vm|container|baremetal, ``numGpus`` a whole number). Empty query values
  count as absent; unknown query parameters are ignored. 413 for a body over 1 MB, answered
  as soon as the 1 MB is passed (chunked or not); 400 for JSON nested over 64 levels; 421 for a
  Host header that is not a loopback name or the bound host (see :mod:`.guards`).
- A volume name is one folder name (no ``/``, ``\\``, NUL, and not ``.`` or ``..``; see
  :mod:`gpucloud_nb.rules`): 400 otherwise. A volume is mounted at ``/mnt/<name>``.
- Sandbox-only limits: names of at most 255 characters, ``sizeInGb`` at most 100000, JSON numbers
  must be finite, text must be valid Unicode; ``dockerContainer.command`` (optional, a string)
  becomes ``dockerCommand``. ``sshKeyId`` and ``sshKey`` may come together (the cloud's docs
  send both): the key text in ``sshKey`` wins, since it is what the machine will accept.
- DELETE of an instance that is already deleting or deleted answers 204 again (idempotent); a
  deleted volume is gone, so deleting it again is 404.
- A volume may be attached to several instances (a network volume). Deleting a volume while an
  instance that is pending, active or in error has it attached is 400 "Volume X is attached to
  instance Y; delete the instance first."; once the instance is deleting, the volume is free.
- Lists are in creation order. Each API key is one user (``user`` on volumes is derived from it)
  and sees only its own resources. An instance's ``provider`` is the provider's name
  (``cloud.name`` of its offer).
- No request, however malformed, is answered with a 5xx. Should a bug raise anyway, the answer is
  still the spec's error body (status 500) and uvicorn logs the traceback. A request the HTTP
  parser rejects (a method it does not know, bytes that are not HTTP, a path that is not ASCII,
  a bad ``Content-Length``) gets a 400 in the spec's body too, and its connection is closed
  (:mod:`gpucloud_nb.serving`; the gateway answers the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from gpucloud_nb.models import InstanceOffer, Volume, VolumeOffer
from gpucloud_nb.rules import instance_create_problem, volume_create_problem
from gpucloud_nb.sandbox import catalogue as default_catalogue
from gpucloud_nb.sandbox import cloud_init
from gpucloud_nb.sandbox.catalogue import DEPLOYMENT_TYPES, select_offers
from gpucloud_nb.sandbox.gpu_use import measuring
from gpucloud_nb.sandbox.http import (
    MAX_BODY_BYTES,
    Handler,
    Problem,
    dumps,
    json_response,
    now_ms,
    read_json_object,
    spec_error,
)
from gpucloud_nb.sandbox.lifecycle import FAIL_SUFFIX, details_json, instance_json, volume_json
from gpucloud_nb.sandbox.service_api import service_routes
from gpucloud_nb.sandbox.ssh import free_port, mount_point
from gpucloud_nb.sandbox.ssh_servers import InstanceServers
from gpucloud_nb.sandbox.store import Store, VolumeInUseError, VolumeMissingError

if TYPE_CHECKING:
    from gpucloud_nb.sandbox.config import SandboxConfig

__all__ = ["MAX_BODY_BYTES", "MAX_NAME_LENGTH", "MAX_VOLUME_GB", "create_app", "user_id"]

log = logging.getLogger("uvicorn.error")  # the service log, next to uvicorn's own lines
MAX_NAME_LENGTH = 255
MAX_VOLUME_GB = 100_000

def user_id(api_key: str) -> str:
    """The owner id of everything created with ``api_key`` (24 hex digits; reveals nothing)."""
    return hashlib.sha256(f"gpucloud-nb sandbox user {api_key}".encode()).hexdigest()[:24]


def _shown(value: str) -> str:
    """A user-given value, quoted and cut short, for an error message."""
    return f"'{value}'" if len(value) <= 40 else f"'{value[:37]}…'"


# -- request queries and bodies ---------------------------------------------------------------


def _param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _deployment_type(request: Request) -> str | None:
    value = _param(request, "deploymentType")
    if value is None:
        return None
    if value.lower() not in DEPLOYMENT_TYPES:
        raise Problem(400, f"deploymentType must be one of vm, container, baremetal; "
                           f"{_shown(value)} was given.")
    return value.lower()


def _offer_filters(request: Request) -> dict[str, Any]:
    filters: dict[str, Any] = {
        "region": _param(request, "region"),
        "gpu_type": _param(request, "gpuType"),
        "deployment_type": _deployment_type(request),
    }
    num_gpus = _param(request, "numGpus")
    if num_gpus is not None:
        if not re.fullmatch(r"[0-9]+", num_gpus):
            raise Problem(400, f"numGpus must be a whole number; {_shown(num_gpus)} was given.")
        filters["num_gpus"] = int(num_gpus) if len(num_gpus) <= 18 else -1  # -1 matches nothing
    available = _param(request, "available")
    if available is not None:
        if available.lower() not in ("true", "false"):
            raise Problem(400, f"available must be true or false; {_shown(available)} was given.")
        filters["available"] = available.lower() == "true"
    sort = _param(request, "sort")
    if sort is not None:
        if sort.lower() != "price":
            raise Problem(400, f"sort must be price; {_shown(sort)} was given.")
        filters["sort"] = "price"
    return filters


def _extra_instance_problem(body: Mapping[str, Any]) -> str | None:
    """Sandbox rules beyond :mod:`gpucloud_nb.rules` (documented in the module docstring)."""
    if len(body["name"]) > MAX_NAME_LENGTH:
        return f"name must be at most {MAX_NAME_LENGTH} characters long."
    container = body.get("dockerContainer")
    if isinstance(container, Mapping) and container.get("command") is not None \
            and not isinstance(container["command"], str):
        return "dockerContainer.command must be a string."
    return None


def _extra_volume_problem(body: Mapping[str, Any]) -> str | None:
    if len(body["name"]) > MAX_NAME_LENGTH:
        return f"name must be at most {MAX_NAME_LENGTH} characters long."
    if body["sizeInGb"] > MAX_VOLUME_GB:
        return f"sizeInGb must be at most {MAX_VOLUME_GB} GB in the sandbox."
    return None


def _ssh_key(body: Mapping[str, Any]) -> dict[str, str]:
    """The instance's ``sshKey`` object: ``sshKey`` (the key text) wins over ``sshKeyId``."""
    key = body.get("sshKey")
    if not key:
        return {"_id": body["sshKeyId"], "name": body["sshKeyId"]} if body.get("sshKeyId") else {}
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    parts = key.split()
    return {"_id": digest, "name": parts[2] if len(parts) >= 3 else f"ssh-key-{digest[:6]}"}


# -- the catalogue, ready to serve ------------------------------------------------------------


class _Catalogue:
    """Offers with each one's JSON encoded once, so large catalogues list fast."""

    def __init__(self, offers: Sequence[Mapping[str, Any]],
                 volume_offers: Sequence[Mapping[str, Any]]) -> None:
        self.offers = [dict(offer) for offer in offers]
        self.encoded = [dumps(offer) for offer in self.offers]
        # Keyed by (provider _id, instanceId): two providers may sell the same instanceId.
        self.by_key: dict[tuple[str, str], Mapping[str, Any]] = {}
        for offer in self.offers:
            provider = (offer.get("cloud") or {}).get("_id")
            self.by_key.setdefault((str(provider), str(offer.get("instanceId"))), offer)
        self.volume_offers = [dict(offer) for offer in volume_offers]
        self.volume_offers_body = dumps(self.volume_offers)
        self.volume_offer_records = [VolumeOffer.from_json(offer) for offer in self.volume_offers]

    def listing(self, positions: Sequence[int]) -> bytes:
        return b"[" + b",".join(self.encoded[p] for p in positions) + b"]"


# -- endpoints --------------------------------------------------------------------------------


class _Management:
    def __init__(self, config: SandboxConfig, store: Store, offers: _Catalogue) -> None:
        self.config = config
        self.store = store
        self.catalogue = offers
        # Each key is one account: what a key creates only that key sees.
        # By a digest of the key: one dict lookup per request, whatever the class size (the
        # lookup's time tells nothing about a key: it hashes the digest, not the key).
        self.keys = {_digest(key.encode("utf-8")): user_id(key) for key in config.account_keys}
        # ... and has its own inference secret (GET /sandbox/inference tells it).
        self.inference_secrets = {user_id(key): config.inference_secret_for(key)
                                  for key in config.account_keys}
        self.launch_ms = round(config.launch_seconds * 1000)
        self.delete_ms = round(config.delete_seconds * 1000)

    def route(self, path: str, handlers: Mapping[str, Handler]) -> Route:
        """One route for ``path``: latency, then the key check, then the method's handler."""

        async def endpoint(request: Request) -> Response:
            if self.config.latency:
                await asyncio.sleep(self.config.latency)
            handler = handlers.get(request.method) or handlers["GET"]  # HEAD → GET
            try:
                self._authenticate(request)
                return await handler(request)
            except Problem as problem:
                return problem.spec_response(request.url.path)

        return Route(path, endpoint, methods=list(handlers))

    def _authenticate(self, request: Request) -> None:
        given = request.headers.get("x-api-key")
        if given is None:
            raise Problem(403, "The x-api-key header is missing; send your API key in it.")
        # Header values arrive decoded as Latin-1: encoding back gives the bytes that were sent.
        user = self.keys.get(_digest(given.encode("latin-1")))
        if user is None:
            raise Problem(403, "The API key is invalid.")
        request.state.user = user

    # instances

    async def instance_offers(self, request: Request) -> Response:
        positions = select_offers(self.catalogue.offers, **_offer_filters(request))
        return Response(self.catalogue.listing(positions), media_type="application/json")

    async def create_instance(self, request: Request) -> Response:
        body = await read_json_object(request)
        instance_id = body.get("instanceId")
        provider = body.get("cloudProvider")
        offer = self.catalogue.by_key.get((provider, instance_id)) \
            if isinstance(instance_id, str) and isinstance(provider, str) else None
        if offer is None:  # for the 400's sentence: no such offer, or not from this provider
            offer = next((o for o in self.catalogue.offers if o.get("instanceId") == instance_id),
                         None)
        volume_id = body.get("volumeId")
        volume_record = self.store.volume(request.state.user, volume_id) \
            if isinstance(volume_id, str) else None
        volume = None if volume_record is None else Volume.from_json(volume_json(volume_record))
        checked = [InstanceOffer.from_json(offer)] if offer else []
        problem = instance_create_problem(body, checked, volume) \
            or _extra_instance_problem(body)
        if problem:
            raise Problem(400, problem)
        assert offer is not None
        region = body["region"]
        here = next(a for a in offer["availability"] if a.get("region") == region)
        configuration = offer["configuration"]
        container = body.get("dockerContainer")
        vm = body.get("vm")
        user_data = cloud_init.read(vm.get("base64CloudInitScript") if vm else None)
        for skipped in user_data.skipped:
            log.warning("Instance %r: cloud-init skipped %s, as cloud-init on a VM would.",
                        body["name"], skipped)
        doc = {
            "name": body["name"],
            "provider": offer["cloud"]["name"],
            "region": {"id": region, "name": here.get("name", region),
                       "countryCode": here.get("countryCode", "")},
            "volumes": [] if volume is None else [[volume.id, mount_point(volume.id, volume.name)]],
            "gpuCount": offer["gpuCount"],
            "gpuModel": offer["gpuName"],
            "ram": configuration["ramGB"],
            "storage": configuration["storageGB"],
            "vramPerGpu": configuration["vRamGB"],
            "vcpus": configuration["vCpu"],
            "interconnect": configuration["interconnect"],
            "nvlink": offer["nvlink"],
            "os": vm["os"] if vm else "",
            "sshUser": "root" if offer["deploymentType"] == "container" else "ubuntu",
            "dockerImage": container["image"] if container else "",
            "dockerCommand": (container.get("command") or "") if container else "",
            "hourlyPrice": offer["hourlyPrice"],
            "sshKey": _ssh_key(body),
            # Not in the spec's bodies: the key text the SSH server accepts, and its port.
            "sshPublicKey": body.get("sshKey") or "",
            "sshPort": free_port(),
            "cloudInit": user_data.as_doc(),
        }
        if not body.get("sshKey") and isinstance(body.get("sshKeyId"), str):
            # a key of the account's SSH-key book (sandbox/inference_instances.py), named by id
            booked = request.app.state.key_book.booked_key(request.state.user, body["sshKeyId"])
            doc["sshKey"], doc["sshPublicKey"] = booked
        now = now_ms()
        try:
            record = self.store.insert_instance(
                user=request.state.user, deployment_type=offer["deploymentType"],
                volume_id=None if volume is None else volume.id,
                created_ms=now, ready_ms=now + self.launch_ms,
                fails=body["name"].endswith(FAIL_SUFFIX) or (
                    self.config.faults is not None and self.config.faults.fails(body["name"])),
                doc=doc,
            )
        except VolumeMissingError:
            raise Problem(400, f"Volume {volume_id} not found.") from None
        request.app.state.ssh.wake()  # its SSH server opens before it turns active, not here
        return json_response(instance_json(record, now), status=201)

    async def list_instances(self, request: Request) -> Response:
        records = self.store.instances(request.state.user, _deployment_type(request))
        now = now_ms()
        return json_response([instance_json(record, now) for record in records])

    async def get_instance(self, request: Request) -> Response:
        id_ = request.path_params["id"]
        record = self.store.instance(request.state.user, id_)
        if record is None:
            raise Problem(404, f"Instance {id_} not found.")
        return json_response(details_json(record, now_ms()))

    async def delete_instance(self, request: Request) -> Response:
        id_ = request.path_params["id"]
        now = now_ms()
        record = self.store.delete_instance(request.state.user, id_, delete_ms=now,
                                            gone_ms=now + self.delete_ms)
        if record is None:
            raise Problem(404, f"Instance {id_} not found.")
        return Response(status_code=204)

    # volumes

    async def volume_offers(self, request: Request) -> Response:
        return Response(self.catalogue.volume_offers_body, media_type="application/json")

    async def create_volume(self, request: Request) -> Response:
        body = await read_json_object(request)
        offers = self.catalogue.volume_offers
        problem = volume_create_problem(body, self.catalogue.volume_offer_records) \
            or _extra_volume_problem(body)
        if problem:
            raise Problem(400, problem)
        offer = next(o for o in offers if o["cloudProvider"]["_id"] == body["cloudProvider"])
        doc = {
            "name": body["name"],
            "sizeInGb": body["sizeInGb"],
            "region": body["region"],
            "cloudProvider": {"_id": offer["cloudProvider"]["_id"],
                              "displayName": offer["cloudProvider"]["displayName"]},
        }
        record = self.store.insert_volume(user=request.state.user, created_ms=now_ms(), doc=doc)
        return json_response(volume_json(record), status=201)

    async def list_volumes(self, request: Request) -> Response:
        return json_response([volume_json(record) for record in self.store.volumes(request.state.user)])

    async def get_volume(self, request: Request) -> Response:
        id_ = request.path_params["id"]
        record = self.store.volume(request.state.user, id_)
        if record is None:
            raise Problem(404, f"Volume {id_} not found.")
        return json_response(volume_json(record))

    async def delete_volume(self, request: Request) -> Response:
        id_ = request.path_params["id"]
        try:
            found = self.store.delete_volume(request.state.user, id_)
        except VolumeInUseError as error:
            raise Problem(400, f"Volume {id_} is attached to instance {error.instance_id}; "
                               "delete the instance first.") from None
        if not found:
            raise Problem(404, f"Volume {id_} not found.")
        # Its data goes with it, as on the cloud; off the loop, as a big folder takes a while.
        await asyncio.to_thread(request.app.state.ssh.remove_volume, id_)
        return Response(status_code=204)

    def routes(self) -> list[BaseRoute]:
        return [
            self.route("/gpu-cloud/instances/offers", {"GET": self.instance_offers}),
            self.route("/gpu-cloud/instances",
                       {"GET": self.list_instances, "POST": self.create_instance}),
            self.route("/gpu-cloud/instances/{id}",
                       {"GET": self.get_instance, "DELETE": self.delete_instance}),
            self.route("/gpu-cloud/volumes/offers", {"GET": self.volume_offers}),
            self.route("/gpu-cloud/volumes",
                       {"GET": self.list_volumes, "POST": self.create_volume}),
            self.route("/gpu-cloud/volumes/{id}",
                       {"GET": self.get_volume, "DELETE": self.delete_volume}),
        ]


# -- errors outside the endpoints -------------------------------------------------------------


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if exc.status_code == 404:
        message = f"There is no endpoint {request.method} {path}."
    elif exc.status_code == 405:
        allowed = sorted(m.strip() for m in (exc.headers or {}).get("Allow", "").split(","))
        message = f"Method {request.method} is not allowed on {path}; use {', '.join(allowed)}."
    else:
        message = str(exc.detail)
    return spec_error(exc.status_code, message, path, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    # A bug, never an answer to a bad request: still the spec's body, and uvicorn logs the trace.
    return spec_error(500, "The sandbox failed to handle this request.", request.url.path)


def create_app(config: SandboxConfig) -> Starlette:
    """The sandbox ASGI app for ``config``: management endpoints, plus ``/inference`` if present.

    The app's ``state.store`` is its :class:`~gpucloud_nb.sandbox.store.Store`; whoever serves
    the app closes it after the server stops.
    """
    offers = _Catalogue(
        default_catalogue.instance_offers() if config.offers is None else config.offers,
        default_catalogue.volume_offers() if config.volume_offers is None
        else config.volume_offers,
    )
    store = Store(config.state)
    management = _Management(config, store, offers)
    routes = management.routes() + service_routes(
        management.route, store, home=config.home, inference_secrets=management.inference_secrets,
        bill_factor=config.bill_factor)
    from gpucloud_nb.sandbox.inference import create_inference_app
    from gpucloud_nb.sandbox.inference_instance_routes import endpoint_app, inference_instance_routes
    from gpucloud_nb.sandbox.inference_instances import ENDPOINTS_PREFIX, Endpoints
    from gpucloud_nb.sandbox.ssh_key_book import KeyBook, key_book_routes

    endpoints = Endpoints(config, user_id, store)  # the appendix: inference instances
    key_book = KeyBook(store)  # and the SSH-key book
    routes += inference_instance_routes(management.route, endpoints)
    routes += key_book_routes(management.route, key_book)
    inference = create_inference_app(config)
    routes.append(Mount(ENDPOINTS_PREFIX, app=endpoint_app(endpoints, inference)))
    routes.append(Mount("/inference", app=inference))
    servers = InstanceServers(config, store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Background work on the server's loop: the instances' GPU-use meter and SSH servers.
        async with measuring(servers) as meter:
            app.state.gpu_meter = meter
            await servers.start()
            try:
                yield
            finally:
                await servers.stop()

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan,
    )
    # An id is one path segment: "/gpu-cloud/instances/%2F" is a 404, never a redirect to the list.
    app.router.redirect_slashes = False
    app.state.store = store
    app.state.ssh = servers
    app.state.config = config
    app.state.endpoints = endpoints
    app.state.key_book = key_book
    guarded = _guarded(app, config)  # passes .state on
    if config.faults is not None and config.faults.active:
        from gpucloud_nb.sandbox.faults import FaultInjector

        return FaultInjector(guarded, config.faults)  # type: ignore[return-value]  # passes .state on
    return guarded


def _guarded(app: Any, config: SandboxConfig) -> Any:
    """``app`` behind the Host check and the body limits of :mod:`gpucloud_nb.sandbox.guards`."""
    from gpucloud_nb.media import MAX_AUDIO_BYTES
    from gpucloud_nb.sandbox.guards import Guard, allowed_hosts
    from gpucloud_nb.sandbox.inference.app import MAX_CHAT_BODY_BYTES, MULTIPART_SLACK

    def error(status: int, message: str, path: str) -> Response:
        if path.startswith("/inference/"):
            code = {413: "request_too_large", 421: "misdirected_request"}.get(status)
            return Problem(status, message, code=code).openai_response()
        return spec_error(status, message, path)

    audio_limit = MAX_AUDIO_BYTES + MULTIPART_SLACK
    limits = [
        ("/inference/v1/audio/", audio_limit,
         f"The file is too large (over {audio_limit // 1_000_000} MB); the limit is "
         f"{MAX_AUDIO_BYTES // 1_000_000} MB."),
        ("/inference/", MAX_CHAT_BODY_BYTES,
         f"The request body is too large (over {MAX_CHAT_BODY_BYTES // 1_000_000} MB); the limit "
         f"is {MAX_CHAT_BODY_BYTES // 1_000_000} MB."),
        ("/", MAX_BODY_BYTES, "The request body is larger than 1 MB."),
    ]
    return Guard(app, hosts=allowed_hosts(config.host), limits=limits, error=error)


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()
