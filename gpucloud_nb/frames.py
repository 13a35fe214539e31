"""Records → pandas DataFrames: offers, instances, volumes and volume offers.

Every function takes either typed records from :mod:`gpucloud_nb.models` (their wire JSON in
``.raw`` is what is read) or the raw JSON list the cloud sends, and returns a plain
:class:`pandas.DataFrame` whose columns keep the spec's field names, so that what students read in
the spec is what they sort and filter by. Nothing here does I/O.

    >>> df = offers_frame(cloud.instances.offers())
    >>> df[df.available & (df.gpuName == "H100 SXM5")].head(3)

Choices where the spec says "not shown" or leaves room:

- ``vRamGB`` is read as memory *per GPU* (the spec's ``Instance.vramPerGpu`` is its counterpart),
  so ``totalVRamGB = vRamGB × gpuCount``.
- ``os`` (offers) and ``regions`` (volume offers) are comma-joined strings such as
  ``"ubuntu-22.04, ubuntu-24.04"``: hashable (``groupby``, ``drop_duplicates`` and ``value_counts``
  work), readable in a table, and filterable with ``df.os.str.contains("ubuntu-22.04")``;
  ``df.os.str.split(", ")`` gives the lists back. An empty list gives ``""``, a missing one NA.
- A missing ``gpuCount``/``sshPort`` is ``0`` (the columns stay ``int64``), so
  ``pricePerGpuHour`` is NaN there; other missing numbers are NaN, missing strings NA and missing
  flags ``False``.
- An offer with an empty ``availability`` still gets one row, with ``region`` NA and
  ``available=False``, so no offer disappears from the table.
- ``deletedAt`` is NaT for the Unix-epoch sentinel live instances carry, and for null.
- Instances and volumes are listed newest first; volume offers cheapest first.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from itertools import count, repeat
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd

if TYPE_CHECKING:  # importing the Styler needs jinja2: only style_prices pays for it
    from pandas.io.formats.style import Styler

__all__ = [
    "INSTANCE_COLUMNS",
    "OFFER_COLUMNS",
    "SPEND_COLUMNS",
    "VOLUME_COLUMNS",
    "VOLUME_OFFER_COLUMNS",
    "format_price",
    "instances_frame",
    "offers_frame",
    "spend_frame",
    "style_prices",
    "volume_offers_frame",
    "volumes_frame",
]

OFFER_COLUMNS: tuple[str, ...] = (
    "instanceId",
    "gpuName",
    "gpuCount",
    "hourlyPrice",
    "pricePerGpuHour",
    "deploymentType",
    "nvlink",
    "cloudInitAvailable",
    "providerId",
    "providerName",
    "vRamGB",
    "totalVRamGB",
    "ramGB",
    "vCpu",
    "storageGB",
    "interconnect",
    "os",
    "region",
    "regionName",
    "countryCode",
    "available",
)
INSTANCE_COLUMNS: tuple[str, ...] = (
    "_id",
    "name",
    "status",
    "provider",
    "region",
    "gpuModel",
    "gpuCount",
    "hourlyPrice",
    "ip",
    "sshUser",
    "sshPort",
    "os",
    "dockerImage",
    "createdAt",
    "deletedAt",
    "age",
)
VOLUME_COLUMNS: tuple[str, ...] = (
    "_id",
    "name",
    "sizeInGb",
    "region",
    "providerId",
    "providerName",
    "user",
    "createdAt",
    "updatedAt",
)
SPEND_COLUMNS: tuple[str, ...] = (
    "_id",
    "name",
    "status",
    "hourlyPrice",
    "billedFrom",
    "billedUntil",
    "hoursBilled",
    "spend",
    "estimated",
    "autoDeleteAt",
)
VOLUME_OFFER_COLUMNS: tuple[str, ...] = (
    "providerId",
    "providerName",
    "minSizeInGb",
    "pricePerGbPerHour",
    "pricePerGbMonth",
    "regions",
)

#: Hours in a billing month (365 × 24 / 12), the usual convention for monthly storage prices.
HOURS_PER_MONTH = 730.0

# pandas' default dtype for text: ``str`` on pandas 3, ``object`` on pandas 2.
_STR_DTYPE = pd.Series(["x"]).dtype
_TEXT_IS_OBJECT = pd.api.types.is_object_dtype(_STR_DTYPE)
_DATETIME_DTYPE = pd.DatetimeTZDtype(unit="ns", tz="UTC")
_EPOCH = pd.Timestamp(0, tz="UTC")
_NO_REGION: list[dict[str, Any]] = [{}]
_NONE = type(None)
_get = dict.get

# Price-like columns that style_prices formats as currency, besides any name with these words.
_PRICE_COLUMNS = frozenset(
    {"hourlyPrice", "pricePerGpuHour", "pricePerGbPerHour", "pricePerGbMonth"}
)
_PRICE_WORDS = ("price", "spend", "hourly", "cost")


# --------------------------------------------------------------------------- input normalisation

# Spec names whose snake_case attribute in models.py is not a plain camelCase conversion.
_WIRE_NAMES: dict[str, str | None] = {
    "id": "_id",
    "ram_gb": "ramGB",
    "storage_gb": "storageGB",
    "vram_gb": "vRamGB",
    "vcpu": "vCpu",
    "price_per_gb_per_hour_text": None,  # its float twin is enough
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _record_to_wire(value: Any) -> Any:
    """Rebuild wire JSON from a record that carries no ``raw`` (one built by hand)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            key = None if f.name == "raw" else _WIRE_NAMES.get(f.name, _camel(f.name))
            if key is not None:
                out[key] = _record_to_wire(getattr(value, f.name))
        return out
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_record_to_wire(v) for v in value]
    return value


