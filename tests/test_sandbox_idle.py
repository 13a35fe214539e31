"""Idle deletes kept by the sandbox service: measured over real SSH, deleted over real HTTP."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from helpers import launch_active

from gpucloud_nb import GPUCloud
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
