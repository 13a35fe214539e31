"""Spend budgets in the sandbox, over real HTTP: an instance's budget and a class account's."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from helpers import wait_for
from samples import one_offer

from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.budgets import POLL

STUDENT_A = "student-a-key-0123456789"
STUDENT_B = "student-b-key-0123456789"
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
    assert api.get("/sandbox/budgets").json() == {"account": None, "instances": []}
    assert status(api, id_) == "active"


def test_a_class_account_over_budget_cannot_create_and_its_instances_are_deleted(
        sandbox_factory: Callable[..., Sandbox],
        management_client_factory: Callable[..., httpx.Client]) -> None:
    box = sandbox_factory(api_key=STUDENT_A, keys=(STUDENT_B,), budgets={STUDENT_A: 3.0},
                          offers=one_offer(1.0), bill_factor=DOLLAR_A_SECOND)
    a = management_client_factory(box, api_key=STUDENT_A)
    b = management_client_factory(box, api_key=STUDENT_B)
    first, second = launch(a, "one")["_id"], launch(a, "two")["_id"]  # $3 covers 2 hours of $1/h
    other = launch(b)["_id"]  # no class budget: never limited
    # $2 a second from the two: spent in about 1.5 s, then both are deleted.
    wait_for(lambda: {status(a, first), status(a, second)} <= {"deleting", "deleted"}, timeout=10)
    account = a.get("/sandbox/budgets").json()["account"]
    assert account["budget"] == 3.0 and account["spend"] >= 3.0 and account["left"] == 0.0
    refused = a.post("/gpu-cloud/instances", json={
        "name": "again", "cloudProvider": one_offer(1.0)[0]["cloud"]["_id"],
        "instanceId": "gpu-1x", "region": launch_region(a),
        "vm": {"os": one_offer(1.0)[0]["configuration"]["os"][0]}})
    assert refused.status_code == 400
    assert refused.json()["message"] == (
        "Your class budget has $0.00 left, less than one hour of this instance at $1.00/h; "
        "delete an instance or ask your teacher for more.")
    assert len(a.get("/gpu-cloud/instances").json()) == 2  # nothing was created
    assert status(b, other) == "active"


def test_a_deleted_instances_spend_still_counts_against_the_class_budget(
        sandbox_factory: Callable[..., Sandbox],
        management_client_factory: Callable[..., httpx.Client]) -> None:
    box = sandbox_factory(api_key=STUDENT_A, budgets={STUDENT_A: 8.0}, offers=one_offer(1.0),
                          bill_factor=DOLLAR_A_SECOND)
    a = management_client_factory(box)
    first = launch(a, "one")["_id"]
    wait_for(lambda: status(a, first) == "active")
    time.sleep(3.5)  # about $3.50, then gone: the watcher reads it no more, but counts it
    assert a.delete(f"/gpu-cloud/instances/{first}").status_code == 204
    wait_for(lambda: status(a, first) == "deleted")
    time.sleep(2 * POLL)
    spent_first = a.get("/sandbox/budgets").json()["account"]["spend"]
    assert 3.5 <= spent_first <= 3.5 + box.config.delete_seconds + 1.0
    second = launch(a, "two")["_id"]
    wait_for(lambda: status(a, second) in ("deleting", "deleted"), timeout=10)
    wait_for(lambda: status(a, second) == "deleted")
    account = a.get("/sandbox/budgets").json()["account"]
    # The second was deleted once both together reached the budget, not once it alone did.
    assert 8.0 <= account["spend"] <= 8.0 + POLL + box.config.delete_seconds + 0.3
    assert account["left"] == 0.0


def test_a_class_create_is_refused_when_one_hour_of_everything_is_not_covered(
        sandbox_factory: Callable[..., Sandbox],
        management_client_factory: Callable[..., httpx.Client]) -> None:
    box = sandbox_factory(api_key=STUDENT_A, budgets={STUDENT_A: 1.5}, offers=one_offer(1.0))
    a = management_client_factory(box)
    launch(a)  # $1.50 covers one hour of $1/h ...
    offer = one_offer(1.0)[0]
    refused = a.post("/gpu-cloud/instances", json={
        "name": "second", "cloudProvider": offer["cloud"]["_id"], "instanceId": "gpu-1x",
        "region": launch_region(a), "vm": {"os": offer["configuration"]["os"][0]}})
    assert refused.status_code == 400  # ... but not of two
    message = refused.json()["message"]
    assert message.startswith("Your class budget has $1.50 left") and "$1.00/h already running" in message


def launch_region(api: httpx.Client) -> str:
    offer = api.get("/gpu-cloud/instances/offers").json()[0]
    return str(next(a["region"] for a in offer["availability"] if a["available"]))
