"""The sandbox's offer catalogue: deterministic GPU instance offers and volume offers.

Every call returns fresh copies of the same data, so a sandbox, a test and a notebook all see the
same offers in the same order, and can change their copy freely.

    >>> offers = instance_offers()
    >>> offers[0]["instanceId"], offers[0]["gpuName"], offers[0]["hourlyPrice"]
    ('nimbus-h100-sxm5-1x-vm', 'H100 SXM5 80GB', 2.49)
    >>> filter_offers(offers, gpu_type="a100", num_gpus=8, sort="price")[0]["cloud"]["name"]
    'Helios Metal'

Choices where the spec says "not shown", written down once:

- ``hourlyPrice`` is the price of the whole offer (all its GPUs) in USD per hour.
- ``configuration.vRamGB`` is the memory of one GPU (as ``vramPerGpu`` on instances); ``ramGB``
  and ``storageGB`` are totals in GB.
- ``configuration.os`` is ``[]`` for container offers (they take ``dockerContainer.image``).
- ``nvlink`` is true for SXM GPUs in offers of more than one GPU.
- Default order of the offers list: the catalogue's own order, grouped by provider, then product
  line, then GPU count (ascending). ``sort=price`` orders by ``hourlyPrice`` ascending; ties keep
  the catalogue order.
- Every provider sells one kind of volume, in every region where it sells instances.
- The providers, prices and availability are invented, but shaped like real GPU clouds.

For benchmarks, :func:`synthetic_offers` builds a catalogue of any size from a seed.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

__all__ = [
    "DEPLOYMENT_TYPES",
    "PROVIDERS",
    "REGIONS",
    "filter_offers",
    "instance_offers",
    "provider_id",
    "select_offers",
    "synthetic_offers",
    "volume_offers",
]

DEPLOYMENT_TYPES = ("vm", "container", "baremetal")


class Region(NamedTuple):
    id: str
    name: str
    country_code: str


class Gpu(NamedTuple):
    slug: str
    name: str
    vram_gb: int
    interconnect: str
    vcpu_per_gpu: int
    ram_per_gpu: int
    storage_per_gpu: int

    @property
    def sxm(self) -> bool:
        return self.interconnect.startswith("SXM")


class Line(NamedTuple):
    """One product line of a provider: an offer per GPU count."""

    provider: str
    gpu: str
    deployment: str
    counts: tuple[int, ...]
    price_per_gpu: float
    cloud_init: bool
    regions: tuple[str, ...]


REGIONS: tuple[Region, ...] = (
    Region("us-east-1", "US East (Virginia)", "US"),
    Region("us-west-2", "US West (Oregon)", "US"),
    Region("ca-central-1", "Canada (Montreal)", "CA"),
    Region("eu-west-1", "EU West (Ireland)", "IE"),
    Region("eu-central-1", "EU Central (Frankfurt)", "DE"),
    Region("eu-north-1", "EU North (Stockholm)", "SE"),
    Region("ap-northeast-1", "Asia Pacific (Tokyo)", "JP"),
    Region("ap-southeast-1", "Asia Pacific (Singapore)", "SG"),
)
_REGION_BY_ID = {region.id: region for region in REGIONS}

#: Provider key → display name. Their ``_id`` is :func:`provider_id` of the key.
PROVIDERS: dict[str, str] = {
    "nimbus": "Nimbus Compute",
    "stratus": "Stratus GPU",
    "cirrus": "Cirrus Cloud",
    "helios": "Helios Metal",
    "boreal": "Boreal Compute",
}

_GPUS: dict[str, Gpu] = {
    gpu.slug: gpu
    for gpu in (
        Gpu("h100-sxm5", "H100 SXM5 80GB", 80, "SXM5", 26, 225, 1000),
        Gpu("h100-pcie", "H100 PCIe 80GB", 80, "PCIe", 16, 120, 500),
        Gpu("h200", "H200 141GB", 141, "SXM5", 28, 250, 1500),
        Gpu("b200", "B200 192GB", 192, "SXM6", 32, 280, 2000),
        Gpu("a100-80gb", "A100 80GB", 80, "SXM4", 30, 240, 800),
        Gpu("a100-40gb", "A100 40GB", 40, "PCIe", 16, 90, 500),
        Gpu("l40s", "L40S 48GB", 48, "PCIe", 16, 96, 400),
        Gpu("rtx-6000-ada", "RTX 6000 Ada 48GB", 48, "PCIe", 14, 80, 400),
        Gpu("rtx-a6000", "RTX A6000 48GB", 48, "PCIe", 12, 64, 300),
        Gpu("rtx-4090", "RTX 4090 24GB", 24, "PCIe", 8, 48, 200),
        Gpu("l4", "L4 24GB", 24, "PCIe", 8, 32, 150),
        Gpu("a10", "A10 24GB", 24, "PCIe", 12, 60, 200),
    )
}

_LINES: tuple[Line, ...] = (
    Line("nimbus", "h100-sxm5", "vm", (1, 2, 4, 8), 2.49, True,
         ("us-east-1", "us-west-2", "eu-west-1")),
    Line("nimbus", "a100-80gb", "vm", (1, 2, 4, 8), 1.79, True, ("us-east-1", "us-west-2")),
    Line("nimbus", "l40s", "vm", (1, 2, 4), 1.09, True, ("us-east-1", "eu-west-1")),
    Line("nimbus", "a10", "vm", (1,), 0.75, True, ("us-east-1", "us-west-2")),
    Line("stratus", "h200", "vm", (1, 8), 3.79, False, ("us-east-1", "eu-central-1")),
    Line("stratus", "h200", "baremetal", (8,), 3.59, False, ("us-east-1",)),
    Line("stratus", "h100-sxm5", "baremetal", (8,), 2.29, False, ("eu-central-1", "eu-north-1")),
    Line("stratus", "h100-pcie", "vm", (1, 2), 2.19, False, ("eu-central-1", "eu-north-1")),
    Line("cirrus", "rtx-4090", "container", (1, 2, 4), 0.44, False,
         ("us-west-2", "ca-central-1", "eu-north-1")),
    Line("cirrus", "rtx-a6000", "container", (1, 2, 4), 0.64, False,
         ("us-west-2", "ca-central-1")),
    Line("cirrus", "rtx-a6000", "vm", (1, 2), 0.69, True, ("us-west-2",)),
    Line("cirrus", "l4", "container", (1, 2), 0.42, False, ("us-west-2", "ap-southeast-1")),
    Line("cirrus", "l4", "vm", (1,), 0.45, True, ("ap-southeast-1",)),
    Line("helios", "b200", "vm", (1, 8), 5.99, True, ("us-east-1", "eu-west-1")),
    Line("helios", "b200", "baremetal", (8,), 5.49, False, ("us-east-1",)),
    Line("helios", "a100-40gb", "vm", (1, 2, 4, 8), 1.29, True,
         ("eu-west-1", "ap-northeast-1")),
    Line("helios", "a100-80gb", "baremetal", (8,), 1.59, False, ("ap-northeast-1",)),
    Line("boreal", "h100-sxm5", "container", (1, 2, 4, 8), 2.69, False,
         ("eu-north-1", "ca-central-1", "us-east-1")),
    Line("boreal", "l40s", "container", (1, 2, 4, 8), 0.99, False, ("eu-north-1",)),
    Line("boreal", "rtx-6000-ada", "vm", (1, 2, 4), 0.89, True, ("eu-north-1", "ca-central-1")),
)

#: Offers that are listed but available in no region (sold out everywhere).
_SOLD_OUT = frozenset({
    "stratus-h200-8x-vm",
    "helios-b200-8x-baremetal",
    "boreal-h100-sxm5-8x-container",
})

_BASE_IMAGES = ["ubuntu-22.04", "ubuntu-24.04", "ubuntu-22.04-cuda-12.4"]
_EXTRA_IMAGES: dict[str, list[str]] = {
    "nimbus": ["ubuntu-22.04-vllm"],
    "helios": ["ubuntu-22.04-vllm", "debian-12"],
    "boreal": ["debian-12"],
}

# provider key → (minSizeInGb, pricePerGbPerHour).
_VOLUME_PRICES: dict[str, tuple[int, str]] = {
    "nimbus": (10, "0.00014"),
    "stratus": (50, "0.00011"),
    "cirrus": (50, "0.00012"),
    "helios": (100, "0.00009"),
    "boreal": (10, "0.00016"),
}


def provider_id(key: str) -> str:
    """The ``_id`` of a provider: 24 hex digits derived from its key, stable across runs."""
    return hashlib.sha256(f"gpucloud-nb provider {key}".encode()).hexdigest()[:24]


def _available(instance_id: str, region: str) -> bool:
    """Deterministic availability: about four region entries out of five are open."""
    if instance_id in _SOLD_OUT:
        return False
    return hashlib.sha256(f"{instance_id}@{region}".encode()).digest()[0] >= 52


def _offer(provider: str, gpu: Gpu, deployment: str, count: int, price_per_gpu: float,
           cloud_init: bool, regions: Iterable[str], instance_id: str,
           available: Mapping[str, bool]) -> dict[str, Any]:
    if deployment == "container":
        images: list[str] = []
    else:
        images = [*_BASE_IMAGES, *_EXTRA_IMAGES.get(provider, [])]
    return {
        "gpuName": gpu.name,
        "gpuCount": count,
        "nvlink": gpu.sxm and count > 1,
        "deploymentType": deployment,
        "instanceId": instance_id,
        "cloudInitAvailable": cloud_init and deployment != "container",
        "cloud": {"_id": provider_id(provider), "name": PROVIDERS[provider]},
        "configuration": {
            "ramGB": gpu.ram_per_gpu * count,
            "storageGB": gpu.storage_per_gpu * count,
            "vCpu": gpu.vcpu_per_gpu * count,
            "vRamGB": gpu.vram_gb,
            "os": images,
            "interconnect": gpu.interconnect,
        },
        "hourlyPrice": round(price_per_gpu * count, 2),
        "availability": [
            {
                "region": region,
                "name": _REGION_BY_ID[region].name,
                "countryCode": _REGION_BY_ID[region].country_code,
                "available": available[region],
            }
            for region in regions
        ],
    }


@lru_cache(maxsize=1)
def _default_offers() -> tuple[dict[str, Any], ...]:
    offers = []
    for line in _LINES:
        gpu = _GPUS[line.gpu]
        for count in line.counts:
            instance_id = f"{line.provider}-{gpu.slug}-{count}x-{line.deployment}"
            available = {r: _available(instance_id, r) for r in line.regions}
            offers.append(_offer(line.provider, gpu, line.deployment, count, line.price_per_gpu,
                                 line.cloud_init, line.regions, instance_id, available))
    return tuple(offers)


def instance_offers() -> list[dict[str, Any]]:
    """The default instance offers (48 of them), as wire-format JSON objects, in catalogue order."""
    return copy.deepcopy(list(_default_offers()))


def volume_offers() -> list[dict[str, Any]]:
    """The default volume offers: one per provider, in the regions where it sells instances."""
    result = []
    for key, (minimum, price) in _VOLUME_PRICES.items():
        used = {r for line in _LINES if line.provider == key for r in line.regions}
        result.append({
            "cloudProvider": {"_id": provider_id(key), "displayName": PROVIDERS[key]},
            "minSizeInGb": minimum,
            "pricePerGbPerHour": price,
            "regions": [region.id for region in REGIONS if region.id in used],
        })
    return result


def synthetic_offers(n: int, regions_per_offer: int = 3, seed: int = 0) -> list[dict[str, Any]]:
    """A catalogue of ``n`` plausible offers for benchmarks, the same for the same arguments.

        >>> offers = synthetic_offers(10_000, regions_per_offer=3)
        >>> len(offers), len(offers[0]["availability"])
        (10000, 3)

    The providers are those of the default catalogue, so :func:`volume_offers` still fits.
    """
    if n < 0:
        raise ValueError("n must not be negative.")
    if not 1 <= regions_per_offer <= len(REGIONS):
        raise ValueError(f"regions_per_offer must be between 1 and {len(REGIONS)}.")
    rng = random.Random(seed)
    gpus = list(_GPUS.values())
    providers = list(PROVIDERS)
    region_ids = [region.id for region in REGIONS]
    offers = []
    for index in range(n):
        gpu = rng.choice(gpus)
        provider = rng.choice(providers)
        deployment = rng.choice(DEPLOYMENT_TYPES)
        count = rng.choice((1, 2, 4, 8))
        regions = rng.sample(region_ids, regions_per_offer)
        available = {region: rng.random() < 0.8 for region in regions}
        price = round(rng.uniform(0.3, 6.5), 2)
        instance_id = f"syn-{index:06d}-{gpu.slug}-{count}x-{deployment}"
        offers.append(_offer(provider, gpu, deployment, count, price, rng.random() < 0.5,
                             regions, instance_id, available))
    return offers


def _is_available(offer: Mapping[str, Any], region: str | None) -> bool:
    return any(
        entry.get("available") and (region is None or entry.get("region") == region)
        for entry in offer.get("availability") or ()
    )


def select_offers(
    offers: Sequence[Mapping[str, Any]],
    *,
    region: str | None = None,
    num_gpus: int | None = None,
    gpu_type: str | None = None,
    available: bool | None = None,
    sort: str | None = None,
    deployment_type: str | None = None,
) -> list[int]:
    """Return the positions in ``offers`` that match every given filter, in response order.

    ``region``: the offer has an availability entry for it. ``num_gpus``: exact ``gpuCount``.
    ``gpu_type``: case-insensitive substring of ``gpuName``. ``available``: available in at least
    one region, or in ``region`` when that is given too (``False`` selects the others).
    ``sort="price"``: ``hourlyPrice`` ascending, stable. ``deployment_type``: exact match.
    """
    needle = gpu_type.casefold() if gpu_type else None
    selected = []
    for position, offer in enumerate(offers):
        if deployment_type is not None and offer.get("deploymentType") != deployment_type:
            continue
        if num_gpus is not None and offer.get("gpuCount") != num_gpus:
            continue
        if needle is not None and needle not in str(offer.get("gpuName", "")).casefold():
            continue
        if region is not None and not any(
            entry.get("region") == region for entry in offer.get("availability") or ()
        ):
            continue
        if available is not None and _is_available(offer, region) != available:
            continue
        selected.append(position)
    if sort == "price":
        selected.sort(key=lambda position: offers[position].get("hourlyPrice", 0))
    return selected


def filter_offers(offers: Sequence[Mapping[str, Any]], **filters: Any) -> list[Mapping[str, Any]]:
    """The offers that :func:`select_offers` selects with the same keyword filters, in order."""
    return [offers[position] for position in select_offers(offers, **filters)]
