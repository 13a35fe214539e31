"""Benchmark: the gateway's money watcher and admission against a semester of history.

Two stores (SQLite files, as a gateway keeps them) for the same class of 40 students with
budgets (half ``/day``), each owning one live instance in the same upstream sandbox; one store
also holds ``history`` final records (deleted instances, instances in ``error``, deleted volumes,
inference instances' closed spans, each with its answered reservation), the other none. Each
round times one :meth:`~gpucloud_nb.gateway.meter.Meter.tick` on each store (the upstream's list
read, the 40 instances metered, every budget checked), then one
:func:`~gpucloud_nb.gateway.money.admit` on each (the reservation then closed as failed), the two
stores alternated so a loaded machine slows both alike. Rows: the median tick and the median
admission with the history against without it (target <= 1.2x: the cost follows what is live, not
history). The first tick of each store (which sums the final records once) is not timed.

Run standalone with ``python -m benchmarks.bench_meter`` (``--quick``: fewer rounds).

Measured (29 Nov 2026, 2 cores shared with other work; the ratio is the figure, the times move
with the load):

- before (main at c999377: the tick read every record ever made several times and rebuilt each
  person's spend from all of them; each create scanned every reservation): tick 42.6x (305 ms
  against 7.2 ms) and admission 7.7x at load 3.5; tick 36.8x and admission 7.1x at load 2.7;
- after, run 1 (load 3.2): tick 1.01x (5.4 ms against 5.3 ms), admission 0.81x;
- after, run 2 (load 3.3): tick 1.00x (5.4 ms against 5.4 ms), admission 0.96x.

The third row times what the tick does first, reading the upstream's list, which holds every
instance the account ever had (deleted ones stay listed): decoding only the nine fields the
watchers use (:func:`gpucloud_nb.gateway.upstream.decode_listing`) against decoding all of each
instance, as the tick did before, for 5,040 instances: 0.32x and 0.33x (5.95 against 18.6 ms, 7.4
against 22.8 ms, load 0.7), 0.18x at load 6.4 (the whole decode makes a dict and a string of
every field, and a loaded, collecting interpreter pays for each).

What is left of a tick is mostly the upstream's list (one HTTP request and its decode) and the 40
live instances; the final records cost it nothing once summed (the first tick, and the first
after one of a person's records becomes final, sums that person's once per budget window:
:func:`gpucloud_nb.gateway.money.spent`). An admission below 1x is noise of a few µs.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["QUICK", "UNIT", "run"]

Row = tuple[str, float, float, float, str, str]
UNIT = "s"
QUICK = {"history": 1_000, "rounds": 10}
STUDENTS = 40
HOUR = 3_600_000


def _add_history(store: object, accounts: list[str], n: int, end: int) -> None:
    """``n`` final records over ``accounts``, created through the store as a gateway does."""
    from gpucloud_nb.gateway.store import Store

    assert isinstance(store, Store)
    for k in range(n):
        account, id = accounts[k % len(accounts)], f"old-{k}"
        created = end - HOUR - (k % 240) * HOUR // 4
        kind = ("volume", "endpoint", "instance")[min(k % 10, 2)]
        store.add_owned(id, kind, account, id, 1.0, created,
                        rid=store.reserve(account, id, 1.0, created))
        if kind == "volume":
            store.end_volume(id, created + HOUR)
            continue
        if kind == "endpoint":
            store.bill_at(id, account, 1.0, created)
            store.bill_at(id, account, 0.0, created + HOUR)
        error = k % 10 == 3
        store.update_owned(id, price=1.0, created_ms=created,
                           status="error" if error else "deleted",
                           deleted_ms=None if error else created + HOUR, final=True)


def run(history: int = 5_000, rounds: int = 40) -> list[Row]:
    """Build both stores, then time ticks and admissions alternately (see the module docs)."""

    from gpucloud_nb import GPUCloud
    from gpucloud_nb.gateway import money
    from gpucloud_nb.gateway.keys import Keyring, parse_keys
    from gpucloud_nb.gateway.meter import Meter
    from gpucloud_nb.gateway.store import Store
    from gpucloud_nb.gateway.upstream import Upstream, decode_listing
    from gpucloud_nb.sandbox import Sandbox
    from gpucloud_nb.sandbox.http import now_ms

    key = "bench-meter-upstream-0123456789"
    people = parse_keys("".join(f"bench-meter-student-{n:02d}-0123456789 "
                                f"{'10000/day' if n % 2 else '10000'} Student {n}\n"
                                for n in range(STUDENTS)))
    folder = Path(tempfile.mkdtemp(prefix="gpucloud-bench-meter-"))
    box = Sandbox(api_key=key).start()
    stores = {"none": Store(folder / "none.sqlite3"), "history": Store(folder / "history.sqlite3")}
    times: dict[tuple[str, str], list[float]] = {}
    try:
        with GPUCloud(api_key=key, base_url=box.management_url) as cloud:
            offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
            live = [cloud.instances.create(
                name=f"live-{n}", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
                region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
                for n in range(STUDENTS)]
        now = now_ms()
        for name, store in stores.items():
            store.set_people(people)
            if name == "history":
                _add_history(store, [p.account for p in people], history, now)
            for person, instance in zip(people, live, strict=True):
                store.add_owned(instance.id, "instance", person.account, instance.name,
                                offer.hourly_price, now)

        async def measure() -> None:
            meters = {name: Meter(store, Keyring(people), Upstream(box.management_url, key))
                      for name, store in stores.items()}
            try:
                for meter in meters.values():
                    await meter.tick()  # warm: connected, and the final records summed once
                for n in range(rounds):
                    order = list(stores) if n % 2 else list(reversed(stores))
                    for name in order:
                        start = time.perf_counter()
                        await meters[name].tick()
                        times.setdefault(("tick", name), []).append(time.perf_counter() - start)
                    for name in order:
                        store, person = stores[name], people[n % STUDENTS]
                        start = time.perf_counter()
                        rid = money.admit(store, person, f"job-{n}", 1.0, 1.0, now_ms())
                        times.setdefault(("admit", name), []).append(
                            time.perf_counter() - start)
                        store.fail_reservation(rid)
            finally:
                for meter in meters.values():
                    await meter.upstream.aclose()

        asyncio.run(measure())
        body = _long_list(box.management_url, key, history)
        for n in range(max(rounds // 4, 3)):  # the tick's read of the list, against a plain decode
            for name, decode in sorted((("typed", decode_listing), ("generic", _whole)),
                                       reverse=bool(n % 2)):
                start = time.perf_counter()
                decode(body)
                times.setdefault(("decode", name), []).append(time.perf_counter() - start)
    finally:
        for store in stores.values():
            store.close()
        box.stop()
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
    rows: list[Row] = []
    for what, label in (("tick", "one tick"), ("admit", "one admission")):
        ours = statistics.median(times[(what, "history")])
        base = statistics.median(times[(what, "none")])
        rows.append((f"meter: {label} with {history:,} final records vs none "
                     f"({STUDENTS} students, {STUDENTS} live)", ours, base, ours / base,
                     "<= 1.2x", UNIT))
    ours, base = (statistics.median(times[("decode", name)]) for name in ("typed", "generic"))
    rows.append((f"meter: reading the upstream's list of {history + STUDENTS:,} instances "
                 f"({history:,} deleted), only the fields it uses vs a whole decode",
                 ours, base, ours / base, "", UNIT))
    return rows


def _whole(body: bytes) -> dict[str, Any]:
    """The list by id as the tick read it before: every field of every instance decoded."""
    import msgspec

    return {str(item.get("_id")): item for item in msgspec.json.decode(body)
            if isinstance(item, dict)}


def _long_list(url: str, key: str, deleted: int) -> bytes:
    """The upstream's list at ``url`` with ``deleted`` deleted instances more, shaped as its
    own: what a cloud account lists after a semester (deleted instances stay listed)."""
    import httpx
    import msgspec

    items = httpx.get(f"{url}/gpu-cloud/instances", headers={"x-api-key": key}).json()
    old = [{**items[k % len(items)], "_id": f"gone-{k}", "name": f"gone-{k}", "status": "deleted",
            "deletedAt": items[0]["createdAt"]} for k in range(deleted)]
    return msgspec.json.encode(old + items)


if __name__ == "__main__":
    for row in run(**(QUICK if "--quick" in sys.argv else {})):
        print(row)
