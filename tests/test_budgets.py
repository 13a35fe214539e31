"""Spend budgets from the client: kept by a gateway, never by this kernel nor by the sandbox
(through a gateway: tests/test_client_gateway.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from samples import one_offer

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.budgets import UnkeptBudgets
from gpucloud_nb.client.gateway import unkept
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance
from gpucloud_nb.sandbox import Sandbox


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


def test_on_the_real_cloud_without_a_gateway_nobody_keeps_a_budget_and_none_is_set(
        cloud_of: GPUCloud) -> None:
    budgets = cloud_of.budgets
    assert isinstance(budgets, UnkeptBudgets) and budgets.where == "nobody"
    instance = launch(cloud_of)
    with pytest.raises(InvalidInputError) as refused:
        budgets.set(instance.id, 1.5)
    assert str(refused.value) == unkept("a budget")
    assert budgets.states() == {} and not budgets.cancel(instance.id)
    assert not [t for t in threading.enumerate() if t.name.startswith("gpucloud-nb-budgets")]


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
    with pytest.raises(InvalidInputError) as unkept_:  # the real cloud, no gateway: nobody would
        cloud_of.instances.create(name="job", cloud_provider=offer.cloud.id,
                                  instance_id=offer.instance_id, region=region,
                                  vm={"os": offer.configuration.os[0]}, budget=1e6)
    assert str(unkept_.value) == unkept("budget", at_create=True)
    assert cloud_of.instances.list() == []
    cloud_of.sandbox = dollar_a_second  # the sandbox itself keeps no budget either
    assert cloud_of.budgets.where == "nobody"
    with pytest.raises(InvalidInputError) as unkept_on_sandbox:
        cloud_of.instances.create(name="job2", cloud_provider=offer.cloud.id,
                                  instance_id=offer.instance_id, region=region,
                                  vm={"os": offer.configuration.os[0]}, budget=1e6)
    assert str(unkept_on_sandbox.value) == unkept("budget", at_create=True)
    assert cloud_of.instances.list() == []
