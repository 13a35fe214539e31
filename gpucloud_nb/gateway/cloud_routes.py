"""The spec's management interface, per person: forwarded to the upstream with the upstream's key.

    $ curl -H "x-api-key: $STUDENT_KEY" $GATEWAY/gpu-cloud/instances

Same paths, ``x-api-key``, statuses and error body ``{statusCode, timestamp, path, message}`` as
the spec. A key not in the keys file is a 403. Offers pass through. A key sees only the instances
and volumes created with it: lists are filtered, and another key's id is the same 404 as an id
that does not exist. Choices where the spec is silent:

- a create is admitted against the budget first (:func:`gpucloud_nb.gateway.money.admit`); a
  refusal is **402** with one sentence naming the dollars left; while another key's create of
  the same name is in flight, a create waits for its answer (up to :data:`SAME_NAME_WAIT`
  seconds, then a **409** with ``Retry-After``), so a lost answer is never adopted crosswise;
  more than ``creates_per_minute`` creates of one key within a minute is a 429 with
  ``Retry-After``; an offer the upstream does not list is a 400;
- an error of the upstream (a 429, a 503) is passed on with its ``Retry-After``;
- the upstream refusing the gateway's own key is a **502** (not the upstream's 403: the
  student's key is fine; a personal gateway's key is the user's, so there it is a 403), and so
  is an upstream that does not answer (for a create: "it may have
  happened", and the watcher adopts it by name if it did);
- a volume's ``user`` is the person's account id, not the upstream's owner id; a volume create
  is held against the budget as an instance's is (:func:`gpucloud_nb.gateway.money.check_volume`,
  402), and what it costs counts in its owner's spend.
- a personal gateway (``config.personal``, :mod:`gpucloud_nb.gateway.personal`) filters nothing:
  its one person owns the whole account, and what it lists or reads that was made elsewhere is
  adopted (recorded as theirs, metered from then on).

Lists of the same query that arrive together board one request to the upstream, which leaves
after each of them arrived (:mod:`gpucloud_nb.gateway.flights`): each answer is as fresh as a
direct call, and a class refreshing at once sends the upstream a few lists, not 40.

Speed (``benchmarks/bench_gateway.py``): a get and an instance list are passed on as the
upstream's own bytes, key masked (:meth:`Upstream.scrub_body`), never decoded into Python objects;
a list is filtered by reading only each item's ``_id`` (:func:`mine_only`). Ownership is read from
SQLite on every request, so a list is exactly as fresh as the upstream's. Nothing the upstream
answers is cached (but offers, for admission's price): an instance's status is the upstream's to
change, and a cached answer could only be older than the direct call a student would otherwise
make. Measured per request (29 Nov 2026, load 3-7): the key's lookup (SHA-256 and 40
constant-time compares) 16 µs, the owner's ids from SQLite 17-35 µs, :func:`mine_only` on a list
of 40 instances 40-110 µs: together under a tenth of the gateway's CPU per request (1.6-2.4 ms)
and of its own work in its app (``Server-Timing`` 0.26-0.44 ms at the median, Starlette
included), so ownership stays in SQLite, the one copy, rather than in a cache beside it. What
the extra hop costs is its HTTP: uvicorn's parse and write of the request and the answer, the
upstream request through ``aiohttp``, and the wake-ups of one process more (see
``benchmarks/bench_gateway.py``).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gpucloud_nb.gateway import money
from gpucloud_nb.gateway.cloud_init import with_gateway_key
from gpucloud_nb.gateway.config import GatewayConfig
from gpucloud_nb.gateway.idle import idle_seconds_of
from gpucloud_nb.gateway.keys import Person
from gpucloud_nb.gateway.meter import Meter, parse_ms
from gpucloud_nb.gateway.store import Store
from gpucloud_nb.gateway.timing import ADMIT_SPENT
from gpucloud_nb.gateway.upstream import RETRY_AFTER, Upstream, UpstreamUnreachable, decode
from gpucloud_nb.sandbox.http import Problem, now_ms, read_json_object

__all__ = ["Gate", "cloud_routes"]

SAME_NAME_WAIT = 75.0
"""Seconds a create waits for someone else's create of the same name to be answered."""
PersonHandler = Callable[[Request, Person], Awaitable[Response]]


