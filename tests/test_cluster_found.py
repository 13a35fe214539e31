"""A GPUCloudCluster the Dask way: built with ``asynchronous=True``, found again by name from a
second Python process (``from_name``, and the ``dask_cluster_discovery`` entry point dask-ctl
reads), kept past its process with ``shutdown_on_close=False``, and deleted by its orphan timer
once no process keeps it. All over real HTTP and SSH against a sandbox."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, PERSONAL, wait_for
from tests.samples import one_offer

distributed = pytest.importorskip("distributed")

from gpucloud_nb.cluster import GPUCloudCluster  # noqa: E402  (needs distributed)
from gpucloud_nb.cluster.discovery import cluster_names, discover  # noqa: E402

LIVE = ("pending", "active")

# A second Python process that knows the sandbox as connect() would tell it (its URLs, key and
# home), so its SSH keys are the ones the sandbox already accepts.
PRELUDE = textwrap.dedent("""
    import json, os, types
    from gpucloud_nb import GPUCloud
    from gpucloud_nb.cluster import GPUCloudCluster
    box = json.loads(os.environ["TEST_SANDBOX"])
    front = json.loads(os.environ.get("TEST_GATEWAY") or "null")  # a gateway in front, if any
    cloud = GPUCloud(api_key=front["key"] if front else box["api_key"],
                     base_url=front["url"] if front else box["management_url"])
    cloud.sandbox = types.SimpleNamespace(**box)
