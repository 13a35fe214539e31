"""Lists through the gateway board shared requests to the upstream, each as fresh as a direct call.

The rule itself (:class:`~gpucloud_nb.gateway.flights.Flights`: lists asked in one turn of the
loop share one flight, a later one never waits for a flight in the air) is tested on an event
loop, where "together" can be made exact. Over real HTTP, the gateway in front of a
:class:`Relay` that passes every request on to a sandbox playing the real cloud, counts the lists
it is sent, and can hold one list's answer (the sandbox's answer taken first, so it shows the
account as it was), answer lists with a 429, or drop them unanswered: what a list meets there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from gpucloud_nb.gateway import Gateway
from gpucloud_nb.gateway.flights import Answer, Flights
from gpucloud_nb.gateway.upstream import UpstreamUnreachable
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.serving import Served
from tests.helpers import (
    ADA,
    BOB,
    PERSONAL,
    SPEC_FIELDS,
    as_key,
    create_body,
    direct,
    gateway_cloud,
    vm_offer,
    wait_for,
)

LIST = "/gpu-cloud/instances"


class Relay:
    """The upstream as the gateway reaches it: ``sandbox`` behind a relay of our own."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.target, self.api_key = sandbox.management_url, sandbox.api_key
        self.lists = 0  #: lists the gateway sent
        self.held = 0  #: lists whose answer is held now
        self.mode = "relay"  # or "429" (Retry-After: 7), or "drop" (closed, never answered)
        self._hold_next = False
        self._released = threading.Event()
        self._client: httpx.AsyncClient | None = None
        self._served = Served.start(self, "127.0.0.1", 0, "relay")
        self.management_url = f"http://127.0.0.1:{self._served.port}"

    def hold(self) -> None:
        """Hold the answer of the next list until :meth:`release`."""
        self._released.clear()
        self._hold_next = True

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self.release()
        self._served.stop()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            if self._client is not None:
                await self._client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        is_list = scope["method"] == "GET" and scope["path"] == LIST
        status, headers, answer = 0, [], b""
        if is_list:
            self.lists += 1
        if is_list and self.mode == "429":
            status, answer = 429, (b'{"statusCode":429,"timestamp":"2026-11-29T00:00:00.000Z",'
                                   b'"path":"/gpu-cloud/instances","message":"Too many requests."}')
            headers = [(b"content-type", b"application/json"), (b"retry-after", b"7")]
        elif not (is_list and self.mode == "drop"):
            if self._client is None:
                self._client = httpx.AsyncClient(base_url=self.target, timeout=60.0)
            query = scope.get("query_string", b"").decode()
            forwarded = await self._client.request(
                scope["method"], scope["path"] + (f"?{query}" if query else ""), content=body,
                headers=[(k, v) for k, v in scope["headers"] if k.lower() != b"host"])
            status, answer = forwarded.status_code, forwarded.content
            headers = [(k.encode(), v.encode()) for k, v in forwarded.headers.items()
                       if k.lower() in ("content-type", "retry-after")]
        if is_list and self._hold_next:  # the answer is made: it shows the account as it was
            self._hold_next = False
            self.held += 1
            while not self._released.is_set():
                await asyncio.sleep(0.005)
            self.held -= 1
        if is_list and self.mode == "drop":  # closed without a byte: the upstream did not answer
            send.__self__.transport.close()
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": [*headers, (b"content-length", str(len(answer)).encode())]})
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture
def relay(upstream: Sandbox) -> Iterator[Relay]:
    served = Relay(upstream)
    yield served
    served.stop()


@pytest.fixture
def class_gateway(gateway_factory: Callable[..., Gateway],
                  relay: Relay) -> Callable[..., Gateway]:
    """A gateway in front of ``relay`` whose meter lists once, at its start (then not for an
    hour, so every later list the relay counts is a student's)."""
    def start(keys: str = f"{ADA} - Ada\n{BOB} - Bob\n", **options: Any) -> Gateway:
        gateway = gateway_factory(keys, upstream=relay, poll=3600, **options)
        wait_for(lambda: relay.lists >= 1, 60, what=lambda: "the meter's first list")
        return gateway
    return start


