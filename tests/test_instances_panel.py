"""InstancesPanel against the sandbox, over real HTTP: list, auto-refresh, details, delete."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from html import escape
from typing import Any

import pandas as pd
import pytest
from helpers import launch, vm_offer, wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.models import InstanceDetails
from gpucloud_nb.widgets import InstancesPanel
from gpucloud_nb.widgets._layout import iter_widgets
from tests.helpers import ADA, PERSONAL

SECRET = "sk-widget-secret-0123456789abcdef"
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def panels() -> Iterator[list[InstancesPanel]]:
    made: list[InstancesPanel] = []
    yield made
    for panel in made:
        panel.close()


def make_panel(panels: list[InstancesPanel], cloud: GPUCloud, **options: object) -> InstancesPanel:
    options.setdefault("interval", 0.05)
    panel = InstancesPanel(cloud, **options)
    panels.append(panel)
    return panel


def status_in_panel(panel: InstancesPanel, instance_id: str) -> str | None:
    rows = panel.frame[panel.frame["_id"] == instance_id]
    return None if rows.empty else str(rows["status"].iloc[0])


def test_lists_instances_with_status_age_price_and_spend(sandbox_factory, panels) -> None:
    sandbox = sandbox_factory(launch_seconds=60)  # they stay pending for the whole test
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud, \
            GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as observer:
        panel = make_panel(panels, cloud, interval=5)
        assert "No instances" in panel.table.value and not panel.auto_refreshing
        first = launch(observer, "train-1")
        second = launch(observer, "train-2")
        frame = panel.refresh()
        assert panel.auto_refreshing
        assert list(frame.columns) == ["name", "status", "gpu", "region", "age", "hourlyPrice",
                                       "spend", "autoDelete", "budget", "idle", "_id"]
        assert set(frame["_id"]) == {first.id, second.id}
        assert set(frame["status"]) == {"pending"} and (frame["spend"] == 0).all()
        assert (frame["hourlyPrice"] == first.hourly_price).all()
        assert (frame["age"] >= pd.Timedelta(0)).all()
        assert "train-1" in panel.table.value and "$" in panel.table.value
        assert {"gpucloud-instances-panel", "gpucloud-instances-table", "gpucloud-instances-select",
                "gpucloud-instance-delete-button", "gpucloud-instance-details-button",
                "gpucloud-delete-confirm", "gpucloud-instance-details"} <= {
            c for w in iter_widgets(panel) for c in getattr(w, "_dom_classes", ())}


def test_refreshes_itself_while_something_is_pending(cloud, observer, panels) -> None:
    instance = launch(observer, "warming-up")
    panel = make_panel(panels, cloud)
    assert status_in_panel(panel, instance.id) == "pending" and panel.auto_refreshing
    assert "refreshing every" in panel.updated.value
    wait_for(lambda: status_in_panel(panel, instance.id) == "active")
    # active: spend keeps moving, so the panel keeps refreshing, slowly
    wait_for(lambda: "while instances bill" in panel.updated.value)
    assert panel.auto_refreshing and panel._poller.interval == 10
    observer.instances.delete(instance.id)
    panel.refresh()
    assert panel._poller.interval == 0.05
    wait_for(lambda: not panel.auto_refreshing)
    assert "refreshing every" not in panel.updated.value


def test_delete_asks_first_and_cancel_keeps_the_instance(cloud, observer, panels) -> None:
    instance = launch(observer, "train-1")
    panel = make_panel(panels, cloud)
    panel.instance_select.value = instance.id
    panel.delete_button.click()
    assert panel.confirm_box.layout.display is None
    assert "Delete train-1? It has no volume, so its data is lost." in panel.question.value
    panel.cancel_button.click()
    assert panel.confirm_box.layout.display == "none" and panel.pending_delete is None
    assert panel.status.text == "Kept train-1."
    assert observer.instances.get(instance.id).status in ("pending", "active")

    panel.delete_button.click()
    panel.confirm_button.click()
    assert observer.instances.get(instance.id).status in ("deleting", "deleted")
    assert panel.status.text == "Deleting train-1; it has no volume, so its data is lost."
    assert panel.confirm_box.layout.display == "none"
    wait_for(lambda: status_in_panel(panel, instance.id) is None)  # gone once deleted
    wait_for(lambda: not panel.auto_refreshing)
    panel.show_deleted.value = True
    assert status_in_panel(panel, instance.id) == "deleted"


def test_delete_from_code(cloud, observer, panels) -> None:
    keep = launch(observer, "keep")
    drop = launch(observer, "drop")
    panel = make_panel(panels, cloud)
    with pytest.raises(InvalidInputError, match="Nothing to confirm"):
        panel.confirm_delete()
    with pytest.raises(InvalidInputError, match="Choose an instance"):
        panel.request_delete()
    assert panel.status.is_error
    assert panel.request_delete(drop.id) == "Delete drop? It has no volume, so its data is lost."
    assert panel.confirm_delete() == drop.id
    assert observer.instances.get(drop.id).status in ("deleting", "deleted")
    assert observer.instances.get(keep.id).status in ("pending", "active")
    with pytest.raises(InvalidInputError, match="already"):
        panel.request_delete(drop.id)


def test_details_view(cloud, observer, panels) -> None:
    offer = vm_offer(observer)
    volume_offer = next((v for v in observer.volumes.offers()
                         if v.cloud_provider.id == offer.cloud.id), None)
    volume_id = None
    if volume_offer is not None:
        volume_id = observer.volumes.create(name="data", cloud_provider=offer.cloud.id,
                                            region=offer.available_regions[0],
                                            size_in_gb=volume_offer.min_size_in_gb).id
    instance = launch(observer, "detailed", offer=offer, volume_id=volume_id)
    observer.instances.wait_until_active(instance.id, timeout=10)
    panel = make_panel(panels, cloud)
    assert panel.select(instance.id).id == instance.id
    details = panel.details()
    assert details.status == "active" and panel.shown_details == details
    view = panel.details_view.value
    command = cloud.instances.ssh_command(details.id)
    assert details.ip in view and escape(command) in view and "-o HostKeyAlias=" in command
    used = cloud.instances.ssh_key_in_use(details.id)  # which key it has, not "none"
    assert used and "(SHA256:" in used and escape(used) in view
    assert all(str(port) in view for port in details.port_forwards)
    assert "detailed" in view and "$" in view
    if volume_id:
        assert volume_id in view
    panel.details_button.click()
    assert panel.details_view.value
    with pytest.raises(GPUCloudError):
        panel.details("no-such-instance")
    assert panel.status.is_error and "no-such-instance" in panel.status.text


def test_details_view_shows_port_forward_objects_as_ports() -> None:
    # The cloud may send {internalPort, externalPort} objects where the spec shows strings.
    details = InstanceDetails.from_json({
        "_id": "i1", "name": "n", "status": "active",
        "portForwards": [{"internalPort": 8000, "externalPort": 18000}, "22:2201"]})
    view = InstancesPanel._details_html(details, None, None)
    assert "8000:18000, 22:2201" in view
    assert "internalPort" not in view and "{" not in view


def test_auto_delete_countdown_set_extend_and_cancel(through_gateway, panels) -> None:
    cloud = observer = through_gateway
    instance = launch(observer, "timed")
    panel = make_panel(panels, cloud, interval=0.05)
    assert list(panel.frame["autoDelete"]) == [""]
    assert panel.actions.children == ()
    panel.select(instance.id)
    assert panel.auto_delete_set.description == "Set auto-delete"
    # Buttons as wide as their label: a fixed width cut "Set auto-delete" to "Set auto-del…".
    assert panel.auto_delete_set.layout.width == panel.auto_delete_cancel.layout.width == "auto"
    assert "var(--jp-ui-font-color2)" in panel.updated.value and "#555" not in panel.updated.value
    assert panel.auto_delete_cancel not in panel.actions.children

    panel.auto_delete_after.value = "5"  # a bare number: which unit? One sentence, no timer
    panel.auto_delete_set.click()
    assert "needs a unit" in panel.status.text and cloud.auto_delete.remaining(instance.id) is None
    panel.auto_delete_after.value = "5m"
    panel.auto_delete_set.click()
    assert "will be deleted at" in panel.status.text
    assert 4 * 60 < cloud.auto_delete.remaining(instance.id) <= 5 * 60
    assert panel.frame["autoDelete"].iloc[0].startswith("in 4 min")
    assert panel.frame["autoDelete"].iloc[0].endswith("(gateway)")
    assert "in 4 min" in panel.table.value and panel.auto_refreshing
    assert panel.auto_delete_set.description == "Extend to this"
    assert panel.auto_delete_cancel in panel.actions.children

    panel.set_auto_delete(after=timedelta(minutes=30))
    assert cloud.auto_delete.remaining(instance.id) > 29 * 60
    panel.auto_delete_cancel.click()
    assert cloud.auto_delete.remaining(instance.id) is None
    assert panel.status.text.startswith("Auto-delete of timed cancelled; it keeps running")
    with pytest.raises(InvalidInputError, match="has no auto-delete timer"):
        panel.cancel_auto_delete(instance.id)


def test_on_the_cloud_directly_a_timer_is_refused_in_one_sentence(cloud, panels) -> None:
    instance = launch(cloud, "untimed")
    panel = make_panel(panels, cloud, interval=0.05)
    panel.select(instance.id)
    panel.auto_delete_after.value = "5m"
    panel.auto_delete_set.click()
    assert panel.status.is_error and "Nothing watches money without a gateway" in panel.status.text
    assert "\n" not in panel.status.text and cloud.auto_delete.remaining(instance.id) is None


@pytest.mark.parametrize("kept_by", ["gateway"])  # the cloud or sandbox directly: above
def test_auto_delete_from_the_panel_deletes_by_whoever_keeps_timers(request, panels,
                                                                     kept_by) -> None:
    cloud = observer = request.getfixturevalue("through_gateway")
    instance = launch(observer, "short-lived")
    panel = make_panel(panels, cloud, interval=0.05)
    message = panel.set_auto_delete(instance.id, after=0.3)
    assert message.endswith(f"by the {kept_by}, even if this kernel stops.")
    wait_for(lambda: observer.instances.get(instance.id).status in ("deleting", "deleted"))
    wait_for(lambda: status_in_panel(panel, instance.id) in (None, "deleting"))


def test_delete_names_the_volume_that_keeps_the_data(cloud, observer, panels) -> None:
    offer = vm_offer(observer)
    volume_offer = next(v for v in observer.volumes.offers() if v.cloud_provider.id == offer.cloud.id)
    volume = observer.volumes.create(name="results", cloud_provider=offer.cloud.id,
                                     region=offer.available_regions[0],
                                     size_in_gb=volume_offer.min_size_in_gb)
    instance = launch(observer, "with-data", offer=offer, volume_id=volume.id)
    panel = make_panel(panels, cloud)
    question = panel.request_delete(instance.id)
    assert question == f"Delete with-data? Volume results ({volume.id}) keeps its data."
    panel.confirm_delete()
    assert f"volume results ({volume.id}) keeps its data" in panel.status.text
    assert observer.volumes.get(volume.id).name == "results"


def test_refresh_errors_are_sentences(sandbox_factory, panels) -> None:
    sandbox = sandbox_factory()
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  max_retries=0, timeout=2) as cloud:
        panel = make_panel(panels, cloud)
        sandbox.stop()
        panel.refresh_button.click()  # never raises into the void
        assert panel.status.is_error and "Traceback" not in panel.status.value
        with pytest.raises(GPUCloudError):
            panel.refresh()


def test_spend_column_comes_from_the_client_ledger(cloud, observer, panels) -> None:
    instance = launch(observer, "billed")
    cloud.instances.wait_until_active(instance.id, timeout=10, poll_interval=0.05)
    time.sleep(0.2)
    panel = make_panel(panels, cloud)
    spent = panel.frame.set_index("_id").loc[instance.id, "spend"]
    expected = cloud.spend().set_index("_id").loc[instance.id, "spend"]
    assert 0 < spent <= expected


def test_no_widget_state_holds_the_api_key(sandbox_factory, panels) -> None:
    sandbox = sandbox_factory(api_key=SECRET)
    with GPUCloud(api_key=SECRET, base_url=sandbox.management_url) as cloud:
        instance = launch(cloud, "secret-test")
        panel = make_panel(panels, cloud)
        panel.select(instance.id)
        panel.request_delete(instance.id)
        states = [json.dumps(w.get_state(), default=str) for w in iter_widgets(panel)]
        assert len(states) > 20
        assert not any(SECRET in state for state in states)
        assert SECRET not in repr(panel)


def test_a_table_that_cannot_be_drawn_says_why(cloud: GPUCloud, panels,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    launch(cloud, "drawn")
    for name in [n for n in sys.modules if n.startswith("pandas.io.formats.style")]:
        monkeypatch.delitem(sys.modules, name)  # pandas' Styler as on a bare install: no jinja2
    monkeypatch.setitem(sys.modules, "jinja2", None)
    panel = make_panel(panels, cloud)  # builds: the error is shown, not raised
    assert panel.status.is_error
    assert panel.status.text.startswith("Something went wrong: ")
    assert "jinja2" in panel.status.text and "\n" not in panel.status.text


def _gpucloud_threads() -> int:
    import threading

    return sum(1 for t in threading.enumerate() if t.name.startswith("gpucloud-nb"))


def test_closing_panels_and_browsers_stops_their_threads(sandbox_factory) -> None:
    from gpucloud_nb.widgets import OffersBrowser

    sandbox = sandbox_factory(launch_seconds=60)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        launch(cloud, "keeps-panels-polling")     # pending: every panel polls fast
        before = _gpucloud_threads()
        made = []
        for _ in range(20):
            made.append(InstancesPanel(cloud, interval=0.05))
            made.append(OffersBrowser(cloud, debounce=0.05))
        assert all(p.auto_refreshing for p in made if isinstance(p, InstancesPanel))
        assert _gpucloud_threads() > before
        for widget in made:
            widget.close()
        wait_for(lambda: _gpucloud_threads() <= before, timeout=10)


def test_a_dropped_panel_stops_polling_once_collected(sandbox_factory) -> None:
    import gc

    from ipywidgets.widgets.widget import _instances as registry

    sandbox = sandbox_factory(launch_seconds=60)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        launch(cloud, "pending")
        before = _gpucloud_threads()
        existing = set(registry)
        panel = InstancesPanel(cloud, interval=0.05)
        assert panel.auto_refreshing
        # ipywidgets and the comm manager hold every open widget; forget the panel's there, as a
        # kernel does once its front end is gone, without ever calling panel.close().
        for model_id in set(registry) - existing:
            widget = registry.pop(model_id)
            widget.comm.on_msg(None)  # the comm no longer calls back into the widget
        del panel, widget
        # The refresh thread holds the panel only while it calls it: a collection between two
        # calls frees the panel, and the thread then ends by itself.
        wait_for(lambda: gc.collect() is not None and _gpucloud_threads() <= before, timeout=10)


def test_a_budget_set_from_the_panel_warns_then_deletes(sandbox_factory, gateway_factory,
                                                        panels) -> None:
    from helpers import wait_for
    from samples import one_offer

    box = sandbox_factory(offers=one_offer(3600.0))  # a dollar a second
    with GPUCloud(api_key=ADA, base_url=gateway_factory(PERSONAL, upstream=box).url) as cloud:
        cloud.sandbox = box  # as connect() makes it: its gateway watches the budget
        instance = launch(cloud, "metered")
        cloud.instances.wait_until_active(instance.id, timeout=10)
        panel = make_panel(panels, cloud, interval=0.05)
        assert list(panel.frame["budget"]) == [""]
        panel.select(instance.id)
        assert panel.budget_set in panel.actions.children
        panel.budget_dollars.value = 3
        panel.budget_set.click()
        assert panel.status.text == ("metered will be deleted once it has cost $3.00, by the "
                                     "gateway, even if this kernel stops.")
        assert panel.frame["budget"].iloc[0].endswith(" of $3.00")
        wait_for(lambda: panel.refresh()["budget"].iloc[0].startswith("⚠ "), timeout=60)
        assert "⚠" in panel.table.value
        # Under load a refresh may miss "deleting" and the panel drops deleted rows: ask the
        # cloud too (generous: the machine may be busy).
        wait_for(lambda: status_in_panel(panel, instance.id) in ("deleting", "deleted")
                 or cloud.instances.get(instance.id).status in ("deleting", "deleted")
                 or panel.refresh() is None, timeout=60)
        with pytest.raises(GPUCloudError, match="is already"):  # the panel's check or the cloud's
            panel.set_budget(instance.id, dollars=10)


def test_the_idle_column_warns_before_the_delete_and_keep_resets_it(box, panels) -> None:
    from datetime import timedelta

    cloud = box  # as connect() makes it: its gateway watches
    instance = launch(cloud, "idle-panel", delete_when_idle=timedelta(seconds=8))
    cloud.instances.wait_until_active(instance.id, timeout=30)
    panel = make_panel(panels, cloud, interval=0.05)
    panel.select(instance.id)
    assert panel.frame["idle"].iloc[0] == "after 8 s idle"
    assert panel.keep_button in panel.actions.children
    time.sleep(4.3)  # the warning starts half-way for a short limit
    panel.refresh()
    warned = panel.frame["idle"].iloc[0]
    assert warned.startswith("idle ") and ", deletes in " in warned
    assert warned in panel.table.value
    assert panel.keep(instance.id) == "idle-panel kept: its idle clock starts again."
    assert panel.frame["idle"].iloc[0] == "after 8 s idle"
    other = launch(cloud, "not-watched")
    panel.refresh()
    with pytest.raises(InvalidInputError, match="not-watched is not deleted when idle"):
        panel.keep(other.id)


def test_through_a_gateway_the_status_says_what_the_spent_budget_deleted(
        upstream: Any, gateway_factory: Any) -> None:
    from tests.test_client_gateway import ADA, cloud, spent_budget

    gateway = spent_budget(upstream, gateway_factory)
    with cloud(gateway, ADA) as ada:
        panel = InstancesPanel(ada)
        panel.refresh()
        text = panel.status.text
        assert text.startswith("Your budget of $") and text.endswith("UTC; deleted: spender.")
        assert "Traceback" not in panel.status.value
