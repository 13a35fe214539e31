"""The Lab poller's GPU use, busy kernels reported as use, idle clocks and delete confirmations,
against sandboxes and a gateway in front of one, over real HTTP and SSH (the poller runs
in-process, on its own event loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from helpers import ADA, UPSTREAM_KEY, launch_active, wait_for
from poller_helpers import row, run, until

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.lab.idle import CONFIRM, busy_instance_ids
from gpucloud_nb.lab.poller import Poller
from gpucloud_nb.sandbox import Sandbox

GONE = ("deleting", "deleted")
LOOP = "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"


pytestmark = pytest.mark.usefixtures("own_home")  # see tests/conftest.py

def polling(sandbox: Sandbox, *, as_sandbox: bool, transport: Any = None,
            busy: Callable[[], set[str]] | None = None, confirm: float = CONFIRM,
            key: str | None = None) -> Poller:
    def connect() -> AsyncGPUCloud:
        cloud = AsyncGPUCloud(api_key=key or sandbox.api_key, base_url=sandbox.management_url,
                              transport=transport, timeout=5, max_retries=1)
        if as_sandbox:
            cloud.sandbox = sandbox
        return cloud

    poller = Poller(connect, fast=1.0, slow=1.0, busy=busy, confirm=confirm)
    return poller




def test_busy_kernels_name_their_instances() -> None:
    kernels = [("busy", {"instance_id": "a"}), ("idle", {"instance_id": "b"}), ("busy", {})]
    assert busy_instance_ids(kernels) == {"a"}


@pytest.mark.slow  # 20-60 s: the full run has it, the fast lane does not
def test_rows_show_gpu_use_and_the_gateways_idle_clock_and_keep_resets_it(
        gateway_factory: Callable[..., Gateway]) -> None:
    """The Lab poller through a gateway (as Lab's personal one): GPU use read by the gateway over
    SSH, its idle clock, the warning halfway, Keep, and the delete it makes itself."""
    gateway = gateway_factory()
    cloud = GPUCloud(api_key=ADA, base_url=gateway.url)
    busy = launch_active(cloud, "busy", delete_when_idle=timedelta(seconds=3)).id
    cloud.instances.run(busy, LOOP)
    idle = launch_active(cloud, "idle", delete_when_idle=timedelta(seconds=16)).id

    def connect() -> AsyncGPUCloud:
        return AsyncGPUCloud(api_key=ADA, base_url=gateway.url, timeout=5, max_retries=1)

    async def body(poller: Poller) -> None:
        seen = await until(poller, lambda s: (row(s, busy).get("gpu") or {}).get("util", 0) >= 50
                           and len(row(s, busy)["gpu"]["history"]) >= 2, 60)
        assert row(seen, busy)["idle"]["by"] == "the gateway"
        warned = await until(poller, lambda s: (row(s, idle).get("idle") or {}).get("warning"), 60)
        assert row(warned, idle)["idle"]["halfway"] and row(warned, idle)["status"] == "active"
        await poller.keep(idle)
        kept = await until(poller, lambda s: not row(s, idle)["idle"]["warning"], 30)
        assert row(kept, idle)["idle"]["idleSeconds"] < 8
        gone = await until(poller, lambda s: row(s, idle)["status"] in GONE, 60)
        assert row(gone, busy)["status"] == "active"  # past its 3 s limit: the loop keeps it
        assert gone["deleteProblems"] == []

    run(Poller(connect, fast=1.0, slow=1.0), body)
    cloud.close()


def test_through_a_gateway_a_busy_kernel_keeps_its_instance_and_an_idle_one_lets_it_go(
        gateway_factory: Callable[..., Gateway], upstream: Sandbox) -> None:
    """#36: a kernel executing code is use, reported to the gateway by the Lab's poller; an idle
    kernel is not. The gateway alone deletes: once the poller stops, nothing else is needed."""
    gateway = gateway_factory()
    cloud = GPUCloud(api_key=ADA, base_url=gateway.url)
    limit = 3.0  # set once the poller runs (launching both may take longer than that)
    busy = launch_active(cloud, "kernel-busy", delete_when_idle=600).id
    idle = launch_active(cloud, "kernel-idle", delete_when_idle=600).id
    reported: list[str] = []

    def kernels() -> set[str]:  # what the Jupyter server's kernel manager says: busy on one
        reported.append(busy)
        return {busy}

    def connect() -> AsyncGPUCloud:
        return AsyncGPUCloud(api_key=ADA, base_url=gateway.url, timeout=5, max_retries=1)

    async def body(poller: Poller) -> None:
        first = await until(poller, lambda s: row(s, idle).get("idle") is not None
                            and row(s, busy).get("idle") is not None and reported, 30)
        assert row(first, idle)["idle"]["by"] == "the gateway"
        for id in (busy, idle):
            cloud.idle_delete.watch(id, limit)
        gone = await until(poller, lambda s: row(s, idle)["status"] in GONE, limit + 30)
        assert row(gone, busy)["status"] == "active"  # its idle clock never reached its limit
        since = time.monotonic()
        while time.monotonic() - since < limit + 2:  # a whole limit more, still kept
            assert row(await poller.snapshot(), busy)["status"] == "active"
            await asyncio.sleep(0.5)

    run(Poller(connect, fast=1.0, slow=1.0, busy=kernels), body)
    assert reported  # the poller asked, and reported the busy kernel's instance
    with httpx.Client(base_url=upstream.management_url,
                      headers={"x-api-key": UPSTREAM_KEY}) as real:
        def status(id: str) -> str:
            return str(real.get(f"/gpu-cloud/instances/{id}").json()["status"])

        assert status(idle) in GONE and status(busy) == "active"
        cloud.close()  # no Lab, no kernel, no client: the gateway deletes the one now idle
        wait_for(lambda: status(busy) in GONE, timeout=limit + 60)


class ReportsActive(httpx.AsyncHTTPTransport):
    """A list that keeps showing deleted instances as active: the delete never shows."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.method != "GET" or request.url.path != "/gpu-cloud/instances":
            return response
        body = (await response.aread()).replace(b'"deleting"', b'"active"').replace(
            b'"deleted"', b'"active"')
        return httpx.Response(response.status_code, headers={"content-type": "application/json"},
                              content=body)


def test_a_delete_that_never_shows_turns_red(gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    cloud = GPUCloud(api_key=ADA, base_url=gateway.url)
    instance = launch_active(cloud, "stuck", delete_when_idle=600).id
    confirm = 3.0  # the default is a minute

    def connect() -> AsyncGPUCloud:
        return AsyncGPUCloud(api_key=ADA, base_url=gateway.url, transport=ReportsActive(),
                             timeout=5, max_retries=1)

    async def body(poller: Poller) -> None:
        await until(poller, lambda s: row(s, instance).get("idle") is not None, 30)
        cloud.idle_delete.watch(instance, 3)  # the poller sees this limit before it is due
        await until(poller, lambda s: (row(s, instance).get("idle") or {}).get(
            "limitSeconds") == 3, 30)
        start = time.monotonic()
        red = await until(poller, lambda s: s["deleteProblems"], 3 + 2 + confirm + 60)
        assert time.monotonic() - start >= confirm - 1
        sentence = row(red, instance)["deleteProblem"]
        assert red["deleteProblems"] == [sentence] and row(red, instance)["status"] == "active"
        assert sentence.startswith("stuck was to be deleted by its idle limit at ")
        assert "is still active" in sentence and sentence.endswith("delete it by hand.")
        assert ADA not in sentence and UPSTREAM_KEY not in sentence

    run(Poller(connect, fast=1.0, slow=1.0, confirm=confirm), body)
    assert CONFIRM == 60
    cloud.close()
