"""delete_when_idle= at create, and cloud.idle_delete, against the sandbox (seconds, not minutes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client.idle import LabIdleDelete, limits_path
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.idle import POLL


@pytest.fixture
def box(sandbox: Sandbox) -> Iterator[GPUCloud]:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    cloud.sandbox = sandbox  # as connect() does: the service watches
    yield cloud
    cloud.close()


def launch(cloud: GPUCloud, name: str = "idle", **extra: Any) -> Any:
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    return cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]}, **extra)


def wait_gone(cloud: GPUCloud, instance_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cloud.instances.get(instance_id).status in ("deleting", "deleted"):
            return True
        time.sleep(0.05)
    return False


def test_delete_when_idle_deletes_an_unused_sandbox_instance(box: GPUCloud,
                                                             observer: GPUCloud) -> None:
    instance = launch(box, delete_when_idle=timedelta(seconds=2))
    assert box.idle_delete.where == "sandbox service"
    state = box.idle_delete.states()[instance.id]
    assert state.limit == 2 and 0 < state.deletes_in <= 2 and not state.warning
    box.instances.wait_until_active(instance.id, timeout=30)
    assert wait_gone(observer, instance.id, 2 + POLL + 3)
    assert box.idle_delete.states() == {}


def test_keep_and_cancel(box: GPUCloud) -> None:
    instance = launch(box, delete_when_idle=3 / 60)  # minutes: three seconds
    box.instances.wait_until_active(instance.id, timeout=30)
    time.sleep(1.8)
    warned = box.idle_delete.states()[instance.id]
    assert warned.warning and warned.idle >= 1.5
    kept = box.idle_delete.keep(instance.id)
    assert not kept.warning and kept.idle < 0.5 and kept.delete_at > warned.delete_at
    assert box.idle_delete.cancel(instance.id) and not box.idle_delete.cancel(instance.id)
    time.sleep(3 + POLL)
    assert box.instances.get(instance.id).status == "active"


@pytest.mark.parametrize("bad", [0, -5, "30", True, float("nan"), float("inf")])
def test_a_bad_limit_is_refused_before_anything_is_sent(box: GPUCloud, bad: object) -> None:
    with pytest.raises(InvalidInputError, match="delete_when_idle must be a positive number of "
                                                "minutes or a timedelta"):
        launch(box, delete_when_idle=bad)
    assert box.instances.list() == []


def test_on_the_real_cloud_the_limit_goes_to_the_lab_extensions_file(sandbox: Sandbox) -> None:
    # A client that does not know it talks to the sandbox behaves as on the real cloud.
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        assert isinstance(cloud.idle_delete, LabIdleDelete)
        assert "JupyterLab" in cloud.idle_delete.where
        instance = launch(cloud, delete_when_idle=30)
        limits = LabIdleDelete(sandbox.management_url).limits()
        assert limits[instance.id]["seconds"] == 1800
        assert limits_path(sandbox.management_url).is_file()
        before = limits[instance.id]["keptAt"]
        time.sleep(0.01)
        cloud.idle_delete.keep(instance.id)
        assert LabIdleDelete(sandbox.management_url).limits()[instance.id]["keptAt"] > before
        cloud.instances.delete(instance.id)  # a deleted instance is watched no more
        assert instance.id not in LabIdleDelete(sandbox.management_url).limits()
        with pytest.raises(InvalidInputError, match="is not deleted when idle"):
            cloud.idle_delete.keep(instance.id)


def test_the_async_client_takes_delete_when_idle(sandbox: Sandbox) -> None:
    async def main() -> str:
        async with AsyncGPUCloud(api_key=sandbox.api_key,
                                 base_url=sandbox.management_url) as cloud:
            cloud.sandbox = sandbox
            offer = (await cloud.instances.offers(deployment_type="vm", available=True))[0]
            instance = await cloud.instances.create(
                name="async-idle", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
                region=offer.available_regions[0], vm={"os": offer.configuration.os[0]},
                delete_when_idle=timedelta(seconds=1))
            return instance.id

    instance_id = asyncio.run(main())
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        assert wait_gone(cloud, instance_id, 1 + POLL + 4)