class Gate:
    """What every route of one gateway shares."""

    def __init__(self, config: GatewayConfig, store: Store, upstream: Upstream,
                 meter: Meter, public_key: str = "") -> None:
        self.config, self.store, self.upstream, self.meter = config, store, upstream, meter
        #: the gateway's own SSH public key, added to the cloud-init of creates it watches idle
        self.public_key = public_key
        self.keyring = meter.keyring
        self._creates: dict[str, collections.deque[float]] = {}
        #: Who sends a request: the keys file's person of its ``x-api-key`` by default; a hub's
        #: gateway puts :meth:`gpucloud_nb.gateway.hub_people.Roster.identify` here.
        self.identify: Callable[[Request], Awaitable[Person]] = self._by_key

    async def _by_key(self, request: Request) -> Person:
        person = self.keyring.find(request.headers.get("x-api-key"))
        if person is None:
            raise Problem(403, "The API key is invalid.")
        return person

    def route(self, handler: PersonHandler) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind the key check, its :class:`Problem` answered in the spec's body."""
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request, await self.identify(request))
            except Problem as problem:
                return problem.spec_response(request.url.path)
            except UpstreamUnreachable:
                what = ("; the create may have happened: list your instances in a minute"
                        if request.method == "POST" else "")
                return Problem(502, f"The upstream cloud did not answer{what}.").spec_response(
                    request.url.path)
        return endpoint

    def relay(self, status: int, data: Any, request: Request) -> Response:
        """The upstream's answer as the gateway's: JSON as is, an error in the spec's body."""
        if status < 400:
            if data is None:
                return Response(status_code=status)
            return Response(self.upstream.scrub(json_text(data)).encode(), status_code=status,
                            media_type="application/json")
        if status in (401, 403) and self.config.personal:
            raise Problem(403, "The cloud refused your key (GPUCLOUD_API_KEY); check it.")
        if status in (401, 403):
            raise Problem(502, "The upstream cloud refused the gateway's own key; tell whoever "
                               "runs the gateway.")
        message = data.get("message") if isinstance(data, dict) else None
        text = message if isinstance(message, str) and message else f"The upstream answered {status}."
        wait = RETRY_AFTER.get()
        raise Problem(status, self.upstream.scrub(text),
                      headers=None if wait is None else {"Retry-After": wait})

    def relay_body(self, status: int, body: bytes, request: Request) -> Response:
        """:meth:`relay` of the upstream's bytes: passed on as they are when they may be."""
        scrubbed = self.upstream.scrub_body(body) if status < 400 and body else None
        if scrubbed is None:
            return self.relay(status, decode(body), request)
        return Response(scrubbed, status_code=status, media_type="application/json")

    def rate_limited(self, account: str) -> None:
        """Count one create of ``account``; a 429 :class:`Problem` past the limit."""
        now = time.monotonic()
        times = self._creates.setdefault(account, collections.deque())
        while times and now - times[0] > 60:
            times.popleft()
        if len(times) >= self.config.creates_per_minute:
            wait = max(int(60 - (now - times[0])) + 1, 1)
            raise Problem(429, f"More than {self.config.creates_per_minute} creates in a minute "
                               f"from this key; try again in {wait} s.",
                          headers={"Retry-After": str(wait)})
        times.append(now)

    async def admitted(self, person: Person, name: str, price: float) -> int:
        """A create of ``price`` $/h admitted against ``person``'s budget (its reservation), once
        no one else's of ``name`` is in flight; a 402 or 409 :class:`Problem` otherwise."""
        spent, start = ADMIT_SPENT.get(), time.perf_counter()
        try:
            return await self._admit(person, name, price, time.monotonic())
        finally:
            if spent is not None:  # the create's Server-Timing (gateway.timing)
                spent[0] += time.perf_counter() - start

    async def _admit(self, person: Person, name: str, price: float, waited: float) -> int:
        while True:
            try:
                return money.admit(self.store, person, name, price, self.config.reserve_hours,
                                   now_ms())
            except money.BudgetRefused as refused:
                self.store.audit(now_ms(), person.account, "refused", name, str(refused))
                raise Problem(402, str(refused)) from None
            except money.NameInFlight:
                if time.monotonic() - waited > SAME_NAME_WAIT:
                    raise Problem(409, f"Someone else's create named {name!r} is still being "
                                       "settled with the upstream; nothing was launched: try "
                                       "again in a minute or choose another name.",
                                  headers={"Retry-After": "60"}) from None
                await asyncio.sleep(0.05)


def json_text(data: Any) -> str:
    """``data`` as compact JSON text."""
    import json

    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class _Item(msgspec.Struct):
    id: str = msgspec.field(default="", name="_id")


_ITEMS = msgspec.json.Decoder(list[_Item])
_RAW_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])


