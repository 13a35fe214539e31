"""Records parsed from the spec's JSON: every field where it belongs, drift tolerated.

These are pure functions of a JSON value, so they are tested on literal payloads; the sandbox
tests check the same records over HTTP.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest

from gpucloud_nb.models import (
    Instance,
    InstanceDetails,
    InstanceOffer,
    PortForward,
    Volume,
    VolumeOffer,
    parse_datetime,
)

# Every field a distinct value, so a field parsed into the wrong attribute cannot go unnoticed.
INSTANCE = {
    "_id": "inst-1", "name": "train-1", "provider": "Cirrus Cloud", "status": "active",
    "region": {"id": "eu-west-1", "name": "Europe (Ireland)", "countryCode": "IE"},
    "volumes": [{"_id": "vol-9"}], "gpuCount": 2, "gpuModel": "H100 80GB", "ram": 64,
    "storage": 500, "vramPerGpu": 80, "vcpus": 16, "interconnect": "SXM", "nvlink": True,
    "os": "ubuntu-22.04", "ip": "10.0.0.7", "sshUser": "ubuntu", "sshPort": 2222,
    "dockerImage": "pytorch/pytorch", "dockerCommand": "python app.py", "hourlyPrice": 4.98,
    "createdAt": "2026-11-22T10:00:00.000Z", "deletedAt": "2026-11-22T12:00:00.000Z",
    "updatedAt": "2026-11-22T11:00:00.000Z",
}
EXPECTED = {
    "id": "inst-1", "name": "train-1", "provider": "Cirrus Cloud", "status": "active",
    "region": INSTANCE["region"], "volumes": [{"_id": "vol-9"}], "gpu_count": 2,
    "gpu_model": "H100 80GB", "ram": 64.0, "storage": 500.0, "vram_per_gpu": 80.0, "vcpus": 16.0,
    "interconnect": "SXM", "nvlink": True, "os": "ubuntu-22.04", "ip": "10.0.0.7",
    "ssh_user": "ubuntu", "ssh_port": 2222, "docker_image": "pytorch/pytorch",
    "docker_command": "python app.py", "hourly_price": 4.98,
    "created_at": datetime(2026, 11, 22, 10, tzinfo=timezone.utc),
    "deleted_at": datetime(2026, 11, 22, 12, tzinfo=timezone.utc),
}


def test_every_instance_field_lands_in_its_attribute() -> None:
    instance = Instance.from_json(INSTANCE)
    assert {name: getattr(instance, name) for name in EXPECTED} == EXPECTED
    assert instance.updated_at == datetime(2026, 11, 22, 11, tzinfo=timezone.utc)
    assert instance.region_id == "eu-west-1"


def test_every_instance_details_field_lands_in_its_attribute() -> None:
    payload = {**INSTANCE, "isPending": False, "sshKey": {"_id": "key-3", "name": "laptop"},
               "portForwards": ["8888:8888", 22]}
    details = InstanceDetails.from_json(payload)
    assert {name: getattr(details, name) for name in EXPECTED} == EXPECTED
    assert details.is_pending is False and details.ssh_key == {"_id": "key-3", "name": "laptop"}
    assert details.updated_at == datetime(2026, 11, 22, 11, tzinfo=timezone.utc)
    assert details.port_forwards == (PortForward(8888, 8888), PortForward(22, None))


def test_port_forwards_as_objects_become_typed_pairs() -> None:
    details = InstanceDetails.from_json({**INSTANCE, "portForwards": [
        {"internalPort": 8000, "externalPort": 32768}, "22:2201", {"internalPort": "8888"},
        "weird"]})
    forwards = details.port_forwards
    assert forwards[0] == PortForward(internal_port=8000, external_port=32768)
    assert forwards[1] == PortForward(22, 2201)
    assert [str(f) for f in forwards] == ["8000:32768", "22:2201", "8888:?", "weird"]
    assert not any("internalPort" in str(f) or "{" in str(f) for f in forwards)


def test_instances_tolerate_drift_missing_fields_and_extra_fields() -> None:
    drifted = {"_id": 7, "status": "pending", "gpuCount": "4", "hourlyPrice": "1.25",
               "nvlink": "true", "sshPort": None, "ram": "n/a", "region": "us-east-1",
               "deletedAt": "1970-01-01T00:00:00.000Z", "createdAt": "not a date",
               "somethingNew": {"nested": [1, 2]}}
    instance = Instance.from_json(drifted)
    assert (instance.id, instance.gpu_count, instance.hourly_price, instance.nvlink) == ("7", 4, 1.25, True)
    assert instance.ssh_port == 0 and math.isnan(instance.ram) and instance.name == ""
    assert instance.region_id == "us-east-1" and instance.volumes == []
    assert instance.deleted_at is None and instance.created_at is None
    assert not hasattr(instance, "something_new") and not hasattr(instance, "raw")  # skipped
    assert Instance.from_json(None).id == ""  # not even an object: an empty record, no crash


def test_no_record_offers_an_ssh_command_that_fails_as_printed_and_what_a_delete_keeps() -> None:
    """A bare ``ssh -p PORT user@ip`` fails without the client's key and host key: the records
    hold the address (``ip``, ``ssh_port``, ``ssh_user``); ``cloud.instances.ssh_command(id)`` is
    the command."""
    instance = Instance.from_json(INSTANCE)
    assert (instance.ssh_user, instance.ip, instance.ssh_port) == ("ubuntu", "10.0.0.7", 2222)
    for record in (Instance, InstanceDetails):
        assert not hasattr(record, "ssh_command"), f"{record.__name__}.ssh_command is a trap"
    volume = Volume.from_json({"_id": "vol-9", "name": "results"})
    other = Volume.from_json({"_id": "vol-1", "name": "scratch"})
    assert instance.data_fate([volume, other]) == "volume results (vol-9) keeps its data"
    assert instance.data_fate() == "volume vol-9 keeps its data"
    assert Instance.from_json({**INSTANCE, "volumes": []}).data_fate([volume]) == (
        "it has no volume, so its data is lost")


def test_reprs_are_short_and_name_the_record() -> None:
    text = repr(Instance.from_json(INSTANCE))
    assert text.startswith("Instance(id='inst-1', name='train-1', status='active'")
    assert "raw" not in text and len(text) < 200


def test_offer_and_volume_offer_parse_the_documented_drift() -> None:
    offer = InstanceOffer.from_json({
        "gpuName": "L4 24GB", "gpuCount": 1, "nvlink": False, "deploymentType": "vm",
        "instanceId": "l4-1", "cloudInitAvailable": True,
        "cloud": {"_id": "cirrus", "name": "Cirrus Cloud"},
        "configuration": {"ramGB": 32, "storageGB": 150, "vCpu": 8, "vRamGB": 24,
                          "os": ["ubuntu-22.04"], "interconnect": "PCIe"},
        "hourlyPrice": 0.45,
        "availability": [{"region": "eu-west-1", "name": "Ireland", "countryCode": "IE",
                          "available": True},
                         {"region": "us-east-1", "name": "Virginia", "countryCode": "US",
                          "available": False}],
        "extra": 1})
    assert offer.available_regions == ("eu-west-1",) and offer.is_available
    assert offer.cloud.id == "cirrus" and offer.configuration.os == ("ubuntu-22.04",)
    volume_offer = VolumeOffer.from_json({"cloudProvider": {"_id": "cirrus", "displayName": "Cirrus"},
                                          "minSizeInGb": 10, "pricePerGbPerHour": "0.00014",
                                          "regions": ["eu-west-1"]})
    assert volume_offer.price_per_gb_per_hour == pytest.approx(0.00014)
    assert volume_offer.price_per_gb_per_hour_text == "0.00014"


def test_offers_are_frozen() -> None:
    offer = InstanceOffer.from_json({"instanceId": "x"})
    with pytest.raises(AttributeError):
        offer.hourly_price = 0.0  # type: ignore[misc]


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-22T11:42:10.123Z", datetime(2026, 11, 22, 11, 42, 10, 123000, tzinfo=timezone.utc)),
    ("2026-11-22T11:42:10", datetime(2026, 11, 22, 11, 42, 10, tzinfo=timezone.utc)),
    ("1970-01-01T00:00:00.000Z", None),
    ("", None), (None, None), (0, None), ("yesterday", None),
])
def test_parse_datetime(text: object, expected: datetime | None) -> None:
    assert parse_datetime(text) == expected