def ids(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {item["_id"] for item in response.json()}


class Tower:
    """Flights of :meth:`fly` on a loop, the first held until :attr:`first_lands` is set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.flights = Flights()
        self.first_lands = asyncio.Event()
        self.flown: list[int] = []
        self.error = error

    async def fly(self) -> Answer:
        n = len(self.flown) + 1
        self.flown.append(n)
        if n == 1:
            await self.first_lands.wait()
        if self.error is not None:
            raise self.error
        return 200, f"[{n}]".encode(), None

    def board(self, key: str = "list") -> asyncio.Task[Answer]:
        return asyncio.create_task(self.flights.board(key, self.fly))

    async def first_in_the_air(self) -> None:
        while not self.flown:
            await asyncio.sleep(0)


def test_lists_asked_together_board_one_flight_and_a_later_one_does_not_wait_for_it() -> None:
    async def scenario() -> tuple[list[Answer], Answer, Answer, Tower]:
        tower = Tower()
        together = [tower.board() for _ in range(40)]  # 40 students' lists in one turn
        await tower.first_in_the_air()
        # boarding closed: one asked now opens the next flight, answered while the first flies
        later = await asyncio.wait_for(tower.board(), 30)
        other = await asyncio.wait_for(tower.board("list?deploymentType=vm"), 30)
        assert not any(task.done() for task in together)
        tower.first_lands.set()
        return list(await asyncio.gather(*together)), later, other, tower

    together, later, other, tower = asyncio.run(scenario())
    assert together == [(200, b"[1]", None)] * 40
    assert later == (200, b"[2]", None)
    assert other == (200, b"[3]", None)  # another query flies on its own
    assert (tower.flights.flown, tower.flights.asked) == (3, 42)


def test_what_a_flight_met_reaches_every_list_that_boarded_it_and_one_gone_leaves_it() -> None:
    async def scenario() -> tuple[list[BaseException | Answer], Tower]:
        tower = Tower(error=UpstreamUnreachable("ClientConnectorError"))
        boarded = [tower.board() for _ in range(4)]
        await tower.first_in_the_air()
        boarded[0].cancel()  # its client went away: the flight flies on for the others
        await asyncio.sleep(0)
        tower.first_lands.set()
        return list(await asyncio.gather(*boarded, return_exceptions=True)), tower

    results, tower = asyncio.run(scenario())
    assert isinstance(results[0], asyncio.CancelledError)
    assert all(isinstance(r, UpstreamUnreachable) for r in results[1:]), results
    assert tower.flights.flown == 1


def test_a_gateway_stopping_cancels_the_flight_in_the_air_and_its_lists() -> None:
    async def scenario() -> list[BaseException | Answer]:
        tower = Tower()
        boarded = [tower.board() for _ in range(3)]
        await tower.first_in_the_air()
        await tower.flights.aclose()
        return list(await asyncio.gather(*boarded, return_exceptions=True))

    results = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results


def test_a_list_never_waits_for_one_in_the_air_and_sees_what_was_made_before_it_arrived(
        class_gateway: Callable[..., Gateway], relay: Relay, upstream: Sandbox) -> None:
    gateway = class_gateway(PERSONAL, personal=True)  # its one person owns the whole account
    first, second = as_key(gateway, ADA), as_key(gateway, ADA)
    try:
        with gateway_cloud(gateway, ADA) as cloud:
            offer = vm_offer(cloud)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            relay.hold()
            older = pool.submit(first.get, LIST)  # its flight: the account before the create
            wait_for(lambda: relay.held == 1, 60, what=lambda: "the first list held")
            with direct(upstream) as console:  # the cloud's console, with the account's key
                made = console.post(LIST, json=create_body(offer, "made-meanwhile"))
            assert made.status_code == 201, made.text
            newer = second.get(LIST)  # answered while the first list's flight is still held
            assert relay.held == 1 and not older.done()
            relay.release()
            older_ids = ids(older.result(60))
        assert made.json()["_id"] in ids(newer)
        assert made.json()["_id"] not in older_ids  # that flight had left before the create
    finally:
        first.close()
        second.close()


def test_forty_students_listing_at_once_each_see_their_own(
        class_gateway: Callable[..., Gateway], relay: Relay) -> None:
    keys = [f"gk-student-{n:02d}-000000000000" for n in range(40)]
    gateway = class_gateway("".join(f"{key} - Student {n}\n" for n, key in enumerate(keys)))
    with gateway_cloud(gateway, keys[0]) as cloud:
        offer = vm_offer(cloud)
    students = [as_key(gateway, key) for key in keys]
    try:
        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            made = list(pool.map(lambda n: students[n].post(
                LIST, json=create_body(offer, f"own-{n}")), range(40)))
            assert all(r.status_code == 201 for r in made), [r.text for r in made]
            for _ in range(3):  # boarding together: each keeps their own of the one answer
                lists = list(pool.map(lambda client: client.get(LIST), students))
                for response, mine in zip(lists, made, strict=True):
                    assert ids(response) == {mine.json()["_id"]}  # their own, nobody else's
    finally:
        for client in students:
            client.close()


@pytest.mark.parametrize("mode", ["429", "drop"])
def test_what_the_upstream_did_to_a_list_reaches_it_in_the_spec_body(
        class_gateway: Callable[..., Gateway], relay: Relay, mode: str) -> None:
    gateway = class_gateway()
    relay.mode = mode
    with as_key(gateway, ADA) as ada, as_key(gateway, BOB) as bob:
        for response in (ada.get(LIST), bob.get(LIST)):
            assert set(response.json()) == SPEC_FIELDS
            if mode == "429":
                assert response.status_code == 429
                assert response.headers["retry-after"] == "7"
            else:
                assert response.status_code == 502
                assert response.json()["message"] == "The upstream cloud did not answer."
