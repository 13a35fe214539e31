"""The sandbox under load and under SIGKILL, over real HTTP.

- 50 concurrent creates, deletes and lists (threads with their own connections, and asyncio with
  the client) leave a consistent state: every created id listed once, every deleted one deleting
  or deleted, and no answer a 5xx.
- ``gpucloud-nb sandbox --state FILE`` killed with SIGKILL in the middle of a burst of creates,
  then restarted on the same file, still has every instance whose create was answered 201.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import AsyncGPUCloud
from gpucloud_nb.sandbox import DEFAULT_API_KEY, Sandbox

WORKERS = 50
REPO = Path(__file__).resolve().parents[1]


def vm_create_body(http: httpx.Client, name: str) -> dict[str, Any]:
    offers = http.get("/gpu-cloud/instances/offers",
                      params={"deploymentType": "vm", "available": "true", "sort": "price"}).json()
    offer = next(o for o in offers if o["configuration"]["os"])
    region = next(a["region"] for a in offer["availability"] if a["available"])
    return {"name": name, "cloudProvider": offer["cloud"]["_id"], "instanceId": offer["instanceId"],
            "region": region, "vm": {"os": offer["configuration"]["os"][0]}}


def test_fifty_threads_create_delete_and_list_consistently(sandbox: Sandbox) -> None:
    headers = {"x-api-key": sandbox.api_key}
    with httpx.Client(base_url=sandbox.management_url, headers=headers) as http:
        template = vm_create_body(http, "x")
        volume_offer = http.get("/gpu-cloud/volumes/offers").json()[0]
    barrier = threading.Barrier(WORKERS)
    statuses: list[int] = []
    created: dict[int, str] = {}
    deleted: set[str] = set()
    volumes: dict[int, str] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        try:
            with httpx.Client(base_url=sandbox.management_url, headers=headers, timeout=30) as http:
                def call(method: str, path: str, **kwargs: Any) -> httpx.Response:
                    response = http.request(method, path, **kwargs)
                    with lock:
                        statuses.append(response.status_code)
                    return response

                barrier.wait(timeout=30)
                made = call("POST", "/gpu-cloud/instances", json={**template, "name": f"load-{index}"})
                assert made.status_code == 201, made.text
                instance_id = made.json()["_id"]
                with lock:
                    created[index] = instance_id
                if index % 5 == 0:
                    volume = call("POST", "/gpu-cloud/volumes", json={
                        "name": f"vol-{index}", "cloudProvider": volume_offer["cloudProvider"]["_id"],
                        "region": volume_offer["regions"][0], "sizeInGb": volume_offer["minSizeInGb"]})
                    assert volume.status_code == 201, volume.text
                    with lock:
                        volumes[index] = volume.json()["_id"]
                call("GET", "/gpu-cloud/instances")
                if index % 2 == 0:
                    assert call("DELETE", f"/gpu-cloud/instances/{instance_id}").status_code == 204
                    with lock:
                        deleted.add(instance_id)
                    # a second delete, as a retried one would be, is answered the same
                    assert call("DELETE", f"/gpu-cloud/instances/{instance_id}").status_code == 204
                if index % 10 == 0:
                    assert call("DELETE", f"/gpu-cloud/volumes/{volumes[index]}").status_code == 204
                assert call("GET", f"/gpu-cloud/instances/{instance_id}").status_code == 200
        except BaseException as error:
            with lock:
                failures.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures[:3]
    assert not [s for s in statuses if s >= 500]
    assert len(created) == WORKERS

    with httpx.Client(base_url=sandbox.management_url, headers=headers) as http:
        listed = http.get("/gpu-cloud/instances").json()
        listed_volumes = http.get("/gpu-cloud/volumes").json()
    ids = [item["_id"] for item in listed]
    assert not [i for i, n in Counter(ids).items() if n > 1], "duplicate ids"
    assert sorted(ids) == sorted(created.values())
    assert sorted(item["name"] for item in listed) == sorted(f"load-{i}" for i in range(WORKERS))
    for item in listed:
        if item["_id"] in deleted:
            assert item["status"] in ("deleting", "deleted"), item
        else:
            assert item["status"] in ("pending", "active"), item
    kept = {v for i, v in volumes.items() if i % 10}
    assert sorted(v["_id"] for v in listed_volumes) == sorted(kept)


def test_fifty_async_creates_then_deletes_with_the_client(sandbox: Sandbox) -> None:
    async def scenario() -> tuple[list[Any], list[Any]]:
        async with AsyncGPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
            offer = next(o for o in await cloud.instances.offers(deployment_type="vm", available=True)
                         if o.configuration.os)
            made = await asyncio.gather(*(
                cloud.instances.create(name=f"async-{i}", cloud_provider=offer.cloud.id,
                                       instance_id=offer.instance_id,
                                       region=offer.available_regions[0],
                                       vm={"os": offer.configuration.os[0]})
                for i in range(WORKERS)))
            doomed = made[::2]
            results = await asyncio.gather(
                *(cloud.instances.delete(i.id) for i in doomed),
                *(cloud.instances.list() for _ in range(10)),
                *(cloud.instances.get(i.id) for i in made[1::2]),
            )
            assert all(r is None for r in results[: len(doomed)])
            return made, await cloud.instances.list()

    made, listed = asyncio.run(scenario())
    doomed = {i.id for i in made[::2]}
    assert len({i.id for i in made}) == WORKERS
    assert sorted(i.id for i in listed) == sorted(i.id for i in made)
    for instance in listed:
        expected = ("deleting", "deleted") if instance.id in doomed else ("pending", "active")
        assert instance.status in expected, instance


# SIGKILL during a burst of creates ------------------------------------------------------------


class CliSandbox:
    """``python -m gpucloud_nb sandbox --state FILE`` as a subprocess; ``url`` once it serves."""

    def __init__(self, state: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpucloud_nb", "sandbox", "--port", "0", "--state", str(state),
             "--launch-seconds", "0.2"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=env,
        )
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 30
        self.url = ""
        while not self.url:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise AssertionError("the sandbox command printed no management URL") from None
            if line.startswith("management: "):
                self.url = line.split(" ", 1)[1].strip()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


@pytest.fixture
def cli_sandboxes() -> Iterator[list[CliSandbox]]:
    started: list[CliSandbox] = []
    yield started
    for box in started:
        box.kill()


def test_sigkill_during_creates_loses_nothing_that_was_acknowledged(
    tmp_path: Path, cli_sandboxes: list[CliSandbox],
) -> None:
    state = tmp_path / "state.db"
    first = CliSandbox(state)
    cli_sandboxes.append(first)
    headers = {"x-api-key": DEFAULT_API_KEY}
    with httpx.Client(base_url=first.url, headers=headers) as http:
        template = vm_create_body(http, "x")

    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def creator(worker: int) -> None:
        with httpx.Client(base_url=first.url, headers=headers, timeout=10) as http:
            count = 0
            while not stop.is_set():
                try:
                    response = http.post("/gpu-cloud/instances",
                                         json={**template, "name": f"burst-{worker}-{count}"})
                except httpx.TransportError:
                    return  # the server is gone
                count += 1
                if response.status_code == 201:
                    with lock:
                        acknowledged.append(response.json()["_id"])

    threads = [threading.Thread(target=creator, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    first.process.send_signal(signal.SIGKILL)  # in the middle of the burst
    first.process.wait(10)
    stop.set()
    for thread in threads:
        thread.join(15)
    assert len(acknowledged) >= 20, "the burst hardly started"

    second = CliSandbox(state)
    cli_sandboxes.append(second)
    with httpx.Client(base_url=second.url, headers=headers) as http:
        listed = http.get("/gpu-cloud/instances").json()
        assert http.get(f"/gpu-cloud/instances/{acknowledged[-1]}").status_code == 200
    ids = [item["_id"] for item in listed]
    missing = set(acknowledged) - set(ids)
    assert not missing, f"{len(missing)} acknowledged creates were lost"
    assert len(ids) == len(set(ids))
    # at most one create per worker can have been made without its 201 reaching the client
    assert len(ids) - len(acknowledged) <= len(threads)
