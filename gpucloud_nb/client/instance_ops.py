"""The instance operations as sans-IO generators: offers, create, list, get, delete, wait, spend.

Written once and run by :class:`~gpucloud_nb.client.instances.Instances` (sync) and
:class:`~gpucloud_nb.client.instances.AsyncInstances` (async), each with its driver.

    >>> ops = InstanceOps(core)  # doctest: +SKIP
    >>> core.driver.run(ops.get("train-1"))  # doctest: +SKIP

Every method that takes an instance (``get``, ``delete``, ``wait_until_active``, ``run``,
``upload``, ``download``, ``forward``) takes its ``_id`` or its name. Chosen where the interface
is silent: the argument is tried as an id first, so an id costs no extra request and is never
taken for a name; only when the cloud answers 404 (or 400, which a server that checks the
shape of its ids may send) is it looked up by name, with one list request. A name must be
unique among the instances not deleted or being deleted (such a one is found by name only when
no other has it); otherwise the error names the ids that match.
An argument that cannot be an id (empty, ``..``, or holding ``/``, ``?`` or ``#``) is refused
before anything is sent.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from gpucloud_nb import rules
from gpucloud_nb.client import changes, gateway, key_book
from gpucloud_nb.client import create as creating
from gpucloud_nb.client._core import Core, D, decode_offers, json_list, now, path_id, unreadable
from gpucloud_nb.client._ops import Call, Op
from gpucloud_nb.client.remote import default_public_key
from gpucloud_nb.client.waiting import poll_until
from gpucloud_nb.create_request import CreateInstance
from gpucloud_nb.errors import (
    APIError,
    BadRequestError,
    InstanceFailedError,
    InvalidInputError,
    NotFoundError,
)
from gpucloud_nb.models import Instance, InstanceDetails, InstanceOffer

if TYPE_CHECKING:
    import pandas

T = TypeVar("T")

__all__ = ["DEPLOYMENT_TYPES", "OFFERS_PATH", "InstanceOps", "ProgressCallback", "offer_params",
           "path_id"]

DEPLOYMENT_TYPES = ("vm", "container", "baremetal")
ProgressCallback = Callable[[InstanceDetails, float], Any]
OFFERS_PATH = "/gpu-cloud/instances/offers"


def offer_params(
    region: str | None, num_gpus: int | str | None, gpu_type: str | None,
    available: bool | None, sort: str | None, deployment_type: str | None,
) -> dict[str, str]:
    """The query of ``GET /gpu-cloud/instances/offers``; a bad ``sort`` or type is one sentence."""
    if sort is not None and sort != "price":
        raise InvalidInputError(
            f"sort must be 'price' (the only order the cloud offers), not {sort!r}.")
    if deployment_type is not None and deployment_type not in DEPLOYMENT_TYPES:
        raise InvalidInputError(
            f"deployment_type must be one of vm, container, baremetal, not {deployment_type!r}."
        )
    params = {
        "region": region,
        "numGpus": None if num_gpus is None else str(num_gpus),
        "gpuType": gpu_type,
        "available": None if available is None else ("true" if available else "false"),
        "sort": sort,
        "deploymentType": deployment_type,
    }
    return {key: value for key, value in params.items() if value is not None}


class InstanceOps(Generic[D]):
    """The instance operations as sans-IO generators, shared by the sync and async classes."""

    def __init__(self, core: Core[D]) -> None:
        self.core: Core[D] = core

    def offers(self, params: dict[str, str]) -> Op[list[InstanceOffer]]:
        body = yield from self.core.send(Call("GET", OFFERS_PATH, params=params, decode=False))
        return decode_offers(OFFERS_PATH, InstanceOffer, body)

    def offers_frame(self, params: dict[str, str]) -> Op[pandas.DataFrame]:
        body = yield from self.core.send(Call("GET", OFFERS_PATH, params=params, decode=False))
        from gpucloud_nb import frames

        try:
            return frames.offers_frame(body or b"[]")
        except ValueError as error:  # not JSON, or not a JSON array
            raise unreadable(OFFERS_PATH, error) from None

    def problems(self, request: CreateInstance) -> Op[builtins.list[str]]:
        """Why this create would be refused (rules, then the cost cap): ``[]`` when it may go."""
        problems, _ = yield from self.checked(request, keep=False)
        return problems

    def endpoints_hourly(self) -> Op[float]:
        """The $/h of the account's inference instances at their most containers, which the
        cap counts with the instances; 0 where the cloud has none (a 404)."""
        from gpucloud_nb.client.inference_instance_ops import InferenceInstanceOps

        try:
            return (yield from InferenceInstanceOps(self.core).hourly_worst())
        except NotFoundError:
            return 0.0

    def checked(self, request: CreateInstance, *,
                keep: bool) -> Op[tuple[builtins.list[str], int | None]]:
        """:meth:`problems`, the cap counting this client's creates under way; with ``keep``
        and no problem, the ticket under which the create's $/h stays reserved (see
        :class:`~gpucloud_nb.client.costcap.Reservations`), ``None`` without a cap."""
        offers = yield from self.core.catalogue(OFFERS_PATH, InstanceOffer)
        cap = self.core.max_hourly_cost
        problems = creating.launch_problems(request, offers, cap=None, running=())
        if problems or cap is None:
            return problems, None
        holds = self.core.reservations
        ticket = holds.open()  # before the listing, which may miss creates answered after
        try:
            running = yield from self.list(None)
            offer = rules.find_offer(offers, request.instance_id, request.cloud_provider)
            endpoints = yield from self.endpoints_hourly()
            problem = holds.reserve(ticket, cap, running, offer, keep=keep, endpoints=endpoints)
        except BaseException:
            holds.release(ticket)
            raise
        if problem or not keep:
            holds.release(ticket)
            return ([problem] if problem else []), None
        return [], ticket

    def create(self, request: CreateInstance) -> Op[Instance]:
        """Check, send and remember one create; the client-only options act here.

        Everything that can refuse it runs before the POST: the options, the rules and the cap
        (:func:`~gpucloud_nb.client.create.launch_problems`), and whether anyone keeps the
        ``delete_after``, ``budget`` and ``delete_when_idle`` asked for (a gateway; the
        cloud or the sandbox directly: nobody, so the create is refused unsent).
        """
        if not isinstance(request, CreateInstance):
            raise InvalidInputError(
                f"create_from takes a CreateInstance, not {type(request).__name__}.")
        if request.ssh_key is None and request.ssh_key_id is None and self.core.sandbox is None:
            # so that run/upload/forward can log in: by the key book's id (client/key_book.py)
            request = yield from key_book.keyed(
                self.core, request, default_public_key(identity=self.core.ssh_identity))
        if (request.delete_after is not None or request.budget is not None
                or request.delete_when_idle is not None) and self.core.gateway is None:
            yield from self.core.recognise_gateway()  # a gateway keeps them, not this kernel
        problems, ticket = yield from self.checked(request, keep=True)
        if problems:
            raise InvalidInputError(problems[0])
        unkept = [name for name, value, keeper in (
            ("delete_after", request.delete_after, self.core.auto_delete),
            ("budget", request.budget, self.core.budgets),
            ("delete_when_idle", request.delete_when_idle, self.core.idle_delete))
            if value is not None and keeper.where == "nobody"]
        if unkept:  # the cloud directly: nothing would keep them, so nothing is sent
            self.core.reservations.release(ticket)
            raise InvalidInputError(gateway.unkept(" and ".join(unkept), at_create=True))
        holds = self.core.reservations
        try:
            body = request.body()
            if request.delete_when_idle is not None and self.core.gateway:
                body["deleteWhenIdle"] = float(request.delete_when_idle)  # the gateway keeps it
            data = yield from self.core.create_once("/gpu-cloud/instances", body,
                                                    "instance", "launched")
            instance = Instance.from_json(data)
        except APIError:  # the cloud answered with a refusal: nothing was made
            holds.release(ticket)
            raise
        except BaseException:  # lost, cancelled or unreadable: something may have been made
            holds.unsure(ticket)
            raise
        holds.answered(ticket, instance.id)
        self.core.created_instance_ids.append(instance.id)
        changes.touch(str(self.core.driver.http.base_url))  # the Lab sidebar shows it now
        if request.delete_after is not None:
            self.core.auto_delete.schedule(instance.id, request.delete_after)
        if request.budget is not None:
            self.core.budgets.set(instance.id, request.budget)
        if request.delete_when_idle is not None:
            self.core.idle_delete.watch_created(instance.id, float(request.delete_when_idle))
        return instance

    def list(self, deployment_type: str | None) -> Op[builtins.list[Instance]]:
        params = (None if deployment_type is None
                  else offer_params(None, None, None, None, None, deployment_type))
        data = yield from self.core.send(Call("GET", "/gpu-cloud/instances", params=params))
        instances = [Instance.from_json(item) for item in json_list(data)]
        for instance in instances:
            self.core.ledger.observe(instance)
        return instances

    def by_id_or_name(self, given: str, op: Callable[[str], Op[T]]) -> Op[T]:
        """``op(id)`` for the instance whose id or name is ``given`` (see the module docs).

        ``given`` is tried as an id first, so an id is never taken for a name and costs nothing
        extra; only when the cloud answers 404 (or 400, as a server that checks the shape of ids
        may) is it looked up by name, with one list request.
        """
        try:
            return (yield from op(path_id(given)))
        except (NotFoundError, BadRequestError) as missing:
            if isinstance(missing, BadRequestError) and missing.status_code != 400:
                raise
            id = yield from self._named(given, missing)
        return (yield from op(id))

    def _named(self, given: str, missing: APIError) -> Op[str]:
        """The id of the one instance named ``given``, preferring those not (being) deleted."""
        instances = yield from self.list(None)
        if any(i.id == given for i in instances):
            raise missing  # the id exists, so the refusal was about something else: as sent
        named = [i for i in instances if i.name == given]
        chosen = [i for i in named if i.status not in ("deleting", "deleted")] or named
        if len(chosen) == 1:
            return chosen[0].id
        if chosen:
            raise InvalidInputError(
                f"{len(chosen)} instances are named {given!r} ({', '.join(i.id for i in chosen)}); "
                "give the id of the one you mean.")
        raise NotFoundError(f"Instance {given} not found: no instance has that id or name.",
                            status_code=missing.status_code, path=missing.path,
                            timestamp=missing.timestamp)

    def get(self, given: str) -> Op[InstanceDetails]:
        return (yield from self.by_id_or_name(given, self._get))

    def _get(self, id: str) -> Op[InstanceDetails]:
        data = yield from self.core.send(
            Call("GET", f"/gpu-cloud/instances/{id}", what=f"Instance {id}"))
        details = InstanceDetails.from_json(data)
        self.core.ledger.observe(details)
        return details

    def delete(self, given: str) -> Op[None]:
        yield from self.by_id_or_name(given, self._delete)

    def _delete(self, id: str) -> Op[None]:
        yield from self.core.send(
            Call("DELETE", f"/gpu-cloud/instances/{path_id(id)}", what=f"Instance {id}"))
        changes.touch(str(self.core.driver.http.base_url))
        self.core.reservations.forget(id)
        self.core.auto_delete.cancel(id)
        self.core.idle_delete.forget(id)
        if self.core.remote is not None:
            self.core.remote.forget(id)

    def wait_until_active(self, id: str, timeout: float, on_progress: ProgressCallback | None,
                          poll_interval: float, max_poll_interval: float) -> Op[InstanceDetails]:
        details = yield from self.get(id)

        def settled(details: InstanceDetails) -> bool:
            if details.status in ("error", "deleting", "deleted"):
                raise InstanceFailedError(f"Instance {details.name or details.id} is "
                                          f"{details.status}; it will not become active.")
            return details.status == "active"

        def late(details: InstanceDetails, timeout: float) -> str:
            return (f"Instance {details.name or details.id} is still {details.status} after "
                    f"{timeout:g} s; it may yet become active: wait again or check "
                    "instances.get().")

        return (yield from poll_until(details, lambda d: self._get(d.id), settled, late,
                                      timeout=timeout, on_progress=on_progress,
                                      poll_interval=poll_interval,
                                      max_poll_interval=max_poll_interval))

    def spend(self, include_deleted: bool) -> Op[pandas.DataFrame]:
        data = yield from self.core.send(Call("GET", "/gpu-cloud/instances"))
        moment = now()
        deadlines = self.core.auto_delete.deadlines()
        rows = []
        for instance in (Instance.from_json(item) for item in json_list(data)):
            bill = self.core.ledger.bill(instance, moment)
            rows.append({
                "_id": instance.id, "name": instance.name, "status": instance.status,
                "hourlyPrice": 0.0 if math.isnan(instance.hourly_price) else instance.hourly_price,
                "billedFrom": bill.start, "billedUntil": bill.end, "hoursBilled": bill.hours,
                "spend": bill.spend, "estimated": bill.estimated,
                "autoDeleteAt": deadlines.get(instance.id),
            })
        from gpucloud_nb import frames

        return frames.spend_frame(rows, include_deleted=include_deleted)
