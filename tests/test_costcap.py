"""The cost cap fails closed, over real HTTP: a price it cannot sum refuses the launch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.costcap import cap_problem, hourly_price
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance, InstanceOffer
from gpucloud_nb.sandbox import catalogue

BASE = catalogue.instance_offers()[0]
REGION = next(a["region"] for a in BASE["availability"] if a["available"])
OS = BASE["configuration"]["os"][0]


def offer(instance_id: str, price: Any) -> dict[str, Any]:
    made = copy.deepcopy(BASE)
    made["instanceId"] = instance_id
    made["hourlyPrice"] = price
    return made


PRICES: dict[str, Any] = {"nan-price": "NaN", "null-price": None, "negative": -100.0,
                          "infinite": "Infinity", "cheap": 1.0, "pricey": 100.0}
OFFERS = [offer(name, price) for name, price in PRICES.items()]


def launch(cloud: GPUCloud, instance_id: str, name: str) -> None:
    cloud.instances.create(name=name, cloud_provider=BASE["cloud"]["_id"],
                           instance_id=instance_id, region=REGION, vm={"os": OS})


@pytest.fixture
def priced(sandbox_factory):
    return sandbox_factory(offers=OFFERS)


def capped(sandbox, cap: float) -> GPUCloud:
    return GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url, max_hourly_cost=cap)


@pytest.mark.parametrize(("instance_id", "shown"), [
    ("nan-price", "no usable hourlyPrice"), ("null-price", "no usable hourlyPrice"),
    ("negative", "hourlyPrice -100"), ("infinite", "hourlyPrice inf"),
])  # fmt: skip
def test_an_offer_without_a_usable_price_is_refused(priced, instance_id: str, shown: str) -> None:
    with capped(priced, 1000.0) as cloud:
        with pytest.raises(InvalidInputError) as caught:
            launch(cloud, instance_id, "x")
        assert cloud.instances.list() == []  # nothing was launched
    message = str(caught.value)
    assert f"Offer '{instance_id}' from {BASE['cloud']['name']} has {shown}" in message
    assert "cannot be checked" in message and message.count(".") <= 3


@pytest.mark.parametrize(("instance_id", "shown"), [
    ("nan-price", "no usable hourlyPrice"), ("negative", "hourlyPrice -100"),
    ("null-price", "no usable hourlyPrice"),
])  # fmt: skip
def test_a_running_instance_without_a_usable_price_refuses_any_launch(
        priced, instance_id: str, shown: str) -> None:
    with GPUCloud(api_key=priced.api_key, base_url=priced.management_url) as uncapped:
        launch(uncapped, instance_id, "odd-one")  # the sandbox bills what the offer says
        reported = uncapped._core.driver.http.get("/gpu-cloud/instances").json()[0]
        assert reported["hourlyPrice"] == PRICES[instance_id]  # really on the wire
    with capped(priced, 5.0) as cloud, pytest.raises(InvalidInputError) as caught:
        launch(cloud, "pricey", "big")  # $100/h: before, NaN or -100 let it through
    message = str(caught.value)
    assert message.startswith("Instance 'odd-one' (") and shown in message, message
    assert "max_hourly_cost" in message


def test_within_and_over_the_cap_still_work(priced) -> None:
    with capped(priced, 1.5) as cloud:
        launch(cloud, "cheap", "ok")
        with pytest.raises(InvalidInputError, match="above the cap"):
            launch(cloud, "cheap", "second")


@pytest.mark.parametrize(("value", "price"), [
    (2.5, 2.5), ("2.5", 2.5), (0, 0.0), ("NaN", None), (float("nan"), None), (-1, None),
    (None, None), ("1e999", None), ([], None),
])  # fmt: skip
def test_hourly_price(value: Any, price: float | None) -> None:
    """The wire value as the schema reads it (NaN when missing or not a number), then checked."""
    assert hourly_price(InstanceOffer.from_json({"hourlyPrice": value}).hourly_price) == price


def test_cap_problem_without_a_cap_is_none() -> None:
    running = [Instance.from_json({"status": "active", "hourlyPrice": "NaN"})]
    assert cap_problem(None, running, InstanceOffer()) is None


def test_an_instance_with_no_hourly_price_field_refuses(priced) -> None:
    """The sandbox always sends hourlyPrice; a server leaving it out is stood in for here."""
    import httpx

    upstream = httpx.Client(base_url=priced.management_url,
                            headers={"x-api-key": priced.api_key})

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/gpu-cloud/instances":
            return httpx.Response(200, json=[{"_id": "i1", "name": "ghost", "status": "active"}])
        answer = upstream.request(request.method, request.url.path, content=request.content,
                                  params=request.url.params)
        return httpx.Response(answer.status_code, content=answer.content)

    with GPUCloud(api_key=priced.api_key, base_url=priced.management_url, max_hourly_cost=500.0,
                  transport=httpx.MockTransport(handler)) as cloud, pytest.raises(InvalidInputError,
                       match=r"^Instance 'ghost' \(i1\) reports no usable hourlyPrice, so the cap"):
        launch(cloud, "cheap", "x")
    upstream.close()
    with GPUCloud(api_key=priced.api_key, base_url=priced.management_url) as observer:
        assert observer.instances.list() == []
