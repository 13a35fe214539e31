"""Records → pandas DataFrames: offers, instances, volumes and volume offers.

Every function takes the typed records of :mod:`gpucloud_nb.models` (or the raw JSON list the
cloud sends, which is parsed into them first, so both read alike), builds its columns from their
attributes, and returns a plain :class:`pandas.DataFrame` whose columns keep the spec's field
names, so that what students read in the spec is what they sort and filter by. Nothing here does
I/O. The instance, volume, volume offer and spend frames are :class:`~gpucloud_nb.tables.Table`:
the same raw values, displayed as a person reads them (name first, ids last, dollars, local
times, a total row for spend).

    >>> df = offers_frame(cloud.instances.offers())  # doctest: +SKIP
    >>> df[df.available & (df.gpuName == "H100 SXM5")].head(3)  # doctest: +SKIP

Choices where the spec says "not shown" or leaves room:

- ``vRamGB`` is read as memory *per GPU* (the spec's ``Instance.vramPerGpu`` is its counterpart),
  so ``totalVRamGB = vRamGB × gpuCount``.
- ``os`` (offers) and ``regions`` (volume offers) are comma-joined strings such as
  ``"ubuntu-22.04, ubuntu-24.04"``: hashable (``groupby``, ``drop_duplicates`` and ``value_counts``
  work), readable in a table, and filterable with ``df.os.str.contains("ubuntu-22.04")``;
  ``df.os.str.split(", ")`` gives the lists back. An empty or missing list gives ``""``.
- A missing ``gpuCount``/``sshPort`` is ``0`` (the columns stay ``int64``), so
  ``pricePerGpuHour`` is NaN there; other missing numbers are NaN and missing flags ``False``.
  A missing or empty string is NA (``df.ip.isna()`` finds instances without an address yet).
- An offer with an empty ``availability`` still gets one row, with ``region`` NA and
  ``available=False``, so no offer disappears from the table.
- ``deletedAt`` is NaT for the Unix-epoch sentinel live instances carry, and for null.
- Instances and volumes are listed newest first; volume offers cheapest first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from itertools import count, repeat
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd

from gpucloud_nb.display import format_price, style_prices
from gpucloud_nb.models import (
    Instance,
    InstanceDetails,
    InstanceOffer,
    Record,
    Volume,
    VolumeOffer,
    convert_list,
    decode_list,
    to_float,
    to_int,
)
from gpucloud_nb.tables import Table, table

R = TypeVar("R", bound=Record)

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
_STR_DTYPE: Any = pd.Series(["x"]).dtype
_TEXT_IS_OBJECT = pd.api.types.is_object_dtype(_STR_DTYPE)
_DATETIME_DTYPE = pd.DatetimeTZDtype(unit="ns", tz="UTC")
_EPOCH = pd.Timestamp(0, tz="UTC")
_get = dict.get


# --------------------------------------------------------------------------- input normalisation

_JSON_BODY = bytes | bytearray | memoryview | str


def _records(cls: type[R], items: Any, what: str) -> list[R]:
    """Records of ``cls`` from records, wire JSON objects or a JSON body (``None``: none)."""
    if items is None:
        return []
    if isinstance(items, _JSON_BODY):
        return decode_list(cls, items, what)
    return convert_list(cls, items)


def _dicts(items: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Rows that are not wire records (``spend_frame``'s) → dicts; a non-mapping reads as ``{}``."""
    return [] if items is None else [dict(i) if isinstance(i, Mapping) else {} for i in items]


def _col(dicts: list[Any], key: str) -> list[Any]:
    """``[d.get(key) for d in dicts]``."""
    return list(map(_get, dicts, repeat(key)))


# --------------------------------------------------------------------------- typed columns


def _floats(values: list[Any]) -> np.ndarray:
    """Numbers as ``float64``; ``None`` and anything that is not a number become NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.fromiter(map(to_float, values), dtype=np.float64, count=len(values))


def _ints(values: list[Any]) -> np.ndarray:
    """Counts and ports as ``int64``; anything that is not a number becomes 0."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(to_int, values), dtype=np.int64, count=len(values))


def _bools(values: list[Any]) -> np.ndarray:
    """Flags as ``bool`` (records hold real flags: truthiness is enough)."""
    return np.fromiter(values, dtype=bool, count=len(values))


