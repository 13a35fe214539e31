"""Spend so far: the ledger's arithmetic, and ``cloud.spend()`` against the sandbox."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from helpers import launch, vm_offer

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.billing import Ledger
from gpucloud_nb.models import Instance

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
EPOCH = "1970-01-01T00:00:00.000Z"


def item(status: str, *, updated: datetime = T0, deleted: str = EPOCH) -> Instance:
    return Instance.from_json({"_id": "i1", "status": status, "hourlyPrice": 2.0,
                               "createdAt": T0.isoformat(), "updatedAt": updated.isoformat(),
                               "deletedAt": deleted})


def test_pending_and_error_cost_nothing() -> None:
    ledger = Ledger()
    assert ledger.bill(item("pending"), T0 + timedelta(hours=5)).spend == 0
    assert ledger.bill(item("error"), T0 + timedelta(hours=5)).spend == 0


def test_active_bills_from_the_activation_it_saw() -> None:
    ledger = Ledger()
    active_at = T0 + timedelta(minutes=5)
    bill = ledger.bill(item("active", updated=active_at), active_at + timedelta(hours=1.5))
    assert bill.hours == pytest.approx(1.5) and bill.spend == pytest.approx(3.0)
    assert not bill.estimated


def test_deleted_bills_until_deleted_at_and_no_further() -> None:
    ledger = Ledger()
    active_at = T0 + timedelta(minutes=5)
    ledger.observe(item("active", updated=active_at))
    gone = active_at + timedelta(hours=2)
    later = gone + timedelta(days=3)
    bill = ledger.bill(item("deleted", updated=gone, deleted=gone.isoformat()), later)
    assert bill.hours == pytest.approx(2.0) and bill.end == gone and not bill.estimated


def test_deleted_before_the_client_saw_it_active_is_an_upper_bound() -> None:
    gone = T0 + timedelta(hours=1)
    bill = Ledger().bill(item("deleted", updated=gone, deleted=gone.isoformat()), gone)
    assert bill.estimated and bill.hours == pytest.approx(1.0)


def test_spend_against_the_sandbox(sandbox_factory) -> None:
    box = sandbox_factory(launch_seconds=1.0, delete_seconds=0.2)
    with GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
        offer = vm_offer(cloud)
        first = launch(cloud, "first", offer=offer)
        cloud.instances.wait_until_active(first.id, timeout=10, poll_interval=0.05)
        launch(cloud, "second", offer=offer)
        time.sleep(0.2)

        frame = cloud.spend().set_index("name")
        assert frame.loc["second", "status"] == "pending" and frame.loc["second", "spend"] == 0
        row = frame.loc["first"]
        assert row["status"] == "active" and row["spend"] > 0
        activated = first.created_at + timedelta(seconds=1.0)
        assert abs((row["billedFrom"] - activated).total_seconds()) < 0.05
        assert row["spend"] == pytest.approx(row["hoursBilled"] * offer.hourly_price)
        assert frame.attrs["total"] == pytest.approx(frame["spend"].sum())

        cloud.instances.delete(first.id)
        time.sleep(0.3)
        frozen = cloud.spend().set_index("name").loc["first"]
        time.sleep(0.2)
        again = cloud.spend().set_index("name").loc["first"]
        assert again["status"] == "deleted"
        assert again["spend"] == frozen["spend"] > row["spend"]
