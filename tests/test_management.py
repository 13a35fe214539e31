"""The management client against the sandbox, over real HTTP."""

from __future__ import annotations

import asyncio
import base64
import threading

import httpx
import pytest
from pandas.testing import assert_frame_equal

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.errors import (
    AuthenticationError,
    BadRequestError,
    InstanceFailedError,
    InvalidInputError,
    NotFoundError,
    WaitTimeoutError,
)
from gpucloud_nb.frames import offers_frame
from gpucloud_nb.models import InstanceOffer


def first_offer(cloud: GPUCloud, deployment_type: str = "vm", **filters: object) -> InstanceOffer:
    offers = cloud.instances.offers(deployment_type=deployment_type, available=True, sort="price",
                                    **filters)  # type: ignore[arg-type]
    assert offers, f"the sandbox has no available {deployment_type} offer"
    return offers[0]


def launch_args(offer: InstanceOffer, name: str = "job") -> dict[str, object]:
    args: dict[str, object] = {
        "name": name, "cloud_provider": offer.cloud.id, "instance_id": offer.instance_id,
        "region": offer.available_regions[0],
    }
    if offer.deployment_type == "container":
        args["docker_container"] = {"image": "vllm/vllm-openai:latest"}
    else:
        args["vm"] = {"os": offer.configuration.os[0]}
    return args


# offers -------------------------------------------------------------------------------------


def test_offers_are_typed_records(shared_cloud: GPUCloud) -> None:
    offers = shared_cloud.instances.offers()
    assert len(offers) >= 40
    assert {o.deployment_type for o in offers} == {"vm", "container", "baremetal"}
    assert any(not o.is_available for o in offers)
    offer = offers[0]
    assert offer.instance_id and offer.cloud.id and offer.configuration.vram_gb > 0
    assert isinstance(offer.hourly_price, float)


def test_each_offer_filter(shared_cloud: GPUCloud) -> None:
    every = shared_cloud.instances.offers()
    region = every[0].availability[0].region
    assert all(region in {a.region for a in o.availability}
               for o in shared_cloud.instances.offers(region=region))
    assert {o.gpu_count for o in shared_cloud.instances.offers(num_gpus=8)} == {8}
    assert all("h100" in o.gpu_name.lower() for o in shared_cloud.instances.offers(gpu_type="h100"))
    assert shared_cloud.instances.offers(gpu_type="h100")
    assert all(o.is_available for o in shared_cloud.instances.offers(available=True))
    prices = [o.hourly_price for o in shared_cloud.instances.offers(sort="price")]
    assert prices == sorted(prices)
    for kind in ("vm", "container", "baremetal"):
        assert {o.deployment_type for o in shared_cloud.instances.offers(deployment_type=kind)} == {kind}


def test_offers_frame_is_a_dataframe(shared_cloud: GPUCloud) -> None:
    frame = shared_cloud.instances.offers_frame(gpu_type="H100")
    assert len(frame) >= 1
    assert {"instanceId", "gpuName", "hourlyPrice", "region", "available"} <= set(frame.columns)


@pytest.mark.parametrize("filters", [{}, {"gpu_type": "A100", "available": True}])
def test_offers_frame_reads_the_body_like_the_records(shared_cloud: GPUCloud, filters: dict) -> None:
    # The frame decodes the body itself (msgspec); the records go through json.loads.
    assert_frame_equal(shared_cloud.instances.offers_frame(**filters),
                       offers_frame(shared_cloud.instances.offers(**filters)))


@pytest.mark.parametrize(
    ("filters", "words"),
    [({"sort": "name"}, "sort must be 'price'"), ({"deployment_type": "gpu"}, "deployment_type")],
)
def test_bad_filters_are_refused_before_sending(shared_cloud: GPUCloud, filters: dict, words: str) -> None:
    with pytest.raises(InvalidInputError, match=words):
        shared_cloud.instances.offers(**filters)


# instances ----------------------------------------------------------------------------------


