"""Benchmark: a Dask cluster on sandbox instances (``GPUCloudCluster``) against ``LocalCluster``.

- Start: seconds from ``GPUCloudCluster(cloud, workers)`` to ``workers`` workers ready, on a sandbox
  whose instances take ``launch_seconds`` (1 s) to launch; the baseline is a
  ``distributed.LocalCluster`` with as many workers started in the same run. Target ``<= 30 s``.
- Throughput of ``tasks`` tiny tasks (``client.map`` then ``gather``, best of ``repeat``), tasks
  per second, ours against the ``LocalCluster`` (same workers, same threads each). Target
  ``>= 0.8x``.

Everything listens on 127.0.0.1. Ours speaks TLS through an SSH forward; the LocalCluster plain
TCP, as each would be used. Run standalone with ``python -m benchmarks.bench_cluster``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"workers": 2, "tasks": 300, "repeat": 1}


def _rate(client: Any, tasks: int, repeat: int) -> float:
    """Tasks per second of the best of ``repeat`` rounds of ``tasks`` tiny tasks."""
    client.gather(client.map(abs, range(-50, 0), pure=False))  # warm up
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        results = client.gather(client.map(abs, range(-tasks, 0), pure=False))
        best = min(best, time.perf_counter() - start)
        assert len(results) == tasks
    return tasks / best


def run(workers: int = 4, tasks: int = 2_000, repeat: int = 3,
        launch_seconds: float = 1.0) -> list[Row]:
    """Two rows: seconds to ``workers`` ready workers, and tiny tasks per second."""
    import distributed

    from gpucloud_nb import GPUCloud
    from gpucloud_nb.cluster import GPUCloudCluster
    from gpucloud_nb.sandbox import Sandbox

    with Sandbox(launch_seconds=launch_seconds, delete_seconds=0.2) as box, \
            GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
        cloud.sandbox = box
        start = time.perf_counter()
        # The launch's progress line goes to stderr: stdout is the benchmarks' table.
        with contextlib.redirect_stdout(sys.stderr), \
                GPUCloudCluster(cloud, workers, name="bench") as cluster:
            cluster.wait_for_workers(workers, timeout=120)
            ours_start = time.perf_counter() - start
            with distributed.Client(cluster) as client:
                ours_rate = _rate(client, tasks, repeat)
            threads = {w["nthreads"] for w in cluster.scheduler_info["workers"].values()}

    start = time.perf_counter()
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=max(threads),
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                  processes=True) as local:
        local.wait_for_workers(workers, timeout=120)
        local_start = time.perf_counter() - start
        with distributed.Client(local) as client:
            local_rate = _rate(client, tasks, repeat)

    return [
        (f"GPUCloudCluster(cloud, {workers}) to {workers} workers ready ({launch_seconds:g} s launches)",
         ours_start, local_start, ours_start / local_start, "<= 30 s", "s"),
        (f"{tasks:,} tiny tasks, vs LocalCluster({workers})", ours_rate, local_rate,
         ours_rate / local_rate, ">= 0.8x", "tasks/s"),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
