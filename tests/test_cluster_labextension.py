"""dask-labextension's sidebar builds our cluster from its ``labextension.factory`` config, as
its server extension does (its cluster manager, on the Jupyter server's event loop, with
``asynchronous=True``): New, Scale, Adapt, Shutdown, against a sandbox over real HTTP and SSH."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox import Sandbox

pytest.importorskip("distributed")
manager_module = pytest.importorskip("dask_labextension.manager")
dask = pytest.importorskip("dask")

#: The configuration docs/dask-labextension.md gives (``~/.config/dask/labextension.yaml``).
FACTORY = {"module": "gpucloud_nb.cluster", "class": "GPUCloudCluster", "args": [],
           "kwargs": {"n_workers": 1}}


pytestmark = pytest.mark.usefixtures("dask_home")  # see tests/conftest.py


def test_the_sidebars_new_scale_adapt_and_shutdown_rent_resize_and_delete_our_cluster(
        sandbox_factory: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = sandbox_factory(launch_seconds=0.3, delete_seconds=0.2)
    # The Jupyter server's environment: the cloud connect() finds (here the sandbox, directly).
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    monkeypatch.setenv("GPUCLOUD_GATEWAY", "off")

    async def sidebar() -> tuple[dict, dict, list[str]]:
        with dask.config.set({"labextension.factory": FACTORY}):
            manager = manager_module.DaskClusterManager()
            made = await manager.start_cluster(configuration={})  # the "New" button
            cluster = manager._clusters[made["id"]]
            ids = list(cluster.instance_ids)
            await manager.scale_cluster(made["id"], 2)  # the "Scale" dialog
            deadline = time.monotonic() + 120
            while manager.get_cluster(made["id"])["workers"] < 2:
                assert time.monotonic() < deadline, manager.get_cluster(made["id"])
                await asyncio.sleep(0.2)
            scaled = manager.get_cluster(made["id"])
            ids = list(cluster.instance_ids)
            adapted = manager.adapt_cluster(made["id"], 1, 1)  # the "Adapt" dialog
            assert adapted is not None and adapted["adapt"] == {"minimum": 1, "maximum": 1}
            # Dask's Adaptive picks the worker to retire (maybe the scheduler's instance's).
            while manager.get_cluster(made["id"])["workers"] > 1:
                assert time.monotonic() < deadline + 120, manager.get_cluster(made["id"])
                await asyncio.sleep(0.2)
            await manager.close_cluster(made["id"])  # the "Shutdown" button
            return made, scaled, ids

    made, scaled, ids = asyncio.run(sidebar())
    assert made["workers"] == 1 and made["name"] == "GPUCloudCluster 1"
    assert made["dashboard_link"].startswith("http://127.0.0.1:")
    assert made["scheduler_address"].startswith("tls://127.0.0.1:")
    assert scaled["workers"] == 2 and len(ids) == 2
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as observer:
        assert {i.id: i.status for i in observer.instances.list()} == dict.fromkeys(
            ids, "deleted")
