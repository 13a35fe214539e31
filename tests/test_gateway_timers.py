"""``delete_after`` kept by the gateway: the sandbox's timer routes, mirrored under /gateway/."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import httpx

from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, BOB, TEACHER, UPSTREAM_KEY, as_key, create_body, direct, wait_for


def at(seconds: float) -> str:
    when = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_a_timer_deletes_with_no_client_running(upstream: Sandbox,
                                                gateway_factory: Callable[..., Gateway]) -> None:
    from gpucloud_nb import GPUCloud
    from tests.helpers import vm_offer

    gateway = gateway_factory()
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
    with as_key(gateway, ADA) as ada, as_key(gateway, BOB) as bob, direct(upstream) as real, \
            as_key(gateway, TEACHER) as teacher:
        timed = ada.post("/gpu-cloud/instances", json=create_body(offer, "timed")).json()["_id"]
        kept = ada.post("/gpu-cloud/instances", json=create_body(offer, "kept")).json()["_id"]
        path = f"/gateway/instances/{timed}/auto-delete"
        assert bob.put(path, json={"at": at(1)}).status_code == 404  # not Bob's
        assert ada.put(path, json={"at": "soon"}).status_code == 400
        answer = ada.put(path, json={"at": at(600)})
        assert answer.status_code == 200 and answer.json()["instanceId"] == timed
        assert [t["instanceId"] for t in ada.get("/gateway/auto-deletes").json()] == [timed]
        assert bob.get("/gateway/auto-deletes").json() == []
        assert ada.put(path, json={"at": at(1.5)}).status_code == 200  # replaces the first
        ada.close()  # nothing of Ada's runs now
        wait_for(lambda: real.get(f"/gpu-cloud/instances/{timed}").json()["status"]
                 in ("deleting", "deleted"), timeout=60)
        assert real.get(f"/gpu-cloud/instances/{kept}").json()["status"] in ("pending", "active")
        reasons = [e["reason"] for e in teacher.get("/gateway/audit").json()["entries"]
                   if e["resource"] == timed and e["action"] == "deleted"]
        assert reasons == ["delete_after timer (by gateway)"]
    with httpx.Client(base_url=gateway.url, headers={"x-api-key": ADA}) as ada:
        assert ada.get("/gateway/auto-deletes").json() == []
        assert ada.get(path).status_code == 404
        kept_path = f"/gateway/instances/{kept}/auto-delete"
        assert ada.put(kept_path, json={"at": at(600)}).status_code == 200
        assert ada.delete(kept_path).status_code == 204
        assert ada.delete(kept_path).status_code == 404
        assert ada.put(path, json={"at": at(1)}).status_code == 400  # already deleting