""")


pytestmark = pytest.mark.usefixtures("dask_home")  # see tests/conftest.py


@pytest.fixture
def sandbox(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(launch_seconds=0.3, delete_seconds=0.2)


@pytest.fixture
def box(sandbox: Sandbox) -> Iterator[GPUCloud]:
    cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    cloud.sandbox = sandbox
    yield cloud
    cloud.close()


def second_process(sandbox: Sandbox, script: str, timeout: float = 180,
                   gateway_url: str | None = None) -> str:
    """Run ``script`` after :data:`PRELUDE` in a new interpreter (through ``gateway_url`` as
    ``ADA`` if given, as keyless ``connect()`` goes); its stdout."""
    handle = {name: getattr(sandbox, name) for name in (
        "management_url", "inference_url", "api_key", "inference_secret", "launch_seconds")}
    handle["home"] = str(sandbox.home) if sandbox.home is not None else None
    front = {"url": gateway_url, "key": ADA} if gateway_url else None
    env = dict(os.environ, TEST_SANDBOX=json.dumps(handle), TEST_GATEWAY=json.dumps(front))
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def live(cloud: GPUCloud, ids: list[str]) -> set[str]:
    return {i.id for i in cloud.instances.list() if i.id in ids and i.status in LIVE}


def test_asynchronous_true_starts_scales_and_closes_on_the_callers_loop(box: GPUCloud) -> None:
    async def use() -> tuple[list[str], int]:
        async with GPUCloudCluster(box, 2, name="awaited", asynchronous=True) as cluster:
            async with distributed.Client(cluster, asynchronous=True) as client:
                assert await client.submit(sum, [1, 2, 3]) == 6
            cluster.scale(3)
            await cluster._wait_for_workers(3, timeout=60)  # what wait_for_workers awaits
            return cluster.instance_ids, len(cluster.scheduler_info["workers"])

    ids, workers = asyncio.run(use())
    assert workers == 3 and len(ids) == 3
    assert not live(box, ids)


def test_a_second_process_finds_the_cluster_by_name_uses_it_and_closes_it(
        box: GPUCloud, sandbox: Sandbox) -> None:
    cluster = GPUCloudCluster(box, 2, name="relay")
    ids = cluster.instance_ids
    assert [box.instances.get(i).name for i in ids] == ["dask-relay-0", "dask-relay-1"]
    assert cluster_names(box) == ["relay"]
    out = second_process(sandbox, """
        from distributed import Client
        found = GPUCloudCluster.from_name("relay", cloud)
        with Client(found) as client:
            print(client.submit(lambda: 6 * 7).result(), len(client.scheduler_info()["workers"]))
        print(" ".join(found.instance_ids))
        found.close()  # as dask-ctl's delete does
    """)
    answer, listed = out.strip().splitlines()[-2:]
    assert answer == "42 2"  # the same two workers, taken over, not new ones
    assert sorted(listed.split()) == sorted(ids)
    wait_for(lambda: cluster.status.name == "closed", timeout=60,
             what=lambda: f"status {cluster.status.name}")
    assert {i.id: i.status for i in box.instances.list()} == dict.fromkeys(ids, "deleted")
    cluster.close()  # the first process's object: closed already, quietly


def test_from_name_of_no_such_cluster_is_one_sentence_and_deletes_nothing(box: GPUCloud) -> None:
    with pytest.raises(InvalidInputError) as refused:
        GPUCloudCluster.from_name("nowhere", box)
    assert str(refused.value) == ("No running cluster 'nowhere' on this cloud: no live instance "
                                  "is named 'dask-nowhere-0'.")


def test_discovery_entry_point_lists_the_running_cluster_as_dask_ctl_reads_it(
        box: GPUCloud, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """dask-ctl cannot run here: its last release (2024.1.0) and its main branch (1aed52e,
    2024-01-25) import ``install_signal_handlers`` from ``distributed.cli.utils`` at the top of
    ``dask_ctl/utils.py``, which its ``discovery``, ``lifecycle`` and ``cli`` modules import, and
    distributed removed that function (dask/distributed#9240), so ``import dask_ctl.discovery``
    raises ImportError with distributed 2026.8. Its protocol is exercised here as it runs it: the
    entry point of group ``dask_cluster_discovery``, an async iterator of ``(name, class)``;
    dask-ctl's own CLI runs in a second venv in tests/test_cluster_daskctl.py."""
    points = [p for p in importlib.metadata.entry_points(group="dask_cluster_discovery")
              if p.name == "gpucloud"]
    assert [p.value for p in points] == ["gpucloud_nb.cluster.discovery:discover"]
    assert points[0].load() is discover
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    monkeypatch.setenv("GPUCLOUD_GATEWAY", "off")

    async def names() -> list[tuple[str, object]]:
        return [found async for found in discover()]

    assert asyncio.run(names()) == []
    with GPUCloudCluster(box, 1, name="listed"):
        assert asyncio.run(names()) == [("listed", GPUCloudCluster)]
    assert asyncio.run(names()) == []


def test_dask_ctls_discover_clusters_steps_find_use_and_delete_the_cluster_inside_its_loop(
        box: GPUCloud, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """What dask-ctl's ``discover_clusters`` (and so ``dask-ctl list`` and ``delete``) does with
    the entry point, step by step: inside its running event loop, each ``(name, class)`` the
    discovery method yields becomes ``class.from_name(name)``, called synchronously there; the
    object it gives must work and its ``close()`` delete the cluster."""
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    monkeypatch.setenv("GPUCLOUD_GATEWAY", "off")
    # The user's own client, as a notebook's: its SSH key is the one connect() finds again.
    mine = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    cluster = GPUCloudCluster(mine, 2, name="ctl", shutdown_on_close=False)
    ids = cluster.instance_ids
    method = next(p for p in importlib.metadata.entry_points(group="dask_cluster_discovery")
                  if p.name == "gpucloud").load()

    async def discover_clusters() -> list[tuple[str, str, list[str]]]:
        seen = []
        async for name, cluster_class in method():
            found = cluster_class.from_name(name)  # as dask-ctl calls it, in its loop
            with distributed.Client(found) as client:
                answer = client.submit(lambda: 6 * 7).result()
            seen.append((name, f"{answer} {len(found.scheduler_info['workers'])}",
                         found.instance_ids))
            found.close()  # dask-ctl's delete
        return seen

    [(name, answer, found_ids)] = asyncio.run(discover_clusters())
    assert (name, answer) == ("ctl", "42 2") and sorted(found_ids) == sorted(ids)
    assert {i.id: i.status for i in box.instances.list()} == dict.fromkeys(ids, "deleted")
    wait_for(lambda: cluster.status.name == "closed", timeout=60,
             what=lambda: f"status {cluster.status.name}")
    cluster.close()
    mine.close()


def test_shutdown_on_close_false_outlives_its_process_until_the_orphan_timer_deletes_it(
        box: GPUCloud, sandbox: Sandbox, gateway_factory: Any) -> None:
    """The first process keeps its instances past their 8 s orphan timer while it lives (the
    cluster object starts their idle clocks again), ends without closing the cluster, and the
    gateway in front of the sandbox deletes them once nobody has kept them for 8 s."""
    gateway_url = gateway_factory(PERSONAL, upstream=sandbox).url
    out = second_process(sandbox, gateway_url=gateway_url, script="""
        import time
        cluster = GPUCloudCluster(cloud, 2, name="kept", shutdown_on_close=False,
                                  delete_when_orphaned=8)
        time.sleep(14)  # longer than the timer: kept alive by this process
        print(" ".join(i.id for i in cloud.instances.list() if i.status == "active"))
        print(" ".join(cluster.instance_ids))
    """)
    alive_at_exit, ids = (line.split() for line in out.strip().splitlines()[-2:])
    assert sorted(alive_at_exit) == sorted(ids) and len(ids) == 2
    assert live(box, ids) == set(ids)  # the process has ended; the cluster has not
    assert cluster_names(box) == ["kept"]
    wait_for(lambda: not live(box, ids), timeout=90, what=lambda: f"live {live(box, ids)}")
    # (deleted by the timer, not at exit: they were live above, after the process ended)


def test_a_cluster_found_again_keeps_its_budget_and_what_it_has_cost_so_adapt_stays_within_it(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    """#40: ``from_name`` reads the cluster's budget, and bills it from the cluster's start (the
    instance an earlier scale-down deleted too), not from when it was found. At a cent a second,
    a budget of two instances' hour ($72) and 25 cents: once the cluster has cost more than 25
    cents, the object found again refuses a second worker, and its ``adapt`` under a burst never
    rents one."""
    sandbox = sandbox_factory(offers=one_offer(36.0), launch_seconds=0.3, delete_seconds=0.2)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        cloud.sandbox = sandbox
        out = second_process(sandbox, """
            from tests.helpers import wait_for
            cluster = GPUCloudCluster(cloud, 2, name="frugal", budget=72.25,
                                      shutdown_on_close=False)
            ids = cluster.instance_ids
            bill = lambda: cloud.spend().set_index("_id")["spend"][ids[1]]  # noqa: E731
            wait_for(lambda: bill() > 0.15, timeout=120)  # the second instance bills a while
            cluster.scale(1)
            wait_for(lambda: cloud.instances.get(ids[1]).status == "deleted", timeout=60)
            print(" ".join(ids))
        """)
        ids = out.strip().splitlines()[-1].split()

        def cost() -> float:
            bills = cloud.spend(include_deleted=True).set_index("_id")["spend"]
            return float(bills[ids[0]] + bills[ids[1]])

        wait_for(lambda: cost() > 0.3, timeout=120, what=lambda: f"cost {cost():.2f}")
        before = cost()
        found = GPUCloudCluster.from_name("frugal", cloud)
        with found, distributed.Client(found) as client:
            assert found.budget == 72.25
            with pytest.raises(InvalidInputError) as refused:
                found.scale(2)
            said = re.fullmatch(r"Cluster 'frugal' has cost \$(\d+\.\d\d); one more hour of 2 × "
                                r"\$36\.00/h would bring it past its budget of \$72\.25, so no "
                                r"worker was added\.", str(refused.value))
            assert said, str(refused.value)
            # Both instances' bills: the one the scale-down deleted (over 15 cents) too.
            assert before - 0.01 <= float(said[1]) <= cost() + 0.01
            found.adapt(minimum=1, maximum=3, interval="200ms", target_duration="0.1s")
            tasks = client.map(lambda i: time.sleep(1) or i, range(24))
            most, deadline = 0, time.monotonic() + 12
            while time.monotonic() < deadline:
                most = max(most, len(live(cloud, [i.id for i in cloud.instances.list()])))
                time.sleep(0.05)
            assert sum(client.gather(tasks)) == sum(range(24))
            assert most == 1, f"{most} instances under adapt past a found cluster's budget"
            assert any("past its budget of $72.25" in n for n in found.notices), found.notices
        assert not live(cloud, [i.id for i in cloud.instances.list()])


def test_after_a_literal_kernel_restart_from_name_in_the_new_kernel_reconnects_and_closes_it(
        box: GPUCloud, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """#40: a cluster made in a real IPython kernel (jupyter_client's ``KernelManager``, the
    local python kernel) with ``shutdown_on_close=False`` survives that kernel's restart; in the
    new kernel ``GPUCloudCluster.from_name`` reconnects to it, runs a task on its workers and
    closes it, every instance deleted."""
    from jupyter_client.manager import KernelManager

    handle = {name: getattr(sandbox, name) for name in (
        "management_url", "inference_url", "api_key", "inference_secret", "launch_seconds")}
    handle["home"] = str(sandbox.home) if sandbox.home is not None else None
    monkeypatch.setenv("TEST_SANDBOX", json.dumps(handle))
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel()
    client = manager.client()
    client.start_channels()

    def run(code: str) -> list[str]:
        """Run :data:`PRELUDE` and ``code`` in the kernel; the lines it printed that start with
        ``=``."""
        printed: list[str] = []

        def keep(message: dict) -> None:
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])
            elif message["msg_type"] == "error":
                printed.append("\n".join(message["content"]["traceback"]))

        reply = client.execute_interactive(PRELUDE + textwrap.dedent(code), timeout=180,
                                           output_hook=keep)
        assert reply["content"]["status"] == "ok", "".join(printed)[-3000:]
        return [line[1:] for line in "".join(printed).splitlines() if line.startswith("=")]

    try:
        client.wait_for_ready(timeout=90)
        first = run("""
            cluster = GPUCloudCluster(cloud, 2, name="reborn", shutdown_on_close=False)
            print("=" + " ".join(cluster.instance_ids))
            print("=" + str(os.getpid()))
        """)
        ids, pid = first[0].split(), first[1]
        assert len(ids) == 2 and live(box, ids) == set(ids)
        manager.restart_kernel()  # as JupyterLab's "Restart Kernel": the kernel ends cleanly
        client.wait_for_ready(timeout=90)
        assert live(box, ids) == set(ids)  # the kernel's end left the cluster running
        second = run("""
            from distributed import Client
            print("=" + str(os.getpid()), "cluster" in globals())
            found = GPUCloudCluster.from_name("reborn", cloud)
            with Client(found) as client:
                print("=" + str(client.submit(lambda: 6 * 7).result()),
                      len(client.scheduler_info()["workers"]))
            print("=" + " ".join(found.instance_ids))
            found.close()
        """)
        assert second[0] != f"{pid} False" and second[0].endswith(" False")  # a new kernel
        assert second[1] == "42 2"  # the same two workers, taken over
        assert sorted(second[2].split()) == sorted(ids)
        assert {i.id: i.status for i in box.instances.list()} == dict.fromkeys(ids, "deleted")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
