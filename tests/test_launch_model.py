"""launch_model.py: the launch form's choice and its problems, as plain functions of records."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gpucloud_nb import GPUCloud, InvalidInputError, connect
from gpucloud_nb.launch_model import (
    DEFAULT_EXPECTED_LAUNCH_SECONDS,
    LaunchChoice,
    expected_launch_seconds,
    script_text,
    volume_problem,
)
from gpucloud_nb.models import InstanceOffer
from gpucloud_nb.rules import find_offer


@pytest.fixture
def cloud(shared_cloud: GPUCloud) -> GPUCloud:
    """These tests read the catalogue only: a client of the run's shared sandbox serves them."""
    return shared_cloud


def offers_of(cloud: GPUCloud, kind: str) -> list[InstanceOffer]:
    return [o for o in cloud.instances.offers(available=True, sort="price")
            if o.deployment_type == kind and o.available_regions]


def test_a_vm_choice_walks_through_its_problems_to_the_body(through_gateway: GPUCloud) -> None:
    cloud = through_gateway  # a timer is kept by a gateway (#36): connect()'s path
    offer = offers_of(cloud, "vm")[0]
    region, os = offer.available_regions[0], offer.configuration.os[0]
    steps = [
        (LaunchChoice(offer=None), "Choose an offer to launch."),
        (LaunchChoice(offer=offer), "Give the instance a name."),
        (LaunchChoice(offer=offer, name="t"), "Choose a region."),
        (LaunchChoice(offer=offer, name="t", region=region), "Choose an OS image"),
    ]
    for choice, problem in steps:
        found = choice.problem(volumes=[], cap=None, running=[])
        assert found is not None and found.startswith(problem), found
    ready = LaunchChoice(offer=offer, name=" t ", region=region, os=os, cloud_init="#cloud-config")
    assert ready.problem(volumes=[], cap=None, running=[]) is None
    request = ready.request(delete_after=600)
    body = request.body()
    assert (body["name"], body["cloudProvider"], body["instanceId"], body["region"]) == (
        "t", offer.cloud.id, offer.instance_id, region)
    assert base64.b64decode(body["vm"]["base64CloudInitScript"]) == b"#cloud-config"
    assert request.delete_after == 600 and "delete_after" not in str(body)
    instance = cloud.instances.create_from(request)  # the record the form checked is what is sent
    assert cloud.instances.get(instance.id).name == "t"


def test_an_unknown_volume_and_the_cap_are_refused(cloud: GPUCloud) -> None:
    offer = offers_of(cloud, "vm")[0]
    choice = LaunchChoice(offer=offer, name="t", region=offer.available_regions[0],
                          os=offer.configuration.os[0], volume_id="vol-nowhere")
    assert "vol-nowhere" in (choice.problem(volumes=[], cap=None, running=[]) or "")
    capped = LaunchChoice(offer=offer, name="t", region=offer.available_regions[0],
                          os=offer.configuration.os[0])
    assert "max_hourly_cost" in (capped.problem(volumes=[], cap=0.0001, running=[]) or "")


def test_a_container_needs_an_image_and_takes_no_script(cloud: GPUCloud) -> None:
    offer = offers_of(cloud, "container")[0]
    region = offer.available_regions[0]
    assert "container image" in (LaunchChoice(offer=offer, name="c", region=region)
                                 .problem(volumes=[], cap=None, running=[]) or "")
    scripted = LaunchChoice(offer=offer, name="c", region=region, image="vllm/vllm-openai",
                            cloud_init="#!/bin/sh")
    assert "no cloud-init" in (scripted.problem(volumes=[], cap=None, running=[]) or "")


def test_volume_problem_names_the_minimum(cloud: GPUCloud) -> None:
    volume_offers = cloud.volumes.offers()
    offer = next(o for o in offers_of(cloud, "vm")
                 if any(v.cloud_provider.id == o.cloud.id for v in volume_offers))
    region = offer.available_regions[0]
    assert volume_problem(offer, region, volume_offers, "", 100) == "Give the volume a name."
    small = volume_problem(offer, region, volume_offers, "data", 0.5)
    assert small is not None and "at least" in small


def test_find_offer_and_script_text_say_what_is_wrong(cloud: GPUCloud, tmp_path: Path) -> None:
    offers = cloud.instances.offers()
    with pytest.raises(InvalidInputError, match="no offer with instanceId 'nope'"):
        find_offer(offers, "nope")
    assert find_offer(offers, offers[0].instance_id, offers[0].cloud.id) in offers
    (tmp_path / "init.yaml").write_text("#cloud-config\n", encoding="utf-8")
    assert script_text(tmp_path / "init.yaml") == "#cloud-config\n"
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        script_text(b"\xff\xfe")


def test_the_expected_launch_time_is_the_sandboxs(cloud: GPUCloud) -> None:
    assert cloud.sandbox_info is None  # a plain client to a sandbox URL knows no sandbox
    assert expected_launch_seconds(cloud) == DEFAULT_EXPECTED_LAUNCH_SECONDS
    embedded = connect(sandbox=True, quiet=True)
    try:
        info = embedded.sandbox_info
        assert info is not None and info.url.startswith("http://127.0.0.1:")
        assert info.inference_url.startswith("http://127.0.0.1:")
        assert expected_launch_seconds(embedded) == info.launch_seconds > 0
    finally:
        embedded.close()