def test_instance_life_cycle(cloud: GPUCloud) -> None:
    offer = first_offer(cloud)
    instance = cloud.instances.create(**launch_args(offer, "life"))  # type: ignore[arg-type]
    assert instance.status == "pending" and instance.name == "life"
    assert cloud.instances.get(instance.id).is_pending

    seen: list[tuple[str, float]] = []
    details = cloud.instances.wait_until_active(
        instance.id, timeout=30, on_progress=lambda d, t: seen.append((d.status, t)))
    assert details.status == "active" and not details.is_pending
    assert details.ip and details.ssh_user and details.ssh_port
    assert details.ip in cloud.instances.ssh_command(details.id)
    assert seen[-1][0] == "active" and seen[0][1] <= seen[-1][1]
    assert [i.id for i in cloud.instances.list()] == [instance.id]

    cloud.instances.delete(instance.id)
    assert cloud.instances.get(instance.id).status in ("deleting", "deleted")
    with pytest.raises(InstanceFailedError, match="will not become active"):
        cloud.instances.wait_until_active(instance.id, timeout=5)


def test_container_instance(cloud: GPUCloud) -> None:
    offer = first_offer(cloud, "container")
    instance = cloud.instances.create(**launch_args(offer))  # type: ignore[arg-type]
    details = cloud.instances.wait_until_active(instance.id, timeout=30)
    assert details.docker_image == "vllm/vllm-openai:latest"
    assert {i.id for i in cloud.instances.list(deployment_type="container")} == {instance.id}
    assert cloud.instances.list(deployment_type="vm") == []


def test_failed_launch_raises(cloud: GPUCloud) -> None:
    offer = first_offer(cloud)
    instance = cloud.instances.create(**launch_args(offer, "broken-sandbox-fail"))  # type: ignore[arg-type]
    with pytest.raises(InstanceFailedError, match="is error"):
        cloud.instances.wait_until_active(instance.id, timeout=30)


def test_wait_times_out_with_a_sentence(sandbox_factory) -> None:
    slow = sandbox_factory(launch_seconds=60)
    with GPUCloud(api_key=slow.api_key, base_url=slow.management_url) as cloud:
        instance = cloud.instances.create(**launch_args(first_offer(cloud)))  # type: ignore[arg-type]
        with pytest.raises(WaitTimeoutError, match="still pending after 0.3 s"):
            cloud.instances.wait_until_active(instance.id, timeout=0.3)


def test_unknown_ids_and_wrong_key(cloud: GPUCloud, sandbox) -> None:
    with pytest.raises(NotFoundError, match="Instance 0123456789abcdef01234567 not found."):
        cloud.instances.get("0123456789abcdef01234567")
    with pytest.raises(NotFoundError, match="Volume nope not found."):
        cloud.volumes.delete("nope")
    intruder = GPUCloud(api_key="wrong-key", base_url=sandbox.management_url)
    with pytest.raises(AuthenticationError, match="refused the API key") as info:
        intruder.instances.list()
    assert info.value.status_code == 403


@pytest.mark.parametrize("bad", ["", "  ", "a/b", "/", "x?y", "x#y", "..", "?"])
def test_an_odd_id_is_refused_before_anything_is_sent(sandbox, bad: str) -> None:
    sent: list[httpx.Request] = []
    transport = httpx.HTTPTransport()

    class Counting(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return transport.handle_request(request)

    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  transport=Counting()) as cloud:
        for call in (cloud.instances.get, cloud.instances.delete, cloud.volumes.get,
                     cloud.volumes.delete):
            with pytest.raises(InvalidInputError, match="is not a valid id") as info:
                call(bad)
            assert "\n" not in str(info.value)
    assert sent == []


def _counting_cloud(sandbox) -> tuple[GPUCloud, list[httpx.Request]]:
    sent: list[httpx.Request] = []
    transport = httpx.HTTPTransport()

    class Counting(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return transport.handle_request(request)

    return GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                    transport=Counting()), sent