def _as_dict(item: Any) -> dict[str, Any]:
    """The wire JSON of one record or mapping; anything else reads as an empty object."""
    if isinstance(item, dict):
        return item
    if isinstance(item, Mapping):
        return dict(item)
    raw = getattr(item, "raw", None)
    if isinstance(raw, Mapping) and raw:
        return raw if isinstance(raw, dict) else dict(raw)
    wire = _record_to_wire(item)
    return wire if isinstance(wire, dict) else {}


def _dicts(items: Iterable[Any] | None) -> list[Any]:
    """Records or raw JSON → a list of wire dicts (a list of dicts is used as is, no copy).

    Only the first item is looked at: the offers fast path checks the rest as it goes, and the
    other frames go through ``.get`` on each item, so an odd item falls back to :func:`_as_dict`.
    """
    if items is None:
        return []
    if not isinstance(items, list):
        items = list(items)
    if not items or items[0].__class__ is dict:
        return items
    return [_as_dict(item) for item in items]


def _col(dicts: list[Any], key: str) -> list[Any]:
    """``[d.get(key) for d in dicts]``, tolerant of items that are not dicts."""
    try:
        return list(map(_get, dicts, repeat(key)))
    except TypeError:
        return [_as_dict(d).get(key) for d in dicts]


# --------------------------------------------------------------------------- typed columns


def _to_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _to_int(value: Any) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) else 0


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes"}
    return bool(value)


def _floats(values: list[Any]) -> np.ndarray:
    try:  # the JSON case (numbers), in C
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except (TypeError, ValueError):
        pass
    try:  # None (→ NaN) and numeric text, in C
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.fromiter(map(_to_float, values), dtype=np.float64, count=len(values))


def _ints(values: list[Any]) -> np.ndarray:
    try:  # ints, floats (truncated like int()) and numeric text, in C; None or NaN fall back
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(_to_int, values), dtype=np.int64, count=len(values))


def _bools(values: list[Any]) -> np.ndarray:
    flags = np.fromiter(values, dtype=bool, count=len(values))  # truthiness, in C
    # Falsy values (False, None, 0, "") all read as False; truthy ones must all be true (== True),
    # else something like the text "false" is there and each value is read like models._bool.
    if values.count(True) == np.count_nonzero(flags):
        return flags
    return np.fromiter(map(_to_bool, values), dtype=bool, count=len(values))


