"""``cloud.inference_instances`` and ``cloud.ssh_keys`` over real HTTP against the sandbox."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_for

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.errors import (
    GPUCloudError,
    InstanceFailedError,
    InvalidInputError,
    NotFoundError,
    ServerError,
)
from gpucloud_nb.models import InferenceInstanceDetails
from gpucloud_nb.sandbox import Sandbox

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBmd0lVf5hW8dQ2b3xLq1vJb6yQ0H8fT2cW1m8s9zQ4d me@laptop"
MODEL = "sandbox-vision-1"


@pytest.fixture
def box(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(launch_seconds=0.5, cold_start_seconds=1.5)


@pytest.fixture
def cloud(box: Sandbox) -> Iterator[GPUCloud]:
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as client:
        yield client


def test_create_wait_chat_and_delete_by_name(cloud: GPUCloud) -> None:
    made = cloud.inference_instances.create(name="chat", model=MODEL, min=1, max=2, cooldown=60)
    assert made.status == "NEW" and made.hourly_price == 0.75  # the A10, the model's default
    progress: list[tuple[str, int, int]] = []
    active = cloud.inference_instances.wait_until_active(
        "chat", on_progress=lambda d, s: progress.append((d.status, d.ready, d.total)),
        poll_interval=0.05)
    assert active.status == "ACTIVE" and progress[-1] == ("ACTIVE", 1, 1)
    assert progress[0][1] == 0  # progress began before any container was ready
    assert active.hardware_name == "NVIDIA A10 24GB" and active.containers[0].scale.max == 2
    with cloud.inference_instances.chat_client("chat") as chat:
        assert chat.models() == [MODEL]
        assert "2 + 2" in chat.chat("What is 2+2?").text
        assert cloud.scrub("sandbox-key") not in ("sandbox-key",)  # the key is one to mask
        assert "sandbox-key" not in repr(chat) and "sandbox-key" not in str(vars(chat))
    cloud.inference_instances.delete("chat")
    assert cloud.inference_instances.get(made.id).status in ("DELETING", "DELETED")


def test_a_cold_start_through_the_chat_client_succeeds(cloud: GPUCloud) -> None:
    cloud.inference_instances.create(name="sleepy", model=MODEL, min=0, max=1, cooldown=0.3)
    cloud.inference_instances.wait_until_active("sleepy", poll_interval=0.05)
    wait_for(lambda: cloud.inference_instances.get("sleepy").scaled_to_zero)
    asleep = cloud.inference_instances.get("sleepy").container_hours
    seen: list[InferenceInstanceDetails] = []
    replies: list[str] = []
    with cloud.inference_instances.chat_client("sleepy") as chat:
        thread = threading.Thread(target=lambda: replies.append(chat.chat("Hello").text))
        thread.start()
        wait_for(lambda: (seen.append(cloud.inference_instances.get("sleepy"))
                          or (seen[-1].total, seen[-1].ready) == (1, 0)) or bool(replies),
                 timeout=60)
        thread.join(60)
    assert any((d.total, d.ready) == (1, 0) for d in seen)  # it was waking up
    assert replies and replies[0]
    # the container it woke was billed (it may have scaled to zero again since: a loaded machine)
    assert cloud.inference_instances.get("sleepy").container_hours > asleep


def test_stop_refuses_bills_nothing_start_answers_again(cloud: GPUCloud) -> None:
    cloud.inference_instances.create(name="paused", model=MODEL, min=1, max=1)
    cloud.inference_instances.wait_until_active("paused", poll_interval=0.05)
    assert cloud.inference_instances.stop("paused").status == "DISABLED"
    with cloud.inference_instances.chat_client("paused") as chat:
        with pytest.raises(ServerError) as refused:
            chat.chat("Hello")
        # one sentence, raised at the first answer: asking a stopped endpoint again changes nothing
        assert refused.value.message == ("Inference instance paused is stopped; start it to send "
                                         "requests.")
        with pytest.raises(ServerError, match=r"^Inference instance paused is stopped"):
            chat.chat("Hello", stream=True)
        with pytest.raises(InstanceFailedError, match="DISABLED"):
            cloud.inference_instances.wait_until_active("paused")
        assert cloud.inference_instances.start("paused").status in ("PENDING", "DEPLOYING",
                                                                    "ACTIVE")
        cloud.inference_instances.wait_until_active("paused", poll_interval=0.05)
        assert chat.chat("Hello").text


@pytest.mark.parametrize(("options", "words"), [
    ({"model": "gpt-9"}, "Unknown model 'gpt-9'"),
    ({"hardware": "TPU"}, "Unknown hardware 'TPU'"),
    ({"min": 3, "max": 2}, "scale.min (3) is more than scale.max (2)."),
    ({"triggers": ["cpu"]}, "min may be 0 only with an http trigger"),
    ({"triggers": {"disk": 3}}, "There is no trigger 'disk'"),
    ({"hardware": "h100-80gb", "region": "eu-central-1"}, "has no capacity for NVIDIA H100"),
])
def test_bad_creates_are_refused_before_anything_is_sent(
        cloud: GPUCloud, options: dict[str, object], words: str) -> None:
    arguments: dict[str, object] = {"name": "x", "model": MODEL, **options}
    with pytest.raises(InvalidInputError) as refused:
        cloud.inference_instances.create(**arguments)  # type: ignore[arg-type]
    assert words in refused.value.message
    assert cloud.inference_instances.list() == []


def test_the_first_region_with_capacity_is_chosen(cloud: GPUCloud) -> None:
    cloud.inference_instances.create(name="big", model=MODEL, hardware="NVIDIA H100 80GB", min=1)
    assert [c.region_id for c in cloud.inference_instances.get("big").containers] == ["us-east-1"]


def test_update_changes_the_scaling_of_every_region(cloud: GPUCloud) -> None:
    cloud.inference_instances.create(name="grow", model=MODEL, min=1, max=1,
                                     region=["eu-central-1", "us-east-1"])
    updated = cloud.inference_instances.update("grow", max=3, cooldown=120)
    assert [(c.scale.min, c.scale.max, c.scale.cooldown_period) for c in updated.containers] \
        == [(1, 3, 120), (1, 3, 120)]
    assert updated.containers[0].scale.triggers.http == 10  # kept
    with pytest.raises(InvalidInputError, match="http trigger"):
        cloud.inference_instances.update("grow", min=0, triggers=["cpu"])
    with pytest.raises(InvalidInputError, match="Nothing to change"):
        cloud.inference_instances.update("grow")


def test_an_unknown_name_is_one_sentence(cloud: GPUCloud) -> None:
    with pytest.raises(NotFoundError, match="Inference instance nope not found"):
        cloud.inference_instances.get("nope")


def test_the_cost_cap_counts_endpoints_at_their_most_containers(box: Sandbox) -> None:
    with GPUCloud(api_key=box.api_key, base_url=box.management_url, max_hourly_cost=2.0) as capped:
        capped.inference_instances.create(name="one", model=MODEL, min=1, max=2)  # $1.50/h at most
        with pytest.raises(InvalidInputError, match="over the cap of"):
            capped.inference_instances.create(name="two", model=MODEL, min=1, max=1)
        assert [e.name for e in capped.inference_instances.list()] == ["one"]


def test_frames_show_prices_per_hour(cloud: GPUCloud) -> None:
    hardwares = cloud.inference_instances.hardwares_frame()
    assert hardwares.hourlyPrice.is_monotonic_increasing and (hardwares.capacity > 0).any()
    models = cloud.inference_instances.models_frame()
    assert models.set_index("id").hourlyPrice[MODEL] == 0.75


def test_the_async_twin(box: Sandbox) -> None:
    async def main() -> list[str]:
        async with AsyncGPUCloud(api_key=box.api_key, base_url=box.management_url) as acloud:
            await acloud.inference_instances.create(name="a", model=MODEL, min=1)
            await acloud.inference_instances.wait_until_active("a", poll_interval=0.05)
            async with await acloud.inference_instances.chat_client("a") as chat:
                return await chat.models()

    assert asyncio.run(main()) == [MODEL]


def test_the_key_book_by_path_and_by_name(cloud: GPUCloud, tmp_path: Path) -> None:
    private = tmp_path / "id_ed25519"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (tmp_path / "id_ed25519.pub").write_text(ED25519 + "\n")
    added = cloud.ssh_keys.add("laptop", path=private)  # its .pub beside it is read
    assert added.public_key == ED25519 and added.is_default
    other = cloud.ssh_keys.add("desk", "ssh-rsa AAAAB3NzaC1yc2E you@desk")
    assert cloud.ssh_keys.make_default("desk").id == other.id
    assert [k.is_default for k in cloud.ssh_keys.list()] == [False, True]
    cloud.ssh_keys.delete("laptop")
    assert [k.name for k in cloud.ssh_keys.list()] == ["desk"]
    with pytest.raises(InvalidInputError, match="private key"):
        cloud.ssh_keys.add("oops", private.read_text())
    with pytest.raises(GPUCloudError, match="SSH key laptop not found"):
        cloud.ssh_keys.delete("laptop")


def test_the_async_chat_client_says_when_it_is_waking_and_a_stop_is_raised_at_once(
        box: Sandbox) -> None:
    async def scenario() -> None:
        async with AsyncGPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
            await cloud.inference_instances.create(name="nap", model=MODEL, min=0, max=1,
                                                   cooldown=0.3)
            await cloud.inference_instances.wait_until_active("nap", poll_interval=0.05)
            chat = await cloud.inference_instances.chat_client("nap")
            async with chat:
                while not (await cloud.inference_instances.get("nap")).scaled_to_zero:
                    await asyncio.sleep(0.05)
                assert chat.endpoint_name == "nap" and await chat.waking() is True
                assert "2 + 2" in (await chat.chat("What is 2+2?")).text  # the cold start
                await cloud.inference_instances.stop("nap")
                assert await chat.waking() is False  # stopped: no start is ahead, a refusal is
                with pytest.raises(ServerError) as refused:
                    await chat.chat("Hello")
                assert refused.value.message == ("Inference instance nap is stopped; start it "
                                                 "to send requests.")

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_create_whose_answer_is_lost_is_adopted_by_name_not_a_deleted_namesake(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    """#38: as for a GPU instance, a deploy whose answer the connection lost is found by its
    name and returned; a DELETED endpoint of that name (still listed) is never the one."""
    from gpucloud_nb.sandbox.faults import FaultInjector, Faults

    box = sandbox_factory(launch_seconds=0.5, delete_seconds=0.1,
                          faults=Faults(drop_create_every=2))
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
        old = cloud.inference_instances.create(name="served", model=MODEL, min=1, max=1)
        cloud.inference_instances.delete(old.id)
        wait_for(lambda: cloud.inference_instances.get(old.id).status == "DELETED", timeout=30)
        made = cloud.inference_instances.create(name="served", model=MODEL, min=1, max=1)
        assert isinstance(box.app, FaultInjector) and box.app.stats.dropped == 1  # really lost
        live = [e for e in cloud.inference_instances.list() if e.status != "DELETED"]
        assert made.id != old.id and [e.id for e in live] == [made.id]  # one made, and adopted


def test_a_lost_deploy_that_made_nothing_is_sent_again_not_answered_by_a_deleted_namesake(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    """The lookup after a lost answer skips a DELETED endpoint of that name (the cloud's statuses
    are upper-case), so the deploy goes again. The sandbox cannot lose a create before making
    it, so the second deploy's connection is failed here, in front of the real sandbox."""
    import httpx

    box = sandbox_factory(launch_seconds=0.5, delete_seconds=0.1)
    upstream = httpx.Client(base_url=box.management_url, headers={"x-api-key": box.api_key})
    posts: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/ai-inference/instances":
            posts.append(1)
            if len(posts) == 2:  # the second deploy: the connection fails, nothing is made
                raise httpx.RemoteProtocolError("Server disconnected", request=request)
        answer = upstream.request(request.method, request.url.path, content=request.content,
                                  params=request.url.params,
                                  headers={"content-type": "application/json"})
        return httpx.Response(answer.status_code, content=answer.content)

    with GPUCloud(api_key=box.api_key, base_url=box.management_url,
                  transport=httpx.MockTransport(handler)) as cloud:
        old = cloud.inference_instances.create(name="served", model=MODEL, min=1, max=1)
        cloud.inference_instances.delete(old.id)
        wait_for(lambda: cloud.inference_instances.get(old.id).status == "DELETED", timeout=30)
        made = cloud.inference_instances.create(name="served", model=MODEL, min=1, max=1)
        assert made.id != old.id and made.status != "DELETED", made
        assert len(posts) == 3  # sent again once the lookup found no live one
    upstream.close()


