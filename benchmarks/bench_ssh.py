"""Benchmark: the client's SSH use of an instance against raw asyncssh on the same server.

- ``run("true")`` round trip: ``cloud.instances.run(id, "true")`` (sync, cached connection)
  against ``await conn.run("true")`` on an open asyncssh connection to the same instance's
  server. Target ``<= 1.2x``.
- SFTP of ``megabytes`` MB on loopback, MB/s (best of ``copies``): ``cloud.instances.upload``
  against asyncssh's ``sftp.put`` on an open connection. Target ``>= 0.9x``.

Medians of ``repeat`` round trips, taken one ours, one raw, in turn.

Both sides talk to the same sandbox instance's SSH server (127.0.0.1), in the same run.
Run standalone with ``python -m benchmarks.bench_ssh``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"repeat": 20, "megabytes": 8, "copies": 2}


def run(repeat: int = 300, megabytes: int = 50, copies: int = 5) -> list[Row]:
    """Two rows: run("true") seconds per call, and SFTP upload MB/s."""
    import asyncssh

    from gpucloud_nb import GPUCloud
    from gpucloud_nb.client.remote import key_dir
    from gpucloud_nb.sandbox import Sandbox

    with tempfile.TemporaryDirectory() as scratch, Sandbox(launch_seconds=0.0) as box:
        cloud = GPUCloud(api_key=box.api_key, base_url=box.management_url)
        cloud.sandbox = box
        offer = next(o for o in cloud.instances.offers(available=True)
                     if o.deployment_type == "vm")
        instance = cloud.instances.create(
            name="bench-ssh", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
            region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
        details = cloud.instances.wait_until_active(instance.id, timeout=30)
        source = Path(scratch) / "payload.bin"
        source.write_bytes(os.urandom(megabytes * 1024 * 1024))
        cloud.instances.run(instance.id, "true")  # connect, register the key, learn the host key

        def ours_run() -> float:
            start = time.perf_counter()
            cloud.instances.run(instance.id, "true")
            return time.perf_counter() - start

        def ours_sftp() -> float:
            start = time.perf_counter()
            cloud.instances.upload(instance.id, source, "ours.bin")
            return time.perf_counter() - start

        # The raw side keeps its own open connection on its own loop; each of its calls is
        # timed inside that loop, so only asyncssh's own work counts. Calls alternate with ours
        # one by one, so load from other processes on the machine hits both sides alike.
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()

        def on_loop(coroutine: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

        async def open_raw() -> Any:
            key = asyncssh.read_private_key(str(key_dir(box) / "id_ed25519"))
            return await asyncssh.connect(details.ip, details.ssh_port,
                                          username=details.ssh_user, client_keys=[key],
                                          known_hosts=None, config=[], agent_path=None)

        async def raw_run(conn: Any) -> float:
            start = time.perf_counter()
            await conn.run("true")
            return time.perf_counter() - start

        async def raw_sftp(conn: Any) -> float:
            start = time.perf_counter()
            async with conn.start_sftp_client() as sftp:
                await sftp.put(str(source), "raw.bin")
            return time.perf_counter() - start

        conn = on_loop(open_raw())
        on_loop(raw_run(conn))
        ours_runs, raw_runs, ours_copies, raw_copies = [], [], [], []
        for _ in range(repeat):
            ours_runs.append(ours_run())
            raw_runs.append(on_loop(raw_run(conn)))
        for _ in range(copies):
            ours_copies.append(ours_sftp())
            raw_copies.append(on_loop(raw_sftp(conn)))
        conn.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        cloud.close()

    ours_rt, raw_rt = statistics.median(ours_runs), statistics.median(raw_runs)
    ours_mbs, raw_mbs = megabytes / min(ours_copies), megabytes / min(raw_copies)
    return [
        ('instances.run("true") round trip vs raw asyncssh conn.run (open connection)',
         ours_rt, raw_rt, ours_rt / raw_rt, "<= 1.2x", "s"),
        (f"instances.upload {megabytes} MB over SFTP vs raw asyncssh sftp.put",
         ours_mbs, raw_mbs, ours_mbs / raw_mbs, ">= 0.9x", "MB/s"),
    ]


if __name__ == "__main__":
    from benchmarks.__main__ import main

    main(["--only", "ssh"])
