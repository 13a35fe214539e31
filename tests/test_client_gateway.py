"""A client through a class gateway: it recognises the gateway, which keeps its money rules.

Over real HTTP: a gateway in front of a sandbox that plays the real cloud (the fixtures of
tests/test_gateway.py); students use :class:`~gpucloud_nb.GPUCloud` with their own keys.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.client.gateway import GatewayStatus
from gpucloud_nb.display import format_price
from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, BOB, TEACHER, UPSTREAM_KEY, as_key, direct, launch, vm_offer, wait_for
from tests.helpers import gateway_cloud as cloud
from tests.test_gateway_cloud_init import cloud_init_offer
from tests.test_gateway_idle import gone, needs_ssh

GONE = ("deleting", "deleted")


def price(upstream: Sandbox) -> float:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        return vm_offer(real_cloud).hourly_price


def status_upstream(upstream: Sandbox, id: str) -> str:
    with direct(upstream) as real:
        return str(real.get(f"/gpu-cloud/instances/{id}").json()["status"])


def test_delete_after_is_kept_by_the_gateway_with_the_client_closed(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    before = set(threading.enumerate())
    with cloud(gateway, ADA) as ada:
        timed = launch(ada, "timed", delete_after=3)
        kept = launch(ada, "kept")
        assert ada.auto_delete.where == "gateway"
        assert 0 < (ada.auto_delete.remaining(timed.id) or 0) <= 3
        with as_key(gateway, ADA) as raw:  # the gateway holds the timer, not this process
            assert [t["instanceId"] for t in raw.get("/gateway/auto-deletes").json()] == [timed.id]
        assert not [t for t in set(threading.enumerate()) - before
                    if isinstance(t, threading.Timer)]
    wait_for(lambda: status_upstream(upstream, timed.id) in GONE, timeout=60)
    assert status_upstream(upstream, kept.id) in ("pending", "active")


def test_a_budget_is_kept_by_the_gateway_with_the_client_closed(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    dollars = price(upstream) * 4 / 3600  # four seconds of it
    with cloud(gateway, ADA) as ada:
        capped = launch(ada, "capped", budget=dollars)
        free = launch(ada, "free")
        assert ada.budgets.where == "gateway"
        state = ada.budgets.states()[capped.id]
        assert state.dollars == pytest.approx(dollars) and state.spend < dollars
        assert not [t for t in threading.enumerate() if t.name.startswith("gpucloud-nb-budgets")]
    wait_for(lambda: status_upstream(upstream, capped.id) in GONE, timeout=60)
    assert status_upstream(upstream, free.id) in ("pending", "active")
    with as_key(gateway, TEACHER) as teacher:
        reasons = [e["reason"] for e in teacher.get("/gateway/audit").json()["entries"]
                   if e["resource"] == capped.id and e["action"] == "deleted"]
    assert reasons == ["instance budget spent (by gateway)"]
    with cloud(gateway, ADA) as ada:
        assert ada.budgets.states()[capped.id].status in GONE
    with as_key(gateway, BOB) as bob:  # another key's instance is not there
        assert bob.get(f"/gateway/instances/{capped.id}/budget").status_code == 404


def test_the_sandbox_and_the_real_cloud_are_not_gateways(
        upstream: Sandbox, sandbox_factory: Callable[..., Sandbox]) -> None:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        assert real_cloud.gateway_status() is None
        with pytest.raises(InvalidInputError, match="Nothing watches money without a gateway"):
            launch(real_cloud, "direct", delete_after=600)  # nobody would keep it: unsent
        assert real_cloud.auto_delete.where == "nobody" and real_cloud.instances.list() == []


def test_a_student_sees_the_warning_at_80_percent(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    hourly = price(upstream)
    budget = hourly * 40 / 3600  # forty seconds of one instance
    gateway = gateway_factory(f"{ADA} {budget} Ada\n{TEACHER} teacher Grace\n",
                              reserve_hours=1 / 3600)
    with cloud(gateway, ADA) as ada:
        first = ada.gateway_status()
        assert isinstance(first, GatewayStatus)
        assert (first.name, first.budget, first.warning) == ("Ada", pytest.approx(budget), False)
        assert first.sentence() == ""
        made = launch(ada, "warm")
        wait_for(lambda: ada.gateway_status().warning, timeout=120)  # type: ignore[union-attr]
        ada.instances.delete(made.id)  # spend stops before the budget is spent
        status = ada.gateway_status()
        assert status is not None and status.warning and not status.deleted
        assert status.left is not None and status.left < 0.2 * budget
        assert "of your budget of" in status.sentence() and "%" in status.sentence()


def test_a_student_is_told_what_was_deleted_at_100_percent(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    hourly = price(upstream)
    budget = hourly * 3 / 3600
    gateway = gateway_factory(f"{ADA} {budget} Ada\n", reserve_hours=1 / 3600)
    with cloud(gateway, ADA) as ada:
        made = launch(ada, "spender")
    wait_for(lambda: status_upstream(upstream, made.id) in GONE, timeout=60)  # client closed
    with cloud(gateway, ADA) as ada:
        status = ada.gateway_status()
    assert status is not None and status.left == 0 and status.spent_at is not None
    assert [(d.id, d.name) for d in status.deleted] == [(made.id, "spender")]
    assert status.sentence() == (f"Your budget of {format_price(budget)} was spent at "
                                 f"{status.spent_at:%H:%M} UTC; deleted: spender.")
    with httpx.Client(base_url=gateway.url, headers={"x-api-key": ADA}) as raw:
        me = raw.get("/gateway/me").json()
    assert me["deleted"][0]["id"] == made.id and me["spentAt"]


def spent_budget(upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> Gateway:
    """A gateway whose student ADA (budget: three seconds of one instance) has spent it all:
    the gateway deleted her instance ``spender``; the upstream confirms."""
    budget = price(upstream) * 3 / 3600
    gateway = gateway_factory(f"{ADA} {budget} Ada\n", reserve_hours=1 / 3600)
    with cloud(gateway, ADA) as ada:
        made = launch(ada, "spender")
    wait_for(lambda: status_upstream(upstream, made.id) in GONE, timeout=60)
    return gateway


def test_an_async_client_hands_its_timer_and_budget_to_the_gateway(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    import asyncio

    from gpucloud_nb import AsyncGPUCloud
    from tests.helpers import alaunch

    gateway = gateway_factory()
    dollars = price(upstream) * 600 / 3600

    async def main() -> tuple[str, str, str, GatewayStatus | None]:
        async with AsyncGPUCloud(api_key=ADA, base_url=gateway.url, max_retries=0) as ada:
            made = await alaunch(ada, "async-timed", delete_after=2, budget=dollars)
            states = ada.budgets.states()
            assert states[made.id].dollars == pytest.approx(dollars)
            return made.id, ada.auto_delete.where, ada.budgets.where, await ada.gateway_status()

    made, timers_by, budgets_by, status = asyncio.run(main())
    assert (timers_by, budgets_by) == ("gateway", "gateway")
    assert status is not None and status.name == "Ada" and status.budget is None
    wait_for(lambda: status_upstream(upstream, made) in GONE, timeout=60)  # client closed


@needs_ssh
def test_a_client_hands_delete_when_idle_to_the_gateway_and_reports_its_runs(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory()
    offer = cloud_init_offer(upstream)
    with cloud(gateway, ADA) as ada, direct(upstream) as real:  # a class gateway, no Lab
        made = ada.instances.create(
            name="runner", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
            region=offer.available_regions[0], vm={"os": offer.configuration.os[0]},
            delete_when_idle=4)
        assert ada.idle_delete.where == "gateway"
        ada.instances.wait_until_active(made.id, timeout=60)
        assert ada.idle_delete.states()[made.id].limit == 4
        ran = ada.instances.run(made.id, "sleep 9 && echo done")  # no CPU, no GPU: reported
        assert ran.exit_status == 0 and ran.stdout == "done\n"
        assert real.get(f"/gpu-cloud/instances/{made.id}").json()["status"] == "active"
        with pytest.raises(GPUCloudError, match="cannot watch"):
            container = next(o for o in ada.instances.offers(deployment_type="container",
                                                            available=True))
            ada.instances.create(
                name="box", cloud_provider=container.cloud.id,
                instance_id=container.instance_id, region=container.available_regions[0],
                docker_container={"image": "nginx:1.27"}, delete_when_idle=60)
    with direct(upstream) as real:
        wait_for(lambda: gone(real, made.id), timeout=60)  # no client runs now
        assert [i["name"] for i in real.get("/gpu-cloud/instances").json()] == ["runner"]
