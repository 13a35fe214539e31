"""Benchmark: a small move against a launch, and what an idle checkpoint costs a waiting cell.

Real kernels on sandbox instances (``launch_seconds`` 3 s, the sandbox's default), started by
``jupyter_client.KernelManager`` from the kernelspec, over real SSH:

- **Small move.** A namespace of under 1 MB (``small_kb`` KB of arrays plus a few names) moved
  with ``%gpucloud move --gpu MODEL`` to a new instance, the whole cell's time, against the
  launch of an instance of the same offer measured in the same run (create to active) plus
  5 s: the issue's bound, ratio ``<= 1.0``.
- **Idle checkpoint.** ``%gpucloud checkpoint --every 1s`` in a kernel holding ``megabytes``
  MB of numpy arrays: how long the background checkpoint held cells back (the variables read
  and written to a file; the copy to this machine runs beside cells), against the same kernel
  writing the same bytes with ``ndarray.tofile``. The issue's bound is 2 s held.

Run standalone with ``python -m benchmarks.bench_session``.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from typing import Any

__all__ = ["QUICK", "run"]

Row = tuple[str, float, float, float, str, str]
QUICK = {"megabytes": 16, "small_kb": 100}


def _cell(client: Any, code: str, timeout: float = 600) -> str:
    out: list[str] = []

    def hook(message: dict[str, Any]) -> None:
        content = message["content"]
        if "text" in content:
            out.append(content["text"])
        elif "ename" in content:
            out.append(f"{content['ename']}: {content['evalue']}")

    reply = client.execute_interactive(code, timeout=timeout, output_hook=hook)
    if reply["content"]["status"] != "ok":
        raise RuntimeError("".join(out))
    return "".join(out)


def run(megabytes: int = 1000, small_kb: int = 500) -> list[Row]:
    """Two rows: the small move, and the idle checkpoint's hold."""
    from jupyter_client.manager import KernelManager

    from gpucloud_nb import GPUCloud
    from gpucloud_nb.kernel import install_kernel
    from gpucloud_nb.sandbox import Sandbox

    saved = {name: os.environ.get(name) for name in
             ("GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL", "JUPYTER_DATA_DIR")}
    with tempfile.TemporaryDirectory() as scratch, Sandbox() as box:
        os.environ.update(GPUCLOUD_API_KEY=box.api_key, GPUCLOUD_BASE_URL=box.management_url,
                          JUPYTER_DATA_DIR=os.path.join(scratch, "jupyter"))
        managers: list[Any] = []
        try:
            with GPUCloud() as cloud:
                offer = next(o for o in cloud.instances.offers(available=True, sort="price")
                             if o.deployment_type == "vm")

                def launch(name: str) -> tuple[Any, float]:
                    started = time.perf_counter()
                    created = cloud.instances.create(
                        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
                        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
                    details = cloud.instances.wait_until_active(created.id, timeout=120)
                    return details, time.perf_counter() - started

                def kernel(instance: Any) -> Any:
                    manager = KernelManager(kernel_name=install_kernel(cloud, instance.id))
                    manager.start_kernel(cwd=scratch)
                    managers.append(manager)
                    client = manager.client()
                    client.start_channels()
                    client.wait_for_ready(timeout=120)
                    return client

                here, _ = launch("bench-session-here")
                _, launch_seconds = launch("bench-session-baseline")
                client = kernel(here)
                _cell(client, f"%load_ext gpucloud_nb\nimport numpy as np\n"
                              f"small = np.ones({small_kb * 1000 // 8})\ncount, text = 1, 'x'\n"
                              "def double(v):\n    return 2 * v\n")
                started = time.perf_counter()
                out = _cell(client, f"%gpucloud move --gpu {offer.gpu_name!r}")
                moved = time.perf_counter() - started
                if "Moved to " not in out:
                    raise RuntimeError(out)
                timings = re.search(r"\((instance[^)]*)\)", out)
                rows: list[Row] = [(
                    f"{small_kb} kB namespace moved to a new instance vs its launch + 5 s "
                    f"({timings.group(1) if timings else '?'})",
                    moved, launch_seconds + 5, moved / (launch_seconds + 5), "<= 1.0x", "s")]

                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:  # a cell sent in the swap's second is
                    try:                            # refused by the old kernel: sent again
                        _cell(client, "pass")
                        break
                    except RuntimeError as error:
                        if "MovedError" not in str(error):
                            raise
                        time.sleep(0.5)
                _cell(client, f"big = np.ones({megabytes * 2**20 // 8})\n"
                              "import time as _t\n_s = _t.perf_counter()\n"
                              "big.tofile('raw.bin')\n_raw = _t.perf_counter() - _s\n"
                              "import os as _o\n_o.unlink('raw.bin')\n"
                              "%gpucloud checkpoint --every 1s --keep 1")
                deadline = time.monotonic() + 600
                held, raw = -1.0, 0.0
                while held < 0 and time.monotonic() < deadline:
                    time.sleep(2)
                    held, raw = (float(part) for part in _cell(
                        client, "from gpucloud_nb.kernel import background as _b\n"
                                "print((_b._schedule.busy or [-1])[0], _raw)").split())
                if held < 0:
                    raise RuntimeError("no background checkpoint within 10 minutes")
                _cell(client, "%gpucloud checkpoint --every off")
                rows.append((f"{megabytes} MB idle checkpoint: cells held back vs the kernel "
                             "writing the arrays (tofile)", held, raw, held / raw,
                             "held <= 2 s", "s"))
        finally:
            for manager in managers:
                if manager.has_kernel:
                    manager.shutdown_kernel(now=True)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return rows


if __name__ == "__main__":
    from benchmarks.__main__ import main

    main(["--only", "session"])
