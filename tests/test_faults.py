"""The client against a faulty cloud: the sandbox's fault mode, over real HTTP.

:mod:`gpucloud_nb.sandbox.faults` makes every Nth request a 500 or a 429 with ``Retry-After``,
slows requests by 200 ms, drops the TCP connection of a create after the resource was made, and
adds unknown fields to every JSON object. Reads must succeed through all of that, a dropped create
must leave exactly one resource, retries that run out must say what the last status was, and
records and frames must ignore what they do not know.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from helpers import vm_offer

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client._ops import RetryPolicy
from gpucloud_nb.errors import GPUCloudError, RateLimitError, ServerError
from gpucloud_nb.frames import (
    INSTANCE_COLUMNS,
    OFFER_COLUMNS,
    VOLUME_COLUMNS,
    instances_frame,
    offers_frame,
    volumes_frame,
)
from gpucloud_nb.models import INSTANCE_STATUSES, InstanceOffer
from gpucloud_nb.sandbox import Sandbox, SandboxConfig
from gpucloud_nb.sandbox.cli import main as cli_main
from gpucloud_nb.sandbox.faults import (
    EXTRA_FIELDS,
    ConnectionDropped,
    FaultInjector,
    Faults,
    FaultStats,
)

EXTRA = next(iter(EXTRA_FIELDS))


class RecordingPolicy:
    """A quick retry policy that remembers every ``Retry-After`` the client was told."""

    def __init__(self, max_retries: int = 6) -> None:
        self.max_retries = max_retries
        self.retry_afters: list[float | None] = []
        self._policy = RetryPolicy(max_retries=max_retries, backoff=0.005, max_backoff=0.02)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        self.retry_afters.append(retry_after)
        return self._policy.delay(attempt, retry_after)


def stats(sandbox: Sandbox) -> FaultStats:
    app = sandbox.app
    assert isinstance(app, FaultInjector)
    return app.stats


@pytest.fixture
def client_for() -> Iterator[Callable[..., GPUCloud]]:
    opened: list[GPUCloud] = []

    def make(sandbox: Sandbox, max_retries: int = 6) -> GPUCloud:
        cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url, timeout=10)
        cloud._core.policy = RecordingPolicy(max_retries)  # type: ignore[assignment]
        opened.append(cloud)
        return cloud

    yield make
    for cloud in opened:
        cloud.close()


def create_args(offer: InstanceOffer, name: str) -> dict[str, Any]:
    return {"name": name, "cloud_provider": offer.cloud.id, "instance_id": offer.instance_id,
            "region": offer.available_regions[0], "vm": {"os": offer.configuration.os[0]}}


def raw_client(sandbox: Sandbox) -> httpx.Client:
    return httpx.Client(base_url=sandbox.management_url, headers={"x-api-key": sandbox.api_key},
                        timeout=10)


def raw_list(sandbox: Sandbox, path: str) -> list[dict[str, Any]]:
    """``GET path`` without the client, asking again past injected 500s and 429s."""
    with raw_client(sandbox) as http:
        for _ in range(20):
            response = http.get(path)
            if response.status_code == 200:
                return response.json()  # type: ignore[no-any-return]
            assert response.status_code in (429, 500), response.text
    raise AssertionError(f"{path} kept failing")


# the fault settings --------------------------------------------------------------------------


def test_faults_parse_print_and_validate() -> None:
    faults = Faults.parse("error_every=3, rate-limit-every=4,retry_after=0.5,slow_every=2,extra_fields")
    assert faults == Faults(error_every=3, rate_limit_every=4, retry_after=0.5, slow_every=2,
                            extra_fields=True)
    assert Faults.parse(str(faults)) == faults
    assert faults.active and not Faults().active
    assert Faults.parse("extra_fields=false") == Faults()
    for bad in ("nope=1", "error_every=x", "error_every=-1", "slow_seconds=-2"):
        with pytest.raises(ValueError):
            Faults.parse(bad)
    assert "faults='error_every=3" in repr(SandboxConfig(faults=faults))


def test_cli_passes_faults_on_and_refuses_bad_ones(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[SandboxConfig] = []
    monkeypatch.setattr("gpucloud_nb.sandbox.server.serve", lambda config, ready: served.append(config))
    assert cli_main(["sandbox", "--port", "0", "--faults", "error_every=2,extra_fields"]) == 0
    assert served[0].faults == Faults(error_every=2, extra_fields=True)
    assert cli_main(["sandbox", "--port", "0", "--faults", "explode_every=2"]) == 2
    assert "--faults" in capsys.readouterr().err
    assert len(served) == 1


def test_without_uvicorn_a_dropped_create_still_cuts_the_answer_short() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:  # a plain function: no transport to close
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    injector = FaultInjector(app, Faults(drop_create_every=1))
    scope = {"type": "http", "method": "POST", "path": "/gpu-cloud/instances"}
    with pytest.raises(ConnectionDropped):
        asyncio.run(injector(scope, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start"]  # started, never finished
    assert injector.stats.dropped == 1


# reads through errors, 429s and slowness ------------------------------------------------------


def test_reads_succeed_through_500s_429s_and_slow_answers(sandbox_factory, client_for) -> None:
    faults = Faults(error_every=3, rate_limit_every=4, retry_after=0.05, slow_every=5,
                    slow_seconds=0.2)
    box = sandbox_factory(faults=faults)
    cloud = client_for(box)
    offer = vm_offer(cloud)
    made = cloud.instances.create(**create_args(offer, "through-faults"))
    volume_offer = cloud.volumes.offers()[0]
    for _ in range(4):
        assert [i.id for i in cloud.instances.list()] == [made.id]
        assert cloud.instances.get(made.id).name == "through-faults"
        assert cloud.instances.offers(gpu_type=offer.gpu_name)
        assert cloud.volumes.list() == []
        assert cloud.volumes.offers()[0] == volume_offer
    cloud.instances.delete(made.id)
    assert cloud.instances.get(made.id).status in ("deleting", "deleted")

    seen = stats(box)
    assert seen.errors >= 3 and seen.rate_limited >= 3 and seen.slowed >= 3
    policy = cloud._core.policy
    assert isinstance(policy, RecordingPolicy)
    assert 0.05 in policy.retry_afters  # Retry-After was read and honoured
    assert len(cloud.instances.list()) == 1  # the retried create did not launch a second one


# a create whose connection drops after the sandbox made it ------------------------------------


def test_a_dropped_create_is_a_dropped_connection_not_a_500(sandbox_factory, client_for) -> None:
    box = sandbox_factory(faults=Faults(drop_create_every=1))
    offer = vm_offer(client_for(box))
    body = {"name": "dropped", "cloudProvider": offer.cloud.id, "instanceId": offer.instance_id,
            "region": offer.available_regions[0], "vm": {"os": offer.configuration.os[0]}}
    with raw_client(box) as http:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            http.post("/gpu-cloud/instances", json=body)
        listed = http.get("/gpu-cloud/instances").json()
        assert [i["name"] for i in listed] == ["dropped"]  # made, though never acknowledged
        refused = http.post("/gpu-cloud/instances", json={**body, "region": "nowhere"})
        assert refused.status_code == 400  # what the sandbox refuses is answered, not dropped
    assert stats(box).dropped == 1


def test_a_dropped_create_leaves_exactly_one_instance(sandbox_factory, client_for) -> None:
    box = sandbox_factory(faults=Faults(drop_create_every=1, error_every=7, rate_limit_every=5,
                                        retry_after=0.01))
    cloud = client_for(box)
    offer = vm_offer(cloud)
    instance = cloud.instances.create(**create_args(offer, "adopt-me"))
    volume_offer = cloud.volumes.offers()[0]
    volume = cloud.volumes.create(name="adopt-vol", cloud_provider=volume_offer.cloud_provider.id,
                                  region=volume_offer.regions[0],
                                  size_in_gb=volume_offer.min_size_in_gb)
    assert stats(box).dropped == 2

    instances = raw_list(box, "/gpu-cloud/instances")
    volumes = raw_list(box, "/gpu-cloud/volumes")
    assert [(i["_id"], i["name"]) for i in instances] == [(instance.id, "adopt-me")]
    assert [(v["_id"], v["name"]) for v in volumes] == [(volume.id, "adopt-vol")]
    assert cloud.created_instance_ids == (instance.id,)


def test_concurrent_dropped_creates_each_leave_one_instance(sandbox_factory, client_for) -> None:
    box = sandbox_factory(faults=Faults(drop_create_every=2, error_every=9))
    offer = vm_offer(client_for(box))
    names = [f"async-{i}" for i in range(8)]

    async def launch() -> list[str]:
        async with AsyncGPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
            cloud._core.policy = RecordingPolicy()  # type: ignore[assignment]
            made = await asyncio.gather(*(cloud.instances.create(**create_args(offer, name))
                                          for name in names))
            return [i.id for i in made]

    ids = asyncio.run(launch())
    listed = raw_list(box, "/gpu-cloud/instances")
    assert sorted(i["name"] for i in listed) == sorted(names)
    assert sorted(i["_id"] for i in listed) == sorted(ids)
    assert stats(box).dropped >= 2


# retries that run out -------------------------------------------------------------------------


def test_retries_that_run_out_name_the_last_status(sandbox_factory, client_for) -> None:
    failing = client_for(sandbox_factory(faults=Faults(error_every=1)), max_retries=2)
    with pytest.raises(ServerError) as error:
        failing.instances.list()
    assert error.value.status_code == 500
    assert "500" in str(error.value) and "3 attempts" in str(error.value)

    limited = client_for(sandbox_factory(faults=Faults(rate_limit_every=1, retry_after=0.01)),
                         max_retries=2)
    with pytest.raises(RateLimitError) as error:
        limited.volumes.list()
    assert error.value.status_code == 429
    assert "429" in str(error.value) and "3 attempts" in str(error.value)


def test_a_create_that_keeps_failing_raises_and_names_the_status(sandbox_factory, client_for) -> None:
    box = sandbox_factory()
    offer = vm_offer(client_for(box))
    failing = client_for(sandbox_factory(faults=Faults(error_every=1)), max_retries=1)
    # the offers as if already read: the create is the first request to the failing server
    failing._core._catalogues["/gpu-cloud/instances/offers"] = (float("inf"), [offer])
    with pytest.raises(GPUCloudError) as error:
        failing.instances.create(**create_args(offer, "never"))
    assert "500" in str(error.value)


# unknown fields everywhere --------------------------------------------------------------------


def test_unknown_fields_at_every_level_are_ignored(sandbox_factory, client_for) -> None:
    plain = client_for(sandbox_factory())
    extra_box = sandbox_factory(faults=Faults(extra_fields=True))
    extra = client_for(extra_box)

    with raw_client(extra_box) as http:
        raw_offer = http.get("/gpu-cloud/instances/offers").json()[0]
    assert EXTRA in raw_offer and EXTRA in raw_offer["cloud"]
    assert EXTRA in raw_offer["configuration"] and EXTRA in raw_offer["availability"][0]

    # offers: records and frames equal to those of a sandbox without extra fields
    assert extra.instances.offers() == plain.instances.offers()
    assert extra.volumes.offers() == plain.volumes.offers()
    frame = extra.instances.offers_frame()
    assert tuple(frame.columns) == OFFER_COLUMNS
    assert frame.equals(plain.instances.offers_frame())
    assert offers_frame(extra.instances.offers()).equals(frame)

    # instances and volumes: every documented field still parses
    offer = vm_offer(extra)
    made = extra.instances.create(**create_args(offer, "extra-fields"))
    assert made.name == "extra-fields" and made.status in INSTANCE_STATUSES
    assert made.hourly_price == offer.hourly_price and not hasattr(made, "raw")
    listed = extra.instances.list()
    assert [i.id for i in listed] == [made.id]
    details = extra.instances.get(made.id)
    assert details.name == "extra-fields" and details.gpu_count == offer.gpu_count
    assert details.created_at is not None
    assert tuple(instances_frame(listed).columns) == INSTANCE_COLUMNS
    assert instances_frame(listed)["name"].tolist() == ["extra-fields"]
    with raw_client(extra_box) as http:
        listed_json = http.get("/gpu-cloud/instances").json()
    assert EXTRA in listed_json[0]
    assert instances_frame(listed_json)["hourlyPrice"].tolist() == [offer.hourly_price]

    volume_offer = extra.volumes.offers()[0]
    volume = extra.volumes.create(name="extra-vol", cloud_provider=volume_offer.cloud_provider.id,
                                  region=volume_offer.regions[0],
                                  size_in_gb=volume_offer.min_size_in_gb)
    assert extra.volumes.get(volume.id).size_in_gb == volume_offer.min_size_in_gb
    vframe = volumes_frame(extra.volumes.list())
    assert tuple(vframe.columns) == VOLUME_COLUMNS
    assert vframe["providerId"].tolist() == [volume_offer.cloud_provider.id]
    assert extra.instances.wait_until_active(made.id, timeout=20, poll_interval=0.05).status == "active"
