"""Idle deletes kept by the sandbox service: measured over real SSH, deleted over real HTTP."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from helpers import connected, echo_port, launch_active, open_kernel, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.remote import default_public_key
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.idle import POLL

LIMIT = 2.0


pytestmark = pytest.mark.usefixtures("own_home")  # see tests/conftest.py

def watch(api: httpx.Client, instance_id: str, seconds: float = LIMIT) -> dict[str, Any]:
    answer = api.put(f"/sandbox/instances/{instance_id}/idle-delete", json={"seconds": seconds})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def status(api: httpx.Client, instance_id: str) -> str:
    return str(api.get(f"/gpu-cloud/instances/{instance_id}").json()["status"])


def gone_after(api: httpx.Client, instance_id: str, timeout: float) -> float | None:
    """Seconds until the instance is deleting or deleted, or None if it is not by ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if status(api, instance_id) in ("deleting", "deleted"):
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def test_an_instance_with_nothing_running_is_deleted_within_its_limit_and_one_poll(
        box: GPUCloud, sandbox_api: httpx.Client) -> None:
    instance_id = launch_active(box, "idle").id
    state = watch(sandbox_api, instance_id)
    assert state["seconds"] == LIMIT and state["idleSeconds"] < 0.5 and not state["warning"]
    took = gone_after(sandbox_api, instance_id, LIMIT + POLL + 3)
    assert took is not None and LIMIT - 0.1 <= took <= LIMIT + POLL + 0.5
    assert sandbox_api.get(f"/sandbox/instances/{instance_id}/idle-delete").status_code == 404


def test_a_busy_loop_keeps_it_past_its_limit_and_shows_as_gpu_use(
        box: GPUCloud, sandbox_api: httpx.Client) -> None:
    instance_id = launch_active(box, "idle").id
    pid = box.instances.run(instance_id, "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 & "
                                         "echo $!").stdout.strip()
    watch(sandbox_api, instance_id)
    assert gone_after(sandbox_api, instance_id, LIMIT * 2 + POLL) is None
    state = sandbox_api.get(f"/sandbox/instances/{instance_id}/idle-delete").json()
    assert state["gpuUtil"] >= 50 and state["idleSeconds"] < POLL + 0.5
    assert [s["instanceId"] for s in sandbox_api.get("/sandbox/idle").json()] == [instance_id]
    box.instances.run(instance_id, f"kill {pid}")  # stops the loop: now it idles away
    assert gone_after(sandbox_api, instance_id, LIMIT + POLL * 2 + 3) is not None


def test_an_open_ssh_session_keeps_it(box: GPUCloud, sandbox_api: httpx.Client) -> None:
    instance_id = launch_active(box, "idle").id
    watch(sandbox_api, instance_id)
    session = threading.Thread(target=box.instances.run, args=(instance_id, "sleep 5"))
    session.start()  # sleeping uses no CPU: only the open session keeps it
    assert gone_after(sandbox_api, instance_id, 4.5) is None
    session.join()
    assert gone_after(sandbox_api, instance_id, LIMIT + POLL + 3) is not None


def test_the_warning_comes_before_the_delete_and_keep_resets_the_clock(
        box: GPUCloud, sandbox_api: httpx.Client) -> None:
    instance_id = launch_active(box, "idle").id
    limit = 4.0
    first = watch(sandbox_api, instance_id, limit)
    assert not first["warning"] and first["warnAt"] < first["deleteAt"]
    time.sleep(limit / 2 + 0.3)  # the warning starts half-way for a short limit
    warned = sandbox_api.get(f"/sandbox/instances/{instance_id}/idle-delete").json()
    assert warned["warning"] and status(sandbox_api, instance_id) == "active"
    kept = sandbox_api.post(f"/sandbox/instances/{instance_id}/keep").json()
    assert not kept["warning"] and kept["idleSeconds"] < 0.5 and kept["deleteAt"] > warned["deleteAt"]
    time.sleep(limit / 2 + 0.3)  # past the first deadline: kept
    assert status(sandbox_api, instance_id) == "active"
    assert gone_after(sandbox_api, instance_id, limit + POLL + 3) is not None


