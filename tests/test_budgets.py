"""Spend budgets from the client: kept by the sandbox service, or watched by this kernel."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from helpers import deaf_to, wait_for
from samples import one_offer

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.budgets import KernelBudgets, ServiceBudgets
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.budgets import POLL


def launch(cloud: GPUCloud) -> Instance:
    offer = cloud.instances.offers()[0]
    region = next(a.region for a in offer.availability if a.available)
    return cloud.instances.create(name="job", cloud_provider=offer.cloud.id,
                                  instance_id=offer.instance_id, region=region,
                                  vm={"os": offer.configuration.os[0]})


@pytest.fixture
def dollar_a_second(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    """Instances at $3600/h: a dollar a second, billed as the client bills (factor 1)."""
    return sandbox_factory(offers=one_offer(3600.0))


@pytest.fixture
def cloud_of(dollar_a_second: Sandbox) -> Iterator[GPUCloud]:
    with GPUCloud(api_key=dollar_a_second.api_key,
                  base_url=dollar_a_second.management_url) as cloud:
        yield cloud


def test_the_sandbox_service_keeps_the_budget_and_deletes_at_it(
        dollar_a_second: Sandbox, cloud_of: GPUCloud) -> None:
    cloud_of.sandbox = dollar_a_second
    budgets = cloud_of.budgets
    assert isinstance(budgets, ServiceBudgets) and budgets.where == "sandbox service"
    instance = launch(cloud_of)
    cloud_of.instances.wait_until_active(instance.id, timeout=10)
    state = budgets.set(instance.id, 2.0)
    assert state.dollars == 2.0 and state.status == "active" and state.left > 0
    wait_for(lambda: budgets.states()[instance.id].status in ("deleting", "deleted"), timeout=10)
    wait_for(lambda: cloud_of.instances.get(instance.id).status == "deleted")
    final = budgets.states()[instance.id]
    assert 2.0 <= final.spend <= 2.0 + POLL + dollar_a_second.config.delete_seconds + 0.3
    assert final.warning and final.left == 0.0
    assert budgets.account_left() is None  # not a class account
    with pytest.raises(InvalidInputError, match="budget must be a positive number of dollars"):
        budgets.set(instance.id, float("nan"))


def test_on_the_real_cloud_this_kernel_deletes_at_the_budget_and_confirms_it(
        cloud_of: GPUCloud, observer_of: GPUCloud, caplog: pytest.LogCaptureFixture) -> None:
    budgets = cloud_of.budgets
    assert isinstance(budgets, KernelBudgets) and budgets.where == "this kernel"
    budgets.poll = 0.1
    instance = launch(cloud_of)
    cloud_of.instances.wait_until_active(instance.id, timeout=10)
    with caplog.at_level(logging.WARNING, logger="gpucloud_nb.budgets"):
        budgets.set(instance.id, 1.5)
        wait_for(lambda: instance.id in budgets.deleted, timeout=10)
    assert any("% of its budget of $1.50" in record.getMessage() for record in caplog.records)
    assert observer_of.instances.get(instance.id).status in ("deleting", "deleted")
    assert budgets.failures == {} and budgets.states() == {}
    # Billed from when it turned active to the delete: the budget, overshot by at most a poll.
    bill = observer_of.spend(include_deleted=True)
    assert 1.5 <= float(bill["spend"].iloc[0]) <= 1.5 + 0.1 + 1.0


def test_a_client_that_turns_to_the_sandbox_stops_its_kernels_budget_watcher(
        dollar_a_second: Sandbox, cloud_of: GPUCloud) -> None:
    budgets = cloud_of.budgets
    assert isinstance(budgets, KernelBudgets)
    instance = cloud_of.instances.wait_until_active(launch(cloud_of).id, timeout=10)
    budgets.set(instance.id, 1000.0)
    assert watching()
    cloud_of.sandbox = dollar_a_second  # as connect() does: now the service watches
    assert isinstance(cloud_of.budgets, ServiceBudgets)
    wait_for(lambda: not watching(), timeout=60)  # the kernel's thread watches no more


def test_a_budget_delete_the_cloud_never_performs_is_a_failure_in_one_sentence(
        dollar_a_second: Sandbox, cloud_of: GPUCloud) -> None:
    # A cloud that answers 204 to the delete and goes on billing cannot be made from the sandbox:
    # replay a real active instance, and ignore the delete.
    instance = launch(cloud_of)
    details = cloud_of.instances.wait_until_active(instance.id, timeout=10)
    active = httpx.get(f"{dollar_a_second.management_url}/gpu-cloud/instances/{instance.id}",
                       headers={"x-api-key": dollar_a_second.api_key}).json()

    def deaf(request: httpx.Request) -> httpx.Response:
        return httpx.Response(204) if request.method == "DELETE" else httpx.Response(200, json=active)

    with GPUCloud(api_key="k" * 20, base_url="http://127.0.0.1:9",
                  transport=httpx.MockTransport(deaf)) as deaf_cloud:
        budgets = deaf_cloud.budgets
        assert isinstance(budgets, KernelBudgets)
        budgets.poll, budgets.confirm_within = 0.1, 1.0
        started = time.monotonic()
        budgets.set(details.id, 0.5)
        wait_for(lambda: details.id in budgets.failures, timeout=10)
    assert time.monotonic() - started < 1.0 + 5
    assert budgets.failures[details.id] == (
        f"Instance {details.id} reached its budget and was deleted, but it is not deleting "
        "after 1 s; it may still be billing.")


@pytest.fixture
def observer_of(dollar_a_second: Sandbox) -> Iterator[GPUCloud]:
    with GPUCloud(api_key=dollar_a_second.api_key,
                  base_url=dollar_a_second.management_url) as cloud:
        yield cloud


def test_create_with_a_budget_hands_it_to_whoever_watches(
        dollar_a_second: Sandbox, cloud_of: GPUCloud) -> None:
    offer = cloud_of.instances.offers()[0]
    region = next(a.region for a in offer.availability if a.available)
    with pytest.raises(InvalidInputError, match="budget must be a positive number of dollars"):
        cloud_of.instances.create(name="job", cloud_provider=offer.cloud.id,
                                  instance_id=offer.instance_id, region=region,
                                  vm={"os": offer.configuration.os[0]}, budget=-1)
    assert cloud_of.instances.list() == []  # refused before anything was sent
    kept = cloud_of.instances.create(name="job", cloud_provider=offer.cloud.id,
                                     instance_id=offer.instance_id, region=region,
                                     vm={"os": offer.configuration.os[0]}, budget=1e6)
    assert cloud_of.budgets.states()[kept.id].dollars == 1e6  # this kernel watches
    assert cloud_of.budgets.cancel(kept.id)
    cloud_of.sandbox = dollar_a_second
    served = cloud_of.instances.create(name="job2", cloud_provider=offer.cloud.id,
                                       instance_id=offer.instance_id, region=region,
                                       vm={"os": offer.configuration.os[0]}, budget=1e6)
    assert cloud_of.budgets.where == "sandbox service"
    assert cloud_of.budgets.states()[served.id].dollars == 1e6  # the service keeps it


def watching() -> list[threading.Thread]:
    """The budget watcher's thread and its confirmations, while they run."""
    return [t for t in threading.enumerate()
            if t.name == "gpucloud-nb-budgets" or t.name.startswith("gpucloud-nb-confirm")]


