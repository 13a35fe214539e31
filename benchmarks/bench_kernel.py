"""Benchmark: a notebook kernel on a sandbox instance against a local ipykernel, same run.

- ``1+1`` round trip: ``execute_interactive("1+1")`` on the kernel started from the
  ``gpucloud-<name>`` kernelspec (ipykernel on the instance, its ports forwarded over SSH)
  against the same call on a local ipykernel started by the same ``KernelManager`` code. Medians
  of ``repeat`` round trips, taken one remote, one local, in turn. Target ``<= 1.5x``.
- From ``gpucloud_nb.kernel.install_kernel`` on an active instance to the first result (install,
  start, ready, ``1+1``), against a local kernel from start to its first result. Target
  ``<= 5 s`` for ours.

The sandbox is a service of its own (a temporary home), as ``connect()`` starts it: its SSH
server runs in another process, as a real instance's does.
Run standalone with ``python -m benchmarks.bench_kernel``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"repeat": 20}


def _start(kernel_name: str) -> tuple[Any, Any]:
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name=kernel_name)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return manager, client


def _register_entry_point(scratch: str) -> None:
    """pyproject.toml's provisioner entry point, for an editable install older than it."""
    group = "jupyter_client.kernel_provisioners"
    if any(ep.name == "gpucloud-provisioner" for ep in entry_points(group=group)):
        return
    info = Path(scratch) / "entry" / "gpucloud_nb_bench_entry-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpucloud-nb-bench-entry\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(
        f"[{group}]\ngpucloud-provisioner=gpucloud_nb.kernel.provisioner:GPUCloudProvisioner\n")
    sys.path.insert(0, str(info.parent))


def _one_plus_one(client: Any) -> float:
    start = time.perf_counter()
    reply = client.execute_interactive("1+1", timeout=30, output_hook=lambda message: None)
    assert reply["content"]["status"] == "ok"
    return time.perf_counter() - start


def _stop(manager: Any, client: Any) -> None:
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(repeat: int = 200) -> list[Row]:
    """Two rows: the ``1+1`` round trip, and install_kernel to the first result."""
    from gpucloud_nb import connect
    from gpucloud_nb.kernel import install_kernel
    from gpucloud_nb.sandbox import service

    saved = {name: os.environ.get(name) for name in
             ("GPUCLOUD_SANDBOX_HOME", "GPUCLOUD_SANDBOX_LAUNCH_SECONDS", "JUPYTER_DATA_DIR")}
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "sandbox"
        os.environ.update(GPUCLOUD_SANDBOX_HOME=str(home), GPUCLOUD_SANDBOX_LAUNCH_SECONDS="0",
                          JUPYTER_DATA_DIR=str(Path(scratch) / "jupyter"))
        _register_entry_point(scratch)
        try:
            with connect(quiet=True) as cloud:
                offer = next(o for o in cloud.instances.offers(available=True)
                             if o.deployment_type == "vm")
                instance = cloud.instances.create(
                    name="bench-kernel", cloud_provider=offer.cloud.id,
                    instance_id=offer.instance_id, region=offer.available_regions[0],
                    vm={"os": offer.configuration.os[0]})
                cloud.instances.wait_until_active(instance.id, timeout=30)
                cloud.instances.run(instance.id, "true")  # SSH key and host key settled

                start = time.perf_counter()
                remote = _start(install_kernel(cloud, instance.id))
                _one_plus_one(remote[1])
                ours_first = time.perf_counter() - start

                start = time.perf_counter()
                local = _start("python3")
                _one_plus_one(local[1])
                local_first = time.perf_counter() - start

                for client in (remote[1], local[1]):  # warm both
                    _one_plus_one(client)
                ours_trips, local_trips = [], []
                for _ in range(repeat):
                    ours_trips.append(_one_plus_one(remote[1]))
                    local_trips.append(_one_plus_one(local[1]))
                _stop(*remote)
                _stop(*local)
        finally:
            service.stop(home)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    ours, local_rt = statistics.median(ours_trips), statistics.median(local_trips)
    return [
        ("kernel on the instance: 1+1 round trip vs a local ipykernel", ours, local_rt,
         ours / local_rt, "<= 1.5x", "s"),
        ("install_kernel to first result vs a local kernel's start to first result",
         ours_first, local_first, ours_first / local_first, "<= 5 s", "s"),
    ]


if __name__ == "__main__":
    from benchmarks.__main__ import main

    main(["--only", "kernel"])
