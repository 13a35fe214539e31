"""delete_when_idle= at create, and cloud.idle_delete, kept by a gateway in front of the sandbox
(seconds, not minutes); the cloud directly, and the sandbox itself, refuse it. More of a gateway's
idle deletes: tests/test_gateway_idle.py and tests/test_lab_idle.py (a busy kernel reported as use)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from helpers import wait_for

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client.gateway import unkept
from gpucloud_nb.client.idle import UnkeptIdleDelete, parse_use
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA

POLL = 3.0  # the gateway's idle reader measures over SSH: generous on a loaded machine


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
    assert box.idle_delete.where == "gateway"
    state = box.idle_delete.states()[instance.id]
    assert state.limit == 2 and 0 < state.deletes_in <= 2 and not state.warning
    box.instances.wait_until_active(instance.id, timeout=30)
    assert wait_gone(observer, instance.id, 2 + POLL + 3)
    wait_for(lambda: box.idle_delete.states() == {}, timeout=30)  # the gateway saw it go


def test_keep_and_cancel(box: GPUCloud) -> None:
    instance = launch(box, delete_when_idle=3)  # seconds, as delete_after
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
                                                "seconds or a timedelta"):
        launch(box, delete_when_idle=bad)
    assert box.instances.list() == []


def test_the_cloud_directly_refuses_delete_when_idle_before_the_post(cloud: GPUCloud) -> None:
    """Without a gateway nothing would watch the limit: the create is refused unsent, and no
    file or thread of this process stands in."""
    threads = set(threading.enumerate())
    assert isinstance(cloud.idle_delete, UnkeptIdleDelete) and cloud.idle_delete.where == "nobody"
    with pytest.raises(InvalidInputError) as refused:
        launch(cloud, delete_when_idle=1800)
    assert str(refused.value) == unkept("delete_when_idle", at_create=True)
    assert cloud.instances.list() == []
    instance = launch(cloud)
    with pytest.raises(InvalidInputError, match="Nothing watches money without a gateway"):
        cloud.idle_delete.watch(instance.id, 1800)
    with pytest.raises(InvalidInputError, match="has no idle delete to keep"):
        cloud.idle_delete.keep(instance.id)
    assert cloud.idle_delete.states() == {} and not cloud.idle_delete.cancel(instance.id)
    # This package's threads (all named gpucloud…): an asyncio_N executor thread another test
    # of the same xdist worker left lazily starting is not this client's (seen once at load 12).
    assert {t.name for t in set(threading.enumerate()) - threads
            if t.name.startswith("gpucloud")} == set()


def test_the_async_client_takes_delete_when_idle(sandbox: Sandbox, box_gateway: Gateway) -> None:
    async def main() -> str:
        async with AsyncGPUCloud(api_key=ADA, base_url=box_gateway.url) as cloud:
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


def test_parse_use_reads_every_gpu_and_skips_noise() -> None:
    assert parse_use("100, 2048\n50, 0\n") == (75.0, 100.0, 2048.0)
    assert parse_use("No devices were found\n") is None
