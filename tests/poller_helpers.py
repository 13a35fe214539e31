"""Driving a :class:`gpucloud_nb.lab.poller.Poller` in a test: wait for a snapshot, read a row,
run a body on the poller's loop and stop it after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpucloud_nb.lab.poller import Poller


async def until(poller: Poller, predicate: Callable[[dict[str, Any]], Any],
                timeout: float) -> dict[str, Any]:
    """The first snapshot for which ``predicate`` holds; fails with the last one at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = await poller.snapshot()
        if predicate(snapshot):
            return snapshot
        assert time.monotonic() < deadline, {k: v for k, v in snapshot.items() if k != "totals"}
        await asyncio.sleep(0.1)


def row(snapshot: dict[str, Any], instance_id: str) -> dict[str, Any]:
    """The snapshot's row of ``instance_id``, or ``{"status": "deleted"}`` once it is gone."""
    return next((r for r in snapshot["instances"] if r["id"] == instance_id),
                {"status": "deleted"})


def run(poller: Poller, body: Callable[[Poller], Awaitable[None]]) -> None:
    """``await body(poller)`` in a new event loop, the poller stopped after, whatever happens."""
    async def main() -> None:
        try:
            await body(poller)
        finally:
            await poller.stop()

    asyncio.run(main())