def _objects(values: list[Any]) -> np.ndarray:
    """Text as an object array; non-text values become their ``str``, ``None`` stays missing."""
    if not set(map(type, values)) <= {str, _NONE}:
        values = [v if v is None or isinstance(v, str) else str(v) for v in values]
    return np.fromiter(values, dtype=object, count=len(values))


def _text(values: list[Any]) -> Any:
    """A text column in pandas' default string dtype (missing → NA)."""
    if _TEXT_IS_OBJECT:
        return _objects(values)
    return pd.array(np.fromiter(values, dtype=object, count=len(values)), dtype=_STR_DTYPE)


def _joined(values: list[Any]) -> list[str | None]:
    """Lists of names as one ``"a, b"`` string each (see the module docstring)."""
    join = ", ".join
    out: list[str | None] = []
    append = out.append
    for v in values:
        if v.__class__ is list:
            try:
                append(join(v))
                continue
            except TypeError:
                pass
        if isinstance(v, list | tuple):
            append(join(map(str, v)))
        else:
            append(None if v is None else str(v))
    return out


def _categorical(codes: np.ndarray, categories: pd.Index) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories))


def _datetimes(values: list[Any]) -> pd.DatetimeIndex:
    """ISO 8601 strings (or datetimes) → UTC; unparsable, null and the epoch sentinel give NaT.

    A naive value is read as UTC.
    """
    clean = [v if isinstance(v, str | datetime) and v else None for v in values]
    parsed = pd.to_datetime(
        pd.Series(clean, dtype=object), utc=True, format="ISO8601", errors="coerce"
    )
    index = pd.DatetimeIndex(parsed).astype(_DATETIME_DTYPE)
    return index.where(~(index <= _EPOCH))


def _utc(now: datetime | pd.Timestamp | str | None) -> pd.Timestamp:
    stamp = pd.Timestamp.now(tz="UTC") if now is None else pd.Timestamp(now)
    if stamp.tzinfo is None:
        return stamp.tz_localize("UTC")
    return stamp.tz_convert("UTC")


