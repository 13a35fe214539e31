"""GPUCloudCluster under Dask's ``adapt`` (and ``scale``) never leaves the scheduler's instance
billing with no worker on it while another instance runs (#40): a real Dask cluster on sandbox
instances, its scheduler and workers over real SSH."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import wait_for

distributed = pytest.importorskip("distributed")

from gpucloud_nb.cluster import GPUCloudCluster  # noqa: E402  (needs distributed)

LIVE = ("pending", "active")


pytestmark = pytest.mark.usefixtures("dask_home")  # see tests/conftest.py


@pytest.fixture
def cloud(sandbox_factory: Callable[..., Sandbox]) -> Iterator[GPUCloud]:
    sandbox = sandbox_factory(launch_seconds=0.3, delete_seconds=0.2)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as client:
        client.sandbox = sandbox
        yield client


def live_ids(cloud: GPUCloud) -> set[str]:
    return {i.id for i in cloud.instances.list() if i.status in LIVE}


def worker_names(cluster: GPUCloudCluster) -> set[object]:
    return {w["name"] for w in cluster.scheduler_info.get("workers", {}).values()}


def watch_until(cloud: GPUCloud, cluster: GPUCloudCluster, scheduler_id: str,
                done: Callable[[set[str], set[object]], bool], seen: list[str]) -> None:
    """Poll until ``done(live instance ids, worker names)``; record every moment at which the
    scheduler's instance had no worker while another instance was live."""
    def check() -> bool:
        live, names = live_ids(cloud), worker_names(cluster)
        if scheduler_id in live and len(live) > 1 and 0 not in names and names:
            seen.append(f"live {sorted(live)}, workers {sorted(map(str, names))}")
        return done(live, names)
    wait_for(check, timeout=90, what=lambda: f"live {live_ids(cloud)}, workers "
                                             f"{worker_names(cluster)}, notices {cluster.notices}")


def test_adapt_down_retires_the_newest_worker_not_the_one_beside_the_scheduler(
        cloud: GPUCloud) -> None:
    """Dask's own choice would retire worker 0 (it holds no data, the other does), leaving the
    scheduler's instance and the other's both billing for one worker. Ours retires the other
    one (its data moved to worker 0 first) and deletes its instance."""
    with GPUCloudCluster(cloud, 2, name="home") as cluster, \
            distributed.Client(cluster) as client:
        scheduler_id, other_id = cluster.instance_ids
        other = next(a for a, w in client.scheduler_info()["workers"].items() if w["name"] == 1)
        data = client.scatter(b"x" * 2_000_000, workers=[other])
        wait_for(lambda: client.who_has(data).get(data.key) == (other,), timeout=30)
        seen: list[str] = []
        cluster.adapt(minimum=1, maximum=2, interval="200ms", wait_count=1)
        watch_until(cloud, cluster, scheduler_id,
                    lambda live, names: live == {scheduler_id} and names == {0}, seen)
        assert not seen, seen
        assert other_id not in live_ids(cloud)
        assert client.gather(data) == b"x" * 2_000_000  # moved, not lost
        time.sleep(1.5)  # several adapt rounds at the minimum: it stays as it is
        assert worker_names(cluster) == {0} and live_ids(cloud) == {scheduler_id}
    assert not live_ids(cloud)


def test_adapt_to_zero_keeps_the_worker_on_the_schedulers_instance(cloud: GPUCloud) -> None:
    """With ``minimum=0`` the other instances go; the worker beside the scheduler stays, since
    its instance bills for the scheduler either way."""
    with GPUCloudCluster(cloud, 3, name="zero") as cluster:
        scheduler_id = cluster.instance_ids[0]
        seen: list[str] = []
        cluster.adapt(minimum=0, maximum=3, interval="200ms", wait_count=1)
        watch_until(cloud, cluster, scheduler_id,
                    lambda live, names: live == {scheduler_id} and names == {0}, seen)
        assert not seen, seen


def test_scale_up_after_scale_0_puts_the_first_worker_back_beside_the_scheduler(
        cloud: GPUCloud) -> None:
    with GPUCloudCluster(cloud, 2, name="back") as cluster:
        scheduler_id = cluster.instance_ids[0]
        cluster.scale(0)
        wait_for(lambda: not worker_names(cluster) and live_ids(cloud) == {scheduler_id},
                 timeout=60)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=90)
        live = live_ids(cloud)
        assert scheduler_id in live and len(live) == 2 and 0 in worker_names(cluster)
        cluster.scale(1)  # the newest goes, not the one beside the scheduler
        wait_for(lambda: worker_names(cluster) == {0} and live_ids(cloud) == {scheduler_id},
                 timeout=60)
    assert not live_ids(cloud)
