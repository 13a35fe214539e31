"""Auto-delete timers against the sandbox, with times in fractions of a second."""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from helpers import alaunch, launch, wait_for

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.errors import InvalidInputError


def status_after(cloud: GPUCloud, instance_id: str, seconds: float) -> str:
    time.sleep(seconds)
    return cloud.instances.get(instance_id).status


def test_auto_delete_fires(cloud: GPUCloud) -> None:
    instance = launch(cloud, "timed", delete_after=1.0)
    left = cloud.auto_delete.remaining(instance.id)
    assert left is not None and 0 < left <= 1.0
    due = time.monotonic() + left
    status = cloud.instances.get(instance.id).status
    if time.monotonic() < due:  # read before the timer was due (a busy machine may be later)
        assert status != "deleting"
    wait_for(lambda: instance.id in cloud.auto_delete.deleted, timeout=60)  # and confirmed
    assert cloud.instances.get(instance.id).status in ("deleting", "deleted")
    assert cloud.auto_delete.remaining(instance.id) is None


def test_auto_delete_cancelled_keeps_the_instance(cloud: GPUCloud) -> None:
    instance = launch(cloud, "kept", delete_after=timedelta(seconds=2))
    assert cloud.auto_delete.cancel(instance.id)  # long before it is due, even on a busy machine
    assert status_after(cloud, instance.id, 2.5) == "active"
    assert not cloud.auto_delete.cancel(instance.id)


def test_auto_delete_extended(cloud: GPUCloud) -> None:
    instance = launch(cloud, "extended", delete_after=1.0)
    cloud.auto_delete.extend(instance.id, 1.0)
    left = cloud.auto_delete.remaining(instance.id)
    assert left is not None and left > 1.0
    due = time.monotonic() + left
    status = status_after(cloud, instance.id, 1.2)  # past the first time
    if time.monotonic() < due:  # read before the extended time (a busy machine may not)
        assert status == "active"
    wait_for(lambda: cloud.instances.get(instance.id).status in ("deleting", "deleted"),
             timeout=60)


def test_manual_delete_cancels_the_timer(cloud: GPUCloud) -> None:
    instance = launch(cloud, "manual", delete_after=30)
    cloud.instances.delete(instance.id)
    assert cloud.auto_delete.remaining(instance.id) is None
    assert cloud.spend().set_index("_id").loc[instance.id, "autoDeleteAt"] is None


@pytest.mark.parametrize("bad", [-1, 0, "soon", True])
def test_bad_delete_after_is_refused_before_sending(cloud: GPUCloud, bad: object) -> None:
    with pytest.raises(InvalidInputError, match="delete_after must be a positive number"):
        launch(cloud, "bad", delete_after=bad)
    assert cloud.instances.list() == []


def test_spend_shows_the_deadline(cloud: GPUCloud) -> None:
    instance = launch(cloud, "deadline", delete_after=60)
    deadline = cloud.spend().set_index("_id").loc[instance.id, "autoDeleteAt"]
    assert deadline is not None
    cloud.auto_delete.cancel_all()


def test_async_client_auto_delete(sandbox) -> None:
    async def main() -> str:
        async with AsyncGPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
            instance = await alaunch(cloud, "async-timed", delete_after=0.3)
            deadline = asyncio.get_running_loop().time() + 60  # a condition, not a clock
            while (status := (await cloud.instances.get(instance.id)).status) not in (
                    "deleting", "deleted") and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)
            return status

    assert asyncio.run(main()) in ("deleting", "deleted")


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

def test_a_timer_still_deletes_after_the_client_is_closed(sandbox, observer: GPUCloud) -> None:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    instance = launch(cloud, "outlives-close", delete_after=0.4)
    cloud.close()
    wait_for(lambda: instance.id in cloud.auto_delete.deleted, timeout=60)  # and confirmed
    assert observer.instances.get(instance.id).status in ("deleting", "deleted")
    assert cloud.auto_delete.failures == {}


BROKE = ("The delete could not be sent (RuntimeError: transport broke); the instance may still "
         "be billing.")


