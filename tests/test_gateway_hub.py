"""A hub's gateway over real HTTP: people told by their hub tokens, budgets by group and user.

The hub here is the stand-in of ``tests/hub_helpers.py`` (fixtures ``hub`` and ``hub_gateway``
in conftest.py), answering ``GET /hub/api/user`` as JupyterHub does, so these tests are fast and
can stop the hub at will; ``tests/test_jupyterhub.py`` runs the
same gateway as a service of a real JupyterHub. The upstream is a sandbox playing the real cloud.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.gateway.hub_budgets import parse_budgets
from gpucloud_nb.gateway.keys import KeysFileError
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import SPEC_FIELDS, UPSTREAM_KEY, create_body, direct, launch, vm_offer, wait_for
from tests.hub_helpers import (
    ADA_TOKEN,
    ADMIN_TOKEN,
    BOB_TOKEN,
    NO_ACCESS_TOKEN,
    SERVICE,
    StandInHub,
)


def as_token(gateway: Gateway, token: str, prefix: str = "") -> httpx.Client:
    return httpx.Client(base_url=gateway.url + prefix, headers={"x-api-key": token},
                        timeout=60.0)


def offer_of(upstream: Sandbox) -> Any:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        return vm_offer(real_cloud)


def test_each_hub_user_creates_and_sees_only_their_own(upstream: Sandbox, hub: StandInHub,
                                                       hub_gateway: Callable[..., Gateway]) -> None:
    gateway = hub_gateway()
    with GPUCloud(api_key=ADA_TOKEN, base_url=f"{gateway.url}/services/{SERVICE}",
                  max_retries=0, timeout=30.0) as ada, \
            as_token(gateway, BOB_TOKEN, f"/services/{SERVICE}") as bob:
        made = launch(ada, "adas")
        assert [i.id for i in ada.instances.list()] == [made.id]
        assert bob.get("/gpu-cloud/instances").json() == []
        answer = bob.get(f"/gpu-cloud/instances/{made.id}")
        assert answer.status_code == 404 and set(answer.json()) == SPEC_FIELDS
        me = bob.get("/gateway/me").json()
        assert (me["name"], me["budget"], me["left"]) == ("bob", 50.0, 50.0)
        bobs = bob.post("/gpu-cloud/instances", json=create_body(offer_of(upstream), "bobs"))
        assert bobs.status_code in (200, 201)
        assert [i["_id"] for i in bob.get("/gpu-cloud/instances").json()] == [bobs.json()["_id"]]
    with as_token(gateway, ADA_TOKEN) as ada_bare:  # the service's own URL, without the prefix
        assert [i["_id"] for i in ada_bare.get("/gpu-cloud/instances").json()] == [made.id]


def test_tokens_the_hub_does_not_vouch_for_are_refused(hub: StandInHub,
                                                       hub_gateway: Callable[..., Gateway]) -> None:
    gateway = hub_gateway()
    for token in ("hub-unknown-" + "x" * 20, NO_ACCESS_TOKEN, UPSTREAM_KEY, ""):
        with as_token(gateway, token) as stranger:
            answer = stranger.get("/gpu-cloud/instances")
            assert answer.status_code == 403, token
            assert set(answer.json()) == SPEC_FIELDS
            assert answer.json()["message"] == "The API key is invalid."
    with httpx.Client(base_url=gateway.url, timeout=30.0,
                      headers={"Authorization": f"token {ADA_TOKEN}"}) as ada:
        assert ada.get("/gateway/me").json()["name"] == "ada"


def test_answers_and_refusals_are_cached(hub: StandInHub,
                                         hub_gateway: Callable[..., Gateway]) -> None:
    gateway = hub_gateway()
    with as_token(gateway, ADA_TOKEN) as ada, as_token(gateway, "hub-unknown-" + "y" * 20) as no:
        for _ in range(5):
            assert ada.get("/gateway/me").status_code == 200
            assert no.get("/gateway/me").status_code == 403
    assert hub.asked.count("/hub/api/user") == 2  # once for Ada, once for the refusal
    with as_token(gateway, ADA_TOKEN) as ada:  # a create always asks afresh
        assert ada.post("/gpu-cloud/instances", json={}).status_code == 400
    assert hub.asked.count("/hub/api/user") == 3


def test_group_and_user_budgets_hold_and_the_teacher_sees_groups(
        upstream: Sandbox, hub: StandInHub, hub_gateway: Callable[..., Gateway]) -> None:
    offer = offer_of(upstream)
    price = offer.hourly_price
    budgets = (f"default = 100\n[groups]\nphysics = {price * 1.5}\nchemistry = 20\n"
               f"[users]\nbob = {price * 0.5}\n")
    gateway = hub_gateway(budgets)
    with as_token(gateway, ADA_TOKEN) as ada, as_token(gateway, BOB_TOKEN) as bob, \
            as_token(gateway, ADMIN_TOKEN) as admin:
        assert ada.get("/gateway/me").json()["budget"] == pytest.approx(price * 1.5)
        assert bob.get("/gateway/me").json()["budget"] == pytest.approx(price * 0.5)
        assert ada.post("/gpu-cloud/instances", json=create_body(offer, "one")).status_code in (
            200, 201)
        refused = ada.post("/gpu-cloud/instances", json=create_body(offer, "two"))
        assert refused.status_code == 402 and "left" in refused.json()["message"]
        assert bob.post("/gpu-cloud/instances", json=create_body(offer, "b")).status_code == 402
        assert ada.get("/gateway/class").status_code == 404  # a student has no class view
        rows = admin.get("/gateway/class").json()["accounts"]
        assert [(r["name"], r["group"], r["instances"]) for r in rows] == [
            ("bob", "chemistry", 0), ("ada", "physics", 1)]
        assert "grace" not in {r["name"] for r in rows}  # an admin is a teacher, not a student
        # The teacher raises physics' budget at runtime: Ada's next create is admitted.
        assert ada.put("/gateway/hub/groups/physics/budget",
                       json={"budget": 1}).status_code == 404
        view = admin.put("/gateway/hub/groups/physics/budget", json={"budget": price * 3}).json()
        assert {"group": "physics", "budget": pytest.approx(price * 3), "period": "",
                "changed": True} in view["groups"]
        assert ada.get("/gateway/me").json()["budget"] == pytest.approx(price * 3)
        assert ada.post("/gpu-cloud/instances", json=create_body(offer, "two")).status_code in (
            200, 201)
        # One person's own budget through the usual per-account route.
        bob_row = next(r for r in rows if r["name"] == "bob")
        changed = admin.put(f"/gateway/class/accounts/{bob_row['account']}/budget",
                            json={"budget": "7/day"})
        assert changed.status_code == 200 and changed.json()["budget"] == 7.0
        assert (bob.get("/gateway/me").json()["budget"], bob.get("/gateway/me").json()["period"]
                ) == (7.0, "day")
        dropped = admin.delete("/gateway/hub/groups/physics/budget").json()
        assert all(not g["changed"] for g in dropped["groups"])
        assert ada.get("/gateway/me").json()["budget"] == pytest.approx(price * 1.5)
        actions = [(e["action"], e["resource"]) for e in admin.get("/gateway/audit").json()
                   ["entries"] if e["action"] == "budget"]
        assert actions == [("budget", "group:physics"), ("budget", bob_row["account"]),
                           ("budget", "group:physics")]


def test_a_teacher_group_makes_teachers(hub: StandInHub,
                                        hub_gateway: Callable[..., Gateway]) -> None:
    gateway = hub_gateway('teacher-group = "chemistry"\n')
    with as_token(gateway, BOB_TOKEN) as bob, as_token(gateway, ADA_TOKEN) as ada:
        assert ada.get("/gateway/me").status_code == 200
        assert [r["name"] for r in bob.get("/gateway/class").json()["accounts"]] == ["ada"]


def at(seconds: float) -> str:
    when = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_a_stopped_hub_refuses_creates_while_timers_and_budgets_go_on(
        upstream: Sandbox, hub: StandInHub, hub_gateway: Callable[..., Gateway],
        tmp_path: Path) -> None:
    offer = offer_of(upstream)
    # Bob's budget lasts about 11 s of his one instance; creates hold 1.8 s of what runs.
    budgets = f"[users]\nbob = {offer.hourly_price * 0.003}\n"
    gateway = hub_gateway(budgets, reserve_hours=0.0005)
    with as_token(gateway, ADA_TOKEN) as ada, as_token(gateway, BOB_TOKEN) as bob, \
            direct(upstream) as real:
        timed = ada.post("/gpu-cloud/instances", json=create_body(offer, "timed")).json()["_id"]
        kept = ada.post("/gpu-cloud/instances", json=create_body(offer, "kept")).json()["_id"]
        bobs = bob.post("/gpu-cloud/instances", json=create_body(offer, "bobs")).json()["_id"]
        assert ada.put(f"/gateway/instances/{timed}/auto-delete",
                       json={"at": at(6)}).status_code == 200
        hub.stop()
        # Known people still read what they own; a create is one sentence, 503.
        assert sorted(i["_id"] for i in ada.get("/gpu-cloud/instances").json()) == sorted(
            [timed, kept])
        refused = ada.post("/gpu-cloud/instances", json=create_body(offer, "new"))
        assert refused.status_code == 503 and set(refused.json()) == SPEC_FIELDS
        assert refused.json()["message"].startswith("The hub cannot be reached")
        assert refused.headers["Retry-After"]
        with as_token(gateway, "hub-never-seen-" + "z" * 20) as stranger:
            assert stranger.get("/gpu-cloud/instances").status_code == 503
        statuses = {id: real.get(f"/gpu-cloud/instances/{id}").json()["status"]
                    for id in (timed, bobs)}
    # The gateway restarts while the hub is still down: the people it had seen are read back
    # from its state file, and their timer and budget delete with no hub and no client.
    gateway.stop()
    assert set(statuses.values()) <= {"pending", "active"}
    again = hub_gateway(budgets, reserve_hours=0.0005)
    with direct(upstream) as real, as_token(again, BOB_TOKEN) as bob:
        assert bob.post("/gpu-cloud/instances", json=create_body(offer, "x")).status_code == 503

        def gone(id: str) -> bool:
            return real.get(f"/gpu-cloud/instances/{id}").json()["status"] in ("deleting",
                                                                                "deleted")

        wait_for(lambda: gone(timed) and gone(bobs), timeout=90)
        assert not gone(kept)
    with sqlite3.connect(tmp_path / "gateway.sqlite3") as db:
        rows = db.execute("SELECT name, groups FROM hub_people ORDER BY name").fetchall()
        assert rows == [("ada", '["physics"]'), ("bob", '["chemistry"]')]
        texts = " ".join(str(v) for table in ("hub_people", "people", "audit")
                         for row in db.execute(f"SELECT * FROM {table}") for v in row)
        assert ADA_TOKEN not in texts and BOB_TOKEN not in texts


def test_the_budgets_file_is_checked(tmp_path: Path) -> None:
    budgets = parse_budgets('default = "5/day"\nteacher-group = "staff"\n'
                            '[groups]\na = 1\nb = "-"\n[users]\nzoe = "3/week"\n')
    assert budgets.resolve("x", ("b", "a")) == (1.0, "", "a")  # the file's order decides
    assert budgets.resolve("x", ("c",)) == (5.0, "day", "c")
    assert budgets.resolve("zoe", ("a",)) == (3.0, "week", "a")
    assert parse_budgets("default = 1", default="-").default == (None, "")
    for text, words in [("default = 'lots'", "default"), ("[groups]\na = true", r"\[groups\] a"),
                        ("colour = 1", "'colour'"), ("default = ", "not TOML"),
                        ("groups = 3", "table")]:
        with pytest.raises(KeysFileError, match=words):
            parse_budgets(text)


def test_the_class_panel_and_table_group_people_by_hub_group(
        hub: StandInHub, hub_gateway: Callable[..., Gateway]) -> None:
    from gpucloud_nb.gateway.class_table import format_table
    from gpucloud_nb.widgets import ClassPanel

    gateway = hub_gateway("default = 5\n")
    for token in (BOB_TOKEN, ADA_TOKEN):
        with as_token(gateway, token) as person:
            assert person.get("/gateway/me").status_code == 200
    with GPUCloud(api_key=ADMIN_TOKEN, base_url=gateway.url, max_retries=0,
                  timeout=30.0) as admin:
        rows = admin.class_view.accounts()
        assert [(r.group, r.name) for r in rows] == [("chemistry", "bob"), ("physics", "ada")]
        table = format_table(rows).splitlines()
        assert table[0].split()[:2] == ["group", "student"]
        assert [line.split()[:2] for line in table[1:]] == [["chemistry", "bob"],
                                                            ["physics", "ada"]]
        panel = ClassPanel(admin)
        try:
            html = panel.table.value
            assert html.index(">chemistry</th>") < html.index(">bob<") < html.index(
                ">physics</th>") < html.index(">ada<")
        finally:
            panel.close()


def test_an_endpoints_address_keeps_the_hubs_prefix(upstream: Sandbox, hub: StandInHub,
                                                     hub_gateway: Callable[..., Gateway]) -> None:
    gateway = hub_gateway()
    prefixed = f"{gateway.url}/services/{SERVICE}"
    with GPUCloud(api_key=ADA_TOKEN, base_url=prefixed, max_retries=0, timeout=30.0) as ada:
        ada.inference_instances.create(name="talk", model="sandbox-vision-1", min=1, max=1)
        details = ada.inference_instances.wait_until_active("talk", poll_interval=0.05)
        assert details.address.startswith(f"{prefixed}/gateway/endpoints/{details.id}"), \
            details.address
        with ada.inference_instances.chat_client("talk") as chat:
            assert "2 + 2" in chat.chat("What is 2+2?").text
    with as_token(gateway, ADA_TOKEN) as ada_bare:  # the service's own URL: no prefix to keep
        bare = ada_bare.get(f"/ai-inference/instances/{details.id}").json()["address"]
    assert bare == f"{gateway.url}/gateway/endpoints/{details.id}/"