def test_names_work_wherever_ids_do(sandbox, observer: GPUCloud) -> None:
    cloud, sent = _counting_cloud(sandbox)
    with cloud:
        args = launch_args(first_offer(cloud))
        alpha = cloud.instances.create(**(args | {"name": "alpha"}))  # type: ignore[arg-type]
        twins = [cloud.instances.create(**(args | {"name": "twin"})) for _ in range(2)]  # type: ignore[arg-type]
        # An instance named with another's id: the id wins, it is never taken for a name.
        decoy = cloud.instances.create(**(args | {"name": alpha.id}))  # type: ignore[arg-type]

        sent.clear()
        assert cloud.instances.get(alpha.id).id == alpha.id
        assert [r.url.path for r in sent] == [f"/gpu-cloud/instances/{alpha.id}"]  # no list

        sent.clear()
        assert cloud.instances.get("alpha").id == alpha.id
        assert [r.method for r in sent] == ["GET", "GET", "GET"]  # tried as id, one list, get
        assert cloud.instances.wait_until_active("alpha", timeout=30).status == "active"

        with pytest.raises(InvalidInputError) as info:
            cloud.instances.delete("twin")
        assert str(info.value) == (f"2 instances are named 'twin' ({twins[0].id}, {twins[1].id}); "
                                   "give the id of the one you mean.")
        with pytest.raises(NotFoundError, match="Instance nobody not found: no instance has that "
                                                "id or name."):
            cloud.instances.get("nobody")
        assert {i.status for i in observer.instances.list()} <= {"pending", "active"}  # none deleted

        cloud.instances.delete("alpha")
        assert observer.instances.get(alpha.id).status in ("deleting", "deleted")
        assert observer.instances.get(decoy.id).status in ("pending", "active")
        # A new "alpha" is the one found by name; the deleted one is not in the way.
        again = cloud.instances.create(**(args | {"name": "alpha"}))  # type: ignore[arg-type]
        assert cloud.instances.get("alpha").id == again.id


def test_names_work_in_the_async_client(sandbox) -> None:
    async def main() -> None:
        async with AsyncGPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
            offers = await cloud.instances.offers(deployment_type="vm", available=True)
            args = launch_args(offers[0])
            made = await cloud.instances.create(**(args | {"name": "beta"}))  # type: ignore[arg-type]
            assert (await cloud.instances.get("beta")).id == made.id
            assert (await cloud.instances.wait_until_active("beta", timeout=30)).id == made.id
            await cloud.instances.create(**(args | {"name": "beta"}))  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError, match="2 instances are named 'beta'"):
                await cloud.instances.delete("beta")
            await cloud.instances.delete(made.id)
            assert (await cloud.instances.get(made.id)).status in ("deleting", "deleted")
            with pytest.raises(NotFoundError, match="no instance has that id or name"):
                await cloud.instances.delete("gamma")

    asyncio.run(main())


def test_a_name_works_where_the_cloud_answers_400_for_a_malformed_id() -> None:
    # A real server may validate ids (a Mongo ObjectId) and answer 400 to a name in the path,
    # which the sandbox never does: hence a MockTransport.
    live = {"_id": "6650f0c2a1b2c3d4e5f60718", "name": "train", "status": "active"}
    busy = {"_id": "busy", "name": "other", "status": "pending"}
    seen: list[str] = []

    def cloud_api(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path == "/gpu-cloud/instances":
            return httpx.Response(200, json=[live, busy])
        if request.url.path.endswith(live["_id"]):
            return httpx.Response(200 if request.method == "GET" else 204,
                                  json=live if request.method == "GET" else None)
        if request.method == "DELETE" and request.url.path.endswith("/busy"):
            return httpx.Response(400, json={"statusCode": 400, "message": "Instance is busy"})
        return httpx.Response(400, json={"statusCode": 400, "message": "id must be a mongodb id"})

    with GPUCloud(api_key="k", base_url="http://127.0.0.1:9",
                  transport=httpx.MockTransport(cloud_api)) as cloud:
        assert cloud.instances.get("train").id == live["_id"]
        assert seen == ["GET /gpu-cloud/instances/train", "GET /gpu-cloud/instances",
                        f"GET /gpu-cloud/instances/{live['_id']}"]
        cloud.instances.delete("train")
        assert seen[-1] == f"DELETE /gpu-cloud/instances/{live['_id']}"
        with pytest.raises(NotFoundError, match="no instance has that id or name"):
            cloud.instances.get("nobody")
        # A 400 for an id that exists is about something else: the server's sentence stays.
        with pytest.raises(BadRequestError, match="Instance is busy"):
            cloud.instances.delete("busy")


def test_names_work_over_ssh(sandbox, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh: the client's own key is used
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        cloud.sandbox = sandbox
        made = cloud.instances.create(**launch_args(first_offer(cloud), "ssh-box"))  # type: ignore[arg-type]
        assert cloud.instances.run("ssh-box", "echo hello", wait=30).stdout == "hello\n"
        local = tmp_path / "notes.txt"
        local.write_text("by name\n")
        cloud.instances.upload("ssh-box", local, "notes.txt")
        cloud.instances.download("ssh-box", "notes.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == "by name\n"
        assert cloud.instances.run(made.id, "cat notes.txt").stdout == "by name\n"


# client-side validation: refused before anything is sent ------------------------------------


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"vm": {"os": "windows-11"}}, "has no OS image 'windows-11'; choose one of"),
        ({"region": "mars-1"}, "is not offered in region 'mars-1'"),
        ({"instance_id": "no-such-offer"}, "There is no offer with instanceId 'no-such-offer'"),
        ({"cloud_provider": "nobody"}, "Provider 'nobody' sells no offer"),
        ({"vm": None, "docker_container": "nginx"}, "vm offer: vm.os is required"),
        ({"vm": None}, "vm.os is required"),
        ({"name": ""}, "name must not be empty"),
    ],
)
def test_create_validation(cloud: GPUCloud, change: dict, words: str) -> None:
    args = launch_args(first_offer(cloud)) | change
    with pytest.raises(InvalidInputError, match=words):
        cloud.instances.create(**args)  # type: ignore[arg-type]
    assert cloud.instances.list() == []


