"""The gateway over real HTTP, in front of a sandbox that plays the real cloud.

The sandbox is reached only through the spec's paths with its key, as the upstream cloud would be;
students use :class:`~gpucloud_nb.GPUCloud` (or plain httpx) with their own keys.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import NotFoundError
from gpucloud_nb.gateway import Gateway, GatewayConfig
from gpucloud_nb.gateway.keys import parse_keys
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import (
    ADA,
    BOB,
    SPEC_FIELDS,
    TEACHER,
    UPSTREAM_KEY,
    as_key,
    create_body,
    direct,
    launch,
    vm_offer,
    wait_for,
)
from tests.helpers import gateway_cloud as cloud


def test_a_client_works_through_the_gateway(gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with cloud(gateway, ADA) as ada:
        offers = ada.instances.offers()
        assert set(ada.instances.offers_frame()["instanceId"]) == {o.instance_id for o in offers}
        made = launch(ada, "through-gateway")
        assert [i.id for i in ada.instances.list()] == [made.id]
        assert ada.instances.get(made.id).name == "through-gateway"
        ada.instances.delete(made.id)
        wait_for(lambda: ada.instances.get(made.id).status in ("deleting", "deleted"),
                 timeout=30)
        offer = ada.volumes.offers()[0]
        volume = ada.volumes.create(name="data", size_in_gb=offer.min_size_in_gb,
                                    cloud_provider=offer.cloud_provider.id,
                                    region=offer.regions[0])
        assert [v.id for v in ada.volumes.list()] == [volume.id]


def test_students_cannot_see_or_delete_each_others(upstream: Sandbox,
                                                   gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with cloud(gateway, ADA) as ada, as_key(gateway, BOB) as bob, direct(upstream) as real:
        mine = launch(ada, "adas")
        assert bob.get("/gpu-cloud/instances").json() == []
        for method in ("GET", "DELETE"):
            answer = bob.request(method, f"/gpu-cloud/instances/{mine.id}")
            assert answer.status_code == 404
            assert set(answer.json()) == SPEC_FIELDS
            assert answer.json()["path"] == f"/gpu-cloud/instances/{mine.id}"
        assert real.get(f"/gpu-cloud/instances/{mine.id}").json()["status"] in ("pending",
                                                                                  "active")
        offer = ada.volumes.offers()[0]
        volume = ada.volumes.create(name="adas-data", size_in_gb=offer.min_size_in_gb,
                                    cloud_provider=offer.cloud_provider.id,
                                    region=offer.regions[0])
        assert bob.get("/gpu-cloud/volumes").json() == []
        assert bob.delete(f"/gpu-cloud/volumes/{volume.id}").status_code == 404
        assert ada.volumes.get(volume.id).id == volume.id
        with pytest.raises(NotFoundError), cloud(gateway, BOB) as bob_cloud:
            bob_cloud.instances.get(mine.id)


def test_an_unknown_key_is_403_in_the_spec_body(gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with as_key(gateway, "gk-nobody-000000000000") as nobody, as_key(gateway, "") as empty:
        for client in (nobody, empty):
            answer = client.get("/gpu-cloud/instances")
            assert answer.status_code == 403
            assert set(answer.json()) == SPEC_FIELDS


def test_forty_creates_at_once_against_a_budget_for_three(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
    budget = offer.hourly_price * 3.5  # holds 3 for the default hour, not 4
    gateway = gateway_factory(f"{ADA} {budget} Ada\n")

    def create(n: int) -> httpx.Response:
        with as_key(gateway, ADA) as ada:
            return ada.post("/gpu-cloud/instances", json=create_body(offer, f"rush-{n}"))

    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        answers = list(pool.map(create, range(40)))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [201] * 3 + [402] * 37
    refused = next(answer.json() for answer in answers if answer.status_code == 402)
    assert set(refused) == SPEC_FIELDS and "left" in refused["message"]
    with direct(upstream) as real:
        assert len(real.get("/gpu-cloud/instances").json()) == 3  # exactly 3 reached the cloud


def test_a_refusal_names_the_dollars_left(upstream: Sandbox,
                                          gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} 0.01 Ada\n")
    with as_key(gateway, ADA) as ada, GPUCloud(api_key=UPSTREAM_KEY,
                                               base_url=upstream.management_url) as real:
        answer = ada.post("/gpu-cloud/instances", json=create_body(vm_offer(real), "too-dear"))
        assert answer.status_code == 402
        assert "$0.01 left" in answer.json()["message"]
        assert real.instances.list() == []


def test_a_spent_budget_deletes_every_instance_of_its_key(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
    # Two instances for 1.8 s each fit the reservation; the budget lasts about 2 s of both.
    budget = offer.hourly_price * 0.0012
    gateway = gateway_factory(f"{ADA} {budget} Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n",
                              reserve_hours=0.0005)
    with as_key(gateway, ADA) as ada, as_key(gateway, BOB) as bob, direct(upstream) as real, \
            as_key(gateway, TEACHER) as teacher:
        ids = [ada.post("/gpu-cloud/instances", json=create_body(offer, f"b{n}")).json()["_id"]
               for n in range(2)]
        bobs = bob.post("/gpu-cloud/instances", json=create_body(offer, "bobs")).json()["_id"]

        def all_gone() -> bool:
            return all(real.get(f"/gpu-cloud/instances/{id}").json()["status"]
                       in ("deleting", "deleted") for id in ids)

        wait_for(all_gone, timeout=60)
        assert real.get(f"/gpu-cloud/instances/{bobs}").json()["status"] in ("pending", "active")
        me = ada.get("/gateway/me").json()
        assert me["left"] == 0 and me["spend"] >= budget and me["warning"] is True
        reasons = [entry["reason"] for entry in teacher.get("/gateway/audit").json()["entries"]
                   if entry["action"] == "deleted"]
        assert reasons.count("budget spent (by gateway)") == 2
        answer = ada.post("/gpu-cloud/instances", json=create_body(offer, "again"))
        assert answer.status_code == 402


def test_the_teacher_sees_stops_and_audits(upstream: Sandbox,
                                           gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} 50 Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n")
    with as_key(gateway, ADA) as ada, as_key(gateway, BOB) as bob, \
            as_key(gateway, TEACHER) as teacher, direct(upstream) as real, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
        adas = ada.post("/gpu-cloud/instances", json=create_body(offer, "a")).json()["_id"]
        bobs = [bob.post("/gpu-cloud/instances", json=create_body(offer, f"b{n}")).json()["_id"]
                for n in range(2)]
        for student in (ada, bob):
            answer = student.get("/gateway/class")
            assert answer.status_code == 404 and set(answer.json()) == SPEC_FIELDS
            assert student.get("/gateway/audit").status_code == 404
            assert student.delete("/gateway/class/instances").status_code == 404
        rows = {row["name"]: row for row in teacher.get("/gateway/class").json()["accounts"]}
        assert set(rows) == {"Ada", "Bob"}
        assert rows["Ada"]["instances"] == 1 and rows["Bob"]["instances"] == 2
        assert rows["Ada"]["budget"] == 50 and rows["Bob"]["budget"] is None
        assert rows["Bob"]["perHour"] == pytest.approx(2 * offer.hourly_price)
        me = ada.get("/gateway/me").json()
        assert set(me) >= {"name", "budget", "spend", "left"} and me["name"] == "Ada"

        stopped = teacher.delete(f"/gateway/class/accounts/{rows['Bob']['account']}/instances")
        assert sorted(stopped.json()["deleted"]) == sorted(bobs)
        assert real.get(f"/gpu-cloud/instances/{adas}").json()["status"] in ("pending", "active")
        assert teacher.delete("/gateway/class/accounts/nobody/instances").status_code == 404
        assert teacher.delete("/gateway/class/instances").json()["deleted"] == [adas]
        wait_for(lambda: all(real.get(f"/gpu-cloud/instances/{id}").json()["status"]
                             in ("deleting", "deleted") for id in [adas, *bobs]), timeout=30)
        entries = teacher.get("/gateway/audit").json()["entries"]
        assert [(e["name"], e["action"]) for e in entries if e["resource"] == adas] == [
            ("Ada", "created"), ("Ada", "deleted")]
        assert all(e["reason"] == "stopped by the teacher (by Grace)"
                   for e in entries if e["action"] == "deleted")


def test_the_upstream_key_is_in_no_answer(upstream: Sandbox,
                                          gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    seen: list[str] = []
    with as_key(gateway, ADA) as ada, GPUCloud(api_key=UPSTREAM_KEY,
                                               base_url=upstream.management_url) as real:
        body = create_body(vm_offer(real), "leak-check")
        answers = [ada.get("/gpu-cloud/instances/offers"), ada.post("/gpu-cloud/instances",
                                                                    json=body)]
        id = answers[-1].json()["_id"]
        answers += [ada.get("/gpu-cloud/instances"), ada.get(f"/gpu-cloud/instances/{id}"),
                    ada.post("/gpu-cloud/instances", json={**body, "region": "nowhere"}),
                    ada.get("/gpu-cloud/nothing"), ada.get("/gateway/me"),
                    ada.delete(f"/gpu-cloud/instances/{id}")]
        for answer in answers:
            seen.append(answer.text)
            seen.extend(f"{k}: {v}" for k, v in answer.headers.items())
    assert not any(UPSTREAM_KEY in text for text in seen)
    assert UPSTREAM_KEY not in repr(gateway)


def test_an_upstream_that_refuses_the_gateways_key_is_a_502(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    gateway.stop()
    config = GatewayConfig(people=gateway.config.people, upstream_url=upstream.management_url,
                           upstream_key="wrong-upstream-key-000000")
    with Gateway(config) as wrong, as_key(wrong, ADA) as ada:
        answer = ada.get("/gpu-cloud/instances")
        assert answer.status_code == 502
        assert "refused the gateway's own key" in answer.json()["message"]
        assert "wrong-upstream-key-000000" not in answer.text


def test_creates_per_minute_are_limited(upstream: Sandbox,
                                        gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(creates_per_minute=2)
    with as_key(gateway, ADA) as ada, GPUCloud(api_key=UPSTREAM_KEY,
                                               base_url=upstream.management_url) as real:
        body = create_body(vm_offer(real), "many")
        statuses = [ada.post("/gpu-cloud/instances", json=body).status_code for _ in range(3)]
        assert statuses == [201, 201, 429]
        answer = ada.post("/gpu-cloud/instances", json=body)
        assert int(answer.headers["Retry-After"]) >= 1 and set(answer.json()) == SPEC_FIELDS
        assert len(real.instances.list()) == 2


def test_bodies_are_bounded(gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with as_key(gateway, ADA) as ada:
        answer = ada.post("/gpu-cloud/instances", content=b"{" + b" " * 2_000_000 + b"}")
        assert answer.status_code == 413 and set(answer.json()) == SPEC_FIELDS
        answer = ada.post("/gpu-cloud/instances", content=b"[1]")
        assert answer.status_code == 400 and set(answer.json()) == SPEC_FIELDS


def test_a_create_whose_answer_is_lost_is_adopted_once(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    from gpucloud_nb.sandbox.faults import Faults

    dropping = sandbox_factory(api_key=UPSTREAM_KEY, faults=Faults(drop_create_every=1))
    config = GatewayConfig(people=tuple(parse_keys(f"{ADA} 100 Ada\n")), poll=0.2,
                           upstream_url=dropping.management_url, upstream_key=UPSTREAM_KEY)
    with Gateway(config) as gateway, as_key(gateway, ADA) as ada, direct(dropping) as real, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=dropping.management_url) as real_cloud:
        answer = ada.post("/gpu-cloud/instances", json=create_body(vm_offer(real_cloud), "lost"))
        assert answer.status_code == 502 and "may have happened" in answer.json()["message"]
        made = [item["_id"] for item in real.get("/gpu-cloud/instances").json()]
        assert len(made) == 1
        wait_for(lambda: [i["_id"] for i in ada.get("/gpu-cloud/instances").json()] == made,
                 timeout=30)
        assert ada.get("/gateway/me").json()["spend"] > 0
        assert [i["_id"] for i in real.get("/gpu-cloud/instances").json()] == made


def test_a_volume_is_metered_in_its_owners_spend_and_held_against_the_budget(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    with direct(upstream) as real:
        offer = real.get("/gpu-cloud/volumes/offers").json()[0]
    size = offer["minSizeInGb"]
    per_hour = float(offer["pricePerGbPerHour"]) * size
    assert per_hour > 0
    gateway = gateway_factory(f"{ADA} - Ada\n{BOB} {per_hour / 2} Bob\n{TEACHER} teacher Grace\n")
    body = {"name": "data", "cloudProvider": offer["cloudProvider"]["_id"],
            "region": offer["regions"][0], "sizeInGb": size}
    with as_key(gateway, ADA) as ada, as_key(gateway, BOB) as bob, direct(upstream) as real, \
            as_key(gateway, TEACHER) as teacher:
        refused = bob.post("/gpu-cloud/volumes", json=body)  # an hour of it is over Bob's budget
        assert refused.status_code == 402 and "nothing was created" in refused.json()["message"]
        assert real.get("/gpu-cloud/volumes").json() == []
        volume = ada.post("/gpu-cloud/volumes", json=body).json()["_id"]
        assert ada.get("/gateway/me").json()["perHour"] == pytest.approx(per_hour)
        wait_for(lambda: ada.get("/gateway/me").json()["spend"] > 0, timeout=60)
        row = next(r for r in teacher.get("/gateway/class").json()["accounts"] if r["name"] == "Ada")
        assert row["perHour"] == pytest.approx(per_hour) and row["spend"] > 0
        assert ada.delete(f"/gpu-cloud/volumes/{volume}").status_code in (200, 202, 204)
        spent = ada.get("/gateway/me").json()
        assert spent["perHour"] == 0 and spent["spend"] > 0  # what it cost stays counted
        for _ in range(5):  # and no more is added
            assert ada.get("/gateway/me").json()["spend"] == spent["spend"]
            time.sleep(0.2)


def test_the_upstreams_retry_after_is_passed_on(sandbox_factory: Callable[..., Sandbox]) -> None:
    from gpucloud_nb.sandbox.faults import Faults

    busy = sandbox_factory(api_key=UPSTREAM_KEY, faults=Faults(rate_limit_every=1, retry_after=7))
    config = GatewayConfig(people=tuple(parse_keys(f"{ADA} - Ada\n")),
                           upstream_url=busy.management_url, upstream_key=UPSTREAM_KEY)
    with Gateway(config) as gateway, as_key(gateway, ADA) as ada:
        for path in ("/gpu-cloud/instances/offers", "/gpu-cloud/instances", "/gpu-cloud/volumes"):
            answer = ada.get(path)
            assert answer.status_code == 429 and set(answer.json()) == SPEC_FIELDS
            assert answer.headers["retry-after"] == "7", path