def _region_text(value: Any) -> str | None:
    """The instance's region object as a plain string, like ``models.Instance.region_id``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("id", "region", "name", "_id"):
            if value.get(key):
                return str(value[key])
    return None


def _provider(values: list[Any]) -> tuple[list[Any], list[Any]]:
    """``cloudProvider`` objects (or bare id strings) → (``_id`` list, ``displayName`` list)."""
    ids: list[Any] = []
    names: list[Any] = []
    for v in values:
        if isinstance(v, str):
            ids.append(v)
            names.append(v)
        elif isinstance(v, Mapping):
            ids.append(v.get("_id"))
            names.append(v.get("displayName"))
        else:
            ids.append(None)
            names.append(None)
    return ids, names


# --------------------------------------------------------------------------- offers

class _Provider(msgspec.Struct, gc=False):
    """``InstanceOffer.cloud``: leaves typed ``Any`` so loose values (numbers as text) still
    decode; the column builders read them like the records do."""

    id: Any = msgspec.field(default=None, name="_id")
    name: Any = None


class _Configuration(msgspec.Struct, gc=False):
    ramGB: Any = None
    storageGB: Any = None
    vCpu: Any = None
    vRamGB: Any = None
    os: Any = None
    interconnect: Any = None


class _Region(msgspec.Struct, gc=False):
    region: Any = None
    name: Any = None
    countryCode: Any = None
    available: Any = None


class _Offer(msgspec.Struct, gc=False):
    """One offer as :func:`offers_frame` reads it; unknown fields are skipped, missing ones None."""

    gpuName: Any = None
    gpuCount: Any = None
    nvlink: Any = None
    deploymentType: Any = None
    instanceId: Any = None
    cloudInitAvailable: Any = None
    cloud: _Provider | None = None
    configuration: _Configuration | None = None
    hourlyPrice: Any = None
    availability: list[_Region] | None = None


_OFFERS_JSON = msgspec.json.Decoder(list[_Offer])
_JSON_BODY = bytes | bytearray | memoryview | str


def _typed_offers(offers: Any) -> list[_Offer]:
    """Offers as :class:`_Offer` rows: a JSON body decoded straight into them (no dicts made on
    the way), a list of wire dicts converted. Raises ``msgspec.ValidationError`` for offers not shaped
    like the spec (a null or odd object), which :func:`_loose_offers` then reads instead."""
    if isinstance(offers, _JSON_BODY):
        try:
            return _OFFERS_JSON.decode(offers)
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError:
            raise ValueError("The offers are not valid JSON.") from None
    return msgspec.convert(offers, list[_Offer])


def _loose_offers(offers: Any) -> list[Any]:
    """Offers as wire dicts for :func:`_gather_offers_safe`; a body must hold a JSON array."""
    if not isinstance(offers, _JSON_BODY):
        return offers
    data = json.loads(bytes(offers) if isinstance(offers, memoryview) else offers)
    if not isinstance(data, list):
        raise ValueError("The offers are not a JSON array.")
    return data


def _coder() -> defaultdict[Any, int]:
    """A dict that gives each new key the next code: ``codes[value]`` is a C-speed factorize."""
    return defaultdict(count().__next__)


def _gather_offers_fast(data: list[_Offer]) -> tuple[list[Any], list[int]]:
    """Every field of typed offers in one pass.

    This loop is most of the cost of :func:`offers_frame` after decoding, so it does the least
    per value: attribute reads and list appends only, with names coded right here through
    :func:`_coder` dicts (while each string is hot in cache) rather than factorized in later
    passes. Raises ``AttributeError``/``TypeError`` on the first offer it cannot read plainly (a
    missing ``cloud``, an ``os`` that is not a list of names, an unhashable name);
    :func:`_gather_offers_safe` then redoes the work tolerantly. Returns the columns in the order
    :func:`offers_frame` unpacks them (coded names as ``(codes, coder)`` pairs; availability
    fields one entry per row, a placeholder row for an empty ``availability``) and the row count
    per offer.
    """
    names, deployments, providers, provider_names, interconnects = (
        _coder(), _coder(), _coder(), _coder(), _coder()
    )
    regions_coder, region_names, countries, oses = _coder(), _coder(), _coder(), _coder()
    join = ", ".join
    gpu_name: list[int] = []
    gpu_count: list[Any] = []
    nvlink: list[Any] = []
    deployment: list[int] = []
    instance_id: list[Any] = []
    cloud_init: list[Any] = []
    hourly: list[Any] = []
    provider_id: list[int] = []
    provider_name: list[int] = []
    ram: list[Any] = []
    storage: list[Any] = []
    vcpu: list[Any] = []
    vram: list[Any] = []
    os_names: list[int] = []
    interconnect: list[int] = []
    region: list[int] = []
    region_name: list[int] = []
    country: list[int] = []
    available: list[Any] = []
    counts: list[int] = []
    for offer in data:
        gpu_name.append(names[offer.gpuName])
        gpu_count.append(offer.gpuCount)
        nvlink.append(offer.nvlink)
        deployment.append(deployments[offer.deploymentType])
        instance_id.append(offer.instanceId)
        cloud_init.append(offer.cloudInitAvailable)
        hourly.append(offer.hourlyPrice)
        cloud = offer.cloud
        provider_id.append(providers[cloud.id])
        provider_name.append(provider_names[cloud.name])
        config = offer.configuration
        ram.append(config.ramGB)
        storage.append(config.storageGB)
        vcpu.append(config.vCpu)
        vram.append(config.vRamGB)
        os_names.append(oses[join(config.os)])
        interconnect.append(interconnects[config.interconnect])
        entries = offer.availability
        if entries:
            counts.append(len(entries))
            for entry in entries:
                region.append(regions_coder[entry.region])
                region_name.append(region_names[entry.name])
                country.append(countries[entry.countryCode])
                available.append(entry.available)
        else:
            counts.append(1)
            region.append(regions_coder[None])
            region_name.append(region_names[None])
            country.append(countries[None])
            available.append(False)
    columns = [
        (gpu_name, names), gpu_count, nvlink, (deployment, deployments), instance_id, cloud_init,
        hourly, (provider_id, providers), (provider_name, provider_names), ram, storage, vcpu,
        vram, (os_names, oses), (interconnect, interconnects), (region, regions_coder),
        (region_name, region_names), (country, countries), available,
    ]
    return columns, counts


def _coded(values: list[Any]) -> tuple[list[int], defaultdict[Any, int]]:
    """:func:`_coder` codes of any values (unhashable ones by their text)."""
    coder = _coder()
    try:
        return [coder[v] for v in values], coder
    except TypeError:
        coder = _coder()
        return [coder[v if v is None else str(v)] for v in values], coder


def _gather_offers_safe(data: list[Any]) -> tuple[list[Any], list[int]]:
    """Like :func:`_gather_offers_fast` for anything: records, missing fields, nulls, extras."""
    offers = [_as_dict(o) for o in data]
    clouds = [_as_dict(c) for c in _col(offers, "cloud")]
    configs = [_as_dict(c) for c in _col(offers, "configuration")]
    entries: list[dict[str, Any]] = []
    counts: list[int] = []
    for regions in _col(offers, "availability"):
        regions = [_as_dict(r) for r in regions] if isinstance(regions, list | tuple) else []
        entries.extend(regions or _NO_REGION)
        counts.append(len(regions) or 1)
    columns = [
        _coded(_col(offers, "gpuName")),
        _col(offers, "gpuCount"),
        _col(offers, "nvlink"),
        _coded(_col(offers, "deploymentType")),
        _col(offers, "instanceId"),
        _col(offers, "cloudInitAvailable"),
        _col(offers, "hourlyPrice"),
        _coded(_col(clouds, "_id")),
        _coded(_col(clouds, "name")),
        _col(configs, "ramGB"),
        _col(configs, "storageGB"),
        _col(configs, "vCpu"),
        _col(configs, "vRamGB"),
        _coded(_joined(_col(configs, "os"))),
        _coded(_col(configs, "interconnect")),
        _coded(_col(entries, "region")),
        _coded(_col(entries, "name")),
        _coded(_col(entries, "countryCode")),
        _col(entries, "available"),
    ]
    return columns, counts


def _categories(coded: tuple[list[int], Mapping[Any, int]]) -> tuple[np.ndarray, pd.Index]:
    """:func:`_coder` output → (codes with ``-1`` for missing, sorted text categories)."""
    code_list, coder = coded
    keys = [None if k is None else k if k.__class__ is str else str(k) for k in coder]
    categories = sorted({k for k in keys if k is not None})
    position = {k: i for i, k in enumerate(categories)}
    remap = np.array([-1 if k is None else position[k] for k in keys], dtype=np.intp)
    codes = np.fromiter(code_list, dtype=np.intp, count=len(code_list))
    return (remap[codes] if len(remap) else codes), pd.Index(categories, dtype=_STR_DTYPE)


def _row_order(
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


def offers_frame(offers: bytes | str | Iterable[Any] | None) -> pd.DataFrame:
    """One row per offer and region of its ``availability``, available first, then cheapest.

    Takes :class:`~gpucloud_nb.models.InstanceOffer` records, the parsed JSON list of
    ``GET /gpu-cloud/instances/offers``, or its body as bytes or text: a body is decoded straight
    into typed rows with msgspec, without building a dict per offer, which is what makes
    ``cloud.instances.offers_frame()`` cheaper than ``json.loads`` of the same body alone. A body
    that is not JSON, or not a JSON array, raises :class:`ValueError`.

    Columns are :data:`OFFER_COLUMNS`: the spec's names, with ``cloud._id``/``cloud.name`` as
    ``providerId``/``providerName``, the ``configuration`` fields flattened, the
    ``availability`` fields as ``region``/``regionName``/``countryCode``/``available``, and two
    derived columns: ``pricePerGpuHour = hourlyPrice / gpuCount`` and
    ``totalVRamGB = vRamGB × gpuCount`` (``vRamGB`` is per GPU). Flags are ``bool``, ``gpuCount``
    ``int64``, prices and sizes ``float64`` (``vCpu`` too, like the records), ``instanceId``
    text, the other names ``category``. Rows are sorted by ``available`` (True first),
    ``hourlyPrice``, ``instanceId`` and ``region``, stably; the index is ``0..n-1``.

        >>> df = offers_frame(body)   # or offers_frame(json.loads(body)), or records
        >>> df.loc[df.available, ["gpuName", "gpuCount", "hourlyPrice", "region"]].head(2)
            gpuName  gpuCount  hourlyPrice     region
        0  RTX 4090         1         0.44  eu-west-1
        1  RTX 4090         1         0.44  us-east-1
    """
    if not isinstance(offers, _JSON_BODY):
        offers = _dicts(offers)  # once: an iterator cannot be read twice
    try:
        columns, count_list = _gather_offers_fast(_typed_offers(offers))
    except (msgspec.ValidationError, KeyError, TypeError, AttributeError):
        columns, count_list = _gather_offers_safe(_loose_offers(offers))
    (
        gpu_name, gpu_count, nvlink, deployment, instance_id, cloud_init, hourly,
        provider_id, provider_name, ram, storage, vcpu, vram, os_names, interconnect,
        region, region_name, country, available_list,
    ) = columns  # fmt: skip

    counts = np.array(count_list, dtype=np.intp)
    prices = _floats(hourly)
    gpus = _ints(gpu_count)
    vram_gb = _floats(vram)
    available = _bools(available_list)
    region_codes, region_cats = _categories(region)
    order, take = _row_order(prices, instance_id, counts, region_codes, len(region_cats),
                             available)

    def offer_cat(coded: tuple[list[int], Mapping[Any, int]]) -> pd.Categorical:
        codes, categories = _categories(coded)
        return _categorical(codes[take], categories)

    def row_cat(coded: tuple[list[int], Mapping[Any, int]]) -> pd.Categorical:
        codes, categories = _categories(coded)
        return _categorical(codes[order], categories)

    with np.errstate(divide="ignore", invalid="ignore"):
        per_gpu = np.where(gpus > 0, prices / gpus, np.nan)

    frame = {
        "instanceId": _text(instance_id)[take],
        "gpuName": offer_cat(gpu_name),
        "gpuCount": gpus[take],
        "hourlyPrice": prices[take],
        "pricePerGpuHour": per_gpu[take],
        "deploymentType": offer_cat(deployment),
        "nvlink": _bools(nvlink)[take],
        "cloudInitAvailable": _bools(cloud_init)[take],
        "providerId": offer_cat(provider_id),
        "providerName": offer_cat(provider_name),
        "vRamGB": vram_gb[take],
        "totalVRamGB": (vram_gb * gpus)[take],
        "ramGB": _floats(ram)[take],
        "vCpu": _floats(vcpu)[take],
        "storageGB": _floats(storage)[take],
        "interconnect": offer_cat(interconnect),
        "os": offer_cat(os_names),
        "region": _categorical(region_codes[order], region_cats),
        "regionName": row_cat(region_name),
        "countryCode": row_cat(country),
        "available": available[order],
    }
    return pd.DataFrame(frame, columns=list(OFFER_COLUMNS), copy=False)


# --------------------------------------------------------------------------- instances


def instances_frame(
    instances: Iterable[Any] | None, *, now: datetime | pd.Timestamp | str | None = None
) -> pd.DataFrame:
    """One row per instance, newest first, with its age.

    Takes :class:`~gpucloud_nb.models.Instance` or
    :class:`~gpucloud_nb.models.InstanceDetails` records, or the raw JSON of
    ``GET /gpu-cloud/instances``. Columns are :data:`INSTANCE_COLUMNS`; ``region`` is the region
    object read as a plain string (keys ``id``, ``region``, ``name``, ``_id``), ``createdAt`` and
    ``deletedAt`` are UTC datetimes (``deletedAt`` NaT for the epoch sentinel and null) and
    ``age = now - createdAt`` with ``now`` defaulting to the current UTC time (a naive ``now``
    is read as UTC).

        >>> instances_frame(cloud.instances.list())[["name", "status", "hourlyPrice", "age"]]
                name  status  hourlyPrice                    age
        0  llm-lab-2  active         2.49 0 days 00:12:03.120000
    """
    data = _dicts(instances)
    created = _datetimes(_col(data, "createdAt"))
    frame = pd.DataFrame(
        {
            "_id": _text(_col(data, "_id")),
            "name": _text(_col(data, "name")),
            "status": _text(_col(data, "status")),
            "provider": _text(_col(data, "provider")),
            "region": _text([_region_text(r) for r in _col(data, "region")]),
            "gpuModel": _text(_col(data, "gpuModel")),
            "gpuCount": _ints(_col(data, "gpuCount")),
            "hourlyPrice": _floats(_col(data, "hourlyPrice")),
            "ip": _text(_col(data, "ip")),
            "sshUser": _text(_col(data, "sshUser")),
            "sshPort": _ints(_col(data, "sshPort")),
            "os": _text(_col(data, "os")),
            "dockerImage": _text(_col(data, "dockerImage")),
            "createdAt": created,
            "deletedAt": _datetimes(_col(data, "deletedAt")),
            "age": (_utc(now) - created).astype("timedelta64[ns]"),
        },
        columns=list(INSTANCE_COLUMNS),
    )
    return _newest_first(frame)


def _newest_first(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values("createdAt", ascending=False, na_position="last", kind="stable")
    return frame.reset_index(drop=True)


# --------------------------------------------------------------------------- volumes


def volumes_frame(volumes: Iterable[Any] | None) -> pd.DataFrame:
    """One row per volume, newest first.

    Takes :class:`~gpucloud_nb.models.Volume` records or the raw JSON of
    ``GET /gpu-cloud/volumes``. Columns are :data:`VOLUME_COLUMNS`; ``providerId`` and
    ``providerName`` come from ``cloudProvider._id``/``displayName`` (NA when absent),
    ``sizeInGb`` is ``float64``, ``createdAt``/``updatedAt`` UTC datetimes.

        >>> volumes_frame(cloud.volumes.list())[["name", "sizeInGb", "region"]]
             name  sizeInGb     region
        0  models     100.0  us-east-1
    """
    data = _dicts(volumes)
    ids, names = _provider(_col(data, "cloudProvider"))
    frame = pd.DataFrame(
        {
            "_id": _text(_col(data, "_id")),
            "name": _text(_col(data, "name")),
            "sizeInGb": _floats(_col(data, "sizeInGb")),
            "region": _text(_col(data, "region")),
            "providerId": _text(ids),
            "providerName": _text(names),
            "user": _text(_col(data, "user")),
            "createdAt": _datetimes(_col(data, "createdAt")),
            "updatedAt": _datetimes(_col(data, "updatedAt")),
        },
        columns=list(VOLUME_COLUMNS),
    )
    return _newest_first(frame)


def volume_offers_frame(offers: Iterable[Any] | None) -> pd.DataFrame:
    """One row per volume offer, cheapest first, with the monthly price per GB.

    Takes :class:`~gpucloud_nb.models.VolumeOffer` records or the raw JSON of
    ``GET /gpu-cloud/volumes/offers``. Columns are :data:`VOLUME_OFFER_COLUMNS`;
    ``pricePerGbPerHour`` is the float value of the spec's decimal string (NaN if unparsable),
    ``pricePerGbMonth = pricePerGbPerHour × 730`` and ``regions`` a comma-joined string.

        >>> volume_offers_frame(cloud.volumes.offers())
          providerId providerName  minSizeInGb  pricePerGbPerHour  pricePerGbMonth     regions
        0   lambda       Lambda         10.0            0.00014           0.1022  us-east-1
    """
    data = _dicts(offers)
    ids, names = _provider(_col(data, "cloudProvider"))
    price = _floats(_col(data, "pricePerGbPerHour"))
    frame = pd.DataFrame(
        {
            "providerId": _text(ids),
            "providerName": _text(names),
            "minSizeInGb": _floats(_col(data, "minSizeInGb")),
            "pricePerGbPerHour": price,
            "pricePerGbMonth": price * HOURS_PER_MONTH,
            "regions": _text(_joined(_col(data, "regions"))),
        },
        columns=list(VOLUME_OFFER_COLUMNS),
    )
    frame = frame.sort_values(["pricePerGbPerHour", "providerId"], kind="stable")
    return frame.reset_index(drop=True)


def spend_frame(rows: Iterable[Mapping[str, Any]] | None) -> pd.DataFrame:
    """Spend so far, one row per instance, with the total in ``frame.attrs["total"]``.

    Takes the rows ``cloud.spend()`` assembles (one mapping per instance, see
    ``gpucloud_nb.client.billing``). Columns are :data:`SPEND_COLUMNS`, then any other keys of
    the rows in first-seen order; ``billedFrom``/``billedUntil`` are UTC datetimes (NaT when not
    billed), ``hourlyPrice``/``hoursBilled``/``spend`` ``float64``, ``estimated`` ``bool``, and
    ``autoDeleteAt`` stays an ``object`` column holding a datetime or ``None`` (no timer), so
    ``row["autoDeleteAt"] is None`` reads naturally. Rows keep their input order.

        >>> frame = spend_frame(rows)
        >>> frame.attrs["total"]
        1.84
    """
    data = _dicts(rows)
    columns: dict[str, Any] = {
        "_id": _text(_col(data, "_id")),
        "name": _text(_col(data, "name")),
        "status": _text(_col(data, "status")),
        "hourlyPrice": _floats(_col(data, "hourlyPrice")),
        "billedFrom": _datetimes(_col(data, "billedFrom")),
        "billedUntil": _datetimes(_col(data, "billedUntil")),
        "hoursBilled": _floats(_col(data, "hoursBilled")),
        "spend": _floats(_col(data, "spend")),
        "estimated": _bools(_col(data, "estimated")),
        "autoDeleteAt": pd.Series(_col(data, "autoDeleteAt"), dtype=object),
    }
    extra = dict.fromkeys(k for row in data for k in _as_dict(row) if k not in columns)
    for key in extra:
        columns[key] = _col(data, key)
    frame = pd.DataFrame(columns, columns=[*SPEND_COLUMNS, *extra])
    frame.attrs["total"] = float(np.nansum(frame["spend"].to_numpy()))
    return frame


# --------------------------------------------------------------------------- display


def format_price(value: Any) -> str:
    """A price as dollars: cents from $0.10 up, two significant digits below.

        >>> format_price(2.49), format_price(0.00014), format_price(1234.5)
        ('$2.49', '$0.00014', '$1,234.50')
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(number):
        return ""
    magnitude = abs(number)
    if magnitude >= 0.1 or magnitude == 0:
        text = f"{magnitude:,.2f}"
    else:
        digits = 1 - math.floor(math.log10(magnitude))
        text = f"{magnitude:.{digits}f}"
    return f"-${text}" if number < 0 else f"${text}"


def _is_price_column(name: Any, series: pd.Series) -> bool:
    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        return False
    if name in _PRICE_COLUMNS:
        return True
    lowered = str(name).lower()
    return any(word in lowered for word in _PRICE_WORDS)


def style_prices(df: pd.DataFrame, columns: Sequence[str] | None = None) -> Styler:
    """A :class:`~pandas.io.formats.style.Styler` showing price columns as dollars, index hidden.

    Formats ``hourlyPrice``, ``pricePerGpuHour``, ``pricePerGbPerHour``, ``pricePerGbMonth`` and
    any numeric column whose name mentions price, spend, hourly or cost (or exactly ``columns``,
    when given) with :func:`format_price`. Every other cell, and the column names, are
    HTML-escaped: names and images come from the server, and a name like
    ``<img src=x onerror=...>`` must show as text, never run. The frame itself is left a plain
    DataFrame.

        >>> style_prices(offers_frame(offers).head())   # in a notebook cell: $2.49, $0.00014 ...
    """
    if columns is None:
        columns = [c for c in df.columns if _is_price_column(c, df[c])]
    styler = df.style.format(escape="html").format_index(escape="html", axis="columns")
    styler = styler.format(format_price, subset=list(columns), na_rep="")
    return styler.hide(axis="index")
