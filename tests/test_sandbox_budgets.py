"""An instance's spend budget in the sandbox, over real HTTP (a class's budgets are the gateway's)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from helpers import wait_for
from samples import one_offer

from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.budgets import POLL

DOLLAR_A_SECOND = 3600.0  # $1/h billed at 3600 hours per hour


def launch(api: httpx.Client, name: str = "job") -> dict[str, Any]:
    offer = api.get("/gpu-cloud/instances/offers").json()[0]
    region = next(a["region"] for a in offer["availability"] if a["available"])
    response = api.post("/gpu-cloud/instances", json={
        "name": name, "cloudProvider": offer["cloud"]["_id"], "instanceId": offer["instanceId"],
        "region": region, "vm": {"os": offer["configuration"]["os"][0]}})
    assert response.status_code == 201, response.text
    return dict(response.json())


def status(api: httpx.Client, id_: str) -> str:
    return str(api.get(f"/gpu-cloud/instances/{id_}").json()["status"])


def test_an_instance_is_deleted_at_its_budget_after_a_warning_at_80_percent(
        sandbox_factory: Callable[..., Sandbox],
        management_client_factory: Callable[..., httpx.Client]) -> None:
    box = sandbox_factory(offers=one_offer(1.0), bill_factor=DOLLAR_A_SECOND)
    api = management_client_factory(box)
    id_ = launch(api)["_id"]
    wait_for(lambda: status(api, id_) == "active")
    state = api.put(f"/sandbox/instances/{id_}/budget", json={"dollars": 3.0}).json()
    assert state["dollars"] == 3.0 and not state["warning"] and state["status"] == "active"
    states: list[dict[str, Any]] = []
    wait_for(lambda: states.append(api.get(f"/sandbox/instances/{id_}/budget").json())
             or states[-1]["warning"], timeout=10)
    assert states[-1]["status"] == "active" and 2.4 <= states[-1]["spend"] < 3.0
    wait_for(lambda: status(api, id_) in ("deleting", "deleted"), timeout=10)
    wait_for(lambda: status(api, id_) == "deleted")
    final = api.get(f"/sandbox/instances/{id_}/budget").json()
    # At the budget, within one poll of it (plus the deleting time, which bills).
    assert 3.0 <= final["spend"] <= 3.0 + POLL + box.config.delete_seconds + 0.3
    assert final["left"] == 0.0
    assert api.get("/sandbox/status").json()["spend"] == final["spend"]


def test_a_budget_is_refused_when_bad_or_already_spent(
        sandbox_factory: Callable[..., Sandbox],
        management_client_factory: Callable[..., httpx.Client]) -> None:
    box = sandbox_factory(offers=one_offer(1.0), bill_factor=DOLLAR_A_SECOND)
    api = management_client_factory(box)
    id_ = launch(api)["_id"]
    wait_for(lambda: status(api, id_) == "active")
    for bad in (0, -1, "5", True, None):
        answer = api.put(f"/sandbox/instances/{id_}/budget", json={"dollars": bad})
        assert answer.status_code == 400 and answer.json()["message"] == \
            "dollars must be a positive number."
    time.sleep(0.5)
    spent = api.put(f"/sandbox/instances/{id_}/budget", json={"dollars": 0.1})
    assert spent.status_code == 400 and "has already cost $" in spent.json()["message"]
    assert api.get(f"/sandbox/instances/{id_}/budget").status_code == 404
    assert api.put("/sandbox/instances/nope/budget", json={"dollars": 1}).status_code == 404
    assert api.put(f"/sandbox/instances/{id_}/budget", json={"dollars": 1e6}).status_code == 200
    assert api.delete(f"/sandbox/instances/{id_}/budget").status_code == 204
    assert api.get("/sandbox/budgets").json() == {"instances": []}
    assert status(api, id_) == "active"
