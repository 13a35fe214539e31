"""OffersBrowser against the sandbox, over real HTTP: local filters, refresh, table, selection."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator

import pytest
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.frames import offers_frame
from gpucloud_nb.sandbox.catalogue import instance_offers
from gpucloud_nb.widgets import LaunchForm, OffersBrowser
from gpucloud_nb.widgets._layout import iter_widgets

SECRET = "sk-widget-secret-0123456789abcdef"


@pytest.fixture
def cloud(shared_cloud: GPUCloud) -> GPUCloud:
    """These tests read the catalogue only: a client of the run's shared sandbox serves them."""
    return shared_cloud


@pytest.fixture
def browser(cloud: GPUCloud) -> Iterator[OffersBrowser]:
    widget = OffersBrowser(cloud, debounce=0)
    yield widget
    widget.close()


def reference(cloud: GPUCloud):
    """The catalogue as the browser should see it, read with a client of its own."""
    return offers_frame(cloud.instances.offers())


def classes(widget) -> set[str]:
    return {c for w in iter_widgets(widget) for c in getattr(w, "_dom_classes", ())}




def test_starts_with_available_offers_and_a_count(browser: OffersBrowser, cloud: GPUCloud) -> None:
    full = reference(cloud)
    assert browser.fetch_count == 1
    assert browser.filters["available_only"] is True
    assert len(browser.all_frame) == len(full)
    assert len(browser.frame) == int(full["available"].sum()) < len(full)
    assert browser.frame["available"].all()
    assert f"{len(browser.frame)} of {len(full)} offers" in browser.count.value
    assert "$" in browser.table.value and "<table" in browser.table.value
    assert {"gpucloud-offers-browser", "gpucloud-offers-table", "gpucloud-offers-count",
            "gpucloud-offers-select", "gpucloud-offers-refresh", "gpucloud-filter-gpu",
            "gpucloud-filter-available", "gpucloud-filter-max-price"} <= classes(browser)


def test_region_and_availability_come_before_the_wide_columns(browser: OffersBrowser) -> None:
    """A notebook at 1400 px cut the table after pricePerGpuHour: where and whether come first."""
    headers = [re.sub(r"<wbr>", "", h) for h in re.findall(r"<th[^>]*>(.+?)</th>", browser.table.value)]
    assert headers.index("region") < headers.index("totalVRamGB")
    assert headers.index("available") < headers.index("pricePerGpuHour")
    assert headers.index("hourlyPrice") < headers.index("region")
    assert headers[-1] == "instanceId"


def test_set_filters_narrows_rows_without_refetching(browser: OffersBrowser,
                                                      cloud: GPUCloud) -> None:
    full = reference(cloud)
    frame = browser.set_filters(gpu="H100", min_gpus=2, region="us-east-1")
    expected = full[full["gpuName"].astype(str).str.contains("H100") & (full["gpuCount"] >= 2)
                    & (full["region"].astype(str) == "us-east-1") & full["available"]]
    assert len(frame) == len(expected) > 0
    assert set(frame["instanceId"]) == set(expected["instanceId"])
    assert browser.filters["gpu"] == "H100" and browser.filters["min_gpus"] == 2
    assert f"{len(frame)} of {len(full)} offers" in browser.count.value

    frame = browser.set_filters(gpu=None, region=None, min_gpus=None, deployment_type="container",
                                max_price=1.0)
    assert len(frame) > 0
    assert (frame["deploymentType"] == "container").all() and (frame["hourlyPrice"] <= 1.0).all()
    assert browser.fetch_count == 1


def test_typing_into_filters_narrows_rows_without_refetching(browser: OffersBrowser,
                                                             cloud: GPUCloud) -> None:
    full = reference(cloud)
    name = "A100 80GB"
    browser.gpu.value = name
    assert set(browser.frame["gpuName"].astype(str)) == {name}

    browser.gpu.value = None
    browser.min_vram.value = 100
    assert (browser.frame["vRamGB"] >= 100).all() and len(browser.frame) > 0
    per_gpu_rows = len(browser.frame)
    browser.vram_basis.value = "total"
    assert (browser.frame["totalVRamGB"] >= 100).all()
    assert len(browser.frame) > per_gpu_rows  # 2 × 80 GB counts in total, not per GPU

    browser.min_vram.value = 0
    browser.deployment.value = "baremetal"
    assert set(browser.frame["deploymentType"].astype(str)) == {"baremetal"}
    browser.available_only.value = False
    assert len(browser.frame) == int((full["deploymentType"] == "baremetal").sum())
    assert not browser.frame["available"].all()
    browser.deployment.value = None
    browser.max_price.value = 0.5
    assert (browser.frame["hourlyPrice"] <= 0.5).all() and len(browser.frame) > 0
    assert browser.fetch_count == 1


def test_filter_changes_are_debounced(cloud: GPUCloud) -> None:
    browser = OffersBrowser(cloud, debounce=30)
    before = len(browser.frame)
    browser.deployment.value = "vm"
    assert len(browser.frame) == before  # not yet: waiting for more typing
    browser.apply_filters()
    assert set(browser.frame["deploymentType"].astype(str)) == {"vm"}

    quick = OffersBrowser(cloud, debounce=0.05)
    quick.deployment.value = "container"
    wait_for(lambda: set(quick.frame["deploymentType"].astype(str)) == {"container"})
    assert browser.fetch_count == 1 and quick.fetch_count == 1


