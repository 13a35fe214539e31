"""The sidebar's endpoints (``gpucloud_nb.lab.endpoints``) over real HTTP: a ``jupyter server``
whose poller goes through the user's personal gateway to a sandbox, as for a user with a key;
what a kernel deploys through that gateway is listed with its containers and $/h, and the
``/gpucloud/endpoints/`` routes stop, start and delete it in the cloud."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.gateway import personal
from gpucloud_nb.lab.poller import Poller
from gpucloud_nb.sandbox import Sandbox
from tests.test_gateway import UPSTREAM_KEY
from tests.test_lab_server import lab_through_the_personal_gateway, wait_for

MODEL = "sandbox-vision-1"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(api_key=UPSTREAM_KEY, launch_seconds=1, delete_seconds=1) as box:
        yield box


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lab-endpoints")


@pytest.fixture(scope="module")
def lab(home: Path, upstream: Sandbox) -> Iterator[httpx.Client]:
    with lab_through_the_personal_gateway(home, upstream) as client:
        first = wait_for(client, lambda s: s.get("polledAt") is not None, timeout=90)
        assert first["error"] is None, first["error"]
        yield client


@pytest.fixture
def kernel(lab: httpx.Client, home: Path) -> Iterator[GPUCloud]:
    """A client as a kernel of that Lab has: through the same personal gateway."""
    runtime = personal.find(next((home / "gateways").glob("*/")))
    assert runtime is not None
    with GPUCloud(api_key=runtime.api_key, base_url=runtime.management_url) as client:
        yield client


def endpoint_of(snapshot: dict[str, Any], endpoint_id: str) -> dict[str, Any] | None:
    return next((r for r in snapshot.get("endpoints", []) if r["id"] == endpoint_id), None)


def status_of(endpoint_id: str) -> Any:
    return lambda s: (endpoint_of(s, endpoint_id) or {}).get("status")


def test_an_endpoint_shows_its_containers_and_price_and_stops_starts_and_deletes_from_lab(
        lab: httpx.Client, kernel: GPUCloud) -> None:
    made = kernel.inference_instances.create(name="lab-chat", model=MODEL, min=1, max=2)
    snapshot = wait_for(lab, lambda s: status_of(made.id)(s) == "ACTIVE", timeout=60)
    row = endpoint_of(snapshot, made.id)
    assert row is not None and snapshot["endpointsError"] is None
    details = kernel.inference_instances.get(made.id)
    assert (row["name"], row["ready"], row["total"], row["maxContainers"]) == ("lab-chat", 1, 1, 2)
    assert row["hourlyPrice"] == pytest.approx(details.hourly_price) and details.hourly_price > 0
    assert row["hourly"] == pytest.approx(details.hourly_price * 1)  # one container up
    assert row["hardwareName"] == details.hardware_name and row["problem"] is None

    stopped = lab.post(f"/gpucloud/endpoints/{made.id}/stop")
    assert stopped.status_code == 204, stopped.text
    assert kernel.inference_instances.get(made.id).status == "DISABLED"  # reached the cloud
    shown = endpoint_of(lab.get("/gpucloud/instances").json(), made.id)  # at once, not a poll later
    assert shown is not None
    assert (shown["status"], shown["ready"], shown["total"], shown["hourly"]) == ("DISABLED", 0, 0, 0)

    started = lab.post(f"/gpucloud/endpoints/{made.id}/start")
    assert started.status_code == 204, started.text
    assert kernel.inference_instances.get(made.id).status in ("PENDING", "DEPLOYING", "ACTIVE")
    again = wait_for(lab, lambda s: status_of(made.id)(s) == "ACTIVE"
                     and endpoint_of(s, made.id)["ready"] == 1, timeout=60)
    assert endpoint_of(again, made.id)["hourly"] == pytest.approx(details.hourly_price)

    deleted = lab.delete(f"/gpucloud/endpoints/{made.id}")
    assert deleted.status_code == 204, deleted.text
    assert kernel.inference_instances.get(made.id).status in ("DELETING", "DELETED")
    assert status_of(made.id)(lab.get("/gpucloud/instances").json()) in ("DELETING", None)
    wait_for(lab, lambda s: endpoint_of(s, made.id) is None, timeout=60)  # deleted rows leave

    texts = lab.get("/gpucloud/instances").text + stopped.text + started.text
    assert UPSTREAM_KEY not in texts and kernel.scrub(texts) == texts  # neither key shown


def instances_hourly(snapshot: dict[str, Any]) -> float:
    return sum(float(r["hourlyPrice"]) for r in snapshot["instances"]
               if r["status"] in ("active", "deleting"))


def test_the_totals_count_what_endpoints_serve_now_and_nothing_once_stopped(
        lab: httpx.Client, kernel: GPUCloud) -> None:
    """#38: the sidebar's $/h now and the status bar count a running endpoint's containers
    (price × containers up, as billed); a stopped one adds nothing, at once after the stop."""
    made = kernel.inference_instances.create(name="lab-totals", model=MODEL, min=1, max=2)
    price = kernel.inference_instances.get(made.id).hourly_price
    up = wait_for(lab, lambda s: (endpoint_of(s, made.id) or {}).get("total") == 1, timeout=60)
    totals = up["totals"]
    served = sum(float(e["hourly"] or 0) for e in up["endpoints"])
    assert served >= price > 0 and totals["endpointsHourly"] == pytest.approx(served)
    assert totals["hourly"] == pytest.approx(instances_hourly(up) + served)
    assert totals["serving"] == sum(1 for e in up["endpoints"] if e["total"]) >= 1
    assert totals["endpointsCommitted"] >= price * 2  # at its most containers, as the cap counts

    assert lab.post(f"/gpucloud/endpoints/{made.id}/stop").status_code == 204
    stopped = lab.get("/gpucloud/instances").json()  # at once, not a poll later
    assert endpoint_of(stopped, made.id)["total"] == 0
    assert stopped["totals"]["endpointsHourly"] == pytest.approx(
        sum(float(e["hourly"] or 0) for e in stopped["endpoints"]))
    assert stopped["totals"]["endpointsHourly"] <= served - price + 1e-9
    assert stopped["totals"]["hourly"] == pytest.approx(
        instances_hourly(stopped) + stopped["totals"]["endpointsHourly"])
    assert lab.delete(f"/gpucloud/endpoints/{made.id}").status_code == 204


def test_an_endpoint_scaled_to_zero_costs_nothing_now_but_counts_towards_the_cap(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    """min 0, scaled to zero after its cooldown: no container, so nothing in $/h now (the
    appendix bills per container); the cap's committed figure counts it at its most containers,
    as ``create`` does, and the cap warning is reached."""
    box = sandbox_factory(launch_seconds=0.5)
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
        made = cloud.inference_instances.create(name="asleep", model=MODEL, min=0, max=2,
                                               cooldown=0.3)
        price = cloud.inference_instances.get(made.id).hourly_price

        async def polls() -> dict[str, Any]:
            poller = Poller(lambda: AsyncGPUCloud(api_key=box.api_key,
                                                  base_url=box.management_url), cap=1.0,
                            fast=0.2)
            try:
                for _ in range(1200):  # two minutes
                    snapshot = await poller.snapshot()
                    row = endpoint_of(snapshot, made.id)
                    if row is not None and row["status"] == "ACTIVE" and row["total"] == 0:
                        return snapshot
                    poller.nudge()
                    await asyncio.sleep(0.1)
                raise AssertionError(f"never scaled to zero: {snapshot}")
            finally:
                await poller.stop()

        snapshot = asyncio.run(polls())
    row = endpoint_of(snapshot, made.id)
    assert row is not None and row["hourly"] == 0
    totals = snapshot["totals"]
    assert (totals["hourly"], totals["endpointsHourly"], totals["serving"]) == (0, 0, 0)
    assert totals["endpointsCommitted"] == pytest.approx(price * 2) and price * 2 >= 1.0
    assert totals["committed"] == pytest.approx(price * 2) and totals["capReached"] is True


def test_refusals_are_one_sentence_with_their_status(lab: httpx.Client, kernel: GPUCloud) -> None:
    unknown = lab.post("/gpucloud/endpoints/no-such-endpoint/stop")
    assert unknown.status_code == 404
    message = unknown.json()["message"]
    assert message.endswith(".") and "\n" not in message and "Traceback" not in message

    made = kernel.inference_instances.create(name="lab-gone", model=MODEL, min=1, max=1)
    kernel.inference_instances.delete(made.id)
    refused = lab.post(f"/gpucloud/endpoints/{made.id}/start")  # the cloud refuses: 400
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"].endswith(".") and "\n" not in refused.json()["message"]

    assert lab.post(f"/gpucloud/endpoints/{made.id}").status_code == 405  # no action named
    assert lab.delete(f"/gpucloud/endpoints/{made.id}/stop").status_code == 405
    assert lab.post(f"/gpucloud/endpoints/{made.id}/restart").status_code == 404


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/gpucloud/endpoints/x/stop"), ("POST", "/gpucloud/endpoints/x/start"),
    ("DELETE", "/gpucloud/endpoints/x")])
def test_endpoint_routes_refuse_without_the_token(lab: httpx.Client, method: str,
                                                  path: str) -> None:
    with httpx.Client(base_url=str(lab.base_url), timeout=30) as anonymous:
        assert anonymous.request(method, path).status_code == 403


def test_endpoints_that_cannot_be_read_are_one_sentence_and_the_instances_still_show(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    """A cloud whose inference instances fail (every request there a 500) costs the sidebar one
    sentence in ``endpointsError``; the GPU instances' list is read and shown as before."""
    from gpucloud_nb.sandbox.faults import Faults

    box = sandbox_factory(faults=Faults(error_every=1, prefix="/ai-inference/instances"))

    async def one_poll() -> dict[str, Any]:
        poller = Poller(lambda: AsyncGPUCloud(api_key=box.api_key, base_url=box.management_url,
                                              max_retries=0))
        try:
            return await poller.snapshot()
        finally:
            await poller.stop()

    snapshot = asyncio.run(one_poll())
    assert snapshot["error"] is None and snapshot["instances"] == []
    assert snapshot["endpoints"] == []
    sentence = snapshot["endpointsError"]
    assert sentence.startswith("The endpoints could not be read: ") and sentence.endswith(".")
    assert "\n" not in sentence and box.api_key not in sentence
