"""The gateway's watcher against an upstream that takes a delete and goes on billing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway, GatewayConfig
from gpucloud_nb.gateway.keys import parse_keys
from gpucloud_nb.gateway.meter import UNCONFIRMED_AFTER
from gpucloud_nb.gateway.money import DAY_MS as DAY
from gpucloud_nb.gateway.money import HOUR_MS as HOUR
from gpucloud_nb.gateway.store import STATE_FILE, Store
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.faults import FaultInjector, Faults
from gpucloud_nb.sandbox.http import now_ms
from tests.helpers import (
    ADA,
    BOB,
    TEACHER,
    UPSTREAM_KEY,
    add_history,
    as_key,
    create_body,
    direct,
    rows_in_the_file_alone,
    vm_offer,
    wait_for,
)

KEYS = f"{ADA} - Ada\n{TEACHER} teacher Grace\n"


def deaf_upstream(sandbox_factory: Callable[..., Sandbox], deletes: int) -> Sandbox:
    return sandbox_factory(api_key=UPSTREAM_KEY, faults=Faults(deaf_deletes=deletes))


def deaf_count(sandbox: Sandbox) -> int:
    app = sandbox.app
    assert isinstance(app, FaultInjector)
    return app.stats.deaf


def test_a_delete_that_does_not_happen_is_retried_and_shown_to_the_teacher(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    deaf = deaf_upstream(sandbox_factory, 1_000_000)
    config = GatewayConfig(people=tuple(parse_keys(KEYS)), poll=0.2,
                           upstream_url=deaf.management_url, upstream_key=UPSTREAM_KEY)
    with Gateway(config) as gateway, as_key(gateway, ADA) as ada, \
            as_key(gateway, TEACHER) as teacher, direct(deaf) as real, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=deaf.management_url) as real_cloud:
        id = ada.post("/gpu-cloud/instances",
                      json=create_body(vm_offer(real_cloud), "deaf")).json()["_id"]
        assert teacher.delete("/gateway/class/instances").json()["deleted"] == [id]

        def shown() -> bool:
            actions = [e["action"] for e in teacher.get("/gateway/audit").json()["entries"]
                       if e["resource"] == id]
            return "unconfirmed" in actions

        wait_for(shown, timeout=60)
        # asked once, then retried: the audit line is written just before the retry it names
        wait_for(lambda: deaf_count(deaf) > UNCONFIRMED_AFTER, timeout=60)
        row = teacher.get("/gateway/class").json()["accounts"][0]
        assert row["unconfirmedDeletes"] == 1 and row["instances"] == 0
        assert real.get(f"/gpu-cloud/instances/{id}").json()["status"] in ("pending", "active")
        entry = next(e for e in teacher.get("/gateway/audit").json()["entries"]
                     if e["action"] == "unconfirmed")
        assert entry["name"] == "Ada" and "still bills" in entry["reason"]
        asked = deaf_count(deaf)
        wait_for(lambda: deaf_count(deaf) > asked, timeout=60)  # and it goes on retrying


def test_a_delete_taken_at_last_is_confirmed_in_the_audit(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    deaf = deaf_upstream(sandbox_factory, UNCONFIRMED_AFTER + 1)
    config = GatewayConfig(people=tuple(parse_keys(KEYS)), poll=0.2,
                           upstream_url=deaf.management_url, upstream_key=UPSTREAM_KEY)
    with Gateway(config) as gateway, as_key(gateway, ADA) as ada, \
            as_key(gateway, TEACHER) as teacher, direct(deaf) as real, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=deaf.management_url) as real_cloud:
        id = ada.post("/gpu-cloud/instances",
                      json=create_body(vm_offer(real_cloud), "late")).json()["_id"]
        assert ada.delete(f"/gpu-cloud/instances/{id}").status_code in (200, 202, 204)
        wait_for(lambda: real.get(f"/gpu-cloud/instances/{id}").json()["status"]
                 in ("deleting", "deleted"), timeout=60)
        wait_for(lambda: teacher.get("/gateway/class").json()["accounts"][0][
            "unconfirmedDeletes"] == 0, timeout=60)
        wait_for(lambda: [e["action"] for e in teacher.get("/gateway/audit").json()["entries"]
                          if e["resource"] == id][-1] == "confirmed", timeout=60)
        actions = [e["action"] for e in teacher.get("/gateway/audit").json()["entries"]
                   if e["resource"] == id]
        assert actions == ["created", "deleted", "unconfirmed", "confirmed"]


def _tick(upstream: Sandbox, people: int, events: list[str], *, alongside: bool = False) -> None:
    """One meter tick for a class of ``people`` against ``upstream``, each SQL statement of it
    in ``events``; with ``alongside``, after a first (warming) tick, and with a task that
    writes "TURN" whenever the loop gives it a turn."""
    import asyncio

    from gpucloud_nb.gateway.keys import Keyring
    from gpucloud_nb.gateway.meter import Meter
    from gpucloud_nb.gateway.store import Store
    from gpucloud_nb.gateway.upstream import Upstream

    keys = parse_keys("".join(f"student-key-{n:02d}-0123456789 20 Student {n}\n"
                              for n in range(people)))
    store = Store(":memory:")
    store.set_people(keys)

    async def one_tick() -> None:
        meter = Meter(store, Keyring(keys), Upstream(upstream.management_url, UPSTREAM_KEY))
        done = False

        async def other_work() -> None:
            while not done:
                events.append("TURN")
                await asyncio.sleep(0)

        try:
            other = None
            if alongside:
                await meter.tick()  # connected and warm
                other = asyncio.create_task(other_work())
            store.db.set_trace_callback(events.append)
            await meter.tick()
            done = True
            if other is not None:
                await other
        finally:
            store.db.set_trace_callback(None)
            await meter.upstream.aclose()

    try:
        asyncio.run(one_tick())
    finally:
        store.close()


def test_a_tick_reads_what_people_spent_at_once_not_per_person(upstream: Sandbox) -> None:
    # Each tick checks every budget; with 40 people it ran 5 queries each (200 a second on the
    # gateway's one loop, the answers to the class waiting behind them). Now the same few
    # queries whatever the class's size.
    statements: list[str] = []
    _tick(upstream, 40, statements)
    assert 0 < len(statements) < 40, statements


def test_a_tick_lets_waiting_answers_through_between_its_parts(upstream: Sandbox) -> None:
    # After the upstream's list a tick was one stretch of work on the gateway's loop (metering,
    # reconciling, timers, budgets: ~10 ms for a class of 40, more on a busy machine), every
    # answer to the class waiting behind it. A task that runs whenever the loop is free must
    # get a turn between the metering and the budgets' reads.
    events: list[str] = []
    _tick(upstream, 3, events, alongside=True)
    metering = next(n for n, event in enumerate(events) if event.startswith("SELECT * FROM owned"))
    budgets = next(n for n, event in enumerate(events) if "FROM spans" in event)
    assert metering < budgets
    assert "TURN" in events[metering:budgets], events


def _steps_of_a_warm_tick(upstream: Sandbox, history: int) -> tuple[int, int]:
    """SQLite's virtual-machine steps of one tick (after a first) for a class of 40 with budgets,
    whose store holds ``history`` final records; and the rows those statements could have read
    (the owned records and spans in the store)."""
    import asyncio
    import time

    from gpucloud_nb.gateway.keys import Keyring
    from gpucloud_nb.gateway.meter import Meter
    from gpucloud_nb.gateway.store import Store
    from gpucloud_nb.gateway.upstream import Upstream

    keys = parse_keys("".join(f"student-key-{n:02d}-0123456789 {'20/day' if n % 2 else '20'} "
                              f"Student {n}\n" for n in range(40)))
    store = Store(":memory:")
    store.set_people(keys)
    add_history(store, [p.account for p in keys], history, end=int(time.time() * 1000))
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    async def ticks() -> None:
        meter = Meter(store, Keyring(keys), Upstream(upstream.management_url, UPSTREAM_KEY))
        try:
            await meter.tick()  # sums what the final records cost, once
            store.db.set_progress_handler(step, 1)
            await meter.tick()
        finally:
            store.db.set_progress_handler(None, 1)
            await meter.upstream.aclose()

    try:
        asyncio.run(ticks())
        rows = store.db.execute("SELECT (SELECT count(*) FROM owned) + "
                                "(SELECT count(*) FROM spans)").fetchone()[0]
        return steps[0], rows
    finally:
        store.close()


def test_a_tick_reads_no_final_record(upstream: Sandbox) -> None:
    # A tick read every record ever made (deleted ones too) several times and summed each
    # person's spend from all of them: its cost grew with the class's history, on the loop that
    # answers the class. Now a tick after the first reads what is live: with 3,000 final records
    # SQLite takes as many steps as with none (it took several steps for each row it read).
    empty, _ = _steps_of_a_warm_tick(upstream, 0)
    full, rows = _steps_of_a_warm_tick(upstream, 3_000)
    assert rows > 3_000
    assert full <= empty * 1.1 + 50, (full, empty)


def test_a_daily_budget_over_a_long_history_is_metered_agreed_and_spent(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    # The spend is summed from a semester of final records once, then from what is live: the
    # day's window still clips them, the student's and the teacher's figures still agree, and
    # the budget still deletes at 100 %.
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        offer = vm_offer(real_cloud)
    price = offer.hourly_price
    budget = price * 0.008  # today's history spends 90 %: 2.9 s of the instance is the rest
    keys = f"{ADA} {budget}/day Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n"
    ada_account, bob_account = (p.account for p in parse_keys(keys)[:2])
    wait_for(lambda: now_ms() % DAY > 60_000, timeout=90)  # not in a UTC day's first minute
    today = now_ms() - now_ms() % DAY
    store = Store(tmp_path / STATE_FILE)
    try:  # 3,000 records before today at 10x the price, then 1,000 of one second today
        add_history(store, [ada_account, bob_account], 3_000, end=today, price=10 * price)
        each = 0.9 * budget * 3.6  # $/h: 1,000 seconds of it is 90 % of the budget
        for k in range(1_000):
            created = today - HOUR if k < 10 else today  # ten ran from before midnight
            store.add_owned(f"today-{k}", "instance", ada_account, "t", each, created)
            store.update_owned(f"today-{k}", price=each, created_ms=created, status="deleted",
                               deleted_ms=today + 1_000, final=True)
    finally:
        store.close()
    gateway = gateway_factory(keys, home=tmp_path, reserve_hours=0.0005)
    with as_key(gateway, ADA) as ada, as_key(gateway, TEACHER) as teacher, \
            direct(upstream) as real:
        me = ada.get("/gateway/me").json()
        rows = {row["name"]: row for row in teacher.get("/gateway/class").json()["accounts"]}
        assert me["spend"] == pytest.approx(0.9 * budget, abs=2e-6)
        assert (me["spend"], me["left"]) == (rows["Ada"]["spend"], rows["Ada"]["left"])
        # no budget, no window: all Bob's history, 1,500 records of an hour at 10x the price
        assert rows["Bob"]["spend"] == pytest.approx(1_500 * 10 * price, rel=1e-9)
        made = ada.post("/gpu-cloud/instances", json=create_body(offer, "last"))
        assert made.status_code == 201, made.text  # yesterday's 30,000 x the budget is not today's
        id = made.json()["_id"]
        wait_for(lambda: real.get(f"/gpu-cloud/instances/{id}").json()["status"]
                 in ("deleting", "deleted"), timeout=60)
        reasons = [e["reason"] for e in teacher.get("/gateway/audit").json()["entries"]
                   if e["resource"] == id and e["action"] == "deleted"]
        assert reasons == ["budget spent (by gateway)"]

        def agreed() -> bool:  # once the upstream's record is final, neither figure moves
            mine = ada.get("/gateway/me").json()
            row = next(r for r in teacher.get("/gateway/class").json()["accounts"]
                       if r["name"] == "Ada")
            return (mine["spend"], mine["left"]) == (row["spend"], row["left"])

        wait_for(agreed, timeout=60)
        me = ada.get("/gateway/me").json()
        assert me["left"] == 0 and me["spend"] >= budget and me["warning"] is True
        assert [d["id"] for d in me["deleted"]] == [id]
        assert ada.post("/gpu-cloud/instances",
                        json=create_body(offer, "again")).status_code == 402


def test_the_watcher_copies_the_state_into_its_file_with_no_commit_doing_it(
        upstream: Sandbox, gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    # Commits leave the WAL as it is (Store.checkpoint); the watcher's pass copies it into the
    # file from a thread, so a create's record reaches the file without any request waiting.
    gateway = gateway_factory(home=tmp_path)
    with as_key(gateway, ADA) as ada, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud:
        made = ada.post("/gpu-cloud/instances", json=create_body(vm_offer(real_cloud), "kept"))
        assert made.status_code == 201, made.text
        wait_for(lambda: rows_in_the_file_alone(tmp_path / STATE_FILE, "owned") == 1, timeout=60)


def test_a_tick_writes_what_changed_of_a_class_launch_in_one_commit(upstream: Sandbox) -> None:
    # Each record whose upstream state changed was its own write transaction: after 40
    # students launched at once, the next tick committed 40 times in one stretch on the loop
    # that answers them.
    import asyncio

    from gpucloud_nb.gateway.keys import Keyring
    from gpucloud_nb.gateway.meter import Meter
    from gpucloud_nb.gateway.upstream import Upstream

    keys = parse_keys("".join(f"student-key-{n:02d}-0123456789 - Student {n}\n"
                              for n in range(40)))
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real_cloud, \
            direct(upstream) as real:
        offer = vm_offer(real_cloud)
        made = [real.post("/gpu-cloud/instances", json=create_body(offer, f"s{n}")).json()
                for n in range(40)]
    store = Store(":memory:")
    store.set_people(keys)
    for person, item in zip(keys, made, strict=True):  # as a create records it: not yet metered
        store.add_owned(item["_id"], "instance", person.account, item["name"], 0.0, 0)
    statements: list[str] = []

    async def one_tick() -> None:
        meter = Meter(store, Keyring(keys), Upstream(upstream.management_url, UPSTREAM_KEY))
        store.db.set_trace_callback(statements.append)
        try:
            await meter.tick()
        finally:
            store.db.set_trace_callback(None)
            await meter.upstream.aclose()

    try:
        asyncio.run(one_tick())
        assert all(record.price == offer.hourly_price and record.created_ms > 0
                   for record in store.live())
        assert sum(s.strip().upper() == "COMMIT" for s in statements) == 1, statements
    finally:
        store.close()
