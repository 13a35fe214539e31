"""``Server-Timing`` on the gateway's answers (``gateway/timing.py``): its time, the upstream's."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway, GatewayConfig
from gpucloud_nb.gateway.keys import parse_keys
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, BOB, TEACHER, UPSTREAM_KEY, as_key, create_body, vm_offer
from tests.test_gateway_cli import SlowAnswers

DELAY = 0.3


def timing(response: httpx.Response) -> dict[str, float]:
    """``{"app": ms, "upstream": ms}`` from the answer's Server-Timing header."""
    header = response.headers["server-timing"]
    found = dict(re.findall(r"(\w+);dur=([0-9.]+)", header))
    return {name: float(value) for name, value in found.items()}


@pytest.fixture
def slow_gateway(upstream: Sandbox) -> Iterator[Gateway]:
    """A gateway whose upstream answers every request ``DELAY`` s late (a relay in between)."""
    relay = SlowAnswers(upstream.port, delay=DELAY)
    people = parse_keys(f"{ADA} - Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n")
    gateway = Gateway(GatewayConfig(people=tuple(people), upstream_url=relay.url,
                                    upstream_key=UPSTREAM_KEY, poll=60)).start()
    try:
        yield gateway
    finally:
        gateway.stop()
        relay.close()


def test_each_answer_says_the_gateways_time_and_the_upstreams(
        upstream: Sandbox, slow_gateway: Gateway) -> None:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real:
        offer = vm_offer(real)
    with as_key(slow_gateway, ADA) as ada:
        made = ada.post("/gpu-cloud/instances", json=create_body(offer, "timed"))
        assert made.status_code == 201, made.text
        for path in ("/gpu-cloud/instances", f"/gpu-cloud/instances/{made.json()['_id']}"):
            start = time.perf_counter()
            answer = ada.get(path)
            elapsed_ms = (time.perf_counter() - start) * 1e3
            assert answer.status_code == 200
            spent = timing(answer)
            # the relay's delay is the upstream's; the app waited for it; the client for the app
            assert DELAY * 1e3 <= spent["upstream"] <= spent["app"] <= elapsed_ms
        assert "admit" not in spent  # only a create is admitted
        # a create's own admission, inside its app time and apart from the upstream's
        created = timing(made)
        assert 0 < created["admit"] <= created["app"] - created["upstream"]
        # answered by the gateway alone: no time upstream, and the header on an error too
        me = ada.get("/gateway/me")
        assert timing(me)["upstream"] == 0.0 and timing(me)["app"] < DELAY * 1e3
    with as_key(slow_gateway, "gk-not-a-key-000000000000") as stranger:
        refused = stranger.get("/gpu-cloud/instances")
        assert refused.status_code == 403 and timing(refused)["upstream"] == 0.0


def test_a_create_held_for_another_persons_of_the_same_name_counts_the_wait_as_admission(
        upstream: Sandbox) -> None:
    # Bob's create waits while Ada's of the same name is with the (slow) upstream: that wait is
    # admission's part of his answer, not the upstream's.
    import threading

    hold = 3.0
    relay = SlowAnswers(upstream.port, delay=hold)
    people = parse_keys(f"{ADA} - Ada\n{BOB} - Bob\n")
    gateway = Gateway(GatewayConfig(people=tuple(people), upstream_url=relay.url,
                                    upstream_key=UPSTREAM_KEY, poll=60)).start()
    try:
        with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real:
            offer = vm_offer(real)
            answers: dict[str, httpx.Response] = {}

            def create(who: str, key: str) -> None:
                with as_key(gateway, key) as client:
                    answers[who] = client.post("/gpu-cloud/instances",
                                               json=create_body(offer, "same"))

            ada = threading.Thread(target=create, args=("ada", ADA))
            ada.start()
            deadline = time.monotonic() + 60  # Ada's create reached the upstream: in flight
            while not any(i.name == "same" for i in real.instances.list()):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            create("bob", BOB)
            ada.join(60)
        assert answers["ada"].status_code == answers["bob"].status_code == 201
        bob = timing(answers["bob"])
        assert bob["admit"] >= 0.25 * hold * 1e3, bob  # Ada's create held the name that long
        assert bob["admit"] <= bob["app"] - bob["upstream"], bob
    finally:
        gateway.stop()
        relay.close()


def test_the_watchers_own_upstream_calls_count_in_no_request(
        gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(poll=0.05)  # the watcher asks the upstream 20 times a second
    with as_key(gateway, ADA) as ada:
        for _ in range(20):
            assert timing(ada.get("/gateway/me"))["upstream"] == 0.0
