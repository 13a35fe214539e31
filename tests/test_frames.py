"""Records → DataFrames (``gpucloud_nb.frames``): columns, dtypes, order and arithmetic.

No server here: frames do no I/O, so every test builds its JSON by hand.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from gpucloud_nb import GPUCloud, decoding
from gpucloud_nb.frames import (
    INSTANCE_COLUMNS,
    OFFER_COLUMNS,
    SPEND_COLUMNS,
    VOLUME_COLUMNS,
    VOLUME_OFFER_COLUMNS,
    format_price,
    instances_frame,
    offers_frame,
    spend_frame,
    style_prices,
    volume_offers_frame,
    volumes_frame,
)
from gpucloud_nb.models import Instance, InstanceDetails, InstanceOffer, Volume, VolumeOffer
from gpucloud_nb.sandbox import catalogue as sandbox_catalogue

TEXT = pd.Series(["x"]).dtype  # pandas' default string dtype
EPOCH = "1970-01-01T00:00:00.000Z"
UTC = timezone.utc


def region(code: str, name: str, country: str, available: bool) -> dict[str, Any]:
    return {"region": code, "name": name, "countryCode": country, "available": available}


def offer(instance_id: str, price: float, gpus: int, regions: list[dict[str, Any]], *,
          gpu: str = "H100 SXM5", vram: float = 80, deployment: str = "vm",
          os: list[str] | None = None) -> dict[str, Any]:
    return {
        "gpuName": gpu,
        "gpuCount": gpus,
        "nvlink": gpus >= 2,
        "deploymentType": deployment,
        "instanceId": instance_id,
        "cloudInitAvailable": deployment != "container",
        "cloud": {"_id": "lambda", "name": "Lambda"},
        "configuration": {
            "ramGB": 200 * gpus,
            "storageGB": 1000,
            "vCpu": 26 * gpus,
            "vRamGB": vram,
            "os": ["ubuntu-22.04", "ubuntu-24.04"] if os is None else os,
            "interconnect": "SXM5",
        },
        "hourlyPrice": price,
        "availability": regions,
    }


def well_formed() -> list[dict[str, Any]]:
    """Every field present: three regions, an empty availability, a price tie."""
    h100 = offer("h100-1x", 2.49, 1, [
        region("us-west-2", "US West (Oregon)", "US", True),
        region("eu-west-1", "EU West (Ireland)", "IE", False),
        region("us-east-1", "US East (Virginia)", "US", True),
    ])
    h100["spotPrice"] = 1.2  # unknown extra fields are ignored
    h100["cloud"]["tier"] = "gold"
    h100["configuration"]["pcieGen"] = 5
    h100["availability"][0]["latencyMs"] = 12
    rtx = offer("rtx-4090-1x", 0.44, 1, [], gpu="RTX 4090", vram=24, deployment="container",
                os=[])
    a100 = offer("a100-2x", 2.49, 2, [
        region("us-east-1", "US East (Virginia)", "US", False),
        region("eu-west-1", "EU West (Ireland)", "IE", True),
    ], gpu="A100 SXM4", vram=40)
    return [h100, rtx, a100]


def catalogue() -> list[dict[str, Any]]:
    """The well-formed offers plus one missing ``nvlink`` and ``configuration.interconnect``."""
    partial = offer("a100-8x", 14.32, 8, [region("us-east-1", "US East (Virginia)", "US", True)],
                    gpu="A100 SXM4")
    del partial["nvlink"]
    del partial["configuration"]["interconnect"]
    return [*well_formed(), partial]


EXPECTED_ROWS = [  # (instanceId, region, available): available first, price, id, region
    ("a100-2x", "eu-west-1", True),
    ("h100-1x", "us-east-1", True),
    ("h100-1x", "us-west-2", True),
    ("a100-8x", "us-east-1", True),
    ("rtx-4090-1x", None, False),
    ("a100-2x", "us-east-1", False),
    ("h100-1x", "eu-west-1", False),
]

OFFER_DTYPES = {
    "instanceId": TEXT, "gpuName": "category", "gpuCount": "int64", "hourlyPrice": "float64",
    "pricePerGpuHour": "float64", "deploymentType": "category", "nvlink": "bool",
    "cloudInitAvailable": "bool", "providerId": "category", "providerName": "category",
    "vRamGB": "float64", "totalVRamGB": "float64", "ramGB": "float64", "vCpu": "float64",
    "storageGB": "float64", "interconnect": "category", "os": "category", "region": "category",
    "regionName": "category", "countryCode": "category", "available": "bool",
}  # fmt: skip


def assert_dtypes(df: pd.DataFrame, expected: dict[str, Any]) -> None:
    assert list(df.columns) == list(expected)
    for column, dtype in expected.items():
        assert df[column].dtype == dtype, (column, df[column].dtype, dtype)


def rows(df: pd.DataFrame) -> list[tuple[Any, ...]]:
    return [(i, None if pd.isna(r) else r, bool(a))
            for i, r, a in zip(df["instanceId"], df["region"], df["available"], strict=True)]


# --------------------------------------------------------------------------- offers


def test_offer_columns_and_dtypes() -> None:
    df = offers_frame(catalogue())
    assert tuple(df.columns) == OFFER_COLUMNS
    assert_dtypes(df, OFFER_DTYPES)
    assert list(df.index) == list(range(len(df)))


def test_one_row_per_offer_and_region_available_first_then_cheapest() -> None:
    df = offers_frame(catalogue())
    assert len(df) == 3 + 1 + 2 + 1
    assert rows(df) == EXPECTED_ROWS
    assert df["available"].tolist() == sorted(df["available"], reverse=True)
    for _, part in df.groupby("available"):
        assert part["hourlyPrice"].is_monotonic_increasing


def test_order_does_not_depend_on_input_order() -> None:
    data = catalogue()
    assert_frame_equal(offers_frame(data[::-1]), offers_frame(data))


def test_empty_availability_still_gives_one_row() -> None:
    df = offers_frame(catalogue())
    row = df[df["instanceId"] == "rtx-4090-1x"]
    assert len(row) == 1
    row = row.iloc[0]
    assert pd.isna(row["region"]) and pd.isna(row["regionName"]) and pd.isna(row["countryCode"])
    assert not row["available"]
    assert row["os"] == ""  # an empty os list
    assert row["deploymentType"] == "container" and not row["cloudInitAvailable"]


def test_derived_prices_and_sizes() -> None:
    df = offers_frame(catalogue()).drop_duplicates("instanceId").set_index("instanceId")
    assert df.loc["a100-2x", "pricePerGpuHour"] == pytest.approx(2.49 / 2)
    assert df.loc["a100-8x", "pricePerGpuHour"] == pytest.approx(14.32 / 8)
    assert df.loc["a100-2x", "totalVRamGB"] == 80.0  # 40 GB per GPU × 2
    assert df.loc["a100-8x", "totalVRamGB"] == 640.0
    assert df.loc["h100-1x", "totalVRamGB"] == df.loc["h100-1x", "vRamGB"] == 80.0


def test_flattened_fields() -> None:
    df = offers_frame(catalogue())
    first = df.iloc[0]
    assert first["providerId"] == "lambda" and first["providerName"] == "Lambda"
    assert first["os"] == "ubuntu-22.04, ubuntu-24.04"
    assert first["regionName"] == "EU West (Ireland)" and first["countryCode"] == "IE"
    assert first["ramGB"] == 400.0 and first["vCpu"] == 52.0 and first["storageGB"] == 1000.0
    assert df[df["os"].str.contains("ubuntu-24.04")]["instanceId"].nunique() == 3
    assert list(df["region"].cat.categories) == ["eu-west-1", "us-east-1", "us-west-2"]


def test_missing_fields_are_tolerated() -> None:
    df = offers_frame(catalogue())
    partial = df[df["instanceId"] == "a100-8x"].iloc[0]
    assert not partial["nvlink"]
    assert pd.isna(partial["interconnect"])
    broken = [{"instanceId": "bare", "cloud": None, "configuration": "?", "availability": None}]
    bare = offers_frame(broken)
    assert_dtypes(bare, OFFER_DTYPES)
    assert bare["instanceId"].tolist() == ["bare"]
    assert bare["gpuCount"].tolist() == [0] and np.isnan(bare["pricePerGpuHour"].iloc[0])
    assert not bare["available"].iloc[0]


def test_loosely_typed_values_read_like_the_records() -> None:
    data = well_formed()
    data[0]["availability"][0]["available"] = "false"  # text flags, numbers as text
    data[0]["hourlyPrice"] = "2.49"
    data[2]["gpuCount"] = 2.0
    data[2]["cloud"]["_id"] = 42
    df = offers_frame(data)
    assert_dtypes(df, OFFER_DTYPES)
    h100 = df[df["instanceId"] == "h100-1x"].set_index("region")
    assert not h100.loc["us-west-2", "available"] and h100.loc["us-east-1", "available"]
    assert (h100["hourlyPrice"] == 2.49).all()
    a100 = df[df["instanceId"] == "a100-2x"]
    assert (a100["gpuCount"] == 2).all() and (a100["providerId"] == "42").all()
    records = [InstanceOffer.from_json(o) for o in data]
    assert [r.is_available for r in records] == [True, False, True]


def test_fast_and_tolerant_paths_agree() -> None:
    data = well_formed()
    loose = [decoding._loose(InstanceOffer, offer) for offer in data]  # field by field
    assert loose == [InstanceOffer.from_json(offer) for offer in data]
    assert_frame_equal(offers_frame(loose), offers_frame(data))


def test_records_and_raw_json_give_equal_frames() -> None:
    data = catalogue()
    records = [InstanceOffer.from_json(o) for o in data]
    assert_frame_equal(offers_frame(records), offers_frame(data))
    assert_frame_equal(offers_frame(iter(data)), offers_frame(data))
    # A record built by hand reads the same as one decoded from the wire.
    bare = [InstanceOffer(**msgspec.structs.asdict(r)) for r in records[:3]]
    assert_frame_equal(offers_frame(bare), offers_frame(data[:3]))


@pytest.mark.parametrize("encode", [
    lambda text: text.encode(), str, lambda text: bytearray(text.encode()),
    lambda text: memoryview(text.encode()),
])
def test_a_json_body_gives_the_same_frame_as_its_parsed_list(encode: Any) -> None:
    for data in (catalogue(), [*well_formed(), {"instanceId": "odd", "configuration": "?"}], []):
        assert_frame_equal(offers_frame(encode(json.dumps(data))), offers_frame(data))


def test_a_body_whose_nested_values_repeat_reads_like_its_parsed_list() -> None:
    # From a body, each distinct configuration and availability text is decoded once: texts that
    # repeat, differ only in spacing, or are missing must give what the parsed list gives.
    data = [*catalogue(), *sandbox_catalogue.synthetic_offers(300, regions_per_offer=2, seed=7)]
    for i, item in enumerate(data[4:60]):
        item["instanceId"] = f"copy-{i:02d}"
        item["availability"] = data[0]["availability"]  # the same list, the same text
        item["configuration"] = data[2]["configuration"]
    del data[61]["configuration"], data[62]["availability"], data[63]["cloud"]
    spaced = json.dumps(data[100:], indent=1, separators=(" ,", ": "))
    body = json.dumps(data[:100])[:-1] + "," + spaced[1:]
    assert len(json.loads(body)) == len(data)
    assert_frame_equal(offers_frame(body), offers_frame(data))
    assert_frame_equal(offers_frame(body.encode()), offers_frame(json.loads(body)))


@pytest.mark.parametrize("odd", [
    {"availability": None}, {"availability": [{"region": None}]}, {"configuration": []},
    {"configuration": {"os": "ubuntu"}}, {"availability": [{"available": "yes"}]},
])
def test_an_odd_nested_value_in_a_body_reads_like_the_records(odd: dict[str, Any]) -> None:
    data = [*well_formed(), {"instanceId": "odd", "gpuCount": 1, **odd}]
    records = [InstanceOffer.from_json(o) for o in data]
    assert_frame_equal(offers_frame(json.dumps(data).encode()), offers_frame(records))


def test_a_body_read_by_the_tolerant_path_agrees() -> None:
    data = [*well_formed(), {"instanceId": "odd", "cloud": None, "hourlyPrice": "1.5"}]
    body = json.dumps(data).encode()  # the null sends the whole body down the loose path
    assert_frame_equal(offers_frame(body), offers_frame([InstanceOffer.from_json(o) for o in data]))
    frame = offers_frame(body).set_index("instanceId")
    assert frame.loc["odd", "hourlyPrice"] == 1.5 and pd.isna(frame.loc["odd", "providerId"])


@pytest.mark.parametrize(("body", "message"), [
    (b'[{"instanceId": "a"', "The offers are not valid JSON."),
    (b"<html>busy</html>", "The offers are not valid JSON."),
    (b'{"offers": []}', "The offers are not a JSON array."),
])
def test_a_body_that_is_not_a_json_array_is_refused_in_one_sentence(body: bytes,
                                                                     message: str) -> None:
    with pytest.raises(ValueError) as caught:
        offers_frame(body)
    assert str(caught.value) == message


def test_input_is_not_modified() -> None:
    data = catalogue()
    before = copy.deepcopy(data)
    offers_frame(data)
    assert data == before


@pytest.mark.parametrize("empty", [[], (), None])
def test_empty_offers_keep_columns_and_dtypes(empty: Any) -> None:
    df = offers_frame(empty)
    assert len(df) == 0
    assert_dtypes(df, OFFER_DTYPES)


def test_offers_frame_is_a_plain_dataframe() -> None:
    df = offers_frame(catalogue())
    assert type(df) is pd.DataFrame
    cheap = df[df["available"] & (df["gpuCount"] >= 2)]
    assert cheap["instanceId"].tolist() == ["a100-2x", "a100-8x"]


# --------------------------------------------------------------------------- instances


def instance(_id: str, created: str | None, deleted: str | None, **extra: Any) -> dict[str, Any]:
    item = {
        "_id": _id, "name": f"lab-{_id}", "provider": "lambda",
        "region": {"id": "us-east-1", "name": "US East"}, "volumes": [], "status": "active",
        "gpuCount": 1, "gpuModel": "H100 SXM5", "ram": 200, "storage": 1000, "vramPerGpu": 80,
        "vcpus": 26, "interconnect": "SXM5", "nvlink": False, "os": "ubuntu-22.04",
        "ip": "10.0.0.7", "sshUser": "ubuntu", "sshPort": 22, "dockerImage": "",
        "dockerCommand": "", "hourlyPrice": 2.49, "deletedAt": deleted, "createdAt": created,
        "updatedAt": created,
    }  # fmt: skip
    item.update(extra)
    return item


INSTANCE_DTYPES = {
    "_id": TEXT, "name": TEXT, "status": TEXT, "provider": TEXT, "region": TEXT,
    "gpuModel": TEXT, "gpuCount": "int64", "hourlyPrice": "float64", "ip": TEXT,
    "sshUser": TEXT, "sshPort": "int64", "os": TEXT, "dockerImage": TEXT,
    "createdAt": "datetime64[ns, UTC]", "deletedAt": "datetime64[ns, UTC]",
    "age": "timedelta64[ns]",
}  # fmt: skip


def instances() -> list[dict[str, Any]]:
    return [
        instance("i-old", "2026-11-20T10:00:00.000Z", EPOCH),
        instance("i-gone", "2026-11-21T08:30:00.000Z", "2026-11-21T09:00:00.000Z",
                 status="deleted", region={"region": "eu-west-1"}, sshPort=2222),
        instance("i-new", "2026-11-22T09:45:00.000Z", None, region="us-west-2",
                 status="pending", ip=""),
    ]


def test_instances_frame() -> None:
    now = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    df = instances_frame(instances(), now=now)
    assert tuple(df.columns) == INSTANCE_COLUMNS
    assert_dtypes(df, INSTANCE_DTYPES)
    assert df["_id"].tolist() == ["i-new", "i-gone", "i-old"]  # newest first
    assert df["region"].tolist() == ["us-west-2", "eu-west-1", "us-east-1"]
    assert df["deletedAt"].isna().tolist() == [True, False, True]  # null and the epoch → NaT
    assert df.loc[1, "deletedAt"] == pd.Timestamp("2026-11-21T09:00:00Z")
    assert df["age"].tolist() == [timedelta(minutes=15), timedelta(days=1, hours=1, minutes=30),
                                  timedelta(days=2)]
    assert df["sshPort"].tolist() == [22, 2222, 22]
    assert pd.isna(df.loc[0, "ip"])  # not given an address yet: "" reads as missing


def test_instances_naive_now_is_utc_and_default_now_is_current() -> None:
    aware = instances_frame(instances(), now=datetime(2026, 11, 22, 10, 0, tzinfo=UTC))
    naive = instances_frame(instances(), now=datetime(2026, 11, 22, 10, 0))
    assert_frame_equal(aware, naive)
    current = instances_frame(instances())
    assert (current["age"] > timedelta(0)).all()


def test_instances_records_and_raw_json_give_equal_frames() -> None:
    now = "2026-11-22T10:00:00Z"
    data = instances()
    expected = instances_frame(data, now=now)
    assert_frame_equal(instances_frame([Instance.from_json(i) for i in data], now=now), expected)
    details = [InstanceDetails.from_json({**i, "isPending": False, "sshKey": {},
                                          "portForwards": []}) for i in data]
    assert_frame_equal(instances_frame(details, now=now), expected)


def test_missing_created_at_sorts_last() -> None:
    data = [instance("i-x", None, None), *instances()]
    df = instances_frame(data, now="2026-11-22T10:00:00Z")
    assert df["_id"].iloc[-1] == "i-x"
    assert pd.isna(df["createdAt"].iloc[-1]) and pd.isna(df["age"].iloc[-1])


def test_empty_instances() -> None:
    df = instances_frame([])
    assert len(df) == 0
    assert_dtypes(df, INSTANCE_DTYPES)


# --------------------------------------------------------------------------- volumes

VOLUME_DTYPES = {
    "_id": TEXT, "name": TEXT, "sizeInGb": "float64", "region": TEXT, "providerId": TEXT,
    "providerName": TEXT, "user": TEXT, "createdAt": "datetime64[ns, UTC]",
    "updatedAt": "datetime64[ns, UTC]",
}  # fmt: skip
VOLUME_OFFER_DTYPES = {
    "providerId": TEXT, "providerName": TEXT, "minSizeInGb": "float64",
    "pricePerGbPerHour": "float64", "pricePerGbMonth": "float64", "regions": TEXT,
}  # fmt: skip


def volumes() -> list[dict[str, Any]]:
    return [
        {"_id": "vol-1", "user": "u-1", "name": "models", "sizeInGb": 100, "region": "us-east-1",
         "createdAt": "2026-11-20T10:00:00.000Z", "updatedAt": "2026-11-20T10:05:00.000Z",
         "cloudProvider": {"_id": "lambda", "displayName": "Lambda Labs"}},
        {"_id": "vol-2", "user": "u-1", "name": "data", "sizeInGb": 500, "region": "eu-west-1",
         "createdAt": "2026-11-21T10:00:00.000Z", "updatedAt": "2026-11-21T10:00:00.000Z",
         "extra": True},
    ]


def volume_offers() -> list[dict[str, Any]]:
    return [
        {"cloudProvider": {"_id": "lambda", "displayName": "Lambda Labs"}, "minSizeInGb": 10,
         "pricePerGbPerHour": "0.00014", "regions": ["us-east-1", "eu-west-1"]},
        {"cloudProvider": {"_id": "runpod", "displayName": "RunPod"}, "minSizeInGb": 50,
         "pricePerGbPerHour": "0.0001", "regions": []},
    ]


def test_volumes_frame() -> None:
    df = volumes_frame(volumes())
    assert tuple(df.columns) == VOLUME_COLUMNS
    assert_dtypes(df, VOLUME_DTYPES)
    assert df["_id"].tolist() == ["vol-2", "vol-1"]  # newest first
    assert pd.isna(df.loc[0, "providerId"]) and pd.isna(df.loc[0, "providerName"])
    assert df.loc[1, "providerId"] == "lambda" and df.loc[1, "providerName"] == "Lambda Labs"
    assert df.loc[1, "updatedAt"] == pd.Timestamp("2026-11-20T10:05:00Z")
    assert_frame_equal(volumes_frame([Volume.from_json(v) for v in volumes()]), df)
    assert_dtypes(volumes_frame([]), VOLUME_DTYPES)


def test_volume_offers_frame() -> None:
    df = volume_offers_frame(volume_offers())
    assert tuple(df.columns) == VOLUME_OFFER_COLUMNS
    assert_dtypes(df, VOLUME_OFFER_DTYPES)
    assert df["providerId"].tolist() == ["runpod", "lambda"]  # cheapest first
    assert df.loc[1, "pricePerGbPerHour"] == pytest.approx(0.00014)
    assert df.loc[1, "pricePerGbMonth"] == pytest.approx(0.00014 * 730)
    assert df["regions"].tolist() == ["", "us-east-1, eu-west-1"]
    assert df["minSizeInGb"].tolist() == [50.0, 10.0]
    records = [VolumeOffer.from_json(o) for o in volume_offers()]
    assert_frame_equal(volume_offers_frame(records), df)
    assert_dtypes(volume_offers_frame([]), VOLUME_OFFER_DTYPES)


# --------------------------------------------------------------------------- spend


def test_spend_frame() -> None:
    start = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
    deadline = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    df = spend_frame([
        {"_id": "i-1", "name": "a", "status": "active", "hourlyPrice": 2.0, "billedFrom": start,
         "billedUntil": start + timedelta(hours=1.5), "hoursBilled": 1.5, "spend": 3.0,
         "estimated": False, "autoDeleteAt": deadline},
        {"_id": "i-2", "name": "b", "status": "pending", "hourlyPrice": 0.5, "billedFrom": None,
         "billedUntil": None, "hoursBilled": 0.0, "spend": 0.0, "estimated": False,
         "autoDeleteAt": None},
    ])
    assert tuple(df.columns) == SPEND_COLUMNS
    assert df.attrs["total"] == 3.0
    assert df.loc[0, "billedFrom"] == pd.Timestamp(start)
    assert pd.isna(df.loc[1, "billedFrom"])
    assert df.loc[1, "autoDeleteAt"] is None and df.loc[0, "autoDeleteAt"] == deadline
    assert df["estimated"].dtype == bool and df["spend"].dtype == "float64"
    empty = spend_frame([])
    assert tuple(empty.columns) == SPEND_COLUMNS and empty.attrs["total"] == 0.0


# --------------------------------------------------------------------------- display


@pytest.mark.parametrize(("value", "text"), [
    (2.49, "$2.49"), (0.00014, "$0.00014"), (1234.5, "$1,234.50"), (0.44, "$0.44"),
    (0.0, "$0.00"), (0.0123, "$0.012"), (-1.5, "-$1.50"), (float("nan"), ""), (None, ""),
])  # fmt: skip
def test_format_price(value: Any, text: str) -> None:
    assert format_price(value) == text


def test_style_prices_renders_dollars_and_hides_the_index() -> None:
    df = offers_frame(catalogue())
    styler = style_prices(df)
    assert isinstance(styler, pd.io.formats.style.Styler)
    html = styler.to_html()
    assert "$2.49" in html and "$1.245" not in html and "$1.25" in html  # pricePerGpuHour
    assert "$14.32" in html
    assert "row_heading" not in html  # index hidden
    assert "$80" not in html  # sizes are not prices
    assert type(df) is pd.DataFrame and df["hourlyPrice"].dtype == "float64"

    volume_html = style_prices(volume_offers_frame(volume_offers())).to_html()
    assert "$0.00014" in volume_html and "$0.10" in volume_html  # per GB-hour, per GB-month

    spend_html = style_prices(pd.DataFrame({"name": ["a"], "spend": [3.0], "hoursBilled": [1.5]}))
    assert "$3.00" in spend_html.to_html() and "$1.50" not in spend_html.to_html()


# server text in styled frames ----------------------------------------------------------------

HOSTILE = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


def hostile_offers() -> list[dict[str, Any]]:
    offer = copy.deepcopy(sandbox_catalogue.instance_offers()[0])
    offer["gpuName"] = HOSTILE
    offer["cloud"]["name"] = HOSTILE
    return [offer]


def hostile_volume_offers() -> list[dict[str, Any]]:
    offer = copy.deepcopy(sandbox_catalogue.volume_offers()[0])
    offer["cloudProvider"]["displayName"] = HOSTILE
    return [offer]


def assert_escaped(html: str) -> None:
    assert HOSTILE not in html and "<img" not in html
    assert ESCAPED in html


def test_style_prices_escapes_server_text_on_every_frame(sandbox_factory) -> None:
    sandbox = sandbox_factory(offers=hostile_offers(), volume_offers=hostile_volume_offers())
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        offers = cloud.instances.offers_frame()
        assert_escaped(style_prices(offers).to_html())
        assert "$2.49" in style_prices(offers).to_html()  # prices still formatted
        assert_escaped(style_prices(offers_frame(cloud.instances.offers())).to_html())

        assert_escaped(style_prices(volume_offers_frame(cloud.volumes.offers())).to_html())

        offer = cloud.instances.offers()[0]
        region = offer.available_regions[0]
        cloud.instances.create(name=HOSTILE, cloud_provider=offer.cloud.id,
                               instance_id=offer.instance_id, region=region,
                               vm={"os": offer.configuration.os[0]})
        assert_escaped(style_prices(instances_frame(cloud.instances.list())).to_html())
        assert_escaped(style_prices(cloud.spend()).to_html())
