"""Benchmark: a move's instance-to-instance copy against the SSH layer's own copy, same run.

- ``megabytes`` MB of random bytes on one sandbox instance, carried to another through this
  machine by :func:`gpucloud_nb.kernel.carry.stream_between` (two SFTP sessions, the next piece
  read while the last is written, nothing on this machine's disk), against the SSH layer alone
  doing the same: ``download_async`` to a local file, then ``upload_async`` of it. Best of
  ``copies``, taken one ours, one baseline, in turn. Target ``<= 1.5x`` (the issue's bound for a
  whole move of 1 GB of arrays; this row is its copy, the part that grows with the size).

Run standalone with ``python -m benchmarks.bench_move``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"megabytes": 8, "copies": 1}


def run(megabytes: int = 1000, copies: int = 2) -> list[Row]:
    """One row: seconds to carry ``megabytes`` MB from one instance to another."""
    from gpucloud_nb import GPUCloud
    from gpucloud_nb.kernel.carry import stream_between
    from gpucloud_nb.sandbox import Sandbox

    with tempfile.TemporaryDirectory() as scratch, Sandbox(launch_seconds=0.0) as box:
        cloud = GPUCloud(api_key=box.api_key, base_url=box.management_url)
        cloud.sandbox = box
        offer = next(o for o in cloud.instances.offers(available=True)
                     if o.deployment_type == "vm")
        ids = [cloud.instances.create(
            name=f"bench-move-{n}", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
            region=offer.available_regions[0], vm={"os": offer.configuration.os[0]}).id
            for n in (1, 2)]
        for id in ids:
            cloud.instances.wait_until_active(id, timeout=60)
        cloud.instances.run(ids[0], f"head -c {megabytes * 2**20} /dev/urandom > payload.bin")
        remote, source = cloud.instances.ssh(ids[0])
        remote, target = cloud.instances.ssh(ids[1])
        local = Path(scratch) / "payload.bin"
        ours, baseline = [], []
        for _ in range(copies):
            start = time.perf_counter()
            remote.call(stream_between(remote, source, "payload.bin", target, "moved.bin"))
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            remote.call(remote.download_async(source, "payload.bin", local, overwrite=True))
            remote.call(remote.upload_async(target, local, "copied.bin"))
            baseline.append(time.perf_counter() - start)
            os.unlink(local)
        same = cloud.instances.run(ids[1], "cmp moved.bin copied.bin && echo same").stdout
        assert same.strip() == "same", "the two copies differ"
        cloud.close()
    best, base = min(ours), min(baseline)
    return [(f"{megabytes} MB instance -> here -> instance (move's stream) vs SSH layer "
             "download + upload", best, base, best / base, "<= 1.5x", "s")]


if __name__ == "__main__":
    from benchmarks.__main__ import main

    main(["--only", "move"])