def test_deploy_scale_start_stop_and_delete_each_move_the_change_stamp(cloud: GPUCloud) -> None:
    """The Lab sidebar watches the cloud's change stamp (client/changes.py): an endpoint deployed,
    rescaled, stopped, started or deleted from a kernel shows there at once, not a poll later."""
    from gpucloud_nb.client import changes

    url = str(cloud.base_url)
    seen = [changes.stamp(url)]

    def moved() -> bool:
        seen.append(changes.stamp(url))
        return seen[-1] is not None and seen[-1] != seen[-2]

    made = cloud.inference_instances.create(name="stamped", model=MODEL, min=1, max=1)
    assert moved()
    cloud.inference_instances.update("stamped", max=2)
    assert moved()
    cloud.inference_instances.stop("stamped")
    assert moved()
    cloud.inference_instances.start(made.id)
    assert moved()
    cloud.inference_instances.delete("stamped")
    assert moved()
    cloud.inference_instances.list()
    cloud.inference_instances.get(made.id)
    assert not moved()  # reads change nothing


def test_a_name_a_live_endpoint_holds_is_refused_so_a_lost_create_is_adopted_unambiguously(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    """#38: an endpoint record has no ``createdAt``, so a lost create looked up by name could
    not tell an older live namesake from the one it made; a create of a name a live endpoint
    holds is refused before anything is sent, and after a lost answer the one live endpoint of
    that name is the new one."""
    from gpucloud_nb.sandbox.faults import FaultInjector, Faults

    box = sandbox_factory(launch_seconds=0.5, delete_seconds=0.1,
                          faults=Faults(drop_create_every=2))
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
        old = cloud.inference_instances.create(name="served", model=MODEL, min=1, max=1)
        with pytest.raises(InvalidInputError) as refused:
            cloud.inference_instances.create(name="served", model=MODEL, min=1, max=1)
        said = refused.value.message  # its status moves on with the clock (NEW, DEPLOYING, …)
        assert re.fullmatch(
            rf"An inference instance named 'served' already exists \({old.id}, "
            r"(NEW|DEPLOYING|PARTIALLYDEPLOYED|ACTIVE)\); give another name, or delete that one "
            r"first\. Nothing was deployed\.", said), said
        assert [e.id for e in cloud.inference_instances.list()] == [old.id]
        assert isinstance(box.app, FaultInjector) and box.app.stats.dropped == 0  # never sent
        cloud.inference_instances.delete("served")  # DELETING frees the name at once
        made = cloud.inference_instances.create(name="served", model=MODEL, min=1, max=1)
        assert box.app.stats.dropped == 1  # this answer was lost, and the new one adopted
        assert made.id != old.id and cloud.inference_instances.get("served").id == made.id
