"""The sandbox's stand-in for a VM's GPU use: every process of an instance measured, over real
SSH, and shown by its ``nvidia-smi`` (what a gateway's idle reader reads; the idle deletes
themselves are the gateway's: tests/test_gateway_idle.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import DETACHED, detached_job, ended, launch_active, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox.gpu_use import POLL

pytestmark = pytest.mark.usefixtures("own_home")  # see tests/conftest.py

QUERY = "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits"


def gpu_util(cloud: GPUCloud, instance_id: str) -> float:
    return float(cloud.instances.run(instance_id, QUERY).stdout.split()[0])


@pytest.mark.parametrize("how", list(DETACHED))
def test_a_detached_job_is_gpu_use_and_dies_with_the_instance(box: GPUCloud, how: str) -> None:
    """A loop that left the SSH session (setsid, nohup, a double fork, tmux) is the instance's:
    its CPU shows as GPU use, and deleting the instance ends it."""
    instance_id = launch_active(box, "detached").id
    with detached_job(box, instance_id, how) as pid:
        wait_for(lambda: gpu_util(box, instance_id) >= 50, timeout=60)
        box.instances.delete(instance_id)
        wait_for(lambda: ended(pid), timeout=30)


def test_a_job_whose_cell_starts_with_nvidia_smi_is_gpu_use(box: GPUCloud) -> None:
    """Looking at the GPU first does not make the rest of a run bookkeeping: only a client's
    mark in the session's environment does."""
    instance_id = launch_active(box, "job").id
    job = threading.Thread(target=box.instances.run,
                           args=(instance_id, "nvidia-smi\nsleep 8 & while [ -e /proc/$! ]; "
                                              "do :; done"))
    job.start()
    try:
        wait_for(lambda: gpu_util(box, instance_id) >= 50, timeout=7)
    finally:
        job.join(60)


def test_a_server_with_shells_off_measures_nothing(sandbox_factory: Any) -> None:
    """With shells off (several accounts under one OS user) nothing can run on an instance, so
    the meter walks no /proc (its CPU competed with every client's polls)."""
    sandbox = sandbox_factory(keys=("student-b-key-0123456789",))
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        launch_active(cloud, "quiet")
        meter = sandbox.app.state.gpu_meter
        assert not meter.servers.shell and meter.servers.running()
        time.sleep(POLL * 2.5)  # measures would have come by now
        assert meter.uses == {} and meter._meters == {}
