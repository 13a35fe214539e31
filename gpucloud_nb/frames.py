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

from collections.abc import Iterable, Mapping
from datetime import datetime
from itertools import repeat
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd

from gpucloud_nb.decoding import Record, convert_list, decode_list
from gpucloud_nb.display import format_price, style_prices
from gpucloud_nb.frame_columns import (
    bool_column,
    category_column,
    datetime_column,
    float_column,
    int_column,
    text_column,
    utc_timestamp,
)
from gpucloud_nb.models import Instance, InstanceDetails, Volume, VolumeOffer
from gpucloud_nb.offer_columns import Coded, categories, offer_columns, row_order
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


# --------------------------------------------------------------------------- offers


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
    c = offer_columns(offers)
    prices, gpus, vram_gb = c.hourly_price, c.gpu_count, c.vram_gb
    region_codes, region_cats = categories(c.region)
    order, take = row_order(prices, c.instance_id, c.counts, region_codes, len(region_cats),
                            c.available)

    def offer_cat(coded: Coded, keep_empty: bool = False) -> pd.Categorical:
        codes, names = categories(coded, keep_empty)
        return category_column(codes[take], names)

    def row_cat(coded: Coded) -> pd.Categorical:
        codes, names = categories(coded)
        return category_column(codes[order], names)

    with np.errstate(divide="ignore", invalid="ignore"):
        per_gpu = np.where(gpus > 0, prices / gpus, np.nan)

    frame = {
        "instanceId": text_column(c.instance_id)[take],
        "gpuName": offer_cat(c.gpu_name),
        "gpuCount": gpus[take],
        "hourlyPrice": prices[take],
        "pricePerGpuHour": per_gpu[take],
        "deploymentType": offer_cat(c.deployment_type),
        "nvlink": c.nvlink[take],
        "cloudInitAvailable": c.cloud_init_available[take],
        "providerId": offer_cat(c.provider_id),
        "providerName": offer_cat(c.provider_name),
        "vRamGB": vram_gb[take],
        "totalVRamGB": (vram_gb * gpus)[take],
        "ramGB": c.ram_gb[take],
        "vCpu": c.vcpu[take],
        "storageGB": c.storage_gb[take],
        "interconnect": offer_cat(c.interconnect),
        "os": offer_cat(c.os, keep_empty=True),
        "region": category_column(region_codes[order], region_cats),
        "regionName": row_cat(c.region_name),
        "countryCode": row_cat(c.country_code),
        "available": c.available[order],
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
    created = datetime_column([i.created_at for i in data])
    frame = pd.DataFrame(
        {
            "_id": text_column([i.id for i in data]),
            "name": text_column([i.name for i in data]),
            "status": text_column([i.status for i in data]),
            "provider": text_column([i.provider for i in data]),
            "region": text_column([i.region_id for i in data]),
            "gpuModel": text_column([i.gpu_model for i in data]),
            "gpuCount": int_column([i.gpu_count for i in data]),
            "hourlyPrice": float_column([i.hourly_price for i in data]),
            "ip": text_column([i.ip for i in data]),
            "sshUser": text_column([i.ssh_user for i in data]),
            "sshPort": int_column([i.ssh_port for i in data]),
            "os": text_column([i.os for i in data]),
            "dockerImage": text_column([i.docker_image for i in data]),
            "createdAt": created,
            "deletedAt": datetime_column([i.deleted_at for i in data]),
            "age": (utc_timestamp(now) - created).astype("timedelta64[ns]"),
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
            "_id": text_column([v.id for v in data]),
            "name": text_column([v.name for v in data]),
            "sizeInGb": float_column([v.size_in_gb for v in data]),
            "region": text_column([v.region for v in data]),
            "providerId": text_column([p.id if p else None for p in providers]),
            "providerName": text_column([p.display_name if p else None for p in providers]),
            "user": text_column([v.user for v in data]),
            "createdAt": datetime_column([v.created_at for v in data]),
            "updatedAt": datetime_column([v.updated_at for v in data]),
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
    price = float_column([o.price_per_gb_per_hour for o in data])
    frame = pd.DataFrame(
        {
            "providerId": text_column([o.cloud_provider.id for o in data]),
            "providerName": text_column([o.cloud_provider.display_name for o in data]),
            "minSizeInGb": float_column([o.min_size_in_gb for o in data]),
            "pricePerGbPerHour": price,
            "pricePerGbMonth": price * HOURS_PER_MONTH,
            "regions": text_column([", ".join(o.regions) for o in data], keep_empty=True),
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
        "_id": text_column(_col(data, "_id")),
        "name": text_column(_col(data, "name")),
        "status": text_column(_col(data, "status")),
        "hourlyPrice": float_column(_col(data, "hourlyPrice")),
        "billedFrom": datetime_column(_col(data, "billedFrom")),
        "billedUntil": datetime_column(_col(data, "billedUntil")),
        "hoursBilled": float_column(_col(data, "hoursBilled")),
        "spend": float_column(_col(data, "spend")),
        "estimated": bool_column(_col(data, "estimated")),
        "autoDeleteAt": pd.Series(_col(data, "autoDeleteAt"), dtype=object),
    }
    extra = dict.fromkeys(k for row in data for k in row if k not in columns)
    for key in extra:
        columns[key] = _col(data, key)
    frame = pd.DataFrame(columns, columns=[*SPEND_COLUMNS, *extra])
    frame.attrs["total"] = float(np.nansum(frame["spend"].to_numpy()))
    return table(frame, hide_deleted=not include_deleted)