def _text(values: list[Any], keep_empty: bool = False) -> Any:
    """A text column in pandas' default string dtype; ``None`` and ``""`` are missing (NA),
    unless ``keep_empty`` (a joined list, where ``""`` means "none")."""
    if not keep_empty:
        values = [v if v.__class__ is str and v else (str(v) if v else None) for v in values]
    if _TEXT_IS_OBJECT:
        return np.fromiter(values, dtype=object, count=len(values))
    return pd.array(np.fromiter(values, dtype=object, count=len(values)), dtype=_STR_DTYPE)


def _categorical(codes: np.ndarray, categories: pd.Index) -> pd.Categorical[Any]:
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
    return cast("pd.DatetimeIndex", pd.DatetimeIndex(index.where(~(index <= _EPOCH))))


def _utc(now: datetime | pd.Timestamp | str | None) -> pd.Timestamp:
    stamp = pd.Timestamp.now(tz="UTC") if now is None else pd.Timestamp(now)
    if stamp.tzinfo is None:
        return cast("pd.Timestamp", stamp.tz_localize("UTC"))
    return cast("pd.Timestamp", stamp.tz_convert("UTC"))


# --------------------------------------------------------------------------- offers


def _coder() -> defaultdict[Any, int]:
    """A dict that gives each new key the next code: ``codes[value]`` is a C-speed factorize."""
    return defaultdict(count().__next__)


def _gather_offers(data: list[InstanceOffer]) -> tuple[list[Any], list[int]]:
    """Every field of the offers in one pass.

    This loop is most of the cost of :func:`offers_frame` after decoding, so it does the least
    per value: attribute reads and list appends only, with names coded right here through
    :func:`_coder` dicts (while each string is hot in cache) rather than factorized in later
    passes. Returns the columns in the order :func:`offers_frame` unpacks them (coded names as
    ``(codes, coder)`` pairs; availability fields one entry per row, a placeholder row for an
    empty ``availability``) and the row count per offer.
    """
    names, deployments, providers, provider_names, interconnects = (
        _coder(), _coder(), _coder(), _coder(), _coder()
    )
    regions_coder, region_names, countries, oses = _coder(), _coder(), _coder(), _coder()
    gpu_name: list[int] = []
    gpu_count: list[int] = []
    nvlink: list[bool] = []
    deployment: list[int] = []
    instance_id: list[str] = []
    cloud_init: list[bool] = []
    hourly: list[float] = []
    provider_id: list[int] = []
    provider_name: list[int] = []
    ram: list[float] = []
    storage: list[float] = []
    vcpu: list[float] = []
    vram: list[float] = []
    os_names: list[int] = []
    interconnect: list[int] = []
    region: list[int] = []
    region_name: list[int] = []
    country: list[int] = []
    available: list[bool] = []
    counts: list[int] = []
    for offer in data:
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
        config = offer.configuration
        ram.append(config.ram_gb)
        storage.append(config.storage_gb)
        vcpu.append(config.vcpu)
        vram.append(config.vram_gb)
        os_names.append(oses[config.os])  # the tuple: joined once per distinct list, later
        interconnect.append(interconnects[config.interconnect])
        entries = offer.availability
        if entries:
            counts.append(len(entries))
            for entry in entries:
                region.append(regions_coder[entry.region])
                region_name.append(region_names[entry.name])
                country.append(countries[entry.country_code])
                available.append(entry.available)
        else:
            counts.append(1)
            region.append(regions_coder[""])
            region_name.append(region_names[""])
            country.append(countries[""])
            available.append(False)
    columns = [
        (gpu_name, names), gpu_count, nvlink, (deployment, deployments), instance_id, cloud_init,
        hourly, (provider_id, providers), (provider_name, provider_names), ram, storage, vcpu,
        vram, (os_names, oses), (interconnect, interconnects), (region, regions_coder),
        (region_name, region_names), (country, countries), available,
    ]
    return columns, counts