class DeleteBreaks(httpx.HTTPTransport):
    """The real transport, except that a DELETE raises what no server can: a plain bug."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            raise RuntimeError("transport broke")
        return super().handle_request(request)


def test_every_exception_in_a_timer_is_recorded(sandbox, observer: GPUCloud,
                                                caplog: pytest.LogCaptureFixture) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  transport=DeleteBreaks()) as cloud:
        instance = launch(cloud, "unlucky", delete_after=0.3)
        assert status_after(observer, instance.id, 0.9) == "active"
        assert cloud.auto_delete.failures == {instance.id: BROKE}
        assert cloud.auto_delete.remaining(instance.id) is None
    assert f"Auto-delete of instance {instance.id} failed: {BROKE}" in caplog.text


def _open_clients(base_url: str) -> list[httpx.Client]:
    gc.collect()
    return [c for c in gc.get_objects()
            if isinstance(c, httpx.Client) and not c.is_closed and str(c.base_url) == base_url]


def test_async_client_timers_leave_no_http_client_open(sandbox) -> None:
    async def main() -> AsyncGPUCloud:
        async with AsyncGPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
            instance = await alaunch(cloud, "async-timed", delete_after=0.2)
            deadline = time.monotonic() + 60  # fired and confirmed, however busy the machine
            while instance.id not in cloud.auto_delete.deleted and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert instance.id in cloud.auto_delete.deleted
        return cloud

    cloud = asyncio.run(main())  # kept alive: a client it still held would count below
    assert cloud.auto_delete.failures == {}
    assert _open_clients(str(httpx.URL(sandbox.management_url))) == []


def test_every_failure_of_a_timer_is_recorded(sandbox_factory) -> None:
    sandbox = sandbox_factory()
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url, max_retries=0)
    instance = launch(cloud, "unreachable", delete_after=0.3)
    sandbox.stop()  # the cloud is gone when the timer fires
    deadline = time.monotonic() + 10
    while instance.id not in cloud.auto_delete.failures and time.monotonic() < deadline:
        time.sleep(0.05)
    cloud.close()
    assert instance.id not in cloud.auto_delete.deleted
    reason = cloud.auto_delete.failures[instance.id]
    assert reason and "\n" not in reason


def test_a_timer_records_errors_that_are_not_the_clouds() -> None:
    from gpucloud_nb.client.autodelete import AutoDelete

    def broken(instance_id: str) -> None:
        raise RuntimeError("Cannot send a request, as the client has been closed.")

    timers = AutoDelete(broken)
    timers.schedule("i-1", 0.05)
    deadline = time.monotonic() + 30
    while "i-1" not in timers.failures and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "RuntimeError" in timers.failures["i-1"]
    assert "may still be billing" in timers.failures["i-1"]
    assert timers.remaining("i-1") is None


def test_async_client_closes_its_timer_twin_and_timers_keep_working(sandbox,
                                                                   observer: GPUCloud) -> None:
    async def main() -> tuple[str, str]:
        cloud = AsyncGPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
        first, second = [await alaunch(cloud, name, delete_after=after)
                         for name, after in (("twin-1", 0.2), ("twin-2", 5.0))]
        deadline = time.monotonic() + 60
        while first.id not in cloud.auto_delete.deleted and time.monotonic() < deadline:
            await asyncio.sleep(0.05)     # the first timer made the sync twin
        twin = cloud._twin
        assert twin is not None
        await cloud.aclose()
        assert second.id not in cloud.auto_delete.deleted  # it fires after aclose()
        assert twin.driver.http.is_closed  # closed with the client, not leaked
        return first.id, second.id

    first, second = asyncio.run(main())
    assert observer.instances.get(first).status in ("deleting", "deleted")
    wait_for(lambda: observer.instances.get(second).status in ("deleting", "deleted"),
             timeout=60)


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


class NeverDeletes(httpx.HTTPTransport):
    """A cloud that accepts every delete (204) and never performs it."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(204)
        return super().handle_request(request)


def test_a_timed_delete_the_cloud_never_performs_is_a_failure(sandbox, observer: GPUCloud) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  transport=NeverDeletes()) as cloud:
        cloud._core.confirm_seconds = 1.0  # a minute by default
        instance = launch(cloud, "never-deleted", delete_after=0.2)
        deadline = time.monotonic() + 10
        while instance.id not in cloud.auto_delete.failures and time.monotonic() < deadline:
            time.sleep(0.05)
        reason = cloud.auto_delete.failures[instance.id]
        assert reason.startswith(f"The cloud accepted the timed delete of instance {instance.id}, "
                                 "but it is still active ")
        assert reason.endswith("it may still be billing; delete it by hand.")
        assert instance.id not in cloud.auto_delete.deleted
    assert observer.instances.get(instance.id).status == "active"


def test_the_confirmation_waits_a_minute_by_default() -> None:
    from gpucloud_nb.client._core import DELETE_CONFIRM_SECONDS

    assert DELETE_CONFIRM_SECONDS == 60