def test_region_where_the_offer_is_not_available(shared_cloud: GPUCloud) -> None:
    offer = next(o for o in shared_cloud.instances.offers()
                 if any(not a.available for a in o.availability))
    region = next(a.region for a in offer.availability if not a.available)
    args = launch_args(offer) | {"region": region}
    if offer.deployment_type != "container":
        args["vm"] = {"os": offer.configuration.os[0]} if offer.configuration.os else {"os": "x"}
    with pytest.raises(InvalidInputError, match=f"not available in region '{region}'"):
        shared_cloud.instances.create(**args)  # type: ignore[arg-type]


def test_container_offer_needs_an_image(shared_cloud: GPUCloud) -> None:
    offer = first_offer(shared_cloud, "container")
    args = launch_args(offer) | {"vm": {"os": "ubuntu-22.04"}, "docker_container": None}
    with pytest.raises(InvalidInputError, match="container offer: dockerContainer.image is required"):
        shared_cloud.instances.create(**args)  # type: ignore[arg-type]


def test_the_official_clis_shape_vm_with_docker_container(cloud: GPUCloud, sandbox) -> None:
    """The cloud's CLI sends vm: {os} together with dockerContainer: {image} (or null)."""
    vm_offer = first_offer(cloud, "vm")
    on_vm = cloud.instances.create(**launch_args(vm_offer) | {
        "name": "cli-vm", "docker_container": {"image": "vllm/vllm-openai:latest"}})
    assert on_vm.os == vm_offer.configuration.os[0]
    assert on_vm.docker_image == "vllm/vllm-openai:latest"
    assert on_vm.ssh_user == "ubuntu"
    container_offer = first_offer(cloud, "container")
    os_name = (container_offer.configuration.os or ["ubuntu-22.04"])[0]
    in_container = cloud.instances.create(**launch_args(container_offer) | {
        "name": "cli-container", "vm": {"os": os_name}})
    assert in_container.docker_image
    # and over the wire exactly as the CLI sends it, with an explicit null
    body = {"name": "cli-null", "cloudProvider": vm_offer.cloud.id,
            "instanceId": vm_offer.instance_id, "region": vm_offer.available_regions[0],
            "vm": {"os": vm_offer.configuration.os[0]}, "dockerContainer": None}
    answer = httpx.post(f"{sandbox.management_url}/gpu-cloud/instances", json=body,
                        headers={"x-api-key": sandbox.api_key})
    assert answer.status_code == 201, answer.text


