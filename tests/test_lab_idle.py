"""The Lab poller's GPU use, idle clocks and delete confirmations, against sandboxes over real
HTTP and SSH (the poller runs in-process, on its own event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from helpers import launch_active

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client.idle import KernelIdleDelete
from gpucloud_nb.client.idle_file import LOCK_WAIT, IdleLimits, account
from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.lab.idle import CONFIRM, busy_instance_ids
from gpucloud_nb.lab.poller import Poller
from gpucloud_nb.sandbox import Sandbox

LOOP = "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"


pytestmark = pytest.mark.usefixtures("own_home")  # see tests/conftest.py

def lab_file(sandbox: Sandbox, key: str | None = None) -> IdleLimits:
    """The idle limits (and heartbeat) of an account of ``sandbox``, its first key by default."""
    url = sandbox.management_url
    return IdleLimits(url, account(url, key or sandbox.api_key))


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


async def until(poller: Poller, predicate: Callable[[dict[str, Any]], Any],
                timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        snapshot = await poller.snapshot()
        if predicate(snapshot):
            return snapshot
        assert time.monotonic() < deadline, snapshot
        await asyncio.sleep(0.2)


def row(snapshot: dict[str, Any], instance_id: str) -> dict[str, Any]:
    return next((r for r in snapshot["instances"] if r["id"] == instance_id),
                {"status": "deleted"})


def run(poller: Poller, body: Callable[[Poller], Awaitable[None]]) -> None:
    async def main() -> None:
        try:
            await body(poller)
        finally:
            await poller.stop()

    asyncio.run(main())


def test_busy_kernels_name_their_instances() -> None:
    kernels = [("busy", {"instance_id": "a"}), ("idle", {"instance_id": "b"}), ("busy", {})]
    assert busy_instance_ids(kernels) == {"a"}


@pytest.mark.slow  # 20-35 s: the full run has it, the fast lane does not
def test_sandbox_rows_show_gpu_use_and_the_services_idle_clock_and_keep_resets_it(
        sandbox: Sandbox) -> None:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    cloud.sandbox = sandbox
    busy = launch_active(cloud, "busy", delete_when_idle=timedelta(seconds=3)).id
    cloud.instances.run(busy, LOOP)
    idle = launch_active(cloud, "idle", delete_when_idle=timedelta(seconds=16)).id

    async def body(poller: Poller) -> None:
        seen = await until(poller, lambda s: (row(s, busy).get("gpu") or {}).get("util", 0) >= 50
                           and len(row(s, busy)["gpu"]["history"]) >= 2, 20)
        assert row(seen, busy)["gpu"]["memoryMiB"] > 0
        assert row(seen, busy)["idle"]["by"] == "the sandbox service"
        warned = await until(poller, lambda s: (row(s, idle).get("idle") or {}).get("warning"), 16)
        assert row(warned, idle)["idle"]["halfway"] and row(warned, idle)["status"] == "active"
        assert row(warned, idle)["gpu"]["util"] < 5
        await poller.keep(idle)
        kept = await until(poller, lambda s: not row(s, idle)["idle"]["warning"], 8)
        assert row(kept, idle)["idle"]["idleSeconds"] < 3
        gone = await until(poller, lambda s: row(s, idle)["status"] in ("deleting", "deleted"), 22)
        assert row(gone, busy)["status"] == "active"  # past its 3 s limit: the loop keeps it
        assert gone["deleteProblems"] == []

    run(polling(sandbox, as_sandbox=True), body)
    cloud.close()


def test_a_busy_kernel_keeps_a_sandbox_instance(sandbox: Sandbox) -> None:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    cloud.sandbox = sandbox
    instance = launch_active(cloud, "kernel").id

    async def body(poller: Poller) -> None:
        await until(poller, lambda s: row(s, instance).get("gpu") is not None, 10)
        cloud.idle_delete.watch(instance, timedelta(seconds=3))  # nothing runs on it
        await asyncio.sleep(7)
        assert row(await poller.snapshot(), instance)["status"] == "active"

    run(polling(sandbox, as_sandbox=True, busy=lambda: {instance}), body)
    assert cloud.instances.get(instance).status == "active"
    cloud.close()


def test_on_the_real_cloud_the_poller_deletes_the_idle_and_keeps_the_busy(
        sandbox: Sandbox) -> None:
    # Clients that do not know they talk to a sandbox: the real cloud's path, over real SSH.
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    busy = launch_active(cloud, "busy", delete_when_idle=timedelta(seconds=2)).id
    cloud.instances.run(busy, LOOP)
    idle = launch_active(cloud, "idle", delete_when_idle=timedelta(seconds=2)).id

    async def body(poller: Poller) -> None:
        first = await until(poller, lambda s: row(s, idle).get("idle") is not None, 10)
        assert row(first, idle)["idle"]["by"] == "JupyterLab"
        assert idle in lab_file(sandbox).lab_watches()  # kernels' watchers stand aside
        start = time.monotonic()
        await until(poller, lambda s: row(s, idle)["status"] in ("deleting", "deleted"), 10)
        assert time.monotonic() - start <= 2 + 2 * poller.fast + 1
        await asyncio.sleep(2)
        snapshot = await poller.snapshot()
        assert row(snapshot, busy)["status"] == "active" and row(snapshot, busy)["gpu"]["util"] >= 50
        assert snapshot["deleteProblems"] == []

    assert lab_file(sandbox).lab_watches() == set()  # no heartbeat yet
    run(polling(sandbox, as_sandbox=False), body)
    cloud.close()


class NeverDeletes(httpx.AsyncHTTPTransport):
    """A cloud that accepts every delete and never performs it."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(204)
        return await super().handle_async_request(request)


