"""The gateway's watcher: meter spend from the upstream, delete at 100 %, confirm, reconcile.

    >>> meter = Meter(store, keyring, upstream, poll=1.0)  # doctest: +SKIP
    >>> task = asyncio.create_task(meter.run())  # doctest: +SKIP

Every ``poll`` seconds (1) :meth:`Meter.tick` reads the upstream's list of instances once and:

- **meters**: copies each owned instance's ``hourlyPrice``, ``createdAt``, ``status`` and
  ``deletedAt`` into the store; an instance deleted (or in ``error``) is final and never read
  again, so each is counted once. One missing from the list is read by id; a 404 is final too.
- **steps the idle clocks** (:mod:`gpucloud_nb.gateway.idle`): deletes what is idle past its
  limit (audit reason ``idle``);
- **meters inference instances** (:mod:`gpucloud_nb.gateway.endpoint_meter`): their containers
  times the price per container, as billing spans;
- **fires timers**: an instance whose ``delete_after`` timer is due is deleted (audit reason
  ``delete_after timer``; see :mod:`gpucloud_nb.gateway.timers`). A timer that fell due while
  the gateway was not running fires at the first pass after its restart, and its audit reason
  says how late (:func:`timer_reason`): the upstream billed the instance up to that delete, and
  the gateway's spend counts it so (it cannot end an upstream's bill at a time already past);
- **deletes at 100 %**: a person whose spend reaches their budget has every instance and
  inference instance deleted (audit reason ``budget spent``), and one whose own cost reaches its
  own budget (:mod:`gpucloud_nb.gateway.budgets`) is deleted (audit reason ``instance budget spent``);
- **confirms deletes**: a delete the gateway asked for is sent again each tick until the
  upstream reports the instance ``deleting`` or ``deleted`` (or 404); until then the teacher's
  view counts it as ``unconfirmedDeletes``, and after :data:`UNCONFIRMED_AFTER` retries the audit
  says so (action ``unconfirmed``), and says ``confirmed`` once the upstream does (the retry
  counts live in memory: after a restart they start again);
- **reconciles**: a create admitted but never answered (the gateway was killed, or the upstream's
  answer was lost) is looked up by name among the upstream's instances no one owns, created since
  the admission (less 5 s); found, it is adopted; not found :data:`RECONCILE_GRACE` seconds after
  its admission, it is closed as failed. The gateway never sends that create again. Two keys'
  creates of one name are never in flight at once (:func:`gpucloud_nb.gateway.money.admit`), so
  one is never adopted by the other; one key's, the earliest instance to the earliest reservation.

Each delete the upstream accepts calls ``changed()`` (the server touches the change stamp of the
gateway's own URL, :mod:`gpucloud_nb.client.changes`), so a JupyterLab sidebar on this machine
polling the gateway lists again at once instead of at its next slow poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from gpucloud_nb.gateway import money
from gpucloud_nb.gateway.endpoint_meter import ENDPOINT, meter_endpoints, upstream_path
from gpucloud_nb.gateway.idle import IdleWatch
from gpucloud_nb.gateway.keys import Keyring
from gpucloud_nb.gateway.store import Owned, Store
from gpucloud_nb.gateway.upstream import Listed, Upstream, UpstreamUnreachable, decode_listing
from gpucloud_nb.sandbox.http import now_ms

__all__ = ["RECONCILE_GRACE", "UNCONFIRMED_AFTER", "Meter", "parse_ms", "timer_reason"]

log = logging.getLogger("uvicorn.error")
RECONCILE_GRACE = 180.0
UNCONFIRMED_AFTER = 3
_SLACK_MS = 5_000
_GONE = ("deleting", "deleted")


def parse_ms(text: Any) -> int | None:
    """Unix ms of an ISO 8601 date-time, or ``None``.

        >>> parse_ms("1970-01-01T00:00:01.000Z")
        1000
    """
    if not isinstance(text, str):
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def timer_reason(late_ms: int, poll: float) -> str:
    """The audit reason of a ``delete_after`` timer that fired ``late_ms`` after it was due: how
    late, when that is more than the watcher's own lag (two passes and 5 s).

        >>> timer_reason(300, 1.0), timer_reason(125_000, 1.0)
        ('delete_after timer', 'delete_after timer, 125 s late (the gateway was not watching)')
    """
    if late_ms <= _SLACK_MS + 2 * poll * 1000:
        return "delete_after timer"
    return f"delete_after timer, {late_ms / 1000:.0f} s late (the gateway was not watching)"


def _path(record: Owned) -> str:
    return upstream_path(record.id) if record.kind == ENDPOINT \
        else f"/gpu-cloud/instances/{record.id}"


class Meter:
    """The watcher of one gateway; ``inflight`` holds reservations this process still answers."""

    def __init__(self, store: Store, keyring: Keyring, upstream: Upstream,
                 poll: float = 1.0) -> None:
        self.store, self.keyring, self.upstream, self.poll = store, keyring, upstream, poll
        self.inflight: set[int] = set()
        self.retries: dict[str, int] = {}
        #: the idle clocks (:mod:`gpucloud_nb.gateway.idle`), stepped once per pass
        self.idle: IdleWatch | None = None
        #: called after each delete the upstream accepted (the server touches the change stamp)
        self.changed: Callable[[], None] = lambda: None

    async def run(self) -> None:
        """Tick every ``poll`` seconds until cancelled; a failed tick is logged, not fatal."""
        while True:
            try:
                await self.tick()
            except UpstreamUnreachable as error:
                log.warning("gateway: the upstream did not answer (%s); will retry.", error)
            except Exception as error:  # keep watching money whatever one tick met
                log.warning("gateway: a metering pass failed (%s).",
                            self.upstream.scrub(type(error).__name__))
            try:  # the pass's and the requests' writes copied into the file, off this loop
                await asyncio.to_thread(self.store.checkpoint)
            except sqlite3.Error as error:
                log.warning("gateway: a checkpoint of its state failed (%s).", error)
            await asyncio.sleep(self.poll)

    async def tick(self) -> None:
        """One pass: meter, reconcile, fire timers, delete at 100 %, confirm deletes.

        Its reads follow what is live, not the class's history: records whose billing is final
        are read by no query of a pass (:meth:`Store.live`), and what they cost comes from
        :func:`money.spent`'s cache, summed once per window.
        """
        status, body = await self.upstream.send_shared("/gpu-cloud/instances")
        listed = decode_listing(body) if status == 200 else None
        if listed is None:
            return
        now = now_ms()
        changes = []
        for record in self.store.live():
            item = await self._read(record, listed.get(record.id), now)
            change = None if item is None else self._change(record, item, now)
            if change is not None:
                changes.append((record.id, change))
        if changes:  # in one commit: after a class's launch, 40 records change at once
            with self.store.transaction():
                for id, change in changes:
                    self.store.update_owned(id, **change)
        # The rest is work on this loop without a wait (~10 ms for a class of 40 on a quiet
        # machine, more on a busy one): the answers waiting for the loop go between its parts.
        await asyncio.sleep(0)
        await meter_endpoints(self.store, self.upstream, now)
        self._reconcile(listed, now)
        await asyncio.sleep(0)
        for id, _, at in self.store.timers(due=now):
            due = self.store.find(id)
            if due is not None and due.delete_asked_ms is None and due.status not in _GONE:
                await self.delete(due, timer_reason(now - at, self.poll), "gateway")
            self.store.drop_timer(id)
        if self.idle is not None:
            await self.idle.step(listed)
        await asyncio.sleep(0)
        # What can still be deleted, read once; a delete this pass asks is noted in it.
        by_id = {record.id: record for record in self._deletable()}

        async def delete(record: Owned, reason: str) -> None:
            await self.delete(record, reason, "gateway")
            by_id[record.id] = dataclasses.replace(
                record, delete_asked_ms=record.delete_asked_ms or now,
                delete_reason=record.delete_reason or reason)

        for id, _, dollars in self.store.budgets(live=True):
            capped = by_id.get(id)
            if capped is not None and capped.delete_asked_ms is None \
                    and capped.status not in (*_GONE, "error") \
                    and money.cost_of(self.store, capped, now) >= dollars:
                await delete(capped, "instance budget spent")
        await asyncio.sleep(0)
        budgeted = [person for person in self.keyring.people if person.budget is not None]
        if budgeted:  # what is live of everyone, read at once: a few queries a tick, not per person
            billed: dict[str, list[Owned]] = {person.account: [] for person in budgeted}
            for record in self.store.live_billed():
                billed.setdefault(record.account, []).append(record)
            spent = money.spent(self.store, budgeted, now, billed)
            for person in budgeted:
                assert person.budget is not None
                if spent[person.account] < person.budget:
                    continue
                for record in [r for r in by_id.values() if r.account == person.account]:
                    if record.status not in (*_GONE, "error") and record.delete_asked_ms is None:
                        await delete(record, "budget spent")
        for record in by_id.values():
            if record.delete_asked_ms is None:
                continue
            if record.status in _GONE:
                self._confirmed(record, now)
                continue
            tries = self.retries[record.id] = self.retries.get(record.id, 0) + 1
            if tries == UNCONFIRMED_AFTER:
                self.store.audit(now, record.account, "unconfirmed", record.id,
                                 f"the upstream took the delete {tries} times and still bills; "
                                 "retrying")
            with contextlib.suppress(UpstreamUnreachable):
                await self.upstream.call("DELETE", _path(record))
        gone = [id for id in self.retries if id not in by_id]  # final since: confirmed
        for record in self.store.find_many(gone):
            self._confirmed(record, now)
        for id in gone:
            self.retries.pop(id, None)

    def _confirmed(self, record: Owned, now: int) -> None:
        """``record``'s delete is done; say so in the audit if it was said not to be."""
        if self.retries.pop(record.id, 0) >= UNCONFIRMED_AFTER:
            self.store.audit(now, record.account, "confirmed", record.id,
                             "the upstream took the delete at last")

    def _deletable(self) -> list[Owned]:
        """Everyone's instances and inference instances whose billing is not final."""
        return self.store.live() + self.store.live(kind=ENDPOINT)

    async def _read(self, record: Owned, item: Listed | None, now: int) -> Listed | None:
        """``item``, or for a record the list missed, the upstream's record of it by id (a 404
        is final: it is recorded as deleted here); ``None`` when there is nothing to meter."""
        if item is not None:
            return item
        status, data = await self.upstream.call("GET", f"/gpu-cloud/instances/{record.id}")
        if status == 404:
            self.store.update_owned(record.id, price=record.price, created_ms=record.created_ms,
                                    status="deleted", final=True,
                                    deleted_ms=record.deleted_ms or record.delete_asked_ms or now)
            return None
        if status != 200 or not isinstance(data, dict):
            return None
        return msgspec.convert(data, Listed)

    @staticmethod
    def _change(record: Owned, item: Listed, now: int) -> dict[str, Any] | None:
        """What to write of the upstream's ``item`` into ``record``: ``None`` when nothing
        changed (no write transaction each tick for each instance)."""
        state = str(record.status if item.status is None else item.status)
        try:
            price = float(record.price if item.hourlyPrice is None else item.hourlyPrice)
        except (TypeError, ValueError):
            price = record.price
        created = parse_ms(item.createdAt) or record.created_ms
        deleted = parse_ms(item.deletedAt) if state == "deleted" else None
        if state == "deleted" and not deleted:
            deleted = record.delete_asked_ms or now
        final = state in money.BILLING_STOPPED
        if (price, created, state, deleted, final) == (record.price, record.created_ms,
                                                       record.status, record.deleted_ms,
                                                       record.final):
            return None
        return {"price": price, "created_ms": created, "status": state, "deleted_ms": deleted,
                "final": final}

    def _reconcile(self, listed: dict[str, Listed], now: int) -> None:
        adopted: set[str] = set()

        def owned(id: str) -> bool:  # read only for a listed instance of a reservation's name
            record = self.store.find(id)
            return id in adopted or (record is not None and record.kind == "instance")

        for reservation in self.store.reservations():
            if reservation.rid in self.inflight:
                continue
            since = reservation.admitted_ms - _SLACK_MS
            found = sorted(
                (item for id, item in listed.items()
                 if item.name == reservation.name
                 and (parse_ms(item.createdAt) or 0) >= since and not owned(id)),
                key=lambda item: str(item.createdAt or ""))
            if found:
                item = found[0]
                id = str(item.id)
                self.store.add_owned(id, "instance", reservation.account, reservation.name,
                                     reservation.price, parse_ms(item.createdAt) or now,
                                     rid=reservation.rid)
                adopted.add(id)
                self.store.audit(now, reservation.account, "created", id,
                                 "reconciled: admitted before a restart or a lost answer")
            elif now - reservation.admitted_ms > RECONCILE_GRACE * 1000:
                self.store.fail_reservation(reservation.rid)

    async def delete(self, record: Owned, reason: str, actor: str) -> bool:
        """Ask the upstream to delete ``record``; True if it accepted (else retried each tick)."""
        now = now_ms()
        self.store.ask_delete(record.id, now, reason)
        self.store.audit(now, record.account, "deleted", record.id, f"{reason} (by {actor})")
        try:
            status, _ = await self.upstream.call("DELETE", _path(record))
        except UpstreamUnreachable:
            return False
        accepted = status in (200, 202, 204, 404)
        if accepted:
            self.changed()
        return accepted
