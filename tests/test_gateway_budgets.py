"""``budget=`` kept by the gateway: the sandbox's budget routes, mirrored under /gateway/."""

from __future__ import annotations

from collections.abc import Callable

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, BOB, SPEC_FIELDS, UPSTREAM_KEY, as_key, create_body, vm_offer, wait_for


def test_the_budget_routes_answer_as_the_sandboxs(upstream: Sandbox,
                                                   gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
    with as_key(gateway, ADA) as ada, as_key(gateway, BOB) as bob:
        id = ada.post("/gpu-cloud/instances", json=create_body(offer, "capped")).json()["_id"]
        path = f"/gateway/instances/{id}/budget"
        assert ada.get(path).status_code == 404  # no budget yet
        for bad in (0, -1, "5", True, None):
            answer = ada.put(path, json={"dollars": bad})
            assert answer.status_code == 400 and set(answer.json()) == SPEC_FIELDS
        assert bob.put(path, json={"dollars": 5}).status_code == 404  # not Bob's
        state = ada.put(path, json={"dollars": 5}).json()
        assert (state["instanceId"], state["dollars"], state["warning"]) == (id, 5, False)
        assert state["status"] in ("pending", "active") and 0 <= state["spend"] < 5
        listed = ada.get("/gateway/budgets").json()
        assert listed["account"] is None and [s["instanceId"] for s in listed["instances"]] == [id]
        assert bob.get("/gateway/budgets").json()["instances"] == []
        assert ada.delete(path).status_code == 204
        assert ada.delete(path).status_code == 404
        assert ada.delete(f"/gpu-cloud/instances/{id}").status_code < 300
        wait_for(lambda: ada.put(path, json={"dollars": 5}).status_code == 400, timeout=30)
