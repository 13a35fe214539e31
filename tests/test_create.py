"""client/create.py and ``cloud.instances.check_create``: the reasons a launch would be refused,
found without sending, over real HTTP against the sandbox."""

from __future__ import annotations

import base64

import pytest

from gpucloud_nb import GPUCloud, InvalidInputError
from gpucloud_nb.client.create import create_request, launch_problems
from gpucloud_nb.models import CreateInstance, InstanceOffer, VirtualMachine
from gpucloud_nb.sandbox.server import Sandbox


def a_vm_offer(cloud: GPUCloud) -> InstanceOffer:
    return next(o for o in cloud.instances.offers(available=True, sort="price")
                if o.deployment_type == "vm" and o.available_regions and o.configuration.os)


def arguments(offer: InstanceOffer, **changes: object) -> dict[str, object]:
    return {"name": "train-1", "cloud_provider": offer.cloud.id, "instance_id": offer.instance_id,
            "region": offer.available_regions[0], "vm": offer.configuration.os[0], **changes}


def test_a_launch_the_cloud_accepts_has_no_reasons_and_sends_nothing(cloud: GPUCloud,
                                                                      observer: GPUCloud) -> None:
    offer = a_vm_offer(cloud)
    assert cloud.instances.check_create(**arguments(offer)) == []
    assert observer.instances.list() == []  # checking created nothing


def test_a_wrong_region_is_one_sentence_and_create_refuses_with_it(cloud: GPUCloud,
                                                                   observer: GPUCloud) -> None:
    offer = a_vm_offer(cloud)
    reasons = cloud.instances.check_create(**arguments(offer, region="mars-1"))
    assert len(reasons) == 1 and "mars-1" in reasons[0] and "\n" not in reasons[0]
    with pytest.raises(InvalidInputError) as refused:
        cloud.instances.create(**arguments(offer, region="mars-1"))
    assert str(refused.value) == reasons[0]
    assert observer.instances.list() == []


def test_the_cost_cap_is_a_reason(sandbox: Sandbox, observer: GPUCloud) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_hourly_cost=0.0001) as capped:
        offer = a_vm_offer(capped)
        reasons = capped.instances.check_create(**arguments(offer))
    assert any("max_hourly_cost" in reason for reason in reasons), reasons
    assert observer.instances.list() == []


def test_the_body_is_built_in_one_place() -> None:
    body = create_request(name="a", cloud_provider="p1", instance_id="x", region="r",
                         vm={"os": "ubuntu-22.04", "cloud_init": "#cloud-config\n"},
                         ssh_key="ssh-ed25519 AAAA me", delete_after=60).body()
    assert "delete_after" not in body and "deleteAfter" not in body
    assert body["sshKey"] == "ssh-ed25519 AAAA me" and "volumeId" not in body
    assert base64.b64decode(body["vm"]["base64CloudInitScript"]) == b"#cloud-config\n"
    with pytest.raises(InvalidInputError, match="once"):
        create_request(name="a", cloud_provider="p1", instance_id="x", region="r",
                       vm={"os": "u", "cloud_init": "#x", "base64CloudInitScript": "I3g="})
    container = create_request(name="a", cloud_provider="p1", instance_id="x", region="r",
                               docker_container="vllm/vllm-openai:latest").body()
    assert container["dockerContainer"] == {"image": "vllm/vllm-openai:latest"}


def test_a_vm_of_the_wrong_shape_is_one_sentence() -> None:
    with pytest.raises(InvalidInputError):
        create_request(name="a", cloud_provider="p1", instance_id="x", region="r", vm=42)  # type: ignore[arg-type]
    late = create_request(name="a", cloud_provider="p1", instance_id="x", region="r", vm="u",
                          delete_after=-5)  # a value is checked where every check is
    assert launch_problems(late, [], cap=None, running=[]) == [
        "delete_after must be a positive number of seconds or a timedelta, not -5."]


BAD_OPTIONS = [
    ({"delete_when_idle": -5}, "delete_when_idle must be a positive number of seconds or a "
                               "timedelta, not -5."),
    ({"delete_when_idle": float("inf")}, "delete_when_idle must be a positive number of "
                                         "seconds or a timedelta, not inf."),
    ({"delete_when_idle": "30"}, "delete_when_idle must be a positive number of seconds or a "
                                 "timedelta, not '30'."),
    ({"delete_after": float("inf")}, "delete_after must be a positive number of seconds or a "
                                     "timedelta, not inf."),
    ({"delete_after": 0}, "delete_after must be a positive number of seconds or a timedelta, "
                          "not 0."),
    ({"budget": -1.0}, "budget must be a positive number of dollars, not -1.0."),
    ({"volume_id": ""}, "volume_id must be the _id of a volume, not ''."),
    ({"vm": VirtualMachine(os="windows-95")}, "has no OS image 'windows-95'"),
]


@pytest.mark.parametrize(("option", "sentence"), BAD_OPTIONS,
                         ids=[next(iter(o)) + "=" + repr(next(iter(o.values()))) for o, _ in BAD_OPTIONS])
def test_create_from_checks_every_option_before_the_post(
        cloud: GPUCloud, observer: GPUCloud, option: dict[str, object], sentence: str) -> None:
    """#35: a bad option used to launch a billed instance and only then raise."""
    offer = a_vm_offer(cloud)
    fields: dict[str, object] = {
        "name": "checked", "cloud_provider": offer.cloud.id, "instance_id": offer.instance_id,
        "region": offer.available_regions[0], "vm": VirtualMachine(os=offer.configuration.os[0]),
        **option}
    with pytest.raises(InvalidInputError) as refused:
        cloud.instances.create_from(CreateInstance(**fields))  # type: ignore[arg-type]
    assert sentence in str(refused.value) and "\n" not in str(refused.value)
    assert observer.instances.list() == []  # nothing was sent, nothing bills
    assert cloud.auto_delete.deadlines() == {}


def test_create_from_sends_the_record_and_acts_on_its_client_options(
        through_gateway: GPUCloud) -> None:
    cloud = observer = through_gateway  # a gateway keeps delete_after
    offer = a_vm_offer(cloud)
    request = CreateInstance(name="from-record", cloud_provider=offer.cloud.id,
                             instance_id=offer.instance_id, region=offer.available_regions[0],
                             vm=VirtualMachine(os=offer.configuration.os[0]), delete_after=3600.0)
    instance = cloud.instances.create_from(request)
    assert [(i.id, i.name) for i in observer.instances.list()] == [(instance.id, "from-record")]
    assert instance.id in cloud.auto_delete.deadlines()  # delete_after acted on, not sent


def test_create_from_refuses_what_is_not_a_record_and_a_provider_name(
        cloud: GPUCloud, observer: GPUCloud) -> None:
    with pytest.raises(InvalidInputError, match="takes a CreateInstance, not dict"):
        cloud.instances.create_from({"name": "x"})  # type: ignore[arg-type]
    offer = a_vm_offer(cloud)
    by_name = cloud.instances.check_create(**arguments(offer, cloud_provider=offer.cloud.name))
    assert by_name == [f"cloudProvider is the provider's _id: '{offer.cloud.id}', "
                       f"not its name '{offer.cloud.name}'."]
    assert observer.instances.list() == []