def mine_only(body: bytes, mine: set[str]) -> bytes | None:
    """The JSON list ``body`` with only the objects whose ``_id`` is in ``mine``, as bytes.

    ``None`` when ``body`` is not a list of objects with string ids (decode it then). Each kept
    item is the upstream's own bytes; nothing but ``_id`` is decoded.

        >>> mine_only(b'[{"_id":"a","x":1},{"_id":"b"}]', {"b"})
        b'[{"_id":"b"}]'
    """
    try:
        items, raws = _ITEMS.decode(body), _RAW_ITEMS.decode(body)
    except msgspec.MsgspecError:
        return None
    return b"[" + b",".join(bytes(raw) for item, raw in zip(items, raws, strict=True)
                            if item.id in mine) + b"]"


def _unknown(body: bytes, known: set[str]) -> bool:
    """True when the JSON list ``body`` names an ``_id`` not in ``known`` (or cannot be read)."""
    try:
        return any(item.id not in known for item in _ITEMS.decode(body))
    except msgspec.MsgspecError:
        return True


def _text_field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise Problem(400, f"The field {name} must be a non-empty string.")
    return value


def cloud_routes(gate: Gate) -> list[BaseRoute]:
    """The spec's management routes of ``gate``."""
    store, upstream = gate.store, gate.upstream

    async def instance_offers(request: Request, person: Person) -> Response:
        status, data = await upstream.call("GET", "/gpu-cloud/instances/offers",
                                           params=request.query_params.multi_items())
        return gate.relay(status, data, request)

    async def volume_offers(request: Request, person: Person) -> Response:
        status, data = await upstream.call("GET", "/gpu-cloud/volumes/offers")
        return gate.relay(status, data, request)

    async def create_instance(request: Request, person: Person) -> Response:
        body = await read_json_object(request)
        name = _text_field(body, "name")
        provider, offer = _text_field(body, "cloudProvider"), _text_field(body, "instanceId")
        idle = idle_seconds_of(body)
        gate.rate_limited(person.account)
        listed = await upstream.offer(provider, offer)
        price = await upstream.offer_price(provider, offer) if listed is not None else None
        if listed is None or price is None:
            raise Problem(400, f"The upstream offers no instance {offer} of provider {provider}; "
                               "nothing was launched.")
        if idle is not None:
            if listed.get("cloudInitAvailable") is not True or not isinstance(body.get("vm"), dict):
                raise Problem(400, f"Offer {offer} has no cloud-init (a container), so the gateway "
                                   "cannot watch its instances for idle use; nothing was launched: "
                                   "launch it without delete_when_idle.")
            vm = body["vm"]
            body["vm"] = {**vm, "base64CloudInitScript": with_gateway_key(
                vm.get("base64CloudInitScript") if isinstance(vm.get("base64CloudInitScript"), str)
                else None, gate.public_key)}
        rid = await gate.admitted(person, name, price)
        if idle is not None:
            store.reserve_idle(rid, idle)  # kept with the reservation, adopted or answered
        gate.meter.inflight.add(rid)
        try:
            status, answer = await upstream.send("POST", "/gpu-cloud/instances", json=body)
            data = decode(answer)
            if status in (200, 201) and isinstance(data, dict) and data.get("_id"):
                id, now = str(data["_id"]), now_ms()
                with store.transaction():  # one commit: the record, the reservation, the audit
                    store.add_owned(id, "instance", person.account, name,
                                    float(data.get("hourlyPrice") or price), now, rid=rid)
                    store.audit(now, person.account, "created", id, "asked")
                return gate.relay_body(status, answer, request)
            if status < 500:  # a definite answer: nothing was made
                store.fail_reservation(rid)
            return gate.relay(status, data, request)
        finally:
            gate.meter.inflight.discard(rid)

    personal = gate.config.personal

    def adopt(kind: str, items: Any, person: Person) -> None:
        """A personal gateway's one person owns the whole account: what it has not seen yet
        (made elsewhere) becomes theirs, metered from now on."""
        known = store.owned_ids(person.account, kind)
        for item in items if isinstance(items, list) else [items]:
            id = item.get("_id") if isinstance(item, dict) else None
            if isinstance(id, str) and id and id not in known:
                price = item.get("hourlyPrice")
                store.add_owned(id, kind, person.account, str(item.get("name") or id),
                                float(price) if isinstance(price, int | float) else 0.0, now_ms())

    async def list_instances(request: Request, person: Person) -> Response:
        status, body = await upstream.send_shared("/gpu-cloud/instances",
                                                  params=request.query_params.multi_items())
        if status != 200:
            return gate.relay_body(status, body, request)
        if personal:
            if _unknown(body, store.owned_ids(person.account)):
                adopt("instance", decode(body), person)
            return gate.relay_body(status, body, request)
        mine = store.owned_ids(person.account)
        kept = mine_only(body, mine)
        if kept is not None:
            return gate.relay_body(status, kept, request)
        data = decode(body)
        if isinstance(data, list):
            data = [item for item in data if isinstance(item, dict) and item.get("_id") in mine]
        return gate.relay(status, data, request)

    def check_owner(kind: str, id: str, person: Person) -> None:
        if store.owner(id) != person.account and not personal:
            raise Problem(404, f"{kind} {id} not found.")

    async def get_instance(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        check_owner("Instance", id, person)
        status, body = await upstream.send("GET", f"/gpu-cloud/instances/{id}")
        if personal and status == 200 and store.owner(id) is None:
            adopt("instance", decode(body), person)
        return gate.relay_body(status, body, request)

    async def delete_instance(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        check_owner("Instance", id, person)
        status, data = await upstream.call("DELETE", f"/gpu-cloud/instances/{id}")
        if status < 300:
            store.ask_delete(id, now_ms(), "asked")
            store.audit(now_ms(), person.account, "deleted", id, f"asked (by {person.name})")
        return gate.relay(status, data, request)

    def as_owned(data: Any, person: Person) -> Any:
        if isinstance(data, dict) and "user" in data:
            return {**data, "user": person.account}
        return data

    async def create_volume(request: Request, person: Person) -> Response:
        body = await read_json_object(request)
        name = _text_field(body, "name")
        provider = _text_field(body, "cloudProvider")
        offers_status, offers = await upstream.call("GET", "/gpu-cloud/volumes/offers")
        price = money.volume_price(offers, provider, body.get("sizeInGb")) \
            if offers_status == 200 else None
        if price is not None:
            try:
                money.check_volume(store, person, price, gate.config.reserve_hours, now_ms())
            except money.BudgetRefused as refused:
                store.audit(now_ms(), person.account, "refused", name, str(refused))
                raise Problem(402, str(refused)) from None
        status, data = await upstream.call("POST", "/gpu-cloud/volumes", json=body)
        if status in (200, 201) and isinstance(data, dict) and data.get("_id"):
            made = parse_ms(data.get("createdAt")) or now_ms()
            store.add_owned(str(data["_id"]), "volume", person.account, name, price or 0.0, made)
            store.audit(now_ms(), person.account, "created", str(data["_id"]), "asked")
        return gate.relay(status, as_owned(data, person), request)

    async def list_volumes(request: Request, person: Person) -> Response:
        status, data = await upstream.call("GET", "/gpu-cloud/volumes")
        if status == 200 and isinstance(data, list) and personal:
            adopt("volume", data, person)
        elif status == 200 and isinstance(data, list):
            mine = store.owned_ids(person.account, "volume")
            data = [as_owned(item, person) for item in data
                    if isinstance(item, dict) and item.get("_id") in mine]
        return gate.relay(status, data, request)

    async def get_volume(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        check_owner("Volume", id, person)
        status, data = await upstream.call("GET", f"/gpu-cloud/volumes/{id}")
        return gate.relay(status, as_owned(data, person), request)

    async def delete_volume(request: Request, person: Person) -> Response:
        id = request.path_params["id"]
        check_owner("Volume", id, person)
        status, data = await upstream.call("DELETE", f"/gpu-cloud/volumes/{id}")
        if status < 300 or status == 404:
            store.end_volume(id, now_ms())
        if status < 300:
            store.audit(now_ms(), person.account, "deleted", id, f"asked (by {person.name})")
        return gate.relay(status, data, request)

    return [
        Route("/gpu-cloud/instances/offers", gate.route(instance_offers), methods=["GET"]),
        Route("/gpu-cloud/volumes/offers", gate.route(volume_offers), methods=["GET"]),
        Route("/gpu-cloud/instances", gate.route(create_instance), methods=["POST"]),
        Route("/gpu-cloud/instances", gate.route(list_instances), methods=["GET"]),
        Route("/gpu-cloud/instances/{id}", gate.route(get_instance), methods=["GET"]),
        Route("/gpu-cloud/instances/{id}", gate.route(delete_instance), methods=["DELETE"]),
        Route("/gpu-cloud/volumes", gate.route(create_volume), methods=["POST"]),
        Route("/gpu-cloud/volumes", gate.route(list_volumes), methods=["GET"]),
        Route("/gpu-cloud/volumes/{id}", gate.route(get_volume), methods=["GET"]),
        Route("/gpu-cloud/volumes/{id}", gate.route(delete_volume), methods=["DELETE"]),
    ]
