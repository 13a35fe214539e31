"""Benchmark: ``offers_frame`` against ``json.loads`` alone and against ``pandas.json_normalize``.

A synthetic catalogue of 10,000 offers × 3 regions (deterministic seed, field values shaped like
the spec's InstanceOffer) is serialised to one JSON body, then each step is timed as the best of
``repeat`` runs with :func:`time.perf_counter`:

- (a) ``json.loads(body)``
- (b) ``offers_frame(json.loads(body))``
- (c) ``pandas.json_normalize(json.loads(body), record_path="availability", meta=[...])``

Targets: (b) ≤ 1.5 × (a), and (c) / (b) ≥ 1.8. Run standalone with
``python -m benchmarks.bench_frames``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from collections.abc import Callable
from typing import Any

import pandas as pd

from gpucloud_nb.frames import offers_frame

__all__ = ["make_offers", "run"]

Row = tuple[str, float, float, float, str]

#: Smaller sizes for `python -m benchmarks --quick` (a smoke test, not a measurement).
QUICK: dict[str, Any] = {"n": 1_000, "repeat": 2}

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


def make_offers(n: int = 10_000, regions: int = 3, seed: int = 20261122) -> list[dict[str, Any]]:
    """A deterministic synthetic offers catalogue: ``n`` offers, ``regions`` regions each."""
    rng = random.Random(seed)
    offers: list[dict[str, Any]] = []
    for i in range(n):
        gpu, vram, interconnect, base = rng.choice(_GPUS)
        count = rng.choice((1, 1, 2, 4, 8))
        provider_id, provider_name = rng.choice(_PROVIDERS)
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
                    for r, name, cc in rng.sample(_REGIONS, regions)
                ],
            }
        )
    return offers


_META = [
    "gpuName",
    "gpuCount",
    "nvlink",
    "deploymentType",
    "instanceId",
    "cloudInitAvailable",
    "hourlyPrice",
    ["cloud", "_id"],
    ["cloud", "name"],
    ["configuration", "ramGB"],
    ["configuration", "storageGB"],
    ["configuration", "vCpu"],
    ["configuration", "vRamGB"],
    ["configuration", "os"],
    ["configuration", "interconnect"],
]


def _best_of(steps: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Best time of each step over ``repeat`` rounds; the steps alternate within each round, so
    a noisy neighbour on the machine slows all of them alike rather than one."""
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeat):
        for name, step in steps.items():
            gc.collect()
            start = time.perf_counter()
            step()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def run(n: int = 10_000, regions: int = 3, repeat: int = 5) -> list[Row]:
    """Time the three steps; rows are (name, ours, baseline, ratio, target), times in seconds."""
    body = json.dumps(make_offers(n, regions)).encode()
    offers_frame(json.loads(body))  # warm-up (imports, caches)
    pd.json_normalize(json.loads(body)[:10], record_path="availability", meta=_META)

    best = _best_of(
        {
            "loads": lambda: json.loads(body),
            "frame": lambda: offers_frame(json.loads(body)),
            "normalize": lambda: pd.json_normalize(
                json.loads(body), record_path="availability", meta=_META
            ),
        },
        repeat,
    )
    t_loads, t_frame, t_normalize = best["loads"], best["frame"], best["normalize"]
    return [
        ("offers_frame fetch-parse-frame vs json.loads", t_frame, t_loads, t_frame / t_loads,
         "<= 1.5x"),
        ("offers_frame vs json_normalize (speed-up)", t_frame, t_normalize, t_normalize / t_frame,
         ">= 1.8x"),
    ]


def main(argv: list[str] | None = None) -> None:
    """Print one line per figure: name, ours, baseline, ratio, target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--offers", type=int, default=10_000, help="offers in the catalogue")
    parser.add_argument("--regions", type=int, default=3, help="availability regions per offer")
    parser.add_argument("--repeat", type=int, default=5,
                        help="rounds; the best of them counts (raise it on a busy machine)")
    args = parser.parse_args(argv)
    for name, ours, baseline, ratio, target in run(args.offers, args.regions, args.repeat):
        print(f"{name}: ours {ours * 1e3:.1f} ms, baseline {baseline * 1e3:.1f} ms, "
              f"ratio {ratio:.2f}x, target {target}")


if __name__ == "__main__":
    main()
