"""What the resources of one management client share: driver, key, retries, caches, timers.

``instances`` and ``volumes`` of a :class:`~gpucloud_nb.client.management.GPUCloud` hold one
:class:`Core`. Its operations are sans-IO generators (see :mod:`gpucloud_nb.client._ops`): the
no-double-create rule (:meth:`Core.create_once`), the offers cache and the cost cap's reservations
of creates under way (:class:`~gpucloud_nb.client.costcap.Reservations`) are kept here once.
Who keeps its money rules (auto-delete timers, idle deletes, budgets) is held here too: a
gateway, or nobody (the cloud or the sandbox directly); never a thread of this process.

    >>> core = Core(SyncDriver(http), key, RetryPolicy(), None, 60, blocking)  # doctest: +SKIP
    >>> core.driver.run(core.catalogue("/gpu-cloud/instances/offers", InstanceOffer))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, TypeVar

import httpx

from gpucloud_nb._secrets import Secret
from gpucloud_nb.client._auth import ApiKeyAuth
from gpucloud_nb.client._ops import (
    AsyncDriver,
    Call,
    Op,
    RetryPolicy,
    Sleep,
    SyncDriver,
    send,
)
from gpucloud_nb.client.autodelete import ServiceAutoDelete, UnkeptAutoDelete
from gpucloud_nb.client.billing import Ledger
from gpucloud_nb.client.budgets import ServiceBudgets, UnkeptBudgets
from gpucloud_nb.client.costcap import Reservations
from gpucloud_nb.client.gateway import PROBE, GatewayStatus, probe
from gpucloud_nb.client.idle import ServiceIdleDelete, UnkeptIdleDelete
from gpucloud_nb.client.remote import Remote
from gpucloud_nb.client.sandbox_handle import SandboxHandle
from gpucloud_nb.client.use_report import UseReports
from gpucloud_nb.decoding import Record, decode_list, parse_datetime
from gpucloud_nb.errors import (
    BadRequestError,
    ConnectionFailedError,
    GPUCloudError,
    InvalidInputError,
    NotFoundError,
    OutcomeUnknownError,
    UnreadableResponseError,
)

__all__ = ["CREATE_LOOKUP_SLACK", "Blocking", "Core", "D", "decode_offers",
           "json_list", "now", "path_id", "unreadable"]

CREATE_LOOKUP_SLACK = timedelta(minutes=2)
D = TypeVar("D", SyncDriver, AsyncDriver)
R = TypeVar("R", bound=Record)


def now() -> datetime:
    """The current time, in UTC."""
    return datetime.now(timezone.utc)


def json_list(data: Any) -> list[dict[str, Any]]:
    """The objects of a JSON array answer; anything but an array is one sentence."""
    if not isinstance(data, list):
        raise UnreadableResponseError("The server answered with something other than a list.")
    return [item for item in data if isinstance(item, dict)]


def unreadable(path: str, error: ValueError) -> UnreadableResponseError:
    """One sentence for an offers body that is not a JSON array of offers."""
    reason = str(error).removeprefix("The ").rstrip(".")
    return UnreadableResponseError(f"The server's answer to GET {path} was unreadable: {reason}.")


def decode_offers(path: str, cls: type[R], body: bytes | None) -> list[R]:
    """The offers body of ``GET path`` as records, or :func:`unreadable`'s sentence."""
    try:
        return decode_list(cls, body or b"[]", "offers")
    except ValueError as error:
        raise unreadable(path, error) from None


@dataclass(frozen=True)
class Blocking:
    """What a client does from its threads, blocking, away from any event loop (use reports,
    the money rules' routes of a gateway).

        >>> Blocking(send=send)  # doctest: +SKIP
    """

    #: One request to a gateway's or the sandbox's own endpoint, ``send(method, path, body)``:
    #: its decoded JSON.
    send: Callable[[str, str, dict[str, Any] | None], Any]


def path_id(id: str) -> str:
    """``id`` as one path segment, or InvalidInputError before anything is sent."""
    if not isinstance(id, str) or not id.strip() or id in (".", ".."):
        raise InvalidInputError(f"{id!r} is not a valid id: give the id of an instance or volume.")
    odd = sorted({c for c in id if c in "/?#"})
    if odd:
        shown = ", ".join(repr(c) for c in odd)
        raise InvalidInputError(f"{id!r} is not a valid id: an id cannot hold {shown}.")
    return id


