"""The gateway as a service of a real JupyterHub (``tests/hub_helpers.py``), over real HTTP.

Users reach it with their hub tokens only, through the hub's proxy; a user's own single-user
server (spawned by the hub) finds it with no setting; the upstream is a sandbox playing the real
cloud. Slow: each test starts a hub, its proxy and the gateway service.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import vm_offer, wait_for
from tests.hub_helpers import RealHub
from tests.test_gateway import SPEC_FIELDS, UPSTREAM_KEY, create_body

pytestmark = pytest.mark.slow


@pytest.fixture
def upstream(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(api_key=UPSTREAM_KEY)


@pytest.fixture
def real_hub(upstream: Sandbox, tmp_path: Path) -> Iterator[Callable[[str], RealHub]]:
    started: list[RealHub] = []

    def start(budgets: str) -> RealHub:
        hub = RealHub(tmp_path, upstream.management_url, UPSTREAM_KEY, budgets)
        started.append(hub)
        return hub

    yield start
    for hub in started:
        hub.stop()


def as_token(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"x-api-key": token}, timeout=60)


def offer_price(upstream: Sandbox) -> tuple[object, float]:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
    return offer, offer.hourly_price


def test_a_class_on_a_real_hub(upstream: Sandbox, real_hub: Callable[[str], RealHub]) -> None:
    offer, price = offer_price(upstream)
    hub = real_hub(f"default = 100\n[groups]\nphysics = {price * 1.5}\n")
    ada_token, bob_token, grace_token = (hub.token_for(u) for u in ("ada", "bob", "grace"))
    with as_token(hub.gateway_url, ada_token) as ada, as_token(hub.gateway_url, bob_token) as bob, \
            as_token(hub.gateway_url, grace_token) as grace:
        # Each user's hub token reaches the gateway through the hub's proxy, and creates.
        adas = ada.post("/gpu-cloud/instances", json=create_body(offer, "adas"))
        assert adas.status_code in (200, 201), adas.text
        bobs = bob.post("/gpu-cloud/instances", json=create_body(offer, "bobs"))
        assert bobs.status_code in (200, 201), bobs.text
        ada_id, bob_id = adas.json()["_id"], bobs.json()["_id"]
        # They cannot see each other's instances.
        assert [i["_id"] for i in ada.get("/gpu-cloud/instances").json()] == [ada_id]
        assert [i["_id"] for i in bob.get("/gpu-cloud/instances").json()] == [bob_id]
        assert bob.get(f"/gpu-cloud/instances/{ada_id}").status_code == 404
        assert bob.delete(f"/gpu-cloud/instances/{ada_id}").status_code == 404
        # Physics' budget holds Ada's one instance for an hour, not two.
        me = ada.get("/gateway/me").json()
        assert (me["name"], me["budget"]) == ("ada", pytest.approx(price * 1.5))
        refused = ada.post("/gpu-cloud/instances", json=create_body(offer, "second"))
        assert refused.status_code == 402 and "left" in refused.json()["message"]
        assert bob.get("/gateway/me").json()["budget"] == 100.0  # the default
        # The admin's view lists both, by hub group; a student has none.
        rows = grace.get("/gateway/class").json()["accounts"]
        assert [(r["group"], r["name"], r["instances"]) for r in rows] == [
            ("chemistry", "bob", 1), ("physics", "ada", 1)]
        assert ada.get("/gateway/class").status_code == 404
    # A token the hub does not know is refused with the spec's body.
    with as_token(hub.gateway_url, "not-a-hub-token-" + "0" * 24) as stranger:
        answer = stranger.get("/gpu-cloud/instances")
        assert answer.status_code == 403 and set(answer.json()) == SPEC_FIELDS
    # connect() in the environment the hub gives Ada's server: no GPUCLOUD_* setting at all.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("GPUCLOUD_", "JUPYTERHUB_"))}
    env.update(JUPYTERHUB_API_TOKEN=ada_token, JUPYTERHUB_API_URL=hub.api_url,
               JUPYTERHUB_SERVICE_PREFIX="/user/ada/", JUPYTERHUB_BASE_URL="/")
    code = ("from gpucloud_nb import connect\n"
            "with connect() as cloud:\n"
            "    print(cloud.base_url, [i.name for i in cloud.instances.list()],\n"
            "          cloud.gateway_status().name)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"{hub.service_url}/services/gpucloud ['adas'] ada"
    assert ada_token not in done.stdout + done.stderr


def test_a_users_server_finds_the_gateway_with_no_setting(
        upstream: Sandbox, real_hub: Callable[[str], RealHub]) -> None:
    hub = real_hub("default = 12\n")
    hub.start_server("bob")
    token = hub.token_for("bob")
    # The server's JupyterLab extension (the sidebar's data) found the gateway itself.
    with httpx.Client(base_url=f"{hub.url}/user/bob", timeout=60,
                      headers={"Authorization": f"token {token}"}) as server:
        def snapshot() -> dict[str, object] | None:
            answer = server.get("/gpucloud/instances")
            data = answer.json() if answer.status_code == 200 else None
            if not (data and data.get("gateway")):
                time.sleep(0.5)  # the sidebar's poller has not listed yet
                return None
            return data

        wait_for(snapshot, timeout=120, what=hub.log_tail)
        data = snapshot()
        assert data is not None
        budget: Any = data["gateway"]
        assert (budget["name"], budget["budget"], budget["left"]) == ("bob", 12.0, 12.0)
        info = server.get("/gpucloud/info").json()
        assert info["sandbox"] is False and info["url"].endswith("/services/gpucloud")


def at(seconds: float) -> str:
    when = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_a_stopped_hub_refuses_creates_while_a_timer_still_deletes(
        upstream: Sandbox, real_hub: Callable[[str], RealHub]) -> None:
    offer, _ = offer_price(upstream)
    hub = real_hub("default = 100\n")
    token = hub.token_for("ada")
    real = httpx.Client(base_url=upstream.management_url, headers={"x-api-key": UPSTREAM_KEY},
                        timeout=60)
    with as_token(hub.service_url, token) as ada, real:
        timed = ada.post("/gpu-cloud/instances", json=create_body(offer, "timed")).json()["_id"]
        kept = ada.post("/gpu-cloud/instances", json=create_body(offer, "kept")).json()["_id"]
        assert ada.put(f"/gateway/instances/{timed}/auto-delete",
                       json={"at": at(8)}).status_code == 200
        hub.kill_hub()  # the hub is gone; its proxy and the gateway service run on
        refused = ada.post("/gpu-cloud/instances", json=create_body(offer, "new"))
        assert refused.status_code == 503 and set(refused.json()) == SPEC_FIELDS
        assert refused.json()["message"] == (
            "The hub cannot be reached to confirm who you are, so nothing new is created until "
            "it answers; your running instances keep their budget and timers.")
        assert sorted(i["_id"] for i in ada.get("/gpu-cloud/instances").json()) == sorted(
            [timed, kept])
        wait_for(lambda: real.get(f"/gpu-cloud/instances/{timed}").json()["status"]
                 in ("deleting", "deleted"), timeout=90)
        assert real.get(f"/gpu-cloud/instances/{kept}").json()["status"] in ("pending", "active")
