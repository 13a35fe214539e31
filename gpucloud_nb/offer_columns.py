"""The offers frame's columns: an offers body or records → arrays, coded names and the row order.

:func:`gpucloud_nb.frames.offers_frame` builds its DataFrame from what :func:`offer_columns`
returns. The work is per value, so it does the least per value: one loop over the offers with
attribute reads and list appends only, names coded as they are read (:func:`coder`), and an
offer's ``configuration`` and ``availability`` read once per distinct value rather than once
per offer. From a body, those two are kept as their JSON text while the offers are decoded and
each distinct text is decoded once (:func:`~gpucloud_nb.decoding.decode_list_deferring`): a
catalogue repeats them (the benchmark's 10,000 offers hold about 2,600 distinct availability
lists and 2,900 configurations), and the rows, strings and structs not made are most of what
reading the body costs. A body the schema does not fit anywhere is read as records
(:func:`~gpucloud_nb.decoding.decode_list`), loosely, as before.

    >>> columns = offer_columns(b'[{"instanceId": "a", "availability": []}]')
    >>> columns.instance_id, columns.counts.tolist()
    (['a'], [1])
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from gpucloud_nb.decoding import convert_list, decode_fields, decode_list, decode_list_deferring
from gpucloud_nb.frame_columns import STR_DTYPE, float_column
from gpucloud_nb.models import Availability, InstanceOffer

__all__ = ["Coded", "OfferColumns", "categories", "coder", "offer_columns", "row_order"]

#: A coded column: (codes, the coder that gave them, its keys in code order).
Coded = tuple[np.ndarray, Mapping[Any, int]]

_DEFERRED = ("configuration", "availability")
_PLACEHOLDER = (Availability(),)  # the one row of an offer without availability


def coder() -> defaultdict[Any, int]:
    """A dict that gives each new key the next code: ``codes[value]`` is a C-speed factorize."""
    return defaultdict(count().__next__)


@dataclass
class OfferColumns:
    """The offers' values, one entry per offer (``gpu_count`` ... ``interconnect``) or per row
    (``region`` ... ``available``, the rows of each offer in turn, ``counts[i]`` of offer ``i``;
    an offer without availability has one row, region ``""``, not available)."""

    instance_id: list[str]
    gpu_name: Coded
    gpu_count: np.ndarray
    nvlink: np.ndarray
    deployment_type: Coded
    cloud_init_available: np.ndarray
    hourly_price: np.ndarray
    provider_id: Coded
    provider_name: Coded
    ram_gb: np.ndarray
    storage_gb: np.ndarray
    vcpu: np.ndarray
    vram_gb: np.ndarray
    os: Coded
    interconnect: Coded
    counts: np.ndarray
    region: Coded
    region_name: Coded
    country_code: Coded
    available: np.ndarray


def offer_columns(offers: bytes | bytearray | memoryview | str | Iterable[Any] | None
                  ) -> OfferColumns:
    """The columns of :func:`gpucloud_nb.frames.offers_frame`'s offers, from records, parsed
    JSON or a body (see the module docstring)."""
    if isinstance(offers, bytes | bytearray | memoryview | str):
        rows = decode_list_deferring(InstanceOffer, offers, _DEFERRED)
        if rows is not None:
            try:
                return _columns(rows, _decoded)
            except msgspec.ValidationError:
                pass  # a nested value the schema does not fit: read it all loosely
        return _columns(decode_list(InstanceOffer, offers, "offers"), _as_is)
    return _columns(convert_list(InstanceOffer, offers or ()), _as_is)


def _decoded(name: str, texts: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Field ``name``'s JSON texts → (a code per text, each distinct text decoded, in code
    order)."""
    distinct = coder()
    codes = [distinct[bytes(text)] for text in texts]
    return _codes(codes, len(distinct)), decode_fields(InstanceOffer, name, distinct)