def test_ssh_key_id_and_ssh_key_together_the_key_wins(cloud: GPUCloud) -> None:
    """The cloud's docs send both; the key text wins (it is what the machine accepts)."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMfakekeyfakekeyfakekeyfakekeyfakekeyfake ada@laptop"
    created = cloud.instances.create(**launch_args(first_offer(cloud, "vm")) | {
        "name": "both-keys", "ssh_key_id": "saved-key-1", "ssh_key": key})
    details = cloud.instances.get(created.id)
    assert details.ssh_key["name"] == "ada@laptop"
    assert details.ssh_key["_id"] != "saved-key-1"


def test_cloud_init_text_and_file(cloud: GPUCloud, tmp_path) -> None:
    offers = [o for o in cloud.instances.offers(available=True) if o.deployment_type == "vm"]
    with_init = next(o for o in offers if o.cloud_init_available)
    without = next(o for o in offers if not o.cloud_init_available)
    script = tmp_path / "init.yaml"
    script.write_text("#cloud-config\nruncmd:\n  - echo hi\n")

    for given in ("#cloud-config\nruncmd: []\n", str(script), script):
        args = launch_args(with_init, "init") | {
            "vm": {"os": with_init.configuration.os[0], "cloud_init": given}}
        assert cloud.instances.create(**args).status == "pending"  # type: ignore[arg-type]

    args = launch_args(without) | {"vm": {"os": without.configuration.os[0], "cloud_init": "x"}}
    with pytest.raises(InvalidInputError, match="does not support cloud-init"):
        cloud.instances.create(**args)  # type: ignore[arg-type]


def test_cloud_init_is_base64_encoded_on_the_wire() -> None:
    from gpucloud_nb.client.create import create_request

    def vm_body(vm: dict) -> dict:
        return create_request(name="a", cloud_provider="p", instance_id="x", region="r",
                              vm=vm).body()["vm"]

    body = vm_body({"os": "ubuntu-22.04", "cloud_init": "#cloud-config\n"})
    assert base64.b64decode(body["base64CloudInitScript"]) == b"#cloud-config\n"
    with pytest.raises(InvalidInputError, match="once"):
        vm_body({"os": "u", "cloud_init": "a\n", "base64CloudInitScript": "YQ=="})


def test_hourly_cost_cap(sandbox) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as probe:
        offer = first_offer(probe)
    cap = offer.hourly_price * 1.5
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=cap) as cloud:
        cloud.instances.create(**launch_args(offer, "first"))  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="above the cap"):
            cloud.instances.create(**launch_args(offer, "second"))  # type: ignore[arg-type]
        assert [i.name for i in cloud.instances.list()] == ["first"]


# volumes ------------------------------------------------------------------------------------


def test_volume_life_cycle_and_attach(cloud: GPUCloud) -> None:
    offer = first_offer(cloud)
    region = offer.available_regions[0]
    volume_offer = next(v for v in cloud.volumes.offers()
                        if v.cloud_provider.id == offer.cloud.id and region in v.regions)
    assert volume_offer.price_per_gb_per_hour > 0
    assert volume_offer.price_per_gb_per_hour == float(volume_offer.price_per_gb_per_hour_text)

    with pytest.raises(InvalidInputError, match="must be at least"):
        cloud.volumes.create(name="tiny", cloud_provider=offer.cloud.id, region=region,
                             size_in_gb=volume_offer.min_size_in_gb - 1)
    assert cloud.volumes.list() == []

    volume = cloud.volumes.create(name="my data", cloud_provider=offer.cloud.id, region=region,
                                  size_in_gb=volume_offer.min_size_in_gb)
    assert cloud.volumes.get(volume.id).name == "my data"
    assert volume.cloud_provider and volume.cloud_provider.id == offer.cloud.id

    instance = cloud.instances.create(**launch_args(offer), volume_id=volume.id)  # type: ignore[arg-type]
    assert volume.id in str(cloud.instances.get(instance.id).volumes)
    cloud.instances.delete(instance.id)
    assert cloud.volumes.get(volume.id).id == volume.id  # outlives the instance
    cloud.volumes.delete(volume.id)
    with pytest.raises(NotFoundError):
        cloud.volumes.get(volume.id)


@pytest.mark.parametrize("name", ["../../../../tmp/x", "a/b", "..", ".", "back\\slash",
                                  "nul\0byte"])
def test_a_volume_name_that_is_not_one_folder_is_refused_before_anything_is_sent(
        sandbox, name: str) -> None:
    sent: list[httpx.Request] = []
    transport = httpx.HTTPTransport()

    class Counting(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return transport.handle_request(request)

    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  transport=Counting()) as cloud:
        with pytest.raises(InvalidInputError, match="A volume name is one folder name") as info:
            cloud.volumes.create(name=name, cloud_provider="any", region="any", size_in_gb=100)
        assert "\n" not in str(info.value) and "\0" not in str(info.value)
    assert sent == []  # not even the offers


# concurrency, async, persistence ------------------------------------------------------------


def test_concurrent_creates_from_threads(cloud: GPUCloud) -> None:
    offer = first_offer(cloud)
    made: list[str] = []

    def launch(n: int) -> None:
        made.append(cloud.instances.create(**launch_args(offer, f"t{n}")).id)  # type: ignore[arg-type]

    threads = [threading.Thread(target=launch, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 16
    assert sorted(i.name for i in cloud.instances.list()) == sorted(f"t{n}" for n in range(16))


def test_async_client(sandbox) -> None:
    async def main() -> None:
        async with AsyncGPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
            offers = await cloud.instances.offers(deployment_type="vm", available=True)
            offer = offers[0]
            args = launch_args(offer)
            made = await asyncio.gather(*[
                cloud.instances.create(**(args | {"name": f"a{n}"})) for n in range(8)])  # type: ignore[arg-type]
            assert len({i.id for i in made}) == 8
            details = await cloud.instances.wait_until_active(made[0].id, timeout=30)
            assert details.status == "active"
            await cloud.instances.delete(made[0].id)
            volumes = await cloud.volumes.list()
            assert volumes == []
            frame = await cloud.instances.offers_frame(gpu_type="A100")
            assert len(frame) > 0

    asyncio.run(main())


def test_state_survives_a_restart(sandbox_factory, tmp_path) -> None:
    state = tmp_path / "cloud.db"
    first = sandbox_factory(state=str(state))
    with GPUCloud(api_key=first.api_key, base_url=first.management_url) as cloud:
        offer = first_offer(cloud)
        instance = cloud.instances.create(**launch_args(offer, "kept"))  # type: ignore[arg-type]
        volume_offer = cloud.volumes.offers()[0]
        volume = cloud.volumes.create(name="kept", cloud_provider=volume_offer.cloud_provider.id,
                                      region=volume_offer.regions[0],
                                      size_in_gb=volume_offer.min_size_in_gb)
    first.stop()
    second = sandbox_factory(state=str(state))
    with GPUCloud(api_key=second.api_key, base_url=second.management_url) as cloud:
        assert cloud.instances.get(instance.id).name == "kept"
        assert cloud.volumes.get(volume.id).name == "kept"


def test_repr_masks_the_key(sandbox) -> None:
    key = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWX"
    cloud = GPUCloud(api_key=key, base_url=sandbox.management_url)
    assert key not in repr(cloud) and "UVWX" in repr(cloud)
    assert cloud.key_hint == "sk-…UVWX"


def test_a_real_server_that_redirects_is_named_not_followed(sandbox) -> None:
    """A tiny HTTP server on 127.0.0.1 answering 301 towards the sandbox: nothing is done."""
    import http.server

    from gpucloud_nb.errors import RedirectError

    target = sandbox.management_url.rstrip("/")

    class Moved(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.send_response(301)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with GPUCloud(api_key=sandbox.api_key, base_url=base) as moved:
            for call in (moved.instances.list, moved.volumes.list,
                         lambda: moved.instances.delete("a" * 24)):
                with pytest.raises(RedirectError, match=f"base URL redirects to {target}; use that"):
                    call()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_each_client_opens_the_sandbox_inference_of_its_own_kind(box: GPUCloud) -> None:
    """The async client's ``sandbox_inference`` is a coroutine giving an async client."""
    from gpucloud_nb import AsyncInferenceClient, InferenceClient

    async def models_async() -> tuple[object, list[str]]:
        async with AsyncGPUCloud(api_key=box.sandbox.api_key, base_url=box.base_url) as cloud:
            cloud.sandbox = box.sandbox
            async with await cloud.sandbox_inference() as chat:
                return type(chat), await chat.models()

    with box.sandbox_inference() as chat:
        assert isinstance(chat, InferenceClient)
        models = chat.models()
    kind, async_models = asyncio.run(models_async())
    assert kind is AsyncInferenceClient and async_models == models and models


def test_only_the_sandbox_has_a_built_in_inference_endpoint(cloud: GPUCloud) -> None:
    async def ask() -> str:
        async with AsyncGPUCloud(api_key=cloud.key_hint, base_url=cloud.base_url) as acloud:
            with pytest.raises(InvalidInputError) as refused:
                await acloud.sandbox_inference()
            return str(refused.value)

    with pytest.raises(InvalidInputError) as refused:
        cloud.sandbox_inference()
    assert str(refused.value) == asyncio.run(ask())
    assert str(refused.value).startswith("Only the sandbox has a built-in inference endpoint;")
