"""Benchmark: one sandbox service shared by 40 client processes, as a class of kernels would.

A service is started in a temporary home (as ``connect()`` starts one). ``clients`` Python
processes each open a :class:`~gpucloud_nb.GPUCloud` on it, say they are ready, and wait; on one
signal they all launch one instance at the same moment, then each lists the instances and gets
its own every ``interval`` seconds for ``seconds`` seconds. Every request's latency is recorded.

- ours: p50, p95 and p99 latency of every request of the 40 processes (launches included), the
  error count, and how many of the 40 launched instances are ``active`` at the end; then, apart,
  the p99 of the lists and gets alone and the p99 of the 40 simultaneous launches;
- baseline: the same percentiles of one client process alone, in the same run, so the ratio
  says what sharing the service costs.

Targets: p99 <= 100 ms, 0 errors, every launch active. Run standalone with
``python -m benchmarks.bench_service`` (``--quick``: 4 clients for 3 s).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"clients": 4, "seconds": 3.0, "launch_seconds": 1.0}

WORKER = textwrap.dedent("""
    import json, sys, time
    from gpucloud_nb import GPUCloud

    base, key, seconds, interval, name = sys.argv[1:6]
    seconds, interval = float(seconds), float(interval)
    cloud = GPUCloud(api_key=key, base_url=base, max_retries=0)
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    latencies, errors = [], []

    def timed(call):
        start = time.perf_counter()
        try:
            return call()
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
        finally:
            latencies.append(time.perf_counter() - start)

    print("ready", flush=True)
    sys.stdin.readline()                                  # everybody launches at once
    instance = timed(lambda: cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]}))
    launch = latencies.pop()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick = time.monotonic()
        timed(cloud.instances.list)
        if instance is not None:
            timed(lambda: cloud.instances.get(instance.id))
        time.sleep(max(interval - (time.monotonic() - tick), 0))
    print(json.dumps({"latencies": latencies, "launch": launch, "errors": errors,
                      "id": None if instance is None else instance.id}), flush=True)
""")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(round(q / 100 * (len(ordered) - 1)), len(ordered) - 1)
    return ordered[index]


def _load(base: str, key: str, clients: int, seconds: float, interval: float,
          prefix: str) -> tuple[list[float], list[float], list[str], list[str]]:
    """Run ``clients`` worker processes; their list/get and launch latencies, errors and ids."""
    workers = [subprocess.Popen(
        [sys.executable, "-c", WORKER, base, key, str(seconds), str(interval), f"{prefix}-{n}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in range(clients)]
    try:
        for worker in workers:
            assert worker.stdout is not None
            line = worker.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a client process failed to start: {worker.stderr.read()[-500:]}")
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        latencies: list[float] = []
        launches: list[float] = []
        errors: list[str] = []
        ids: list[str] = []
        for worker in workers:
            out, err = worker.communicate(timeout=seconds + 120)
            if worker.returncode != 0 or not out.strip():
                errors.append(f"client exited with {worker.returncode}: {err[-300:]}")
                continue
            report = json.loads(out.strip().splitlines()[-1])
            latencies += report["latencies"]
            launches.append(report["launch"])
            errors += report["errors"]
            if report["id"]:
                ids.append(report["id"])
        return latencies, launches, errors, ids
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def run(clients: int = 40, seconds: float = 60.0, interval: float = 2.0,
        launch_seconds: float = 3.0) -> list[Row]:
    """Latency percentiles of ``clients`` processes against one service, next to one alone."""
    import httpx

    from gpucloud_nb.sandbox import service

    home = Path(tempfile.mkdtemp(prefix="gpucloud-bench-service-"))
    try:
        runtime = service.find_or_start(home, launch_seconds=launch_seconds)
        base, key = runtime.management_url, runtime.api_key
        alone, alone_launch, alone_errors, _ = _load(base, key, 1, min(seconds, 10.0),
                                                     interval / 4, "alone")
        steady, launches, errors, ids = _load(base, key, clients, seconds, interval, "class")
        latencies = steady + launches
        time.sleep(max(launch_seconds - seconds, 0) + 0.5)
        listed = httpx.get(f"{base}/gpu-cloud/instances", headers={"x-api-key": key},
                           trust_env=False, timeout=30).json()
        active = sum(1 for item in listed if item["_id"] in ids and item["status"] == "active")
    finally:
        service.stop(home)
        shutil.rmtree(home, ignore_errors=True)
    if errors:
        print(f"bench_service: {len(errors)} errors, first: {errors[0]}", file=sys.stderr)
    rows: list[Row] = []
    for q, target in ((50, ""), (95, ""), (99, "<= 100 ms")):
        ours, base_q = _percentile(latencies, q), _percentile(alone + alone_launch, q)
        rows.append((f"service: p{q} latency, {clients} processes vs 1 ({len(latencies)} requests)",
                     ours, base_q, ours / base_q if base_q else float("nan"), target, "s"))
    steady_99, launch_99 = _percentile(steady, 99), _percentile(launches, 99)
    rows.append((f"service: p99 of list/get alone (without the launch burst), {clients} vs 1",
                 steady_99, _percentile(alone, 99), steady_99 / _percentile(alone, 99), "", "s"))
    rows.append((f"service: p99 launch, {clients} at the same moment vs 1 alone", launch_99,
                 alone_launch[0], launch_99 / alone_launch[0], "", "s"))
    rows.append((f"service: errors, {clients} processes vs 1", float(len(errors)),
                 float(len(alone_errors)), float("nan"), "<= 0", ""))
    rows.append((f"service: launches active of {clients} at once", float(active), float(clients),
                 active / clients, ">= 1x", ""))
    return rows


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for row in run(**(QUICK if quick else {})):
        print(row)
