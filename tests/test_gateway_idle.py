"""Idle deletes kept by the gateway alone: no kernel, no JupyterLab, no client running.

Over real HTTP: the gateway in front of a sandbox that plays the real cloud (its spec paths and
key only). The gateway reads GPU use over SSH with its own key; the sandbox's instances answer
``nvidia-smi`` from their measured use (a busy loop is GPU use there).
"""

from __future__ import annotations

import csv
import io
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.gateway.ssh_key import KEY_FILE
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import (
    ADA,
    BOB,
    DETACHED,
    SPEC_FIELDS,
    SPIN_LOOP,
    TEACHER,
    UPSTREAM_KEY,
    as_key,
    connected,
    create_body,
    detached_job,
    direct,
    echo_port,
    ended,
    launch_active,
    wait_for,
)
from tests.test_gateway_cloud_init import active, cloud_init_offer
from tests.test_ssh import keypair, ssh

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
BUSY_LOOP = "nohup python3 -c 'while True: pass' > /dev/null 2>&1 &"


def gone(real: httpx.Client, id: str) -> bool:
    return real.get(f"/gpu-cloud/instances/{id}").json()["status"] in ("deleting", "deleted")


def launch(client: httpx.Client, offer: Any, name: str, public: str,
           idle: float = 3600) -> dict[str, Any]:
    body = {**create_body(offer, name), "sshKey": public, "deleteWhenIdle": idle}
    answer = client.post("/gpu-cloud/instances", json=body)
    assert answer.status_code == 201, answer.text
    return active(client, answer.json()["_id"])


def idle_state(client: httpx.Client, id: str) -> dict[str, Any]:
    answer = client.get(f"/gateway/instances/{id}/idle-delete")
    assert answer.status_code == 200, answer.text
    state: dict[str, Any] = answer.json()
    return state


def stays_active(real: httpx.Client, ids: list[str], seconds: float) -> None:
    """Every instance of ``ids`` stays active for ``seconds`` more (checked all along)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for id in ids:
            assert real.get(f"/gpu-cloud/instances/{id}").json()["status"] == "active", id
        time.sleep(0.2)


@contextmanager
def reporting(client: httpx.Client, id: str) -> Iterator[None]:
    """A client reporting use of ``id`` every 0.5 s, as ``UseReports`` does while a run is open."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            client.post(f"/gateway/instances/{id}/use", json={"seconds": 2})
            stop.wait(0.5)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