def test_refresh_refetches_and_keeps_filters(browser: OffersBrowser) -> None:
    browser.set_filters(deployment_type="vm")
    rows = len(browser.frame)
    browser.refresh_button.click()
    assert browser.fetch_count == 2
    assert browser.filters["deployment_type"] == "vm" and len(browser.frame) == rows
    browser.refresh()
    assert browser.fetch_count == 3


def test_unknown_filters_and_values_are_refused(browser: OffersBrowser) -> None:
    with pytest.raises(TypeError, match="gpus"):
        browser.set_filters(gpus=2)
    with pytest.raises(InvalidInputError, match="deployment_type"):
        browser.set_filters(deployment_type="lambda")
    assert browser.set_filters(gpu="no-such-gpu").empty
    assert "0 of" in browser.count.value and "No offer matches" in browser.table.value


def test_selecting_an_offer_opens_a_prefilled_form(browser: OffersBrowser) -> None:
    browser.set_filters(deployment_type="vm", gpu="H100")
    _, (instance_id, region, provider) = browser.offer_select.options[2]
    browser.offer_select.value = (instance_id, region, provider)
    form = browser.form
    assert isinstance(form, LaunchForm) and browser.form_box.children == (form,)
    assert form.offer.value.instance_id == instance_id and form.region.value == region
    assert form.problem == "Give the instance a name."
    assert "gpucloud-launch-form" in classes(browser)

    other = browser.frame.iloc[0]
    form = browser.select(str(other["instanceId"]))
    assert form is browser.form and browser.form_box.children == (form,)
    assert form.offer.value.instance_id == other["instanceId"]
    assert form.region.value == other["region"]
    assert browser.offer_select.value == (other["instanceId"], other["region"], other["providerId"])

    with pytest.raises(InvalidInputError):
        browser.select("no-such-offer")
    assert browser.status.is_error and "no-such-offer" in browser.status.text


def test_offer_text_from_the_server_is_escaped(sandbox_factory) -> None:
    offers = instance_offers()
    offers[0]["gpuName"] = "<img src=x onerror=alert(1)>"
    sandbox = sandbox_factory(offers=offers)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        browser = OffersBrowser(cloud, debounce=0)
        browser.set_filters(available_only=False)
        assert "&lt;img src=x onerror=alert(1)&gt;" in browser.table.value
        assert "<img" not in browser.table.value


def test_no_widget_state_holds_the_api_key(sandbox_factory) -> None:
    sandbox = sandbox_factory(api_key=SECRET)
    with GPUCloud(api_key=SECRET, base_url=sandbox.management_url) as cloud:
        browser = OffersBrowser(cloud, debounce=0)
        browser.select(str(browser.frame.iloc[0]["instanceId"]))
        states = [json.dumps(w.get_state(), default=str) for w in iter_widgets(browser)]
        assert len(states) > 30
        assert not any(SECRET in state for state in states)
        assert SECRET not in repr(browser)


def without_jinja2(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python a bare install may have: pandas' Styler cannot load (it needs jinja2)."""
    for name in [n for n in sys.modules if n.startswith("pandas.io.formats.style")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "jinja2", None)


def test_a_table_that_cannot_be_drawn_says_why(cloud: GPUCloud,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    without_jinja2(monkeypatch)
    browser = OffersBrowser(cloud, debounce=0)  # builds: the error is shown, not raised
    try:
        assert browser.status.is_error
        assert browser.status.text.startswith("Something went wrong: ")
        assert "jinja2" in browser.status.text and "\n" not in browser.status.text
        with pytest.raises(Exception, match="jinja2"):
            browser.refresh()
    finally:
        browser.close()


def test_closing_leaves_no_open_widget_pointing_at_a_closed_one(cloud: GPUCloud) -> None:
    from ipywidgets.widgets.widget import _instances

    browser = OffersBrowser(cloud, debounce=0)
    browser.set_filters(deployment_type="vm")
    row = browser.frame.iloc[0]
    form = browser.select(str(row["instanceId"]), region=str(row["region"]),
                          provider=str(row["providerId"]))
    browser.close()
    assert form.comm is None  # the form closed with the browser
    for widget in list(_instances.values()):
        widget.get_state()  # a reference to a closed widget cannot be serialized


def test_same_instance_id_from_two_providers_opens_the_picked_one(sandbox_factory) -> None:
    from samples import same_id_two_providers

    sandbox = sandbox_factory(offers=same_id_two_providers())
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        browser = OffersBrowser(cloud)
        cheap = [(label, value) for label, value in browser.offer_select.options
                 if "Cheap Cloud" in label and "$1.00/h" in label]
        assert cheap
        browser.offer_select.value = cheap[0][1]
        form = browser.form
        assert form is not None and form.offer.value.cloud.name == "Cheap Cloud"
        assert form.offer.value.hourly_price == 1.0
        form.fill(name="cheap-one")
        form.launch().result(timeout=10)
        launched = cloud.instances.list()
        assert [(i.provider, i.hourly_price) for i in launched] == [("Cheap Cloud", 1.0)]

        pricey = browser.select("gpu-1x", provider="Pricey Cloud")
        assert pricey.offer.value.hourly_price == 50.0
        with pytest.raises(InvalidInputError, match="sold by 2 providers: Cheap Cloud"):
            browser.select("gpu-1x")
        assert "choose one with provider=" in browser.status.text
        browser.close()
