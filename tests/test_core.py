"""A client's core gets what its watchers need when it is built (its ``Blocking`` reach), and
builds every watcher from it: nothing is filled in or swapped in afterwards."""

from __future__ import annotations

import httpx
from helpers import launch, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb._secrets import Secret
from gpucloud_nb.client._core import Blocking, Core
from gpucloud_nb.client._ops import RetryPolicy, SyncDriver
from gpucloud_nb.client.autodelete import AutoDelete, ServiceAutoDelete
from gpucloud_nb.client.budgets import ServiceBudgets, UnkeptBudgets
from gpucloud_nb.client.idle import KernelIdleDelete, ServiceIdleDelete
from gpucloud_nb.sandbox import Sandbox


def test_a_core_built_with_its_reach_deletes_on_time_and_confirms(sandbox: Sandbox,
                                                                  observer: GPUCloud) -> None:
    sent: list[tuple[str, str]] = []

    def send(method: str, path: str, body: object) -> object:
        sent.append((method, path))
        return {}

    reach = Blocking(get=observer.instances.get, delete=observer.instances.delete, send=send)
    with httpx.Client(base_url=sandbox.management_url) as http:
        core = Core(SyncDriver(http), Secret(sandbox.api_key), RetryPolicy(), None, 60, reach)
        assert isinstance(core.auto_delete, AutoDelete)
        assert isinstance(core.idle_delete, KernelIdleDelete)
        assert isinstance(core.budgets, UnkeptBudgets)  # the real cloud, no gateway: nobody
        instance = launch(observer, "timed")
        core.auto_delete.schedule(instance.id, 0.2)
        wait_for(lambda: instance.id in core.auto_delete.deleted, timeout=60)  # confirmed too
        assert core.auto_delete.failures == {}
        assert observer.instances.get(instance.id).status in ("deleting", "deleted")

        kernel_idle = core.idle_delete
        core.use_sandbox(sandbox)  # the same reach builds the service's kind
        assert isinstance(core.auto_delete, ServiceAutoDelete)
        assert isinstance(core.idle_delete, ServiceIdleDelete)
        assert isinstance(core.budgets, ServiceBudgets)
        core.register_keys(["ssh-ed25519 AAAA test"])
        assert sent == [("POST", "/sandbox/ssh-keys")]
        core.use_sandbox(None)
        assert isinstance(core.budgets, UnkeptBudgets)
        assert isinstance(core.idle_delete, KernelIdleDelete)
        assert core.idle_delete is not kernel_idle
