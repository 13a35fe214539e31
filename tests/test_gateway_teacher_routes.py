"""A teacher changes a budget while the class runs (kept over a restart), and exports CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

from gpucloud_nb import GPUCloud
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
    vm_offer,
    wait_for,
)


def test_a_changed_budget_holds_at_once_and_over_a_restart(upstream: Sandbox,
                                                            tmp_path: Path) -> None:
    keys = f"{ADA} 0.01 Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n"

    def gateway(keys_text: str) -> Gateway:
        return Gateway(GatewayConfig(people=tuple(parse_keys(keys_text)), poll=0.2,
                                     upstream_url=upstream.management_url,
                                     upstream_key=UPSTREAM_KEY, home=tmp_path))

    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        body = create_body(vm_offer(real_cloud), "after-raise")
    with gateway(keys) as first, as_key(first, ADA) as ada, as_key(first, TEACHER) as teacher:
        assert ada.post("/gpu-cloud/instances", json=body).status_code == 402
        account = ada.get("/gateway/me").json()
        rows = {row["name"]: row for row in teacher.get("/gateway/class").json()["accounts"]}
        path = f"/gateway/class/accounts/{rows['Ada']['account']}/budget"
        answer = ada.put(path, json={"budget": 500})
        assert answer.status_code == 404 and set(answer.json()) == SPEC_FIELDS
        for bad in ({"budget": "lots"}, {"budget": -1}, {}, {"budget": True}):
            answer = teacher.put(path, json=bad)
            assert answer.status_code == 400 and set(answer.json()) == SPEC_FIELDS
            assert "\n" not in answer.json()["message"]
        assert teacher.put("/gateway/class/accounts/nobody/budget",
                           json={"budget": 5}).status_code == 404
        row = teacher.put(path, json={"budget": "500/day"}).json()
        assert (row["name"], row["budget"], row["period"]) == ("Ada", 500, "day")
        made = ada.post("/gpu-cloud/instances", json=body)
        assert made.status_code == 201
        assert ada.get("/gateway/me").json()["budget"] == 500 != account["budget"]
        entries = [e for e in teacher.get("/gateway/audit").json()["entries"]
                   if e["action"] == "budget"]
        assert [e["reason"] for e in entries] == ["$0.01 → $500.00/day (by Grace)"]
    with gateway(keys) as again, as_key(again, ADA) as ada:  # the change outlives a restart
        me = ada.get("/gateway/me").json()
        assert (me["budget"], me["period"]) == (500, "day")
    edited = keys.replace(f"{ADA} 0.01 Ada", f"{ADA} 7 Ada")
    with gateway(edited) as third, as_key(third, ADA) as ada:  # an edited line is the newer word
        me = ada.get("/gateway/me").json()
        assert (me["budget"], me["period"]) == (7, "")
    with gateway(keys) as fourth, as_key(fourth, ADA) as ada:  # and the change is gone for good
        assert ada.get("/gateway/me").json()["budget"] == 0.01


def test_a_budget_lowered_below_spend_deletes_at_once(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with as_key(gateway, ADA) as ada, as_key(gateway, TEACHER) as teacher, \
            direct(upstream) as real, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        id = ada.post("/gpu-cloud/instances",
                      json=create_body(vm_offer(real_cloud), "cut")).json()["_id"]
        account = teacher.get("/gateway/class").json()["accounts"][0]["account"]
        row = teacher.put(f"/gateway/class/accounts/{account}/budget", json={"budget": 0}).json()
        assert row["budget"] == 0 and row["left"] == 0
        wait_for(lambda: real.get(f"/gpu-cloud/instances/{id}").json()["status"]
                 in ("deleting", "deleted"), timeout=60)
        reasons = [e["reason"] for e in teacher.get("/gateway/audit").json()["entries"]
                   if e["resource"] == id and e["action"] == "deleted"]
        assert reasons == ["budget spent (by gateway)"]


def test_the_teacher_exports_the_class_as_csv(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} 20/week Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n")
    with as_key(gateway, ADA) as ada, as_key(gateway, TEACHER) as teacher, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
        ada.post("/gpu-cloud/instances", json=create_body(offer, "one"))
        answer = teacher.get("/gateway/class.csv")
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
        table = list(csv.DictReader(io.StringIO(answer.text)))
        assert [(r["name"], r["instances"], r["budget"], r["period"]) for r in table] == [
            ("Ada", "1", "20.0", "week"), ("Bob", "0", "", "")]
        assert float(table[0]["perHour"]) == offer.hourly_price
        assert ADA not in answer.text and BOB not in answer.text
        assert ada.get("/gateway/class.csv").status_code == 404
