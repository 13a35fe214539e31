"""Benchmark: a soak of idle deletes: 20 sandbox instances, half busy, half idle.

Every instance is launched with ``delete_when_idle`` (``limit`` seconds: the clocks run in
seconds, not minutes) through a gateway in front of the sandbox, as keyless ``connect()`` goes:
the gateway keeps the limits and reads GPU use over SSH. On the busy half a process keeps the
"GPU" at about 10 % (a tenth of each second spinning, as a light training loop would); the idle
half runs nothing. The soak lasts until every idle one is deleted and the busy ones have lived
twice their limit.

- ours: the longest an idle instance was billed (active, from the sandbox's own times) past its
  limit, against two passes of the gateway's watcher (the baseline: one to see it active and
  start its clock, one late at the delete); how many idle ones were deleted and how many busy
  ones were (wrongly); the lowest GPU use a busy one showed.

Targets: no idle one billed more than its limit plus two passes; every idle one deleted; no busy
one deleted. Bounded: at most ``limit * 3 + 60`` seconds (about 2 minutes at full size). Run
standalone with ``python -m benchmarks.bench_idle`` (``--quick``: 4 instances, 3 s limits).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
from datetime import datetime, timedelta

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"instances": 4, "limit": 3.0}
LAUNCH, DELETE = 0.5, 0.2
POLL = 1.0  # the gateway's watcher pass, seconds (its default)
DUTY = ("import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 0.01: pass\n"
        "    time.sleep(0.09)\n")


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run(instances: int = 20, limit: float = 20.0) -> list[Row]:
    """Launch, soak, and measure (see the module docstring)."""
    from gpucloud_nb import GPUCloud
    from gpucloud_nb.gateway import Gateway, GatewayConfig
    from gpucloud_nb.gateway.keys import parse_keys
    from gpucloud_nb.sandbox import Sandbox

    home = tempfile.mkdtemp(prefix="gpucloud-bench-idle-")
    saved = {name: os.environ.get(name) for name in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    os.environ.update(HOME=home, XDG_CONFIG_HOME=f"{home}/config", XDG_CACHE_HOME=f"{home}/cache")
    box = Sandbox(launch_seconds=LAUNCH, delete_seconds=DELETE).start()
    key = "bench-idle-key-0123456789"
    gateway = Gateway(GatewayConfig(people=tuple(parse_keys(f"{key} - bench\n")),
                                    upstream_url=box.management_url, upstream_key=box.api_key,
                                    poll=POLL)).start()
    cloud = GPUCloud(api_key=key, base_url=gateway.url)
    cloud.sandbox = box
    try:
        offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]

        def launch(name: str) -> str:
            return cloud.instances.create(
                name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
                region=offer.available_regions[0], vm={"os": offer.configuration.os[0]},
                delete_when_idle=timedelta(seconds=limit)).id

        busy = [launch(f"busy-{n}") for n in range(instances // 2)]
        loop = f"nohup {shlex.quote(sys.executable)} -c {shlex.quote(DUTY)} >/dev/null 2>&1 &"
        for instance_id in busy:
            cloud.instances.run(instance_id, loop, wait=30)
        idle = [launch(f"idle-{n}") for n in range(instances - len(busy))]
        start = time.monotonic()
        lowest = float("inf")
        while time.monotonic() - start < limit * 3 + 60:
            listed = {i.id: i.status for i in cloud.instances.list()}
            states = cloud.idle_delete.states()
            if time.monotonic() - start > POLL * 2:  # every loop measured at least once
                lowest = min([lowest, *(states[i].gpu_util or 0.0 for i in busy
                                        if i in states and states[i].gpu_util is not None)])
            gone = {i for i, status in listed.items() if status in ("deleting", "deleted")}
            if set(idle) <= gone and time.monotonic() - start >= limit * 2 + POLL * 2:
                break
            time.sleep(0.5)
        over = []
        for instance_id in idle:
            details = cloud.instances.get(instance_id)
            if details.status not in ("deleting", "deleted"):
                continue
            raw = details.deleted_at
            ended = (raw.timestamp() if isinstance(raw, datetime) else _seconds(str(raw))) - DELETE
            began = details.created_at.timestamp() + LAUNCH if details.created_at else ended
            over.append(ended - began - limit)
        deleted_busy = sum(cloud.instances.get(i).status in ("deleting", "deleted") for i in busy)
        worst = max(over) if over else float("nan")
        return [
            (f"idle soak ({instances} instances, {limit:g} s limits): idle billed past the limit, "
             "worst", worst, 2 * POLL, worst / (2 * POLL), "<= +0 s", "s"),
            ("idle soak: idle instances deleted", float(len(over)), float(len(idle)),
             len(over) / len(idle), ">= 1x", ""),
            ("idle soak: busy instances deleted", float(deleted_busy), 0.0, 0.0, "<= 0", ""),
            ("idle soak: lowest GPU use of a busy instance", lowest, 5.0, lowest / 5.0, ">= 1x",
             "%"),
        ]
    finally:
        for instance_id in [i.id for i in cloud.instances.list()
                            if i.status in ("pending", "active")]:
            cloud.instances.delete(instance_id)
        cloud.close()
        gateway.stop()
        box.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    for row in run(**(QUICK if quick else {})):
        print(row)
