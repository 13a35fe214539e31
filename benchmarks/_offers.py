"""A deterministic synthetic offers catalogue for the benchmarks, shaped as the cloud sends it.

    >>> len(make_offers(10, regions=2)), len(make_offers(10, regions=2)[0]["availability"])
    (10, 2)
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["SECOND", "make_offers"]

_GPUS = [  # (name, vRamGB per GPU, interconnect, base hourly price per GPU)
    ("H100 SXM5", 80, "SXM5", 2.49),
    ("H100 PCIe", 80, "PCIe", 2.19),
    ("A100 SXM4", 80, "SXM4", 1.79),
    ("A100 PCIe", 40, "PCIe", 1.29),
    ("L40S", 48, "PCIe", 1.05),
    ("RTX 6000 Ada", 48, "PCIe", 0.89),
    ("RTX 4090", 24, "PCIe", 0.44),
    ("RTX A6000", 48, "PCIe", 0.69),
    ("L4", 24, "PCIe", 0.39),
    ("V100", 16, "NVLink", 0.29),
]
_PROVIDERS = [
    ("lambda", "Lambda"),
    ("runpod", "RunPod"),
    ("coreweave", "CoreWeave"),
    ("datacrunch", "DataCrunch"),
    ("paperspace", "Paperspace"),
    ("vultr", "Vultr"),
]
_REGIONS = [
    ("us-east-1", "US East (Virginia)", "US"),
    ("us-west-2", "US West (Oregon)", "US"),
    ("us-central-1", "US Central (Texas)", "US"),
    ("eu-west-1", "EU West (Ireland)", "IE"),
    ("eu-central-1", "EU Central (Frankfurt)", "DE"),
    ("eu-north-1", "EU North (Helsinki)", "FI"),
    ("ap-northeast-1", "Asia Pacific (Tokyo)", "JP"),
    ("ap-southeast-1", "Asia Pacific (Singapore)", "SG"),
]
_OS = [
    ["ubuntu-22.04", "ubuntu-24.04"],
    ["ubuntu-22.04", "ubuntu-22.04-cuda-12.4", "ubuntu-24.04"],
    ["ubuntu-22.04"],
    ["ubuntu-24.04", "debian-12"],
]
_DEPLOYMENT = ["vm", "container", "baremetal"]


#: The second catalogue's shape: (GPU types, providers, regions), the first's being (10, 6, 8).
SECOND = (7, 12, 7)


def make_offers(n: int = 10_000, regions: int = 3, seed: int = 20261122, *,
                shape: tuple[int, int, int] = (10, 6, 8)) -> list[dict[str, Any]]:
    """A deterministic synthetic offers catalogue: ``n`` offers, ``regions`` regions each, drawn
    from ``shape`` = (GPU types, providers, regions); providers past the six named are numbered.
    """
    rng = random.Random(seed)
    gpus, provider_count, region_count = shape
    providers = (_PROVIDERS + [(f"provider{i}", f"Provider {i}")
                               for i in range(len(_PROVIDERS), provider_count)])[:provider_count]
    pool = _REGIONS[:region_count]
    offers: list[dict[str, Any]] = []
    for i in range(n):
        gpu, vram, interconnect, base = rng.choice(_GPUS[:gpus])
        count = rng.choice((1, 1, 2, 4, 8))
        provider_id, provider_name = rng.choice(providers)
        deployment = rng.choice(_DEPLOYMENT)
        slug = gpu.lower().replace(" ", "-")
        offers.append(
            {
                "gpuName": gpu,
                "gpuCount": count,
                "nvlink": count >= 4 and interconnect != "PCIe",
                "deploymentType": deployment,
                "instanceId": f"{slug}-{count}x-{provider_id}-{i:05d}",
                "cloudInitAvailable": deployment != "container",
                "cloud": {"_id": provider_id, "name": provider_name},
                "configuration": {
                    "ramGB": count * rng.choice((32, 64, 128)),
                    "storageGB": count * rng.choice((200, 500, 1000)),
                    "vCpu": count * rng.choice((8, 16, 32)),
                    "vRamGB": vram,
                    "os": [] if deployment == "container" else rng.choice(_OS),
                    "interconnect": interconnect,
                },
                "hourlyPrice": round(base * count * rng.uniform(0.85, 1.25), 2),
                "availability": [
                    {"region": r, "name": name, "countryCode": cc, "available": rng.random() < 0.6}
                    for r, name, cc in rng.sample(pool, regions)
                ],
            }
        )
    return offers