def test_bad_limits_and_unknown_instances_are_refused(box: GPUCloud,
                                                      sandbox_api: httpx.Client) -> None:
    instance_id = launch_active(box, "idle").id
    for bad in (0, -1, "soon", True, None):
        answer = sandbox_api.put(f"/sandbox/instances/{instance_id}/idle-delete",
                                 json={"seconds": bad})
        assert answer.status_code == 400 and answer.json()["message"] == (
            "seconds must be a positive number.")
    assert sandbox_api.put("/sandbox/instances/nope/idle-delete",
                           json={"seconds": 5}).status_code == 404
    assert sandbox_api.post(f"/sandbox/instances/{instance_id}/keep").status_code == 404
    watch(sandbox_api, instance_id, 60)
    assert sandbox_api.delete(f"/sandbox/instances/{instance_id}/idle-delete").status_code == 204
    assert sandbox_api.delete(f"/sandbox/instances/{instance_id}/idle-delete").status_code == 404
    box.instances.delete(instance_id)
    answer = sandbox_api.put(f"/sandbox/instances/{instance_id}/idle-delete", json={"seconds": 5})
    assert answer.status_code == 400 and "already deleting" in answer.json()["message"]


def test_an_idle_limit_is_one_accounts_own(sandbox_factory, management_client_factory) -> None:
    sandbox = sandbox_factory(keys=("other-key",))
    mine = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
    offer = mine.instances.offers(deployment_type="vm", available=True)[0]
    instance = mine.instances.create(
        name="mine", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
    other = management_client_factory(sandbox, api_key="other-key")
    assert other.put(f"/sandbox/instances/{instance.id}/idle-delete",
                     json={"seconds": 5}).status_code == 404
    watch(management_client_factory(sandbox), instance.id, 60)
    assert other.get("/sandbox/idle").json() == []
    mine.close()


LOOP = "sh -c 'while :; do :; done'"
DETACHED = {  # each starts a busy loop that leaves the SSH session, and prints its pid
    "setsid": f"setsid {LOOP} >/dev/null 2>&1 </dev/null & echo $!",
    "nohup": f"nohup {LOOP} >/dev/null 2>&1 </dev/null & echo $!",
    "double fork": f"( setsid {LOOP} >/dev/null 2>&1 </dev/null & echo $! )",
    "tmux": f"tmux new-session -d {LOOP!r} && tmux list-panes -F '#{{pane_pid}}'",
}


@contextlib.contextmanager
def killed_after(pid: int) -> Iterator[None]:
    """Whatever the test finds, the loop ``pid`` does not outlive it."""
    try:
        yield
    finally:
        with contextlib.suppress(psutil.Error, OSError):
            if psutil.Process(pid).environ().get("GPUCLOUD_INSTANCE_ID"):
                os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("how", list(DETACHED))
def test_a_detached_job_is_use_and_dies_with_the_instance(
        box: GPUCloud, sandbox_api: httpx.Client, how: str) -> None:
    """A loop that left the SSH session (setsid, nohup, a double fork, tmux) is the instance's:
    its CPU keeps the instance, and deleting the instance ends it."""
    instance_id = launch_active(box, "idle").id
    pid = int(box.instances.run(instance_id, DETACHED[how]).stdout.split()[-1])
    with killed_after(pid):
        watch(sandbox_api, instance_id)
        assert gone_after(sandbox_api, instance_id, LIMIT * 2 + POLL * 2) is None
        state = sandbox_api.get(f"/sandbox/instances/{instance_id}/idle-delete").json()
        assert state["gpuUtil"] >= 50, state
        shown = box.instances.run(instance_id, "nvidia-smi --query-gpu=utilization.gpu "
                                               "--format=csv,noheader,nounits").stdout
        assert float(shown.split()[0]) >= 50
        box.instances.delete(instance_id)
        wait_for(lambda: not running(pid), timeout=30)


def test_a_job_whose_cell_starts_with_nvidia_smi_is_use(
        box: GPUCloud, sandbox_api: httpx.Client) -> None:
    """Looking at the GPU first does not make the rest of a run bookkeeping."""
    instance_id = launch_active(box, "idle").id
    watch(sandbox_api, instance_id)
    job = threading.Thread(target=box.instances.run,
                           args=(instance_id, "nvidia-smi\nsleep 6 & while [ -e /proc/$! ]; "
                                              "do :; done"))
    job.start()
    try:
        assert gone_after(sandbox_api, instance_id, 5) is None
    finally:
        job.join(30)
    assert gone_after(sandbox_api, instance_id, LIMIT + POLL + 5) is not None


@pytest.fixture
def kernel_box(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
               kernel_provisioner_entry_point: Path | None) -> Iterator[GPUCloud]:
    """A client found from the environment, as the provisioner in a Jupyter server finds it;
    kernelspecs go to a temporary JUPYTER_DATA_DIR."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    with GPUCloud() as cloud:
        yield cloud


def kernel_instance(cloud: GPUCloud) -> str:
    return launch_active(cloud, "kernel", ssh_key=default_public_key(None)).id


def test_an_idle_open_kernel_lets_its_instance_idle_away(
        kernel_box: GPUCloud, sandbox_api: httpx.Client) -> None:
    """The provisioner polls the kernel (``kill -0`` over SSH) as JupyterLab's restarter does;
    an idle kernel is not use, so the instance is deleted at its limit, kernel open."""
    instance_id = kernel_instance(kernel_box)
    with open_kernel(install_kernel(kernel_box, instance_id)) as kernel:
        assert kernel.execute_interactive("x = 6 * 7", timeout=60)["content"]["status"] == "ok"
        limit = 4.0
        watch(sandbox_api, instance_id, limit)
        took = gone_after(sandbox_api, instance_id, limit + POLL + 20)
        assert took is not None, sandbox_api.get(
            f"/sandbox/instances/{instance_id}/idle-delete").json()
        assert took >= limit - 0.1


def test_a_kernel_executing_code_keeps_its_instance(
        kernel_box: GPUCloud, sandbox_api: httpx.Client) -> None:
    instance_id = kernel_instance(kernel_box)
    with open_kernel(install_kernel(kernel_box, instance_id)) as kernel:
        kernel.execute("import time\nend = time.time() + 12\nwhile time.time() < end: pass")
        limit = 3.0
        watch(sandbox_api, instance_id, limit)
        assert gone_after(sandbox_api, instance_id, limit * 2 + POLL) is None
        state = sandbox_api.get(f"/sandbox/instances/{instance_id}/idle-delete").json()
        assert state["gpuUtil"] >= 50, state
        reply = kernel.get_shell_msg(timeout=60)  # the cell ends: now it idles away
        assert reply["content"]["status"] == "ok"
        assert gone_after(sandbox_api, instance_id, limit + POLL + 20) is not None


@pytest.mark.parametrize("bookkeeping", [False, True], ids=["the user's", "bookkeeping"])
def test_a_connection_through_a_forward_the_user_opened_is_use(
        box: GPUCloud, sandbox_api: httpx.Client, bookkeeping: bool) -> None:
    """A forward that only listens is not use; a connection through it is, while open, unless
    the package opened the forward for its own bookkeeping (a cluster's scheduler)."""
    instance_id = launch_active(box, "idle").id
    with echo_port() as port, box.instances.forward(instance_id, port,
                                                    bookkeeping=bookkeeping) as url:
        with connected(url):
            watch(sandbox_api, instance_id)
            took = gone_after(sandbox_api, instance_id, LIMIT * 2 + POLL + 1)
            if bookkeeping:
                assert took is not None
                return
            assert took is None, "an open connection through the forward is use"
        # closed; the forward still listens: that is not use, so it idles away
        assert gone_after(sandbox_api, instance_id, LIMIT + POLL + 3) is not None
