"""Tables a person reads (``gpucloud_nb.tables``): formatted display, raw values, over the sandbox."""

from __future__ import annotations

import re
from datetime import datetime

import pandas as pd
import pytest
from helpers import launch, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.display import format_price
from gpucloud_nb.frames import instances_frame, volume_offers_frame, volumes_frame
from gpucloud_nb.tables import Table


def _headers(html: str) -> list[str]:
    return re.findall(r'<th id="[^"]*" class="col_heading[^"]*" >([^<]*)</th>', html)


def _launch(cloud: GPUCloud, name: str) -> str:
    return cloud.instances.wait_until_active(launch(cloud, name).id, timeout=30,
                                             poll_interval=0.05).id


def _local(stamp: pd.Timestamp) -> str:
    return stamp.to_pydatetime().astimezone().strftime("%H:%M")


@pytest.fixture
def billed(cloud: GPUCloud) -> dict[str, str]:
    """Three active instances that have billed a little; "gone" is then deleted."""
    ids = {name: _launch(cloud, name) for name in ("kept", "other", "gone")}
    cloud.instances.delete(ids["gone"])
    wait_for(lambda: cloud.instances.get(ids["gone"]).status == "deleted")
    return ids


def test_spend_display_is_formatted_while_the_values_stay_raw(cloud: GPUCloud,
                                                               billed: dict[str, str]) -> None:
    spend = cloud.spend()
    # Code sees every instance and raw numbers and times.
    assert isinstance(spend, pd.DataFrame) and isinstance(spend, Table)
    assert set(spend["_id"]) == set(billed.values())
    assert spend["spend"].dtype == "float64" and spend["hourlyPrice"].dtype == "float64"
    assert isinstance(spend["billedFrom"].dtype, pd.DatetimeTZDtype)
    total = spend.attrs["total"]
    assert total == pytest.approx(spend["spend"].sum()) and total > 0

    html = spend._repr_html_()
    headers = _headers(html)
    assert headers[0] == "name" and headers[-1] == "_id"
    # Deleted instances are hidden; the total row still counts them and says so.
    assert "kept" in html and "other" in html and ">gone<" not in html
    assert billed["gone"] not in html
    assert "Total (1 deleted not shown)" in html
    assert f">{format_price(total)}<" in html
    row = spend.set_index("name").loc["kept"]
    assert f">${row['hourlyPrice']:,.2f}/h<" in html
    assert f">{_local(row['billedFrom'])}<" in html  # local "11:09", not an ISO string
    assert "+00:00" not in html and "e-0" not in html

    text = repr(spend)
    lines = text.splitlines()
    assert lines[0].split()[0] == "name" and lines[0].split()[-1] == "_id"
    assert lines[-1].lstrip().startswith("Total (1 deleted not shown)")
    assert "gone" not in text

    everything = cloud.spend(include_deleted=True)
    html = everything._repr_html_()
    assert ">gone<" in html and ">Total<" in html
    # A frame derived by code is plain, with pandas' usual display.
    assert type(spend[spend["status"] == "active"]) is pd.DataFrame


def test_instances_and_volumes_display_name_first_ids_last(cloud: GPUCloud) -> None:
    instance_id = _launch(cloud, "reader")
    offer = cloud.volumes.offers()[0]
    volume = cloud.volumes.create(name="data", cloud_provider=offer.cloud_provider.id,
                                  region=offer.regions[0], size_in_gb=max(offer.min_size_in_gb, 10))

    frame = instances_frame(cloud.instances.list())
    assert frame.columns[0] == "_id"  # the frame keeps the spec's order for code
    assert isinstance(frame["createdAt"].dtype, pd.DatetimeTZDtype)
    html = frame._repr_html_()
    headers = _headers(html)
    assert headers[0] == "name" and headers[-1] == "_id"
    assert f">{_local(frame['createdAt'][0])}<" in html
    assert re.search(r">\d+ (s|min)<", html)  # the age
    assert f">${frame['hourlyPrice'][0]:,.2f}/h<" in html and instance_id in html
    port = int(frame["sshPort"][0])
    assert port >= 1000 and f">{port}<" in html and f"{port}" in repr(frame)  # not 39,109

    volumes = volumes_frame(cloud.volumes.list())
    headers = _headers(volumes._repr_html_())
    assert headers[0] == "name" and headers[-3:] == ["_id", "providerId", "user"]
    assert volumes["_id"].tolist() == [volume.id]


def test_a_table_escapes_server_text_and_reads_when_empty() -> None:
    table = Table({"name": ["<b>x</b>"], "createdAt": [pd.Timestamp(datetime.now()).tz_localize(None)]})
    html = table._repr_html_()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "(no rows)" in repr(instances_frame([]))


def test_volume_offer_prices_read_as_money(cloud: GPUCloud) -> None:
    offers = volume_offers_frame(cloud.volumes.offers())
    assert offers["pricePerGbPerHour"].dtype == "float64"  # raw for code
    html, text = offers._repr_html_(), repr(offers)
    assert _headers(html)[0] == "providerName" and _headers(html)[-1] == "providerId"
    tiny = offers["pricePerGbPerHour"].min()
    assert tiny < 1e-4
    money = "$" + f"{tiny:.10f}".rstrip("0")  # $0.00009, never 9e-05
    assert f">{money}<" in html and money in text
    assert "e-0" not in html + text
