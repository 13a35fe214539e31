"""Auto-delete timers, kept by a gateway (or the sandbox service), never by this process."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from datetime import datetime, timedelta, timezone

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


def test_sandbox_timers_are_kept_by_the_service_and_outlive_the_client(sandbox, observer) -> None:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    cloud.sandbox = sandbox  # as connect() does
    assert cloud.auto_delete.where == "sandbox service"
    # Timers long enough that a busy machine cancels and extends them before they fire.
    kept = launch(cloud, "service-kept", delete_after=30)
    longer = launch(cloud, "service-extended", delete_after=2)
    gone = launch(cloud, "service-timed", delete_after=0.4)
    left = cloud.auto_delete.remaining(gone.id)
    assert left is None or 0 < left <= 0.4  # None: already fired on a busy machine
    assert cloud.auto_delete.cancel(kept.id) and not cloud.auto_delete.cancel(kept.id)
    before = cloud.auto_delete.remaining(longer.id)
    cloud.auto_delete.extend(longer.id, 3)
    after = cloud.auto_delete.remaining(longer.id)
    assert before is not None and after is not None and after > before + 2.5
    longer_due = time.monotonic() + after
    cloud.close()  # the client (the kernel, say) is gone: the service still deletes on time
    observer.sandbox = sandbox
    wait_for(lambda: observer.instances.get(gone.id).status in ("deleting", "deleted"),
             timeout=60)
    assert observer.instances.get(kept.id).status == "active"
    status = observer.instances.get(longer.id).status
    if time.monotonic() < longer_due:  # read before its extended time (a busy machine may not)
        assert status == "active"
    wait_for(lambda: observer.instances.get(longer.id).status in ("deleting", "deleted"),
             timeout=60)
    assert observer.auto_delete.deadlines() == {}
    with pytest.raises(InvalidInputError, match="has no auto-delete timer to extend"):
        observer.auto_delete.extend(kept.id, 10)


def test_a_service_timer_outlives_a_restart_of_the_service(sandbox_factory, tmp_path) -> None:
    state = tmp_path / "state.db"
    first = sandbox_factory(state=state)
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    cloud.sandbox = first
    instance = launch(cloud, "durable-timer", delete_after=1.5)
    first.stop()
    second = sandbox_factory(state=state)
    again = GPUCloud(api_key=second.api_key, base_url=second.management_url)
    again.sandbox = second
    left = again.auto_delete.remaining(instance.id)
    assert left is None or 0 < left <= 1.5  # None: already due on a busy machine
    wait_for(lambda: again.instances.get(instance.id).status in ("deleting", "deleted"),
             timeout=60)

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


def test_a_timer_due_while_the_service_was_down_bills_only_up_to_its_due_time(
        sandbox_factory, tmp_path) -> None:
    state = tmp_path / "state.db"
    first = sandbox_factory(state=state)  # deleting lasts 0.2 s
    cloud = GPUCloud(api_key=first.api_key, base_url=first.management_url)
    cloud.sandbox = first
    instance = launch(cloud, "overdue", delete_after=1.0)
    cloud.instances.wait_until_active(instance.id, timeout=10)
    activated = next(i for i in cloud.instances.list() if i.id == instance.id).updated_at
    due = cloud.auto_delete.deadlines()[instance.id]
    first.stop()
    time.sleep(max((due - datetime.now(timezone.utc)).total_seconds(), 0) + 3.0)  # down, past due

    second = sandbox_factory(state=state)
    again = GPUCloud(api_key=second.api_key, base_url=second.management_url)
    again.sandbox = second
    restarted = datetime.now(timezone.utc)
    wait_for(lambda: again.instances.get(instance.id).status == "deleted", timeout=60)
    ended = again.instances.get(instance.id).deleted_at
    assert ended is not None and timedelta(0) <= ended - due <= timedelta(seconds=1)
    assert restarted - ended > timedelta(seconds=2)  # not the restart time
    assert abs((again.spend().set_index("_id").loc[instance.id, "billedUntil"] - due)
               .total_seconds()) <= 1.0
    billed = httpx.get(f"{second.management_url}/sandbox/status",
                       headers={"x-api-key": second.api_key}).json()["spend"]
    hours = (ended - activated).total_seconds() / 3600
    assert billed == pytest.approx(hours * instance.hourly_price, abs=2e-6)
