"""The sandbox's inference instances and SSH-key book over real HTTP: every path of the appendix,
its error bodies, bad inputs, the life cycle, scale to zero, stop, billing, and accounts apart."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from helpers import wait_for

from gpucloud_nb.sandbox import Sandbox

OTHER = "other-account-key"
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBmd0lVf5hW8dQ2b3xLq1vJb6yQ0H8fT2cW1m8s9zQ4d me@laptop"
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 you@desk"


@pytest.fixture
def box(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(launch_seconds=0.5, cold_start_seconds=1.5, keys=(OTHER,))


@pytest.fixture
def api(box: Sandbox, management_client_factory: Callable[..., httpx.Client]) -> httpx.Client:
    return management_client_factory(box)


@pytest.fixture
def other(box: Sandbox, management_client_factory: Callable[..., httpx.Client]) -> httpx.Client:
    return management_client_factory(box, api_key=OTHER)


def create_body(**changes: Any) -> dict[str, Any]:
    scale = {"min": 0, "max": 2, "cooldownPeriod": 0.5, "triggers": {"http": 10}}
    scale.update(changes.pop("scale", {}))
    regions = changes.pop("regions", ["eu-central-1"])
    return {"name": "chat", "modelId": "sandbox-vision-1", "hardwareName": "NVIDIA A10 24GB",
            "containerPort": 8000, "envs": {"MAX_TOKENS": "64"},
            "autoScalingConfigurations": [{"regionId": r, "scale": scale} for r in regions],
            **changes}


def details(api: httpx.Client, id_: str) -> dict[str, Any]:
    answer = api.get(f"/ai-inference/instances/{id_}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def chat(endpoint: httpx.Client, text: str = "Hello") -> httpx.Response:
    return endpoint.post("v1/chat/completions", json={
        "model": "sandbox-vision-1", "messages": [{"role": "user", "content": text}]})


def test_the_catalogue_lists_models_hardwares_and_regions_with_capacity(api: httpx.Client) -> None:
    models = api.get("/ai-inference/models").json()
    assert {m["id"] for m in models} == {"sandbox-vision-1", "sandbox-speech-1"}
    assert set(models[0]) == {"id", "name", "port", "defaultHardwareId", "features"}
    hardwares = api.get("/ai-inference/hardwares").json()
    assert {"id", "name", "cpu", "ram", "gpu"} <= set(hardwares[0])
    assert set(hardwares[0]["gpu"]) == {"model", "count", "memory"}
    regions = api.get("/ai-inference/regions").json()
    assert {"id", "name", "countryCode", "state", "capacities"} <= set(regions[0])
    assert {"hardwareId", "capacity"} == set(regions[0]["capacities"][0])


def test_every_path_needs_the_key(box: Sandbox) -> None:
    with httpx.Client(base_url=box.management_url) as anonymous:
        for path in ("/ai-inference/models", "/ai-inference/instances", "/gpu-cloud/ssh-keys"):
            answer = anonymous.get(path)
            assert answer.status_code == 403
            assert set(answer.json()) == {"statusCode", "timestamp", "path", "message"}


@pytest.mark.parametrize(("changes", "words"), [
    ({"modelId": "gpt-9"}, "Unknown model 'gpt-9'"),
    ({"hardwareName": "TPU v5"}, "Unknown hardware 'TPU v5'"),
    ({"scale": {"min": 3, "max": 1}}, "scale.min (3) is more than scale.max (1)."),
    ({"scale": {"triggers": {"cpu": 80}}}, "min may be 0 only with an http trigger"),
    ({"hardwareName": "NVIDIA H100 80GB"}, "has no capacity for NVIDIA H100 80GB"),
    ({"registryId": "r1", "modelId": None}, "no private registries"),
])
def test_a_bad_create_is_400_with_one_sentence(api: httpx.Client, changes: dict[str, Any],
                                               words: str) -> None:
    answer = api.post("/ai-inference/instances", json=create_body(**changes))
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert words in body["message"] and body["statusCode"] == 400
    assert body["path"] == "/ai-inference/instances"
    assert api.get("/ai-inference/instances").json() == []  # nothing was made


def test_registries_are_refused(api: httpx.Client) -> None:
    answer = api.post("/ai-inference/registries", json={"url": "registry.example"})
    assert answer.status_code == 400 and "no private registries" in answer.json()["message"]


def test_a_create_goes_new_deploying_partially_deployed_active(api: httpx.Client) -> None:
    answer = api.post("/ai-inference/instances",
                      json=create_body(regions=["eu-central-1", "us-east-1"]))
    assert answer.status_code == 201, answer.text
    made = answer.json()
    assert {"_id", "name", "status", "hourlyPrice", "features", "address"} <= set(made)
    assert made["status"] == "NEW" and made["features"] == ["chat", "image"]
    seen: list[str] = []

    def status() -> str:
        seen.append(details(api, made["_id"])["status"])
        return seen[-1]

    wait_for(lambda: status() == "ACTIVE", what=lambda: str(seen))
    order = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]
    assert order[-1] == "ACTIVE"
    assert set(order) <= {"NEW", "DEPLOYING", "PARTIALLYDEPLOYED", "ACTIVE"}
    assert order == sorted(order, key=["NEW", "DEPLOYING", "PARTIALLYDEPLOYED", "ACTIVE"].index)
    full = details(api, made["_id"])
    assert {"containers", "podLifetime", "hardwareName", "envs"} <= set(full)
    assert [c["regionId"] for c in full["containers"]] == ["eu-central-1", "us-east-1"]
    assert all(c["deployStatus"] == {"total": 1, "ready": 1} for c in full["containers"])
    assert full["envs"] == {"MAX_TOKENS": "64"}


def test_two_regions_are_partially_deployed_for_a_while(
        sandbox_factory: Callable[..., Sandbox],
        management_client_factory: Callable[..., httpx.Client]) -> None:
    slow = sandbox_factory(launch_seconds=2.0)
    api = management_client_factory(slow)
    made = api.post("/ai-inference/instances",
                    json=create_body(regions=["eu-central-1", "us-east-1"])).json()
    wait_for(lambda: details(api, made["_id"])["status"] == "PARTIALLYDEPLOYED", timeout=60)
    containers = details(api, made["_id"])["containers"]
    assert [c["deployStatus"]["ready"] for c in containers] in ([1, 0],)


def test_min_zero_scales_to_zero_and_a_request_wakes_it(box: Sandbox, api: httpx.Client) -> None:
    made = api.post("/ai-inference/instances", json=create_body()).json()
    wait_for(lambda: details(api, made["_id"])["status"] == "ACTIVE")
    wait_for(lambda: details(api, made["_id"])["containers"][0]["deployStatus"]["total"] == 0,
             what=lambda: str(details(api, made["_id"])))
    assert details(api, made["_id"])["status"] == "ACTIVE"  # scaled to zero, still active
    waking: list[dict[str, int]] = []
    answers: list[httpx.Response] = []
    with httpx.Client(base_url=made["address"], headers={"x-api-key": box.api_key},
                      timeout=60) as endpoint:
        thread = threading.Thread(target=lambda: answers.append(chat(endpoint)))
        thread.start()
        wait_for(lambda: (waking.append(details(api, made["_id"])["containers"][0]
                                        ["deployStatus"]) or waking[-1] == {"total": 1, "ready": 0})
                 or bool(answers), timeout=60)
        thread.join(60)
    assert {"total": 1, "ready": 0} in waking, waking  # a container was starting: a cold start
    assert answers and answers[0].status_code == 200, answers
    assert answers[0].json()["choices"][0]["message"]["content"]


def test_the_endpoint_lists_its_model_and_takes_only_its_owners_key(
        box: Sandbox, api: httpx.Client) -> None:
    made = api.post("/ai-inference/instances", json=create_body(scale={"min": 1})).json()
    wait_for(lambda: details(api, made["_id"])["status"] == "ACTIVE")
    with httpx.Client(base_url=made["address"], timeout=30) as endpoint:
        listed = endpoint.get("v1/models", headers={"x-api-key": box.api_key})
        assert [m["id"] for m in listed.json()["data"]] == ["sandbox-vision-1"]
        for key in (OTHER, box.inference_secret, None):
            headers = {} if key is None else {"x-api-key": key}
            refused = endpoint.get("v1/models", headers=headers)
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_api_key"
            assert (key or "") not in refused.text or key is None


def test_stop_refuses_requests_bills_nothing_and_start_serves_again(
        box: Sandbox, api: httpx.Client) -> None:
    made = api.post("/ai-inference/instances", json=create_body(scale={"min": 1})).json()
    id_ = made["_id"]
    wait_for(lambda: details(api, id_)["status"] == "ACTIVE")
    first = details(api, id_)["containerHours"]
    wait_for(lambda: details(api, id_)["containerHours"] > first)  # billing while up
    stopped = api.post(f"/ai-inference/instances/{id_}/stop")
    assert stopped.status_code == 200 and stopped.json()["status"] == "DISABLED"
    at_stop = details(api, id_)
    assert at_stop["containers"][0]["deployStatus"] == {"total": 0, "ready": 0}
    with httpx.Client(base_url=made["address"], headers={"x-api-key": box.api_key},
                      timeout=30) as endpoint:
        refused = chat(endpoint)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "endpoint_stopped"
        assert "is stopped; start it" in refused.json()["error"]["message"]
        # nothing billed while stopped, whatever time passes
        wait_for(lambda: details(api, id_)["containerHours"] == at_stop["containerHours"])
        threading.Event().wait(0.3)
        assert details(api, id_)["containerHours"] == at_stop["containerHours"]
        started = api.post(f"/ai-inference/instances/{id_}/start")
        assert started.status_code == 200 and started.json()["status"] == "PENDING"
        wait_for(lambda: details(api, id_)["status"] == "ACTIVE")
        assert chat(endpoint).status_code == 200


def test_patch_changes_the_scaling_and_refuses_what_cannot_change(api: httpx.Client) -> None:
    made = api.post("/ai-inference/instances", json=create_body(scale={"min": 1})).json()
    scale = {"min": 2, "max": 3, "cooldownPeriod": 60, "triggers": {"http": 4}}
    patched = api.patch(f"/ai-inference/instances/{made['_id']}", json={
        "autoScalingConfigurations": [{"regionId": "eu-central-1", "scale": scale}]})
    assert patched.status_code == 200, patched.text
    assert patched.json()["containers"][0]["scale"] == scale
    assert patched.json()["containers"][0]["deployStatus"]["total"] == 2
    bad = api.patch(f"/ai-inference/instances/{made['_id']}", json={"modelId": "sandbox-speech-1"})
    assert bad.status_code == 400 and "modelId cannot change" in bad.json()["message"]
    low = api.patch(f"/ai-inference/instances/{made['_id']}", json={
        "autoScalingConfigurations": [{"regionId": "eu-central-1", "scale": {"min": 0, "max": 1}}]})
    assert low.status_code == 400 and "http trigger" in low.json()["message"]


def test_delete_goes_deleting_then_deleted_and_the_endpoint_is_gone(
        box: Sandbox, api: httpx.Client) -> None:
    made = api.post("/ai-inference/instances", json=create_body(scale={"min": 1})).json()
    assert api.delete(f"/ai-inference/instances/{made['_id']}").status_code == 204
    assert details(api, made["_id"])["status"] == "DELETING"
    wait_for(lambda: details(api, made["_id"])["status"] == "DELETED")
    with httpx.Client(base_url=made["address"], headers={"x-api-key": box.api_key}) as endpoint:
        assert chat(endpoint).status_code == 404
    assert api.post(f"/ai-inference/instances/{made['_id']}/start").status_code == 400


def test_another_keys_instance_is_a_404(api: httpx.Client, other: httpx.Client) -> None:
    made = api.post("/ai-inference/instances", json=create_body()).json()
    assert other.get("/ai-inference/instances").json() == []
    for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/start"),
                         ("POST", "/stop")):
        answer = other.request(method, f"/ai-inference/instances/{made['_id']}{path}",
                               json={} if method == "PATCH" else None)
        assert answer.status_code == 404, (method, path)
        assert answer.json()["message"] == f"Inference instance {made['_id']} not found."
    assert details(api, made["_id"])["status"] != "DISABLED"


def test_capacity_falls_as_containers_run(api: httpx.Client) -> None:
    def a100() -> int:
        region = next(r for r in api.get("/ai-inference/regions").json()
                      if r["id"] == "eu-central-1")
        return next(c["capacity"] for c in region["capacities"] if c["hardwareId"] == "a100-80gb")

    before = a100()
    made = api.post("/ai-inference/instances", json=create_body(
        hardwareName="NVIDIA A100 80GB", scale={"min": before, "max": before}))
    assert made.status_code == 201, made.text
    assert a100() == 0
    again = api.post("/ai-inference/instances", json=create_body(
        name="more", hardwareName="NVIDIA A100 80GB", scale={"min": 1, "max": 1}))
    assert again.status_code == 400 and "no capacity" in again.json()["message"]


def test_the_ssh_key_book(api: httpx.Client, other: httpx.Client) -> None:
    first = api.post("/gpu-cloud/ssh-keys", json={"name": "laptop", "publicKey": ED25519})
    assert first.status_code == 201, first.text
    assert set(first.json()) == {"_id", "user", "name", "publicKey", "isDefault", "createdAt",
                                 "updatedAt"}
    assert first.json()["isDefault"] is True  # the first key is the default
    second = api.post("/gpu-cloud/ssh-keys", json={"name": "desk", "publicKey": RSA}).json()
    assert second["isDefault"] is False
    made = api.patch(f"/gpu-cloud/ssh-keys/{second['_id']}/makedefault")
    assert made.status_code == 200 and made.json()["isDefault"] is True
    assert [k["isDefault"] for k in api.get("/gpu-cloud/ssh-keys").json()] == [False, True]
    assert other.get("/gpu-cloud/ssh-keys").json() == []
    assert other.delete(f"/gpu-cloud/ssh-keys/{second['_id']}").status_code == 404
    twice = api.post("/gpu-cloud/ssh-keys", json={"name": "again", "publicKey": ED25519})
    assert twice.status_code == 400 and "already" in twice.json()["message"]
    private = api.post("/gpu-cloud/ssh-keys",
                       json={"name": "oops", "publicKey": "-----BEGIN OPENSSH PRIVATE KEY-----"})
    assert private.status_code == 400 and "private key" in private.json()["message"]
    assert api.delete(f"/gpu-cloud/ssh-keys/{first.json()['_id']}").status_code == 204
    assert [k["name"] for k in api.get("/gpu-cloud/ssh-keys").json()] == ["desk"]
    assert api.delete(f"/gpu-cloud/ssh-keys/{first.json()['_id']}").status_code == 404


def test_endpoints_and_the_key_book_survive_a_restart(sandbox_factory: Callable[..., Sandbox],
                                                      tmp_path: Any) -> None:
    from gpucloud_nb import GPUCloud

    state = tmp_path / "state.db"
    first = sandbox_factory(state=state, launch_seconds=0.3, cold_start_seconds=0.5)
    with GPUCloud(api_key=first.api_key, base_url=first.management_url) as cloud:
        up = cloud.inference_instances.create(name="up", model="sandbox-vision-1", min=1, max=2,
                                              cooldown=600)
        off = cloud.inference_instances.create(name="off", model="sandbox-vision-1", min=1, max=1)
        cloud.inference_instances.wait_until_active("up", poll_interval=0.05)
        cloud.inference_instances.stop("off")
        key = cloud.ssh_keys.add("laptop", ED25519)
        cloud.ssh_keys.add("desk", RSA)
        cloud.ssh_keys.make_default("desk")
        before = httpx.get(f"{first.management_url}/ai-inference/instances/{up.id}",
                           headers={"x-api-key": first.api_key}).json()["containerHours"]
        assert before > 0
    first.stop()
    second = sandbox_factory(state=state, launch_seconds=0.3, cold_start_seconds=0.5)
    with GPUCloud(api_key=second.api_key, base_url=second.management_url) as cloud:
        assert [(e.id, e.name) for e in cloud.inference_instances.list()] == [
            (up.id, "up"), (off.id, "off")]
        after = cloud.inference_instances.get("up")
        assert (after.status, after.ready, after.total) == ("ACTIVE", 1, 1)
        assert after.containers[0].scale.max == 2
        assert cloud.inference_instances.get("off").status == "DISABLED"
        billed = httpx.get(f"{second.management_url}/ai-inference/instances/{up.id}",
                           headers={"x-api-key": second.api_key}).json()["containerHours"]
        assert billed > before  # what it billed before the restart is kept, and it goes on
        with cloud.inference_instances.chat_client("up") as chat:
            assert "2 + 2" in chat.chat("What is 2+2?").text
        keys = {k.name: k for k in cloud.ssh_keys.list()}
        assert set(keys) == {"laptop", "desk"} and keys["desk"].is_default
        assert keys["laptop"].id == key.id and not keys["laptop"].is_default
        cloud.inference_instances.start("off")
        cloud.inference_instances.wait_until_active("off", poll_interval=0.05)

