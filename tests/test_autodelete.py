"""Auto-delete timers, kept by a gateway, never by this process nor by the sandbox."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from datetime import timedelta

import httpx
import pytest
from helpers import alaunch, launch, wait_for

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client.gateway import unkept
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA

GONE = ("deleting", "deleted")


def status_after(cloud: GPUCloud, instance_id: str, seconds: float) -> str:
    time.sleep(seconds)
    return cloud.instances.get(instance_id).status


def test_auto_delete_fires(through_gateway: GPUCloud) -> None:
    cloud = through_gateway
    instance = launch(cloud, "timed", delete_after=1.0)
    assert cloud.auto_delete.where == "gateway"
    left = cloud.auto_delete.remaining(instance.id)
    assert left is not None and 0 < left <= 1.0
    due = time.monotonic() + left
    status = cloud.instances.get(instance.id).status
    if time.monotonic() < due:  # read before the timer was due (a busy machine may be later)
        assert status not in GONE
    wait_for(lambda: cloud.instances.get(instance.id).status in GONE, timeout=60)
    wait_for(lambda: cloud.auto_delete.remaining(instance.id) is None, timeout=30)


def test_auto_delete_cancelled_keeps_the_instance(through_gateway: GPUCloud) -> None:
    cloud = through_gateway
    instance = launch(cloud, "kept", delete_after=timedelta(seconds=2))
    assert cloud.auto_delete.cancel(instance.id)  # long before it is due, even on a busy machine
    assert status_after(cloud, instance.id, 2.5) == "active"
    assert not cloud.auto_delete.cancel(instance.id)


def test_auto_delete_extended(through_gateway: GPUCloud) -> None:
    cloud = through_gateway
    instance = launch(cloud, "extended", delete_after=1.0)
    cloud.auto_delete.extend(instance.id, 1.0)
    left = cloud.auto_delete.remaining(instance.id)
    assert left is not None and left > 1.0
    due = time.monotonic() + left
    status = status_after(cloud, instance.id, 1.2)  # past the first time
    if time.monotonic() < due:  # read before the extended time (a busy machine may not)
        assert status == "active"
    wait_for(lambda: cloud.instances.get(instance.id).status in GONE, timeout=60)


def test_manual_delete_cancels_the_timer(through_gateway: GPUCloud) -> None:
    cloud = through_gateway
    instance = launch(cloud, "manual", delete_after=30)
    cloud.instances.delete(instance.id)
    wait_for(lambda: cloud.auto_delete.remaining(instance.id) is None, timeout=30)
    assert cloud.spend().set_index("_id").loc[instance.id, "autoDeleteAt"] is None


@pytest.mark.parametrize("bad", [-1, 0, "soon", True])
def test_bad_delete_after_is_refused_before_sending(through_gateway: GPUCloud, bad: object) -> None:
    with pytest.raises(InvalidInputError, match="delete_after must be a positive number"):
        launch(through_gateway, "bad", delete_after=bad)
    assert through_gateway.instances.list() == []


def test_spend_shows_the_deadline(through_gateway: GPUCloud) -> None:
    instance = launch(through_gateway, "deadline", delete_after=60)
    deadline = through_gateway.spend().set_index("_id").loc[instance.id, "autoDeleteAt"]
    assert deadline is not None
    through_gateway.auto_delete.cancel_all()


def test_async_client_auto_delete(gateway_factory) -> None:
    gateway = gateway_factory()

    async def main() -> str:
        async with AsyncGPUCloud(api_key=ADA, base_url=gateway.url) as cloud:
            instance = await alaunch(cloud, "async-timed", delete_after=0.3)
            deadline = asyncio.get_running_loop().time() + 60  # a condition, not a clock
            while (status := (await cloud.instances.get(instance.id)).status) not in GONE \
                    and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)
            return status

    assert asyncio.run(main()) in GONE


def test_the_cloud_directly_refuses_delete_after_before_the_post_and_starts_no_thread(
        cloud: GPUCloud) -> None:
    threads = set(threading.enumerate())
    assert cloud.auto_delete.where == "nobody"
    with pytest.raises(InvalidInputError) as refused:
        launch(cloud, "unkept", delete_after=60)
    assert str(refused.value) == unkept("delete_after", at_create=True)
    assert "\n" not in str(refused.value) and str(refused.value).count(". ") == 0
    assert cloud.instances.list() == []  # nothing was sent
    instance = launch(cloud, "plain")
    with pytest.raises(InvalidInputError, match="Nothing watches money without a gateway"):
        cloud.auto_delete.schedule(instance.id, 60)
    assert cloud.auto_delete.remaining(instance.id) is None and cloud.auto_delete.deadlines() == {}
    assert not cloud.auto_delete.cancel(instance.id)
    started = {t.name for t in set(threading.enumerate()) - threads}
    assert not [name for name in started if "timer" in name.lower() or "idle" in name]


def test_a_client_on_the_sandbox_itself_is_refused_as_on_the_cloud_directly(
        sandbox: Sandbox) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        cloud.sandbox = sandbox  # GPUCLOUD_GATEWAY=off without a key: the sandbox keeps no timer
        assert cloud.auto_delete.where == "nobody"
        with pytest.raises(InvalidInputError) as refused:
            launch(cloud, "unkept-on-sandbox", delete_after=60)
        assert str(refused.value) == unkept("delete_after", at_create=True)
        assert cloud.instances.list() == []  # nothing was sent
    routes = httpx.get(f"{sandbox.management_url}/sandbox/auto-deletes",
                       headers={"x-api-key": sandbox.api_key})
    assert routes.status_code == 404  # the sandbox has no timers of its own


def test_a_gateway_timer_outlives_a_restart_of_the_gateway(gateway_factory, tmp_path) -> None:
    first: Gateway = gateway_factory(home=tmp_path)
    with GPUCloud(api_key=ADA, base_url=first.url) as cloud:
        instance = launch(cloud, "durable-timer", delete_after=3)
    first.stop()
    second: Gateway = gateway_factory(home=tmp_path)
    with GPUCloud(api_key=ADA, base_url=second.url) as again:
        left = again.auto_delete.remaining(instance.id)
        assert left is None or 0 < left <= 3  # None: already due on a busy machine
        wait_for(lambda: again.instances.get(instance.id).status in GONE, timeout=60)


def test_a_timer_still_deletes_after_the_client_is_closed(
        gateway_factory, upstream: Sandbox) -> None:
    gateway: Gateway = gateway_factory()
    cloud = GPUCloud(api_key=ADA, base_url=gateway.url)
    instance = launch(cloud, "outlives-close", delete_after=0.4)
    cloud.close()
    with GPUCloud(api_key=ADA, base_url=gateway.url) as observer:
        wait_for(lambda: observer.instances.get(instance.id).status in GONE, timeout=60)


def _open_clients(base_url: str) -> list[httpx.Client]:
    gc.collect()
    return [c for c in gc.get_objects()
            if isinstance(c, httpx.Client) and not c.is_closed and str(c.base_url) == base_url]


def test_async_client_closes_its_sync_twin_and_timers_keep_working(gateway_factory) -> None:
    gateway: Gateway = gateway_factory()

    async def main() -> tuple[str, str]:
        cloud = AsyncGPUCloud(api_key=ADA, base_url=gateway.url)
        first, second = [await alaunch(cloud, name, delete_after=after)
                         for name, after in (("twin-1", 0.2), ("twin-2", 5.0))]
        twin = cloud._twin  # the timers' routes are sent through it
        assert twin is not None
        await cloud.aclose()
        assert twin.driver.http.is_closed  # closed with the client, not leaked
        return first.id, second.id

    first, second = asyncio.run(main())
    assert _open_clients(str(httpx.URL(gateway.url))) == []
    with GPUCloud(api_key=ADA, base_url=gateway.url) as observer:
        for made in (first, second):  # the second fires after aclose()
            wait_for(lambda made=made: observer.instances.get(made).status in GONE, timeout=60)