def test_a_delete_the_cloud_never_performs_turns_red(sandbox: Sandbox) -> None:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    instance = launch_active(cloud, "stuck", delete_when_idle=timedelta(seconds=1)).id
    confirm = 3.0  # the default is a minute

    async def body(poller: Poller) -> None:
        start = time.monotonic()
        red = await until(poller, lambda s: s["deleteProblems"], 1 + 2 + confirm + 5)
        assert time.monotonic() - start >= confirm
        sentence = row(red, instance)["deleteProblem"]
        assert red["deleteProblems"] == [sentence] and row(red, instance)["status"] == "active"
        assert sentence.startswith("stuck was to be deleted by its idle limit at ")
        assert "is still active" in sentence and sentence.endswith("delete it by hand.")
        assert sandbox.api_key not in sentence

    run(polling(sandbox, as_sandbox=False, transport=NeverDeletes(), confirm=confirm), body)
    assert CONFIRM == 60
    cloud.instances.delete(instance)
    cloud.close()


def test_a_kernel_on_another_key_is_not_stood_aside_for_while_jupyterlab_runs(
        sandbox_factory: Callable[..., Sandbox], caplog: pytest.LogCaptureFixture) -> None:
    """#34: the limits and the heartbeat were one per cloud, so a kernel on key B stood aside
    for a JupyterLab on key A that cannot see B's instance (and counted it busy for ever)."""
    sandbox = sandbox_factory(keys=("key-b",), shared_shell=True)
    kernel_b = GPUCloud(api_key="key-b", base_url=sandbox.management_url)
    watcher = kernel_b.idle_delete
    assert isinstance(watcher, KernelIdleDelete)
    watcher.poll = 0.5
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as kernel_a:
        theirs = launch_active(kernel_a, "a-watched", delete_when_idle=600).id

    async def body(poller: Poller) -> None:
        await until(poller, lambda s: theirs in lab_file(sandbox).lab_watches(), 15)
        mine = launch_active(kernel_b, "b-idle", delete_when_idle=2).id
        # B's limit is in B's file only: A's JupyterLab neither sees it nor says it watches it.
        assert mine in lab_file(sandbox, "key-b").limits()
        assert mine not in lab_file(sandbox).limits()
        lab_file(sandbox).set(mine, 2.0)  # even a limit in A's file: A cannot see the instance
        start = time.monotonic()
        deadline = start + 2 + 0.5 + 20  # generous: a busy machine
        while mine not in watcher.deleted:
            assert time.monotonic() < deadline, "the kernel on key B stood aside"
            assert theirs in lab_file(sandbox).lab_watches()  # JupyterLab polls all along
            assert not watcher.lab_watches(mine)  # so it never says it watches it
            await asyncio.sleep(0.2)
        assert time.monotonic() - start >= 2 - 0.5

    run(polling(sandbox, as_sandbox=False), body)
    kernel_b.close()
    assert "key-b" not in " ".join(str(p) for p in lab_file(sandbox).path.parent.iterdir())


def test_the_keep_button_never_blocks_the_event_loop(sandbox: Sandbox) -> None:
    """#34: the Lab's Keep took the limits file's lock on Jupyter's event loop."""
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    instance = launch_active(cloud, "kept", delete_when_idle=600).id
    file = lab_file(sandbox)
    held = os.open(file.path.with_name(file.path.name + ".lock"), os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # a kernel of this user writing, for as long as it takes

    async def body(poller: Poller) -> None:
        await until(poller, lambda s: (row(s, instance).get("idle") or {}).get("by"), 15)
        gaps: list[float] = []

        async def tick() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.05)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.ensure_future(tick())
        try:
            with pytest.raises(GPUCloudError, match="stayed locked by another process"):
                await poller.keep(instance)
        finally:
            ticker.cancel()
        assert gaps and max(gaps) < LOCK_WAIT / 2  # the loop went on serving while the Keep waited
        os.close(held)  # the writer is done: Keep works
        await poller.keep(instance)
        assert row(await poller.snapshot(), instance)["status"] == "active"

    try:
        run(polling(sandbox, as_sandbox=False), body)
    finally:
        with contextlib.suppress(OSError):
            os.close(held)
    cloud.instances.delete(instance)
    cloud.close()