@needs_ssh
def test_an_idle_instance_is_deleted_with_nothing_open_and_busy_ones_are_kept(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    gateway = gateway_factory()
    user = keypair(tmp_path, "user")
    public = user.with_suffix(".pub").read_text().strip()
    offer = cloud_init_offer(upstream)
    with as_key(gateway, ADA) as ada, as_key(gateway, ADA) as reporter, direct(upstream) as real, \
            as_key(gateway, BOB) as bob, as_key(gateway, TEACHER) as teacher:
        idle = launch(ada, offer, "idle", public)
        busy = launch(ada, offer, "busy", public)
        told = launch(ada, offer, "told", public)
        started = ssh(user, busy["sshPort"], BUSY_LOOP, tmp_path / "kh")
        assert started.returncode == 0, started.stderr
        assert bob.post(f"/gateway/instances/{told['_id']}/use").status_code == 404  # not Bob's
        assert bob.put(f"/gateway/instances/{idle['_id']}/idle-delete",
                       json={"seconds": 1}).status_code == 404
        with reporting(reporter, told["_id"]):
            wait_for(lambda: (idle_state(ada, busy["_id"])["gpuUtil"] or 0) >= 5, timeout=60)
            for made in (idle, busy, told):  # the same limit, from the same moment
                answer = ada.put(f"/gateway/instances/{made['_id']}/idle-delete",
                                 json={"seconds": 3})
                assert answer.status_code == 200 and answer.json()["seconds"] == 3
            wait_for(lambda: idle_state(ada, idle["_id"])["warning"], timeout=60)  # warned first
            assert real.get(f"/gpu-cloud/instances/{idle['_id']}").json()["status"] == "active"
            states = {s["instanceId"]: s for s in ada.get("/gateway/idle").json()}
            assert set(states) == {idle["_id"], busy["_id"], told["_id"]}
            assert bob.get("/gateway/idle").json() == []
            wait_for(lambda: gone(real, idle["_id"]), timeout=60)
            stays_active(real, [busy["_id"], told["_id"]], 6)  # twice the limit after the delete
        reasons = [(e["resource"], e["reason"]) for e in teacher.get("/gateway/audit").json()
                   ["entries"] if e["action"] == "deleted"]
        assert reasons == [(idle["_id"], "idle (by gateway)")]
        assert idle["_id"] not in {s["instanceId"] for s in ada.get("/gateway/idle").json()}
        wait_for(lambda: gone(real, told["_id"]), timeout=60)  # its reports ended: idle now
        assert real.get(f"/gpu-cloud/instances/{busy['_id']}").json()["status"] == "active"


def test_a_container_create_with_delete_when_idle_is_refused_before_anything_launches(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = next(o for o in real_cloud.instances.offers(deployment_type="container",
                                                            available=True))
    body = {"name": "box", "cloudProvider": offer.cloud.id, "instanceId": offer.instance_id,
            "region": offer.available_regions[0], "dockerContainer": {"image": "nginx:1.27"},
            "deleteWhenIdle": 600}
    with as_key(gateway, ADA) as ada, direct(upstream) as real, \
            as_key(gateway, TEACHER) as teacher:
        for sent in (body, {**body, "deleteWhenIdle": "soon"}):
            answer = ada.post("/gpu-cloud/instances", json=sent)
            assert answer.status_code == 400 and set(answer.json()) == SPEC_FIELDS
            message = answer.json()["message"]
            assert message.count(". ") == 0 and message.endswith(".")
            assert "nothing was launched" in message
        assert "cannot watch" in ada.post("/gpu-cloud/instances", json=body).json()["message"]
        assert real.get("/gpu-cloud/instances").json() == []
        assert ada.get("/gateway/me").json()["spend"] == 0
        assert [e for e in teacher.get("/gateway/audit").json()["entries"]
                if e["action"] == "created"] == []
        without = {k: v for k, v in body.items() if k != "deleteWhenIdle"}
        assert ada.post("/gpu-cloud/instances", json=without).status_code == 201


@needs_ssh
def test_a_restart_keeps_idle_limits_and_the_key_and_the_key_is_never_shown(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    home = tmp_path / "gateway"
    home.mkdir(mode=0o700)
    user = keypair(tmp_path, "user")
    public = user.with_suffix(".pub").read_text().strip()
    offer = cloud_init_offer(upstream)
    answers: list[str] = []
    first = gateway_factory(home=home)
    with as_key(first, ADA) as ada:
        idle = launch(ada, offer, "idle", public)
        busy = launch(ada, offer, "busy", public)
        assert ssh(user, busy["sshPort"], BUSY_LOOP, tmp_path / "kh").returncode == 0
        wait_for(lambda: (idle_state(ada, busy["_id"])["gpuUtil"] or 0) >= 5, timeout=60)
        for made in (idle, busy):
            answers.append(ada.put(f"/gateway/instances/{made['_id']}/idle-delete",
                                   json={"seconds": 4}).text)
    first.stop()
    again = gateway_factory(home=home)
    with as_key(again, ADA) as ada, direct(upstream) as real, \
            as_key(again, TEACHER) as teacher:
        listed = ada.get("/gateway/idle")
        answers.append(listed.text)
        assert {(s["instanceId"], s["seconds"]) for s in listed.json()} == {
            (idle["_id"], 4), (busy["_id"], 4)}
        wait_for(lambda: gone(real, idle["_id"]), timeout=60)
        stays_active(real, [busy["_id"]], 8)  # read with the same key: unreadable would be idle
        for path in ("/gateway/me", "/gateway/audit", "/gateway/class", "/gpu-cloud/instances",
                     f"/gpu-cloud/instances/{busy['_id']}", f"/gateway/instances/{busy['_id']}/use"):
            client = teacher if "class" in path or "audit" in path else ada
            answers.append(client.request("POST" if path.endswith("/use") else "GET", path).text)
    private = (home / "ssh" / KEY_FILE).read_text()
    body_lines = [line for line in private.splitlines() if line and "PRIVATE KEY" not in line]
    assert body_lines
    shown = "\n".join(answers) + caplog.text + (home / "gateway.sqlite3").read_bytes().decode(
        "latin-1")
    for line in body_lines:
        assert line not in shown


@needs_ssh
def test_the_teachers_view_shows_each_students_idle_minutes_from_the_gateways_clocks(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    """#36: ``GET /gateway/class`` gives each student ``idleMinutes`` (their idlest watched
    instance, by the gateway's own idle clocks), and ClassView, ClassPanel, the CSV and
    ``gpucloud-nb gateway class``'s table show it; a student with nothing watched has none."""
    from gpucloud_nb.gateway.class_table import format_table
    from gpucloud_nb.widgets import ClassPanel

    gateway = gateway_factory()
    public = keypair(tmp_path, "user").with_suffix(".pub").read_text().strip()
    offer = cloud_init_offer(upstream)

    def row(client: httpx.Client, name: str) -> dict[str, Any]:
        answer = client.get("/gateway/class")
        assert answer.status_code == 200, answer.text
        return next(r for r in answer.json()["accounts"] if r["name"] == name)

    with as_key(gateway, ADA) as ada, as_key(gateway, BOB) as bob, \
            as_key(gateway, TEACHER) as teacher:
        idle = launch(ada, offer, "idle", public)
        unwatched = bob.post("/gpu-cloud/instances", json=create_body(offer, "unwatched"))
        assert unwatched.status_code == 201, unwatched.text
        wait_for(lambda: (row(teacher, "Ada")["idleMinutes"] or 0) >= 0.1, timeout=90)
        assert row(teacher, "Bob")["instances"] == 1 and row(teacher, "Bob")["idleMinutes"] is None
        assert "idleMinutes" not in ada.get("/gateway/me").json()  # the teacher's view only
        before = row(teacher, "Ada")["idleMinutes"]
        assert ada.post(f"/gateway/instances/{idle['_id']}/keep").status_code == 200
        assert row(teacher, "Ada")["idleMinutes"] < before  # the same clock Keep starts again
        wait_for(lambda: (row(teacher, "Ada")["idleMinutes"] or 0) >= 0.1, timeout=90)
        csv_rows = {r["name"]: r for r in csv.DictReader(io.StringIO(
            teacher.get("/gateway/class.csv").text))}
        assert float(csv_rows["Ada"]["idleMinutes"]) >= 0.1 and csv_rows["Bob"]["idleMinutes"] == ""
    with GPUCloud(api_key=TEACHER, base_url=gateway.url) as grace:
        rows = {r.name: r for r in grace.class_view.accounts()}
        assert rows["Ada"].idle_minutes is not None and rows["Ada"].idle_minutes >= 0.1
        assert rows["Bob"].idle_minutes is None
        header, *lines = format_table(list(rows.values())).splitlines()
        assert "idle min" in header.split("  ")
        at = header.index("idle min")
        assert lines[0].startswith("Ada") and float(lines[0][at:].split()[0]) >= 0.1
        panel = ClassPanel(grace)
        try:
            assert "idle min" in panel.table.value
        finally:
            panel.close()


# -- what is use, through a personal gateway in front of the sandbox (as connect() makes it) -----
# The gateway alone keeps the clock: its own GPU read over SSH and the use this client reports.
# (Moved here from the sandbox's own idle watcher, which is gone; a kernel, busy or idle:
# tests/test_kernel_busy.py.)

LIMIT = 3.0
own_home = pytest.mark.usefixtures("own_home")  # see tests/conftest.py

def watched(box: GPUCloud) -> str:
    """An active instance launched through ``box``'s gateway with a long idle limit (a test
    shortens it once its work runs)."""
    return launch_active(box, "idle", delete_when_idle=3600).id


def gone_after(observer: GPUCloud, id: str, timeout: float) -> float | None:
    """Seconds until the upstream says ``id`` is deleting or deleted, or None by ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if observer.instances.get(id).status in ("deleting", "deleted"):
            return time.monotonic() - start
        time.sleep(0.1)
    return None


@own_home
def test_an_instance_with_nothing_running_is_deleted_at_its_limit_not_before(
        box: GPUCloud, observer: GPUCloud) -> None:
    id = watched(box)
    state = box.idle_delete.watch(id, LIMIT)
    assert state.limit == LIMIT and state.idle < 1 and not state.warning
    took = gone_after(observer, id, LIMIT + 30)
    assert took is not None and took >= LIMIT - 0.1


@own_home
def test_a_busy_loop_keeps_its_instance_and_once_killed_it_idles_away(
        box: GPUCloud, observer: GPUCloud) -> None:
    """The gateway's GPU read keeps a loop nobody watches; the run that kills it ends its use
    at the gateway's next pass (its end report used to count 30 s more)."""
    id = watched(box)
    pid = box.instances.run(id, f"nohup {SPIN_LOOP} >/dev/null 2>&1 & echo $!").stdout.strip()
    box.idle_delete.watch(id, LIMIT)
    assert gone_after(observer, id, LIMIT * 3) is None
    state = box.idle_delete.states()[id]
    assert state.gpu_util is not None and state.gpu_util >= 50 and state.idle < LIMIT, state
    box.instances.run(id, f"kill {pid}")
    assert gone_after(observer, id, LIMIT + 20) is not None


@own_home
def test_an_open_run_keeps_its_instance_and_its_end_lets_it_go(
        box: GPUCloud, observer: GPUCloud) -> None:
    """Sleeping uses no GPU: only the run this client reports keeps the instance."""
    id = watched(box)
    box.idle_delete.watch(id, LIMIT)
    session = threading.Thread(target=box.instances.run, args=(id, "sleep 8"))
    session.start()
    try:
        assert gone_after(observer, id, 6) is None
    finally:
        session.join(60)
    assert gone_after(observer, id, LIMIT + 20) is not None


@pytest.mark.parametrize("how", list(DETACHED))
@own_home
def test_a_detached_job_keeps_its_instance_by_its_gpu_use(
        box: GPUCloud, observer: GPUCloud, how: str) -> None:
    """A loop that left the SSH session (setsid, nohup, a double fork, tmux) is the instance's
    GPU use, read by the gateway, after the run that started it has ended."""
    id = watched(box)
    with detached_job(box, id, how) as pid:
        try:
            box.idle_delete.watch(id, LIMIT)
            assert gone_after(observer, id, LIMIT * 3) is None
            state = box.idle_delete.states()[id]
            assert state.gpu_util is not None and state.gpu_util >= 50, state
        finally:
            box.instances.delete(id)
            wait_for(lambda: ended(pid), timeout=30)


@pytest.mark.parametrize("bookkeeping", [False, True], ids=["the user's", "bookkeeping"])
@own_home
def test_a_connection_through_a_forward_the_user_opened_is_use(
        box: GPUCloud, observer: GPUCloud, bookkeeping: bool) -> None:
    """A forward that only listens is not use; a connection through it is, while open, unless
    the package opened the forward for its own bookkeeping (a cluster's scheduler)."""
    id = watched(box)
    with echo_port() as port, box.instances.forward(id, port, bookkeeping=bookkeeping) as url:
        with connected(url):
            box.idle_delete.watch(id, LIMIT)
            took = gone_after(observer, id, LIMIT * 3)
            if bookkeeping:
                assert took is not None
                return
            assert took is None, "an open connection through the forward is use"
        # closed; the forward still listens: that is not use, so it idles away
        assert gone_after(observer, id, LIMIT + 20) is not None
