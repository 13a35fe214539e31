"""The inference-instance and SSH-key records, read from the appendix's shapes and from drift."""

from __future__ import annotations

import math

from gpucloud_nb.models import (
    INFERENCE_STATUSES,
    InferenceHardware,
    InferenceInstance,
    InferenceInstanceDetails,
    InferenceModel,
    InferenceRegion,
    SSHKey,
)

DETAILS = {
    "_id": "ii-1", "name": "chat", "status": "PARTIALLYDEPLOYED", "hourlyPrice": 1.25,
    "features": ["chat", "image"], "address": "https://ii-1-abc.inference.example/",
    "containers": [
        {"regionId": "eu-1", "scale": {"min": 0, "max": 2, "cooldownPeriod": 300,
                                       "triggers": {"http": 10}},
         "deployStatus": {"total": 1, "ready": 1}, "errorMessage": ""},
        {"regionId": "us-1", "scale": {"min": 1, "max": 3, "cooldownPeriod": 60,
                                       "triggers": {"cpu": 80, "http": 5}},
         "deployStatus": {"total": 1, "ready": 0}, "errorMessage": None},
    ],
    "podLifetime": 3600, "hardwareName": "A100 80GB", "envs": {"MAX_TOKENS": "512"},
    "somethingNew": {"x": 1},
}


def test_details_read_every_field_of_the_appendix() -> None:
    details = InferenceInstanceDetails.from_json(DETAILS)
    assert (details.id, details.name, details.status) == ("ii-1", "chat", "PARTIALLYDEPLOYED")
    assert details.hourly_price == 1.25 and details.feature_names == ("chat", "image")
    assert (details.ready, details.total, details.max_containers) == (1, 2, 5)
    first, second = details.containers
    assert first.scale.cooldown_period == 300 and first.scale.triggers.http == 10
    assert second.scale.triggers.cpu == 80 and second.scale.triggers.gpu_memory is None
    assert second.error_message == "" and details.hardware_name == "A100 80GB"
    assert details.envs == {"MAX_TOKENS": "512"} and not details.scaled_to_zero


def test_an_active_instance_with_no_container_ready_has_scaled_to_zero() -> None:
    details = InferenceInstanceDetails.from_json(
        {**DETAILS, "status": "ACTIVE", "containers": [
            {"regionId": "eu-1", "deployStatus": {"total": 0, "ready": 0}}]})
    assert details.is_active and details.scaled_to_zero


def test_drifted_values_are_read_loosely() -> None:
    listed = InferenceInstance.from_json({"_id": 7, "hourlyPrice": "n/a", "features": {"chat": True,
                                                                                     "image": False}})
    assert listed.id == "7" and math.isnan(listed.hourly_price)
    assert listed.feature_names == ("chat",)
    hardware = InferenceHardware.from_json({"id": "h", "gpu": {"model": "H100", "count": "2",
                                                               "memory": "80"},
                                            "pricePerHour": "3.5"})
    assert hardware.gpu.count == 2 and hardware.gpu.memory == 80 and hardware.price == 3.5
    assert math.isnan(InferenceHardware.from_json({"id": "h"}).price)


def test_a_region_sums_its_capacity_for_one_hardware() -> None:
    region = InferenceRegion.from_json({"id": "eu-1", "countryCode": "DE", "capacities": [
        {"hardwareId": "a", "capacity": 2}, {"hardwareId": "b", "capacity": 0}]})
    assert region.capacity_for("a") == 2 and region.capacity_for("b") == 0
    assert region.capacity_for("c") == 0 and region.country_code == "DE"


def test_a_model_reads_its_default_hardware_and_port() -> None:
    model = InferenceModel.from_json({"id": "m", "name": "M", "port": "8000",
                                      "defaultHardwareId": "a", "features": "chat"})
    assert (model.port, model.default_hardware_id, model.feature_names) == (8000, "a", ("chat",))


def test_an_ssh_key_matches_its_key_whatever_the_comment() -> None:
    key = SSHKey.from_json({"_id": "k1", "name": "laptop", "publicKey": "ssh-ed25519 AAAAC3 me@a",
                            "isDefault": "true", "createdAt": "2026-01-01T00:00:00Z"})
    assert key.is_default and key.created_at is not None and key.created_at.tzinfo is not None
    assert key.matches("ssh-ed25519 AAAAC3 other@b")
    assert not key.matches("ssh-ed25519 BBBB me@a") and not key.matches("")
    assert "AAAAC3" not in repr(key)  # a repr is short: the type, not the key


def test_the_statuses_are_the_appendixs() -> None:
    assert INFERENCE_STATUSES == ("NEW", "DEPLOYING", "PARTIALLYDEPLOYED", "ACTIVE", "PENDING",
                                  "DISABLED", "ERROR", "FAILED", "DELETING", "DELETED")