class Core(Generic[D]):
    """Settings and state shared by the resources of one client."""

    def __init__(self, driver: D, key: Secret, policy: RetryPolicy,
                 max_hourly_cost: float | None, offers_ttl: float, blocking: Blocking, *,
                 ssh_identity: str | os.PathLike[str] | None = None) -> None:
        self.driver: D = driver
        self.key = key
        self.policy = policy
        self.max_hourly_cost = max_hourly_cost
        #: The $/h of this client's creates under way, reserved against ``max_hourly_cost``.
        self.reservations = Reservations()
        self.offers_ttl = offers_ttl
        self.created_instance_ids: list[str] = []
        self.ledger = Ledger()
        self.blocking = blocking
        self.sandbox: SandboxHandle | None = None
        self.remote: Remote | None = None
        self.ssh_identity = ssh_identity
        self._catalogues: dict[str, tuple[float, list[Any]]] = {}
        # Who keeps the money rules: nobody until a gateway is recognised.
        self.auto_delete: UnkeptAutoDelete | ServiceAutoDelete = UnkeptAutoDelete()
        self.idle_delete: UnkeptIdleDelete | ServiceIdleDelete = UnkeptIdleDelete()
        #: ``cloud.budgets``: the one ``create(budget=)`` hands a budget to.
        self.budgets: UnkeptBudgets | ServiceBudgets = UnkeptBudgets()
        #: Whether the server is a class gateway; ``None`` until asked (:meth:`recognise_gateway`).
        self.gateway: bool | None = None
        #: Runs, copies and forwards open on instances, told to a class gateway.
        self.use_reports = UseReports(blocking.send, self.reports_use)

    def reports_use(self) -> bool:
        """Whether use is reported to the server: a class gateway (asked once, blocking)."""
        if self.gateway is None:
            try:
                self.blocking.send("GET", PROBE, None)
            except (NotFoundError, BadRequestError):
                return False
            return True
        return self.gateway

    def recognise_gateway(self) -> Op[GatewayStatus | None]:
        """The key's status if the server is a class gateway (see :mod:`~gpucloud_nb.client.gateway`),
        else ``None``; the first answer moves timers and budgets into the gateway."""
        if self.gateway is False:
            return None
        status = yield from probe(self.send)
        if self.gateway is None:
            self.gateway = status is not None
            if self.gateway:
                self.use_gateway()
        return status

    def use_gateway(self) -> None:
        """The server is a gateway: it keeps timers and budgets (under ``/gateway``)."""
        send = self.blocking.send
        self.auto_delete = ServiceAutoDelete(send, prefix="/gateway")
        self.budgets = ServiceBudgets(send, prefix="/gateway")
        self.idle_delete = ServiceIdleDelete(send, prefix="/gateway")

    def ssh(self) -> Remote:
        """This client's SSH to its instances (one :class:`Remote`, made at first use)."""
        if self.remote is None:
            self.remote = Remote(lambda: self.sandbox, self.ssh_identity, self.register_keys,
                                 on_use=self.use_reports.change)
        return self.remote

    def register_keys(self, publics: list[str]) -> None:
        """Tell the sandbox to accept these public keys (blocking; from the SSH thread): a
        service route of the sandbox itself, sent to it even through a gateway in front."""
        box = self.sandbox
        if box is None:
            return
        call = Call("POST", "/sandbox/ssh-keys", json={"keys": publics})
        with httpx.Client(base_url=box.management_url, auth=ApiKeyAuth(Secret(box.api_key)),
                          timeout=30.0) as http:
            SyncDriver(http).run(send(call, self.policy, secrets=(box.api_key,)))

    def send(self, call: Call) -> Op[Any]:
        """One request, retried by the policy, with the key masked in any error."""
        return send(call, self.policy, secrets=(self.key.reveal(),))

    def catalogue(self, path: str, cls: type[R]) -> Op[list[R]]:
        """The offers at ``path`` as records, fetched at most once per ``offers_ttl`` seconds."""
        moment = time.monotonic()
        cached = self._catalogues.get(path)
        if cached and moment - cached[0] < self.offers_ttl:
            return list(cached[1])
        body = yield from self.send(Call("GET", path, decode=False))
        offers = decode_offers(path, cls, body)
        self._catalogues[path] = (moment, offers)
        return list(offers)

    def create_once(self, path: str, body: dict[str, Any], what: str,
                    made: str) -> Op[dict[str, Any]]:
        """POST a create; when its outcome is unknown, adopt what it made before trying again."""
        name = body["name"]
        started = now()
        attempt = 0
        while True:
            try:
                created: dict[str, Any] = yield from self.send(
                    Call("POST", path, json=body, idempotent=False))
                return created
            except OutcomeUnknownError as lost:
                yield Sleep(self.policy.delay(attempt))
                try:
                    found = yield from self.find_created(path, name, started)
                except GPUCloudError as error:
                    raise ConnectionFailedError(
                        f"Creating {what} '{name}': the answer was lost ({lost.message}) and "
                        f"checking whether it was {made} failed too ({error.message}); look at "
                        f"the list of {what}s before trying again."
                    ) from None
                if found is not None:
                    return found
                if attempt >= self.policy.max_retries:
                    raise ConnectionFailedError(
                        f"Creating {what} '{name}' failed ({lost.message}) and no {what} of that "
                        f"name exists, so nothing was {made}; try again."
                    ) from None
                attempt += 1

    def find_created(self, path: str, name: str, started: datetime) -> Op[dict[str, Any] | None]:
        """Look for what a create with an unknown outcome may have made."""
        data = yield from self.send(Call("GET", path))
        since = started - CREATE_LOOKUP_SLACK
        found = [
            item for item in json_list(data)
            if item.get("name") == name
            and str(item.get("status", "")).lower() not in ("deleted", "deleting")  # endpoints: DELETED
            and (parse_datetime(item.get("createdAt")) or since) >= since
        ]
        found.sort(key=lambda item: str(item.get("createdAt", "")))
        return found[-1] if found else None
