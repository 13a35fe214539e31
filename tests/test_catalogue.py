"""The sandbox catalogue: realistic, deterministic offers and the offer filters."""

from __future__ import annotations

import itertools
import re
from decimal import Decimal

import pytest

from gpucloud_nb.models import InstanceOffer, VolumeOffer
from gpucloud_nb.sandbox import catalogue
from gpucloud_nb.sandbox.catalogue import (
    filter_offers,
    instance_offers,
    select_offers,
    synthetic_offers,
    volume_offers,
)


def _available_anywhere(offer: dict) -> bool:
    return any(entry["available"] for entry in offer["availability"])


def test_default_catalogue_is_large_varied_and_realistic() -> None:
    offers = instance_offers()
    assert len(offers) >= 40
    ids = [offer["instanceId"] for offer in offers]
    assert len(set(ids)) == len(ids)
    names = {offer["gpuName"] for offer in offers}
    for wanted in ("H100 SXM5 80GB", "H200 141GB", "A100 80GB", "A100 40GB", "L40S 48GB",
                   "RTX 4090 24GB", "B200 192GB", "RTX A6000 48GB", "L4 24GB"):
        assert wanted in names
    assert len({offer["cloud"]["_id"] for offer in offers}) >= 4
    assert {offer["deploymentType"] for offer in offers} == {"vm", "container", "baremetal"}
    assert {offer["gpuCount"] for offer in offers} == {1, 2, 4, 8}
    assert {offer["cloudInitAvailable"] for offer in offers} == {True, False}
    assert {offer["nvlink"] for offer in offers} == {True, False}
    regions = {entry["region"] for offer in offers for entry in offer["availability"]}
    assert len(regions) >= 6
    assert any(not _available_anywhere(offer) for offer in offers)
    assert sum(_available_anywhere(offer) for offer in offers) >= 35


def test_offers_are_well_formed() -> None:
    for offer in instance_offers():
        parsed = InstanceOffer.from_json(offer)
        assert parsed.instance_id == offer["instanceId"]
        assert re.fullmatch(r"[0-9a-f]{24}", offer["cloud"]["_id"])
        configuration = offer["configuration"]
        assert set(configuration) == {"ramGB", "storageGB", "vCpu", "vRamGB", "os",
                                      "interconnect"}
        assert isinstance(configuration["os"], list)
        if offer["deploymentType"] == "container":
            assert configuration["os"] == []
            assert offer["cloudInitAvailable"] is False
        else:
            assert "ubuntu-22.04" in configuration["os"]
        # Realistic prices: between $0.30 and $7 per GPU-hour.
        per_gpu = offer["hourlyPrice"] / offer["gpuCount"]
        assert 0.3 <= per_gpu <= 7
        for entry in offer["availability"]:
            assert set(entry) == {"region", "name", "countryCode", "available"}
            assert re.fullmatch(r"[A-Z]{2}", entry["countryCode"])


def test_catalogue_is_deterministic_and_copies_are_independent() -> None:
    first = instance_offers()
    first[0]["hourlyPrice"] = 0
    first[0]["availability"].clear()
    assert instance_offers() != first
    assert instance_offers() == instance_offers()
    assert instance_offers()[0]["instanceId"] == "nimbus-h100-sxm5-1x-vm"
    assert catalogue.provider_id("nimbus") == instance_offers()[0]["cloud"]["_id"]


def test_volume_offers() -> None:
    offers = volume_offers()
    assert len(offers) >= 3
    instance_providers = {o["cloud"]["_id"] for o in instance_offers()}
    for offer in offers:
        assert set(offer) == {"cloudProvider", "minSizeInGb", "pricePerGbPerHour", "regions"}
        assert set(offer["cloudProvider"]) == {"_id", "displayName"}
        assert offer["cloudProvider"]["_id"] in instance_providers
        assert isinstance(offer["pricePerGbPerHour"], str)
        assert 0 < Decimal(offer["pricePerGbPerHour"]) < Decimal("0.001")
        assert offer["minSizeInGb"] in (10, 50, 100)
        assert offer["regions"]
        assert VolumeOffer.from_json(offer).price_per_gb_per_hour > 0
    # Every provider sells volumes wherever it sells instances.
    assert {o["cloudProvider"]["_id"] for o in offers} == instance_providers
    for offer in instance_offers():
        volume_offer = next(v for v in offers
                            if v["cloudProvider"]["_id"] == offer["cloud"]["_id"])
        assert {a["region"] for a in offer["availability"]} <= set(volume_offer["regions"])


def test_synthetic_offers() -> None:
    offers = synthetic_offers(10_000, regions_per_offer=3, seed=0)
    assert len(offers) == 10_000
    assert all(len(offer["availability"]) == 3 for offer in offers)
    assert len({offer["instanceId"] for offer in offers}) == 10_000
    assert synthetic_offers(50, seed=1) == synthetic_offers(50, seed=1)
    assert synthetic_offers(50, seed=1) != synthetic_offers(50, seed=2)
    assert synthetic_offers(0) == []
    assert {o["deploymentType"] for o in offers} == {"vm", "container", "baremetal"}
    with pytest.raises(ValueError):
        synthetic_offers(5, regions_per_offer=0)
    with pytest.raises(ValueError):
        synthetic_offers(-1)


def test_filters() -> None:
    offers = instance_offers()
    h100 = filter_offers(offers, gpu_type="H100")
    assert h100 and all("h100" in o["gpuName"].lower() for o in h100)
    assert filter_offers(offers, gpu_type="h100") == h100
    eights = filter_offers(offers, num_gpus=8)
    assert eights and all(o["gpuCount"] == 8 for o in eights)
    for kind in ("vm", "container", "baremetal"):
        chosen = filter_offers(offers, deployment_type=kind)
        assert chosen and all(o["deploymentType"] == kind for o in chosen)
    in_tokyo = filter_offers(offers, region="ap-northeast-1")
    assert in_tokyo and all(
        any(a["region"] == "ap-northeast-1" for a in o["availability"]) for o in in_tokyo)
    open_anywhere = filter_offers(offers, available=True)
    closed = filter_offers(offers, available=False)
    assert len(open_anywhere) + len(closed) == len(offers)
    assert all(_available_anywhere(o) for o in open_anywhere)
    assert not any(_available_anywhere(o) for o in closed)
    open_in_tokyo = filter_offers(offers, region="ap-northeast-1", available=True)
    assert all(any(a["region"] == "ap-northeast-1" and a["available"]
                   for a in o["availability"]) for o in open_in_tokyo)
    closed_in_tokyo = filter_offers(offers, region="ap-northeast-1", available=False)
    assert len(open_in_tokyo) + len(closed_in_tokyo) == len(in_tokyo)
    assert filter_offers(offers, region="mars-1") == []


def test_default_order_and_price_sort() -> None:
    offers = instance_offers()
    assert select_offers(offers) == list(range(len(offers)))
    by_price = filter_offers(offers, sort="price")
    prices = [o["hourlyPrice"] for o in by_price]
    assert prices == sorted(prices)
    # Stable: equal prices keep catalogue order.
    positions = select_offers(offers, sort="price")
    for a, b in itertools.pairwise(positions):
        if offers[a]["hourlyPrice"] == offers[b]["hourlyPrice"]:
            assert a < b
