"""Benchmark: sandbox throughput for ``GET /gpu-cloud/instances`` with 8 concurrent clients.

Each server runs in its own subprocess (see ``benchmarks._servers``). Requests per second over
``seconds``, best of ``rounds`` alternating rounds, with two kinds of load:

- ``httpx`` threads: ``clients`` threads here, each with its own ``httpx.Client`` (keep-alive),
  what Python clients see; on a small machine the clients' own CPU time caps this figure;
- raw asyncio: ``clients`` keep-alive connections in one event loop sending prebuilt HTTP/1.1
  requests and reading each answer by its ``Content-Length``; cheap enough that the server is
  the bottleneck, so this is the server's capacity.

- ours: the sandbox (``Sandbox``), holding 5 instances, answering ``GET /gpu-cloud/instances``
  (key check, SQLite read, life-cycle status, JSON);
- baseline: a bare Starlette app answering ``GET /hello`` with a constant JSON string.

No target: the ratio says what the sandbox's own work costs next to the web stack it runs on.
Run standalone with ``python -m benchmarks.bench_sandbox``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from benchmarks._servers import KEY, ServerProcess

__all__ = ["QUICK", "UNIT", "load", "raw_load", "run"]

Row = tuple[str, float, float, float, str, str]
UNIT = "req/s"
QUICK = {"seconds": 0.3, "rounds": 1}


def load(url: str, path: str, headers: dict[str, str], clients: int = 8,
         seconds: float = 2.0) -> float:
    """Requests per second that ``clients`` threads get from ``GET url+path`` for ``seconds``."""
    counts = [0] * clients
    failures: list[str] = []
    barrier = threading.Barrier(clients + 1)
    stop = threading.Event()

    def client(index: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            http.get(path)  # connect before the clock starts
            barrier.wait()
            while not stop.is_set():
                response = http.get(path)
                if response.status_code != 200:
                    failures.append(f"{response.status_code} {response.text[:80]}")
                    return
                response.json()
                counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    total = sum(counts)
    elapsed = time.perf_counter() - start
    for thread in threads:
        thread.join(30)
    if failures:
        raise RuntimeError(f"the load failed: {failures[0]}")
    return total / elapsed


def raw_load(url: str, path: str, headers: dict[str, str], clients: int = 8,
             seconds: float = 2.0) -> float:
    """Requests per second over ``clients`` raw keep-alive connections (asyncio) for ``seconds``."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: */*",
             *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def client(stop: asyncio.Event, started: asyncio.Event) -> int:
        reader, writer = await asyncio.open_connection(host, int(port))
        count = 0
        try:
            await started.wait()
            while not stop.is_set():
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"the load failed: {head[:40]!r}")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                count += 1
        finally:
            writer.close()
        return count

    async def main() -> float:
        stop, started = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(client(stop, started)) for _ in range(clients)]
        await asyncio.sleep(0.05)  # connect before the clock starts
        start = time.perf_counter()
        started.set()
        await asyncio.sleep(seconds)
        stop.set()
        elapsed = time.perf_counter() - start
        return sum(await asyncio.gather(*tasks)) / elapsed

    return asyncio.run(main())


def run(clients: int = 8, seconds: float = 2.0, rounds: int = 2) -> list[Row]:
    """One row (name, ours req/s, baseline req/s, ratio, target, unit)."""
    from gpucloud_nb import GPUCloud

    sandbox, hello = ServerProcess("sandbox"), ServerProcess("hello")
    try:
        with GPUCloud(api_key=KEY, base_url=sandbox.url) as cloud:
            offer = next(o for o in cloud.instances.offers(deployment_type="vm", available=True)
                         if o.configuration.os)
            for i in range(5):
                cloud.instances.create(name=f"load-{i}", cloud_provider=offer.cloud.id,
                                       instance_id=offer.instance_id,
                                       region=offer.available_regions[0],
                                       vm={"os": offer.configuration.os[0]})
        best = {"ours": 0.0, "base": 0.0, "ours_raw": 0.0, "base_raw": 0.0}
        for _ in range(rounds):
            for key, loader, server, path, headers in (
                ("ours", load, sandbox, "/gpu-cloud/instances", {"x-api-key": KEY}),
                ("base", load, hello, "/hello", {}),
                ("ours_raw", raw_load, sandbox, "/gpu-cloud/instances", {"x-api-key": KEY}),
                ("base_raw", raw_load, hello, "/hello", {}),
            ):
                best[key] = max(best[key], loader(server.url, path, headers, clients, seconds))
    finally:
        sandbox.close()
        hello.close()
    name = "sandbox GET /gpu-cloud/instances (5 instances) vs Starlette hello"
    return [
        (f"{name}, {clients} httpx threads", best["ours"], best["base"],
         best["ours"] / best["base"], "-", UNIT),
        (f"{name}, {clients} raw asyncio connections", best["ours_raw"], best["base_raw"],
         best["ours_raw"] / best["base_raw"], "-", UNIT),
    ]


def main() -> None:
    for name, ours, baseline, ratio, _, unit in run():
        print(f"{name}: ours {ours:.0f} {unit}, baseline {baseline:.0f} {unit}, ratio {ratio:.2f}x")


if __name__ == "__main__":
    main()
