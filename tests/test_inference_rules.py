"""The create rules of an inference instance, shared by client and sandbox."""

from __future__ import annotations

from typing import Any

import pytest

from gpucloud_nb.inference_rules import create_problem, merged
from gpucloud_nb.models import InferenceHardware, InferenceModel, InferenceRegion

MODELS = [InferenceModel(id="m1", port=8000, default_hardware_id="h1")]
HARDWARES = [InferenceHardware(id="h1", name="A100"), InferenceHardware(id="h2", name="H100")]
REGIONS = [InferenceRegion.from_json({"id": "eu-1", "capacities": [
               {"hardwareId": "h1", "capacity": 2}, {"hardwareId": "h2", "capacity": 0}]}),
           InferenceRegion.from_json({"id": "us-1", "capacities": [
               {"hardwareId": "h1", "capacity": 1}]})]


def body(**changes: Any) -> dict[str, Any]:
    scale = {"min": 0, "max": 2, "cooldownPeriod": 60, "triggers": {"http": 10}}
    scale.update(changes.pop("scale", {}))
    return {"name": "chat", "modelId": "m1", "hardwareName": "A100",
            "autoScalingConfigurations": [{"regionId": "eu-1", "scale": scale}], **changes}


def problem(data: dict[str, Any]) -> str | None:
    return create_problem(data, models=MODELS, hardwares=HARDWARES, regions=REGIONS)


def test_a_good_body_passes() -> None:
    assert problem(body()) is None
    assert problem(body(envs={"A": "1"}, containerPort=8000)) is None


@pytest.mark.parametrize(("changes", "words"), [
    ({"name": ""}, "name must be 1 to 255"),
    ({"modelId": "nope"}, "Unknown model 'nope': the catalogue has 'm1'."),
    ({"hardwareName": "TPU"}, "Unknown hardware 'TPU'"),
    ({"scale": {"min": 3, "max": 2}}, "scale.min (3) is more than scale.max (2)."),
    ({"scale": {"max": 0}}, "scale.max must be a whole number, one or more."),
    ({"scale": {"min": 0.5}}, "scale.min must be a whole number"),
    ({"scale": {"triggers": {"cpu": 80}}}, "min may be 0 only with an http trigger"),
    ({"scale": {"triggers": {"disk": 1, "http": 1}}}, "no trigger 'disk'"),
    ({"scale": {"cooldownPeriod": -1}}, "cooldownPeriod must be a number of seconds"),
    ({"hardwareName": "H100"}, "Region 'eu-1' has no capacity for H100 (0 containers)"),
    ({"scale": {"min": 3, "max": 3}}, "has no capacity for A100 (2 containers, min is 3)"),
    ({"envs": {"A": 1}}, "envs must map names to strings."),
    ({"autoScalingConfigurations": []}, "must list at least one region"),
    ({"autoScalingConfigurations": [{"regionId": "mars", "scale": {"min": 1, "max": 1}}]},
     "Unknown region 'mars'"),
])
def test_each_bad_body_is_one_sentence(changes: dict[str, Any], words: str) -> None:
    found = problem(body(**changes))
    assert found is not None and words in found
    assert found.endswith(".") and "\n" not in found


def test_min_zero_with_an_http_trigger_and_min_one_without_pass() -> None:
    assert problem(body(scale={"min": 1, "triggers": {"cpu": 80}})) is None
    assert problem(body(scale={"min": 0, "triggers": {"http": 1}})) is None


def test_a_region_given_twice_is_refused() -> None:
    item = {"regionId": "eu-1", "scale": {"min": 1, "max": 1}}
    assert "given twice" in (problem(body(autoScalingConfigurations=[item, item])) or "")


def test_a_patch_replaces_top_level_fields_whole() -> None:
    assert merged(body(envs={"A": "1"}), {"envs": {"B": "2"}})["envs"] == {"B": "2"}
