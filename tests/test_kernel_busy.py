"""A kernel executing a cell is use of its instance, whoever started it (#36).

Over real HTTP and SSH: a plain ``jupyter_client.KernelManager`` (as nbclient uses; no JupyterLab,
no poller) starts a kernel on an instance launched through a gateway in front of a sandbox. A
sleeping cell uses no GPU, so only the provisioner's report keeps the instance past its idle
limit; once the kernel is idle, the gateway deletes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import ADA, launch_active, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.remote import default_public_key
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.kernel import install_kernel
from tests.test_kernel_provisioner import _entry_point, jupyter_data, kernels  # noqa: F401

GONE = ("deleting", "deleted")


def test_a_kernel_executing_a_cell_keeps_its_instance_and_once_idle_lets_it_go(
        gateway_factory: Callable[..., Gateway], monkeypatch: pytest.MonkeyPatch,
        kernels: Any) -> None:  # noqa: F811
    gateway = gateway_factory()
    monkeypatch.setenv("GPUCLOUD_API_KEY", ADA)  # the provisioner's client: the gateway's
    monkeypatch.setenv("GPUCLOUD_BASE_URL", gateway.url)
    limit = 6.0
    with GPUCloud() as cloud:
        instance = launch_active(cloud, "kernel-busy", delete_when_idle=600,
                                 ssh_key=default_public_key(None))
        kernel = kernels(install_kernel(cloud, instance.id))
        sleep = 30
        message_id = kernel.client.execute(f"import time; time.sleep({sleep})")
        deadline = time.monotonic() + 60
        while True:  # the kernel says it is busy on this cell (the provisioner hears it too)
            message = kernel.client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
            if message["msg_type"] == "status" and message["parent_header"].get(
                    "msg_id") == message_id and message["content"]["execution_state"] == "busy":
                break
        cloud.idle_delete.keep(instance.id)
        cloud.idle_delete.watch(instance.id, limit)
        def status() -> str:
            return cloud.instances.get(instance.id).status

        until = time.monotonic() + 3 * limit  # three whole limits of a sleeping cell: kept
        while time.monotonic() < until:
            assert status() == "active"
            time.sleep(0.5)
        reply = kernel.client.get_shell_msg(timeout=sleep + 120)
        assert reply["parent_header"]["msg_id"] == message_id
        assert reply["content"]["status"] == "ok"
        # The kernel is idle now (and still running): an idle kernel is not use.
        wait_for(lambda: status() in GONE, timeout=limit + 30 + 90,
                 what=lambda: f"the instance is still {status()}")
