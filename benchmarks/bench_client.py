"""Benchmark: the management client against raw httpx, and async launches against sequential ones.

Both figures run against a sandbox served over loopback HTTP.

- ``instances.list()`` against ``httpx.Client.get(...).json()`` on the same sandbox holding a
  handful of instances, served from its own process as a real cloud would be: ``calls`` calls
  each, taking turns call by call, compared by their medians (see :func:`_paired`).
  Target ≤ 1.10×. :func:`breakdown` shows where our extra time goes, without the network.
- ``launches`` instance creates with ``AsyncGPUCloud`` and ``asyncio.gather`` against the same
  number of sequential ``GPUCloud`` creates, the sandbox adding ``latency`` seconds to every
  request. Both clients launch once before timing, so both have the offers catalogue cached.
  Target ≥ 10× faster.

Run standalone with ``python -m benchmarks.bench_client`` (``--profile``: the breakdown).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from benchmarks._servers import KEY, ServerProcess
from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.models import InstanceOffer
from gpucloud_nb.sandbox import Sandbox

__all__ = ["QUICK", "UNIT", "breakdown", "run", "time_launches", "time_list"]

Row = tuple[str, float, float, float, str]
UNIT = "s"
QUICK = {"calls": 200, "launches": 8}


def _offer(cloud: GPUCloud) -> InstanceOffer:
    return next(o for o in cloud.instances.offers(deployment_type="vm", available=True, sort="price")
                if o.configuration.os)


def _create_args(offer: InstanceOffer, name: str) -> dict[str, Any]:
    return {"name": name, "cloud_provider": offer.cloud.id, "instance_id": offer.instance_id,
            "region": offer.available_regions[0], "vm": {"os": offer.configuration.os[0]}}


def _paired(steps: dict[str, Callable[[], Any]], calls: int) -> dict[str, float]:
    """Median seconds per call of each step, the steps taking turns call by call.

    Taking turns gives every step the same moments of the machine, and the order flips each
    round so that neither always follows the other; the median ignores the calls a noisy
    neighbour hit. Two identical steps measured this way agree within about 2 %.
    """
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps.items())
    gc.collect()
    gc.disable()
    try:
        for _ in range(calls):
            for name, step in order:
                start = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - start)
            order.reverse()
    finally:
        gc.enable()
    return {name: statistics.median(values) for name, values in times.items()}


def time_list(url: str, api_key: str, calls: int = 1000,
              instances: int = 5) -> tuple[float, float]:
    """Median seconds per call of ``instances.list()`` and of the raw httpx equivalent."""
    with GPUCloud(api_key=api_key, base_url=url) as cloud, \
            httpx.Client(base_url=url, headers={"x-api-key": api_key}) as raw:
        offer = _offer(cloud)
        existing = len(cloud.instances.list())
        for i in range(existing, instances):
            cloud.instances.create(**_create_args(offer, f"bench-{i}"))
        assert len(cloud.instances.list()) == len(raw.get("/gpu-cloud/instances").json())
        steps = {
            "ours": cloud.instances.list,
            "raw": lambda: raw.get("/gpu-cloud/instances").json(),
        }
        _paired(steps, 50)  # warm-up: connections, caches
        median = _paired(steps, calls)
    return median["ours"], median["raw"]


def time_launches(sandbox: Sandbox, launches: int = 32) -> tuple[float, float]:
    """Seconds for ``launches`` async creates at once and for as many sequential ones."""
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        offer = _offer(cloud)
        cloud.instances.create(**_create_args(offer, "warm-sync"))  # caches the catalogue
        start = time.perf_counter()
        for i in range(launches):
            cloud.instances.create(**_create_args(offer, f"seq-{i}"))
        sequential = time.perf_counter() - start

    async def together() -> float:
        async with AsyncGPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as acloud:
            await acloud.instances.create(**_create_args(offer, "warm-async"))
            start = time.perf_counter()
            made = await asyncio.gather(*(acloud.instances.create(**_create_args(offer, f"async-{i}"))
                                          for i in range(launches)))
            elapsed = time.perf_counter() - start
            assert len({m.id for m in made}) == launches
            return elapsed

    return asyncio.run(together()), sequential


def run(calls: int = 1000, launches: int = 32, latency: float = 0.1) -> list[Row]:
    """Rows (name, ours, baseline, ratio, target); times in seconds."""
    server = ServerProcess("sandbox")
    try:
        ours, raw = time_list(server.url, KEY, calls)
    finally:
        server.close()
    with Sandbox(latency=latency, launch_seconds=600) as slow:
        together, sequential = time_launches(slow, launches)
    return [
        (f"instances.list() vs raw httpx get().json(), 5 instances, per call ({calls} calls each)",
         ours, raw, ours / raw, "<= 1.10x"),
        (f"{launches} launches: AsyncGPUCloud gather vs sequential GPUCloud (speed-up; "
         f"latency {latency:g} s)", together, sequential, sequential / together, ">= 10x"),
    ]


def breakdown(calls: int = 2000, top: int = 20) -> None:
    """Where ``instances.list()`` spends its client-side time, without the network or the server.

    Replays the sandbox's real answer (5 instances) through ``httpx.MockTransport`` and times,
    best of 5 alternating blocks: the raw ``get().json()``; the same with the ``x-api-key`` auth
    flow; the request driven by the operation generator (``send`` + ``SyncDriver``); the raw
    answer parsed into ``Instance`` records; and ``instances.list()`` itself. Then cProfile of
    ``instances.list()``.
    """
    import cProfile
    import pstats

    from gpucloud_nb._secrets import Secret
    from gpucloud_nb.client._auth import ApiKeyAuth
    from gpucloud_nb.client._ops import Call, RetryPolicy, SyncDriver, send
    from gpucloud_nb.models import Instance

    with Sandbox(launch_seconds=600) as sandbox, \
            GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        offer = _offer(cloud)
        for i in range(5):
            cloud.instances.create(**_create_args(offer, f"bench-{i}"))
        body = httpx.get(f"{sandbox.management_url}/gpu-cloud/instances",
                         headers={"x-api-key": sandbox.api_key}).content
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, content=body, headers={"content-type": "application/json"}))
    raw = httpx.Client(base_url="http://cloud.test", headers={"x-api-key": "k"}, transport=transport)
    authed = httpx.Client(base_url="http://cloud.test", auth=ApiKeyAuth(Secret("k")),
                          transport=transport)
    ours = GPUCloud(api_key="k", base_url="http://cloud.test", transport=transport)
    driver, policy = SyncDriver(raw), RetryPolicy()
    steps: dict[str, Callable[[], Any]] = {
        "raw get().json()": lambda: raw.get("/gpu-cloud/instances").json(),
        "+ auth flow (ApiKeyAuth)": lambda: authed.get("/gpu-cloud/instances").json(),
        "+ generator driver (send/SyncDriver)": lambda: driver.run(
            send(Call("GET", "/gpu-cloud/instances", params={}), policy)),
        "+ Instance.from_json x5": lambda: [Instance.from_json(item) for item in
                                            raw.get("/gpu-cloud/instances").json()],
        "instances.list()": ours.instances.list,
    }
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(5):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(calls // 5):
                step()
            best[name] = min(best[name], (time.perf_counter() - start) / (calls // 5))
    for name, seconds in best.items():
        print(f"{name:40s} {seconds * 1e6:8.1f} µs/call")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        ours.instances.list()
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(top)


def main() -> None:
    if "--profile" in sys.argv:
        breakdown()
        return
    for name, ours, baseline, ratio, target in run():
        print(f"{name}: ours {ours * 1e3:.3f} ms, baseline {baseline * 1e3:.3f} ms, "
              f"ratio {ratio:.3f}x, target {target}")


if __name__ == "__main__":
    main()
