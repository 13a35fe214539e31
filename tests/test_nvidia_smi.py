"""The sandbox's nvidia-smi: nvidia-smi's query options, with the instance's real use in them."""

from __future__ import annotations

import pytest
from helpers import launch_active, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox.nvidia_smi import run

QUERY = "nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits"
STATE = {"model": "H100 80GB", "count": 2, "mib": 81920, "util": 130.0, "memoryMiB": 1210.4}


pytestmark = pytest.mark.usefixtures("own_home")  # see tests/conftest.py

def use(cloud: GPUCloud, instance_id: str) -> tuple[int, int]:
    out = cloud.instances.run(instance_id, QUERY).stdout
    util, memory = out.splitlines()[0].split(", ")
    return int(util), int(memory)


def test_the_query_has_nvidia_smis_csv_layout() -> None:
    out, err, status = run(STATE, ["--query-gpu=index,utilization.gpu,memory.used,memory.total",
                                   "--format=csv"])
    assert (out, err, status) == (
        "index, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
        "0, 100 %, 1210 MiB, 81920 MiB\n1, 30 %, 0 MiB, 81920 MiB\n", "", 0)
    assert run(STATE, ["--query-gpu", "utilization.gpu", "--format", "csv,noheader,nounits"])[0] \
        == "100\n30\n"


def test_a_field_nvidia_smi_does_not_know_is_its_own_error() -> None:
    assert run(STATE, ["--query-gpu=power.draw", "--format=csv"]) == (
        "", 'Field "power.draw" is not a valid field to query.\n', 2)
    assert run(STATE, ["--query-gpu=utilization.gpu"])[2] == 2  # no --format


def test_a_busy_loop_is_a_busy_gpu_and_stopping_it_idles_the_gpu(box: GPUCloud) -> None:
    instance_id = launch_active(box, "smi").id
    assert use(box, instance_id)[0] < 5  # nothing runs: not even nvidia-smi's own start counts
    pid = box.instances.run(instance_id, "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 & "
                                         "echo $!").stdout.strip()
    wait_for(lambda: use(box, instance_id)[0] >= 50, timeout=60)  # the service measures each s
    util, memory = use(box, instance_id)
    assert util >= 50 and memory > 0
    table = box.instances.run(instance_id, "nvidia-smi").stdout
    assert f"{util}%" in table or f"{use(box, instance_id)[0]}%" in table
    box.instances.run(instance_id, f"kill {pid}")
    wait_for(lambda: use(box, instance_id)[0] < 5, timeout=60,
             what=lambda: f"still {use(box, instance_id)} after the loop was killed")


def test_a_list_of_the_gpus(box: GPUCloud) -> None:
    instance_id = launch_active(box, "smi").id
    listed = box.instances.run(instance_id, "nvidia-smi -L").stdout
    assert listed.startswith("GPU 0: NVIDIA ") and "(UUID: GPU-" in listed
