"""The JupyterLab poller (``lab/poller.py``) through a gateway in front of a sandbox, over real HTTP:
deletes the gateway makes itself, budgets kept per instance, and a key that stops working.

The poller runs on this test's event loop (as on Jupyter's), without a Jupyter server; the
handlers only pass its snapshot on (``tests/test_lab_server.py`` covers them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from helpers import ADA, UPSTREAM_KEY, launch_active
from poller_helpers import row, run, until

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client import changes
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.lab.poller import REFUSED, Poller
from gpucloud_nb.sandbox import Sandbox


def client_of(gateway: Gateway, key: str = ADA) -> Callable[[], AsyncGPUCloud]:
    return lambda: AsyncGPUCloud(api_key=key, base_url=gateway.url, timeout=5, max_retries=1)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The change stamps live under this test's own cache dir (the gateway runs in-process)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder


def test_a_delete_the_gateway_makes_itself_shows_at_the_next_watch_not_the_slow_poll(
        gateway_factory: Callable[..., Gateway], upstream: Sandbox, cache: Path) -> None:
    """#36: a timer (or idle limit, or budget) kept by the gateway deletes with no client making
    the change: the gateway touches its URL's change stamp, so the poller lists at once."""
    gateway = gateway_factory()
    cloud = GPUCloud(api_key=ADA, base_url=gateway.url)
    made = launch_active(cloud, "timed").id
    slow = 40.0  # the poller lists every 40 s unless the stamp moves

    async def body(poller: Poller) -> None:
        await until(poller, lambda s: row(s, made)["status"] == "active", 60)
        before = changes.stamp(gateway.url)
        cloud.auto_delete.schedule(made, 1)  # a timer the gateway keeps and fires
        with httpx.Client(base_url=upstream.management_url,
                          headers={"x-api-key": UPSTREAM_KEY}) as real:
            deadline = time.monotonic() + 60
            while real.get(f"/gpu-cloud/instances/{made}").json()["status"] == "active":
                assert time.monotonic() < deadline, "the gateway never fired the timer"
                await asyncio.sleep(0.1)
        deleted = time.monotonic()
        await until(poller, lambda s: row(s, made)["status"] != "active", slow)
        shown = time.monotonic() - deleted
        assert changes.stamp(gateway.url) != before  # the gateway's own delete touched it
        assert shown < slow / 4, f"shown {shown:.1f} s after the gateway's delete"

    run(Poller(client_of(gateway), fast=slow, slow=slow), body)
    cloud.close()


def test_a_refused_key_rebuilds_the_client_from_the_current_settings_and_recovers(
        gateway_factory: Callable[..., Gateway], cache: Path) -> None:
    """#36: the poller kept its client, so after the key changed (a new GPUCLOUD_API_KEY, a
    personal gateway back with a new local key) every poll was the same 403 for good. Now a
    refused key drops the client: one sentence meanwhile, and the next poll uses the settings."""
    gateway = gateway_factory()
    settings = {"key": "gk-old-0000000000000009"}  # a key the gateway does not know (any more)
    built: list[str] = []

    def connect() -> AsyncGPUCloud:
        built.append(settings["key"])
        return AsyncGPUCloud(api_key=settings["key"], base_url=gateway.url, timeout=5,
                             max_retries=1)

    async def body(poller: Poller) -> None:
        refused = await until(poller, lambda s: s["error"] is not None, 60)
        assert refused["error"] == REFUSED
        assert settings["key"] not in str(refused)
        settings["key"] = ADA  # the settings now hold the working key
        recovered = await until(poller, lambda s: s["error"] is None, 60)
        assert recovered["gateway"]["name"] == "Ada"

    run(Poller(connect, fast=1.0, slow=1.0), body)
    assert built[0] != ADA and built[-1] == ADA


def test_the_budget_line_shows_each_instances_budget_and_its_spend_through_a_gateway(
        gateway_factory: Callable[..., Gateway], cache: Path) -> None:
    """#36: through a personal gateway (one person, no budget of the key) the sidebar read
    "$0.00 spent; no budget on this key" even with ``create(..., budget=)`` on its instances.
    The snapshot now carries each live instance's budget and a line that names them."""
    gateway = gateway_factory()  # Ada's key has no budget, as the personal gateway's person
    cloud = GPUCloud(api_key=ADA, base_url=gateway.url)
    train = launch_active(cloud, "train", budget=5).id
    launch_active(cloud, "eval", budget=2)
    plain = launch_active(cloud, "plain").id

    async def body(poller: Poller) -> None:
        snapshot = await until(poller, lambda s: s["gateway"] is not None and len(
            s["gateway"].get("instanceBudgets") or []) == 2, 60)
        shown = snapshot["gateway"]
        assert shown["budget"] is None
        budgets = {b["name"]: b for b in shown["instanceBudgets"]}
        assert {name: b["dollars"] for name, b in budgets.items()} == {"eval": 2.0, "train": 5.0}
        assert plain not in {b["instanceId"] for b in shown["instanceBudgets"]}
        assert budgets["train"]["instanceId"] == train
        assert all(b["spend"] >= 0 and b["left"] == pytest.approx(b["dollars"] - b["spend"])
                   for b in budgets.values())
        line = shown["line"]
        assert line.startswith("Instance budgets: eval $") and " of $2.00 spent, train $" in line
        assert line.endswith(" of $5.00 spent") and "no budget" not in line
        cloud.instances.delete(train)  # a deleted instance's budget leaves the line
        after = await until(poller, lambda s: row(s, train)["status"] != "active"
                            and len(s["gateway"]["instanceBudgets"]) == 1, 60)
        assert after["gateway"]["line"].startswith("Instance budget: eval $")

    run(Poller(client_of(gateway), fast=1.0, slow=1.0), body)
    cloud.close()