def confirming(instance_id: str) -> bool:
    """True while the confirmation of this instance's delete runs (not another test's)."""
    return any(t.name == f"gpucloud-nb-confirm-{instance_id}" for t in threading.enumerate())


def test_a_delete_never_confirmed_holds_up_no_other_budget(
        dollar_a_second: Sandbox, cloud_of: GPUCloud, observer_of: GPUCloud) -> None:
    deaf_id, other_id = (cloud_of.instances.wait_until_active(launch(cloud_of).id, timeout=10).id
                         for _ in range(2))
    confirm_within = 6.0
    with deaf_to(deaf_id) as transport, GPUCloud(
            api_key=dollar_a_second.api_key, base_url=dollar_a_second.management_url,
            transport=transport) as cloud:
        budgets = cloud.budgets
        assert isinstance(budgets, KernelBudgets)
        budgets.poll, budgets.confirm_within = 0.1, confirm_within
        # Due in half a second, and in two (a dollar a second from what each has cost so far).
        budgets.set(deaf_id, budgets.set(deaf_id, 1e6).spend + 0.5)
        other_budget = budgets.set(other_id, 1e6).spend + 2.0
        budgets.set(other_id, other_budget)
        wait_for(lambda: deaf_id in budgets.deleted, timeout=60)
        deaf_noted = time.monotonic()
        wait_for(lambda: other_id in budgets.deleted, timeout=confirm_within + 5)
        # On time although the first delete is still being confirmed meanwhile.
        assert deaf_id not in budgets.failures
        assert observer_of.instances.get(other_id).status in ("deleting", "deleted")
        assert observer_of.instances.get(deaf_id).status == "active"
        bill = observer_of.spend(include_deleted=True).set_index("_id")
        assert other_budget <= float(bill.loc[other_id, "spend"]) <= other_budget + 2.0
        wait_for(lambda: deaf_id in budgets.failures, timeout=confirm_within + 5)
        assert time.monotonic() - deaf_noted >= confirm_within - 0.5
    assert budgets.failures == {deaf_id: (
        f"Instance {deaf_id} reached its budget and was deleted, but it is not deleting after "
        "6 s; it may still be billing.")}


def test_closing_the_client_ends_a_confirmation_still_running(
        dollar_a_second: Sandbox, cloud_of: GPUCloud, caplog: pytest.LogCaptureFixture) -> None:
    deaf_id = cloud_of.instances.wait_until_active(launch(cloud_of).id, timeout=10).id
    with deaf_to(deaf_id) as transport:
        cloud = GPUCloud(api_key=dollar_a_second.api_key,
                         base_url=dollar_a_second.management_url, transport=transport)
        budgets = cloud.budgets
        assert isinstance(budgets, KernelBudgets)
        budgets.poll = 0.1  # confirmed within the default minute
        budgets.set(deaf_id, budgets.set(deaf_id, 1e6).spend + 0.3)
        wait_for(lambda: deaf_id in budgets.deleted, timeout=60)
        wait_for(lambda: confirming(deaf_id), timeout=60)
        # Only what the close logs counts: the budget's 80 % warning may come before it, when a
        # poll lands in the 0.06 s between 80 % and 100 % of this small budget.
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gpucloud_nb.budgets"):
            cloud.close()
            wait_for(lambda: not confirming(deaf_id), timeout=60)  # it polls every 2 s
    assert budgets.failures == {}  # ended by the close, not unconfirmed
    assert caplog.records == []  # nor by a closed client's error