def _categories(coded: tuple[list[int], Mapping[Any, int]],
                keep_empty: bool = False) -> tuple[np.ndarray, pd.Index]:
    """:func:`_coder` output → (codes, sorted text categories); ``""`` is missing (code ``-1``)
    unless ``keep_empty`` (a joined list, where ``""`` means "none"). Tuple keys (lists of
    names) are joined with ``", "``; two that join alike share a category."""
    code_list, coder = coded
    keys = [", ".join(k) if k.__class__ is tuple else k for k in coder]
    categories = sorted({k for k in keys if k or keep_empty})
    position = {k: i for i, k in enumerate(categories)}
    remap = np.array([position[k] if k or keep_empty else -1 for k in keys], dtype=np.intp)
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

        >>> df = offers_frame(body)   # or offers_frame(json.loads(body)), or records  # doctest: +SKIP
        >>> df.loc[df.available, ["gpuName", "gpuCount", "hourlyPrice", "region"]].head(2)  # doctest: +SKIP
            gpuName  gpuCount  hourlyPrice     region
        0  RTX 4090         1         0.44  eu-west-1
        1  RTX 4090         1         0.44  us-east-1
    """
    columns, count_list = _gather_offers(_records(InstanceOffer, offers, "offers"))
    (
        gpu_name, gpu_count, nvlink, deployment, instance_id, cloud_init, hourly,
        provider_id, provider_name, ram, storage, vcpu, vram, os_names, interconnect,
        region, region_name, country, available_list,
    ) = columns  # fmt: skip

    counts = np.array(count_list, dtype=np.intp)
    prices = _floats(hourly)
    gpus = np.fromiter(gpu_count, dtype=np.int64, count=len(gpu_count))
    vram_gb = _floats(vram)
    available = _bools(available_list)
    region_codes, region_cats = _categories(region)
    order, take = _row_order(prices, instance_id, counts, region_codes, len(region_cats),
                             available)

    def offer_cat(coded: tuple[list[int], Mapping[str, int]],
                  keep_empty: bool = False) -> pd.Categorical:
        codes, categories = _categories(coded, keep_empty)
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
        "os": offer_cat(os_names, keep_empty=True),
        "region": _categorical(region_codes[order], region_cats),
        "regionName": row_cat(region_name),
        "countryCode": row_cat(country),
        "available": available[order],
    }
    return cast("pd.DataFrame", pd.DataFrame(frame, columns=list(OFFER_COLUMNS), copy=False))


# --------------------------------------------------------------------------- instances


def instances_frame(
    instances: Iterable[Any] | None, *, now: datetime | pd.Timestamp | str | None = None
) -> Table:
    """One row per instance, newest first, with its age.

    Takes :class:`~gpucloud_nb.models.Instance` or
    :class:`~gpucloud_nb.models.InstanceDetails` records, or the raw JSON of
    ``GET /gpu-cloud/instances``. Columns are :data:`INSTANCE_COLUMNS`; ``region`` is the region
    object read as a plain string (keys ``id``, ``region``, ``name``, ``_id``), ``createdAt`` and
    ``deletedAt`` are UTC datetimes (``deletedAt`` NaT for the epoch sentinel and null) and
    ``age = now - createdAt`` with ``now`` defaulting to the current UTC time (a naive ``now``
    is read as UTC).

        >>> frame = instances_frame(cloud.instances.list())  # doctest: +SKIP
        >>> frame[["name", "status", "hourlyPrice", "age"]]  # doctest: +SKIP
                name  status  hourlyPrice                    age
        0  llm-lab-2  active         2.49 0 days 00:12:03.120000
    """
    data = [i if isinstance(i, Instance | InstanceDetails) else Instance.from_json(i)
            for i in instances or ()]
    created = _datetimes([i.created_at for i in data])
    frame = pd.DataFrame(
        {
            "_id": _text([i.id for i in data]),
            "name": _text([i.name for i in data]),
            "status": _text([i.status for i in data]),
            "provider": _text([i.provider for i in data]),
            "region": _text([i.region_id for i in data]),
            "gpuModel": _text([i.gpu_model for i in data]),
            "gpuCount": _ints([i.gpu_count for i in data]),
            "hourlyPrice": _floats([i.hourly_price for i in data]),
            "ip": _text([i.ip for i in data]),
            "sshUser": _text([i.ssh_user for i in data]),
            "sshPort": _ints([i.ssh_port for i in data]),
            "os": _text([i.os for i in data]),
            "dockerImage": _text([i.docker_image for i in data]),
            "createdAt": created,
            "deletedAt": _datetimes([i.deleted_at for i in data]),
            "age": (_utc(now) - created).astype("timedelta64[ns]"),
        },
        columns=list(INSTANCE_COLUMNS),
    )
    return table(_newest_first(frame))


def _newest_first(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values("createdAt", ascending=False, na_position="last", kind="stable")
    return cast("pd.DataFrame", frame.reset_index(drop=True))


# --------------------------------------------------------------------------- volumes


def volumes_frame(volumes: Iterable[Any] | None) -> Table:
    """One row per volume, newest first.

    Takes :class:`~gpucloud_nb.models.Volume` records or the raw JSON of
    ``GET /gpu-cloud/volumes``. Columns are :data:`VOLUME_COLUMNS`; ``providerId`` and
    ``providerName`` come from ``cloudProvider._id``/``displayName`` (NA when absent),
    ``sizeInGb`` is ``float64``, ``createdAt``/``updatedAt`` UTC datetimes.

        >>> volumes_frame(cloud.volumes.list())[["name", "sizeInGb", "region"]]  # doctest: +SKIP
             name  sizeInGb     region
        0  models     100.0  us-east-1
    """
    data = _records(Volume, volumes, "volumes")
    providers = [v.cloud_provider for v in data]
    frame = pd.DataFrame(
        {
            "_id": _text([v.id for v in data]),
            "name": _text([v.name for v in data]),
            "sizeInGb": _floats([v.size_in_gb for v in data]),
            "region": _text([v.region for v in data]),
            "providerId": _text([p.id if p else None for p in providers]),
            "providerName": _text([p.display_name if p else None for p in providers]),
            "user": _text([v.user for v in data]),
            "createdAt": _datetimes([v.created_at for v in data]),
            "updatedAt": _datetimes([v.updated_at for v in data]),
        },
        columns=list(VOLUME_COLUMNS),
    )
    return table(_newest_first(frame))


def volume_offers_frame(offers: Iterable[Any] | None) -> Table:
    """One row per volume offer, cheapest first, with the monthly price per GB.

    Takes :class:`~gpucloud_nb.models.VolumeOffer` records or the raw JSON of
    ``GET /gpu-cloud/volumes/offers``. Columns are :data:`VOLUME_OFFER_COLUMNS`;
    ``pricePerGbPerHour`` is the float value of the spec's decimal string (NaN if unparsable),
    ``pricePerGbMonth = pricePerGbPerHour × 730`` and ``regions`` a comma-joined string.

        >>> volume_offers_frame(cloud.volumes.offers())  # doctest: +SKIP
          providerId providerName  minSizeInGb  pricePerGbPerHour  pricePerGbMonth     regions
        0   lambda       Lambda         10.0            0.00014           0.1022  us-east-1
    """
    data = _records(VolumeOffer, offers, "volume offers")
    price = _floats([o.price_per_gb_per_hour for o in data])
    frame = pd.DataFrame(
        {
            "providerId": _text([o.cloud_provider.id for o in data]),
            "providerName": _text([o.cloud_provider.display_name for o in data]),
            "minSizeInGb": _floats([o.min_size_in_gb for o in data]),
            "pricePerGbPerHour": price,
            "pricePerGbMonth": price * HOURS_PER_MONTH,
            "regions": _text([", ".join(o.regions) for o in data], keep_empty=True),
        },
        columns=list(VOLUME_OFFER_COLUMNS),
    )
    frame = frame.sort_values(["pricePerGbPerHour", "providerId"], kind="stable")
    return table(frame.reset_index(drop=True))


def spend_frame(rows: Iterable[Mapping[str, Any]] | None, *,
                include_deleted: bool = True) -> Table:
    """Spend so far, one row per instance, with the total in ``frame.attrs["total"]``.

    Every instance has its row, deleted ones included; ``include_deleted=False`` hides those in
    the display only, where the total row still counts them (see :mod:`gpucloud_nb.tables`).

    Takes the rows ``cloud.spend()`` assembles (one mapping per instance, see
    ``gpucloud_nb.client.billing``). Columns are :data:`SPEND_COLUMNS`, then any other keys of
    the rows in first-seen order; ``billedFrom``/``billedUntil`` are UTC datetimes (NaT when not
    billed), ``hourlyPrice``/``hoursBilled``/``spend`` ``float64``, ``estimated`` ``bool``, and
    ``autoDeleteAt`` stays an ``object`` column holding a datetime or ``None`` (no timer), so
    ``row["autoDeleteAt"] is None`` reads naturally. Rows keep their input order.

        >>> frame = spend_frame(rows)  # doctest: +SKIP
        >>> frame.attrs["total"]  # doctest: +SKIP
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
    extra = dict.fromkeys(k for row in data for k in row if k not in columns)
    for key in extra:
        columns[key] = _col(data, key)
    frame = pd.DataFrame(columns, columns=[*SPEND_COLUMNS, *extra])
    frame.attrs["total"] = float(np.nansum(frame["spend"].to_numpy()))
    return table(frame, hide_deleted=not include_deleted)
