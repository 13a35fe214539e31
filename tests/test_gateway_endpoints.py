"""Inference instances through the gateway over real HTTP, in front of a sandbox as the cloud:
admitted against the budget, billed per container-hour, deleted when the budget or a timer is
up, chatted with through the gateway, and another key's a 404."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import GPUCloudError, InvalidInputError, NotFoundError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, BOB, TEACHER, UPSTREAM_KEY, as_key, direct, wait_for
from tests.helpers import gateway_cloud as cloud

MODEL = "sandbox-vision-1"  # on the A10 by default: $0.75 per container-hour
A10 = 0.75
PEOPLE = f"{BOB} - Bob\n{TEACHER} teacher Grace\n"


@pytest.fixture
def upstream(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    """The sandbox as the real cloud, its endpoints quick to deploy and to wake."""
    return sandbox_factory(api_key=UPSTREAM_KEY, launch_seconds=0.3, cold_start_seconds=0.5)


def test_creates_are_admitted_against_the_budget_at_their_most_containers(
        gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} 2.0 Ada\n{PEOPLE}")  # holds $2/h for the default hour
    with cloud(gateway, ADA) as ada:
        ada.inference_instances.create(name="one", model=MODEL, min=0, max=2)  # $1.50/h at most
        with pytest.raises(GPUCloudError, match=r"budget has \$2.00 left.*nothing was launched"):
            ada.inference_instances.create(name="two", model=MODEL, min=0, max=1)
        assert [e.name for e in ada.inference_instances.list()] == ["one"]
        with pytest.raises(GPUCloudError, match=r"2 more container\(s\).*nothing was changed"):
            ada.inference_instances.update("one", max=4)  # 2 more: $3/h more than it holds
        assert ada.inference_instances.get("one").containers[0].scale.max == 2


def test_an_endpoint_bills_per_container_hour_and_is_deleted_when_the_budget_is_spent(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    budget = A10 * 2 * 0.001  # two containers for about 1.8 s
    gateway = gateway_factory(f"{ADA} {budget} Ada\n{PEOPLE}", reserve_hours=0.0005)
    with cloud(gateway, ADA) as ada, cloud(gateway, BOB) as bob, direct(upstream) as real, \
            as_key(gateway, TEACHER) as teacher:
        made = ada.inference_instances.create(name="two", model=MODEL, min=2, max=2)
        bobs = bob.inference_instances.create(name="bobs", model=MODEL, min=1, max=1)

        def gone() -> bool:
            return real.get(f"/ai-inference/instances/{made.id}").json()["status"] \
                in ("DELETING", "DELETED")

        wait_for(gone, timeout=60)
        assert real.get(f"/ai-inference/instances/{bobs.id}").json()["status"] not in (
            "DELETING", "DELETED")
        with as_key(gateway, ADA) as raw:
            me = raw.get("/gateway/me").json()
        assert me["spend"] >= budget and me["left"] == 0
        reasons = [entry["reason"] for entry in teacher.get("/gateway/audit").json()["entries"]
                   if entry["action"] == "deleted" and entry["resource"] == made.id]
        assert reasons == ["budget spent (by gateway)"]
        with as_key(gateway, BOB) as raw:
            spent = raw.get("/gateway/me").json()["spend"]
        assert spent > 0  # Bob's one container bills too


def test_a_stopped_endpoint_bills_nothing(upstream: Sandbox,
                                          gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} 100 Ada\n{PEOPLE}")
    with cloud(gateway, ADA) as ada, as_key(gateway, ADA) as raw:
        ada.inference_instances.create(name="e", model=MODEL, min=1, max=1)
        wait_for(lambda: raw.get("/gateway/me").json()["perHour"] == A10, timeout=30)
        ada.inference_instances.stop("e")
        wait_for(lambda: raw.get("/gateway/me").json()["perHour"] == 0, timeout=30)
        spent = raw.get("/gateway/me").json()["spend"]
        assert spent > 0
        later = time.monotonic() + 1.0  # five of the watcher's passes, stopped
        wait_for(lambda: time.monotonic() > later)
        assert raw.get("/gateway/me").json()["spend"] == spent
        ada.inference_instances.start("e")
        wait_for(lambda: raw.get("/gateway/me").json()["spend"] > spent, timeout=30)


def test_delete_after_and_budget_of_an_endpoint_are_kept_by_the_gateway(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} - Ada\n{PEOPLE}")
    with cloud(gateway, ADA) as ada, direct(upstream) as real, \
            as_key(gateway, TEACHER) as teacher:
        timed = ada.inference_instances.create(name="timed", model=MODEL, min=1, max=1,
                                               delete_after=1.0)
        capped = ada.inference_instances.create(name="capped", model=MODEL, min=1, max=1,
                                                budget=A10 * 0.0005)  # about 1.8 s of it

        def status(id: str) -> str:
            return str(real.get(f"/ai-inference/instances/{id}").json()["status"])

        wait_for(lambda: status(timed.id) in ("DELETING", "DELETED")
                 and status(capped.id) in ("DELETING", "DELETED"), timeout=60)
        reasons = {entry["resource"]: entry["reason"]
                   for entry in teacher.get("/gateway/audit").json()["entries"]
                   if entry["action"] == "deleted"}
        assert reasons == {timed.id: "delete_after timer (by gateway)",
                           capped.id: "instance budget spent (by gateway)"}


def test_another_keys_endpoint_is_a_404_everywhere(gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} - Ada\n{PEOPLE}")
    with cloud(gateway, ADA) as ada, cloud(gateway, BOB) as bob, as_key(gateway, BOB) as raw:
        made = ada.inference_instances.create(name="mine", model=MODEL, min=1, max=1)
        assert bob.inference_instances.list() == []
        for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/start"),
                             ("POST", "/stop")):
            answer = raw.request(method, f"/ai-inference/instances/{made.id}{path}",
                                 json={} if method == "PATCH" else None)
            assert answer.status_code == 404, (method, path)
            assert answer.json()["message"] == f"Inference instance {made.id} not found."
        with pytest.raises(NotFoundError):
            bob.inference_instances.get("mine")
        chat = raw.post(f"/gateway/endpoints/{made.id}/v1/chat/completions",
                        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        assert chat.status_code == 404 and "not found" in chat.json()["error"]["message"]
        assert ada.inference_instances.get("mine").status != "DELETED"


def test_a_student_chats_through_the_gateway_with_their_own_key(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(f"{ADA} - Ada\n{PEOPLE}")
    with cloud(gateway, ADA) as ada:
        ada.inference_instances.create(name="talk", model=MODEL, min=0, max=1, cooldown=0.3)
        details = ada.inference_instances.wait_until_active("talk", poll_interval=0.05)
        assert details.address.startswith(gateway.url.rstrip("/") + "/gateway/endpoints/")
        with ada.inference_instances.chat_client("talk") as chat:
            assert chat.models() == [MODEL]
            assert "2 + 2" in chat.chat("What is 2+2?").text  # a cold start, through the gateway
            with chat.chat("What is 2+2?", stream=True) as stream:
                assert "2 + 2" in "".join(chunk.delta for chunk in stream)
        assert UPSTREAM_KEY not in repr(details)


def test_without_a_gateway_delete_after_and_budget_are_refused_before_anything_is_sent(
        upstream: Sandbox) -> None:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as direct_cloud:
        with pytest.raises(InvalidInputError, match="kept by a gateway.*nothing was deployed"):
            direct_cloud.inference_instances.create(name="x", model=MODEL, delete_after=60)
        with pytest.raises(InvalidInputError, match="kept by a gateway"):
            direct_cloud.inference_instances.create(name="x", model=MODEL, budget=1)
        assert direct_cloud.inference_instances.list() == []


def test_an_image_of_several_megabytes_reaches_the_endpoint_through_the_gateway(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path) -> None:
    """Bodies to ``/gateway/endpoints`` are bounded as the endpoint's own are (the spec's 20 MB
    images, 25 MB audio), not at the management interface's 1 MB."""
    import os

    from PIL import Image

    picture = tmp_path / "noise.png"
    Image.frombytes("RGB", (1200, 1200), os.urandom(1200 * 1200 * 3)).save(picture)
    assert picture.stat().st_size > 3_000_000
    gateway = gateway_factory(f"{ADA} - Ada\n{PEOPLE}")
    with cloud(gateway, ADA) as ada:
        ada.inference_instances.create(name="look", model=MODEL, min=1, max=1)
        ada.inference_instances.wait_until_active("look", poll_interval=0.05)
        with ada.inference_instances.chat_client("look") as chat:
            reply = chat.chat("What is in this picture?", images=[picture]).text
        address = ada.inference_instances.get("look").address
    assert "1200" in reply or "image" in reply.lower(), reply
    with as_key(gateway, ADA) as raw:  # past the bound: OpenAI's body, as the endpoint's own
        answer = raw.post(address + "v1/chat/completions", content=b"x" * (64_000_000 + 1))
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "request_too_large"
    assert "the limit is 64 MB" in answer.json()["error"]["message"]

