"""``delete_after`` kept by the gateway: the sandbox's timer routes, mirrored under /gateway/."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

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


def test_a_timer_due_while_the_gateway_was_down_fires_at_its_restart_and_says_how_late(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    """The twin of the sandbox's old "billed only up to its due time" test. The upstream goes on
    billing while the gateway is down, and the gateway cannot end a bill at a time already past:
    what it guarantees is that the timer outlives it, fires at its first pass after the restart,
    the audit says how late, and the spend it shows is the upstream's real bill (up to that
    delete, not the due time)."""
    from gpucloud_nb import GPUCloud
    from tests.helpers import vm_offer

    home = tmp_path / "gateway"
    home.mkdir(mode=0o700)
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
    first = gateway_factory(home=home)
    with as_key(first, ADA) as ada:
        timed = ada.post("/gpu-cloud/instances", json=create_body(offer, "overdue")).json()["_id"]
        answer = ada.put(f"/gateway/instances/{timed}/auto-delete", json={"at": at(3)})
        assert answer.status_code == 200, answer.text
        due = datetime.fromisoformat(answer.json()["at"].replace("Z", "+00:00"))
    first.stop()
    with direct(upstream) as real:
        # Well past the watcher's own lag (two passes and 5 s), however slow the restart is.
        wait_for(lambda: datetime.now(timezone.utc) > due + timedelta(seconds=15), timeout=60)
        assert real.get(f"/gpu-cloud/instances/{timed}").json()["status"] == "active"  # billing
        restarted = datetime.now(timezone.utc)
        again = gateway_factory(home=home)
        wait_for(lambda: real.get(f"/gpu-cloud/instances/{timed}").json()["status"]
                 in ("deleting", "deleted"), timeout=60)
        wait_for(lambda: real.get(f"/gpu-cloud/instances/{timed}").json()["status"] == "deleted",
                 timeout=60)
        item = real.get(f"/gpu-cloud/instances/{timed}").json()
    created, deleted = (datetime.fromisoformat(item[k].replace("Z", "+00:00"))
                        for k in ("createdAt", "deletedAt"))
    assert deleted >= restarted  # billed on past its due time, up to the restart's delete
    with as_key(again, ADA) as ada, as_key(again, TEACHER) as teacher:
        reasons = [e["reason"] for e in teacher.get("/gateway/audit").json()["entries"]
                   if e["resource"] == timed and e["action"] == "deleted"]
        assert len(reasons) == 1 and reasons[0].startswith("delete_after timer, "), reasons
        late = float(reasons[0].split(", ")[1].split(" s late")[0])
        assert late >= 15 and reasons[0].endswith(" s late (the gateway was not watching) "
                                                 "(by gateway)")
        bill = float(item["hourlyPrice"]) * (deleted - created).total_seconds() / 3600
        wait_for(lambda: ada.get("/gateway/me").json()["spend"] == pytest.approx(bill, abs=1e-6),
                 timeout=30, what=lambda: f"{ada.get('/gateway/me').json()} != {bill}")
        assert ada.get("/gateway/auto-deletes").json() == []