def _as_is(name: str, values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """Records' values of field ``name``: each its own (code ``i`` for value ``i``)."""
    return np.arange(len(values), dtype=np.intp), values


def _codes(values: list[int], size: int) -> np.ndarray:
    """A list of codes below ``size`` as an ``intp`` array (through ``bytes`` when they fit one
    byte each: a C loop over the list, twice as fast as ``np.fromiter``)."""
    if size <= 256:
        return np.frombuffer(bytes(values), dtype=np.uint8).astype(np.intp)
    return np.fromiter(values, dtype=np.intp, count=len(values))


def _flags(values: list[bool]) -> np.ndarray:
    """Flags as a read-only ``bool`` array (records hold real flags), through ``bytes``."""
    return np.frombuffer(bytes(values), dtype=np.bool_)


def _columns(rows: Sequence[Any],
             distinct: Callable[[str, list[Any]], tuple[np.ndarray, list[Any]]]) -> OfferColumns:
    """One pass over the offers, then one over each distinct configuration and availability
    list: ``distinct(name, values)`` codes an offer's field (:func:`_decoded` or :func:`_as_is`)."""
    names, deployments, providers, provider_names = coder(), coder(), coder(), coder()
    gpu_name: list[int] = []
    gpu_count: list[int] = []
    nvlink: list[bool] = []
    deployment: list[int] = []
    instance_id: list[str] = []
    cloud_init: list[bool] = []
    hourly: list[float] = []
    provider_id: list[int] = []
    provider_name: list[int] = []
    configuration: list[Any] = []
    availability: list[Any] = []
    for offer in rows:
        gpu_name.append(names[offer.gpu_name])
        gpu_count.append(offer.gpu_count)
        nvlink.append(offer.nvlink)
        deployment.append(deployments[offer.deployment_type])
        instance_id.append(offer.instance_id)
        cloud_init.append(offer.cloud_init_available)
        hourly.append(offer.hourly_price)
        cloud = offer.cloud
        provider_id.append(providers[cloud.id])
        provider_name.append(provider_names[cloud.name])
        configuration.append(offer.configuration)
        availability.append(offer.availability)

    # Then each distinct configuration and availability list, one loop each likewise.
    by_config, configs = distinct("configuration", configuration)
    oses, interconnects = coder(), coder()
    ram: list[float] = []
    storage: list[float] = []
    vcpu: list[float] = []
    vram: list[float] = []
    os_names: list[int] = []
    interconnect: list[int] = []
    for config in configs:
        ram.append(config.ram_gb)
        storage.append(config.storage_gb)
        vcpu.append(config.vcpu)
        vram.append(config.vram_gb)
        os_names.append(oses[config.os])  # the tuple: joined once per distinct list, later
        interconnect.append(interconnects[config.interconnect])

    def per_config(values: list[Any]) -> np.ndarray:
        return np.take(float_column(values), by_config)

    by_list, lists = distinct("availability", availability)
    regions, region_names, countries = coder(), coder(), coder()
    counts: list[int] = []
    region: list[int] = []
    region_name: list[int] = []
    country: list[int] = []
    available: list[bool] = []
    for entries in lists:
        for entry in entries or _PLACEHOLDER:
            region.append(regions[entry.region])
            region_name.append(region_names[entry.name])
            country.append(countries[entry.country_code])
            available.append(entry.available)
        counts.append(len(entries) or 1)
    # Each row: the entry of its offer's list, offer by offer.
    list_counts = np.array(counts, dtype=np.intp)
    list_starts = np.cumsum(list_counts) - list_counts
    row_counts = list_counts[by_list]
    row_starts = np.cumsum(row_counts) - row_counts
    entry = np.arange(int(row_counts.sum()), dtype=np.intp) + np.repeat(
        list_starts[by_list] - row_starts, row_counts)

    return OfferColumns(
        instance_id=instance_id,
        gpu_name=(_codes(gpu_name, len(names)), names),
        gpu_count=np.fromiter(gpu_count, dtype=np.int64, count=len(gpu_count)),
        nvlink=_flags(nvlink),
        deployment_type=(_codes(deployment, len(deployments)), deployments),
        cloud_init_available=_flags(cloud_init),
        hourly_price=float_column(hourly),
        provider_id=(_codes(provider_id, len(providers)), providers),
        provider_name=(_codes(provider_name, len(provider_names)), provider_names),
        ram_gb=per_config(ram),
        storage_gb=per_config(storage),
        vcpu=per_config(vcpu),
        vram_gb=per_config(vram),
        os=(_codes(os_names, len(oses))[by_config], oses),
        interconnect=(_codes(interconnect, len(interconnects))[by_config], interconnects),
        counts=row_counts,
        region=(_codes(region, len(regions))[entry], regions),
        region_name=(_codes(region_name, len(region_names))[entry], region_names),
        country_code=(_codes(country, len(countries))[entry], countries),
        available=_flags(available)[entry],
    )


def categories(coded: Coded, keep_empty: bool = False) -> tuple[np.ndarray, pd.Index]:
    """A coded column → (codes, sorted text categories); ``""`` is missing (code ``-1``)
    unless ``keep_empty`` (a joined list, where ``""`` means "none"). Tuple keys (lists of
    names) are joined with ``", "``; two that join alike share a category."""
    codes, keyed = coded
    keys = [", ".join(k) if k.__class__ is tuple else k for k in keyed]
    names = sorted({k for k in keys if k or keep_empty})
    position = {k: i for i, k in enumerate(names)}
    remap = np.array([position[k] if k or keep_empty else -1 for k in keys], dtype=np.intp)
    return (remap[codes] if len(remap) else codes), pd.Index(names, dtype=STR_DTYPE)


def row_order(
    prices: np.ndarray,
    ids: list[Any],
    counts: np.ndarray,
    region_codes: np.ndarray,
    n_regions: int,
    available: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows by ``available`` (True first), then price, ``instanceId`` and region, stably.

    Returns (row positions, offer position of each output row). Offers are ranked once (by id,
    then a stable sort by price), their rows gathered in that order, regions put in order within
    each offer (a nearly sorted key, cheap for a stable sort) and the available rows moved first
    (a stable partition): no full sort of all the rows.
    """
    n = len(ids)
    try:
        by_id = sorted(range(n), key=ids.__getitem__)
    except TypeError:
        text = ["" if v is None else str(v) for v in ids]
        by_id = sorted(range(n), key=text.__getitem__)
    offers = np.array(by_id, dtype=np.intp)
    offers = offers[np.argsort(prices[offers], kind="stable")]

    # Rows of the offers in that order: row = start of its offer + position inside it.
    new_counts = counts[offers]
    starts = np.cumsum(counts) - counts
    new_starts = np.cumsum(new_counts) - new_counts
    rows = np.arange(len(region_codes), dtype=np.intp) + np.repeat(
        starts[offers] - new_starts, new_counts
    )
    rank = np.repeat(np.arange(n, dtype=np.int64), new_counts)
    within = np.argsort(rank * (n_regions + 1) + region_codes[rows] + 1, kind="stable")
    rows = rows[within]
    offer_of_row = offers[rank[within]]
    available_first = np.argsort(~available[rows], kind="stable")  # a radix sort of booleans
    return rows[available_first], offer_of_row[available_first]
