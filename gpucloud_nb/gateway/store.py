"""The gateway's state in SQLite (WAL): people (hashed keys), what each owns, reservations, audit.

    >>> store = Store(":memory:")
    >>> store.add_owned("i-1", "instance", "acc1", "job", 2.0, 1_000)
    >>> [row.id for row in store.owned("acc1")]
    ['i-1']

Tables: ``people`` (hash of each key, name, budget, period, teacher; rewritten from the keys file
at every start), ``owned`` (each instance or volume created through the gateway: its account,
name, hourly price, created/deleted times in Unix ms, whether its billing is final, and whether a
delete the gateway asked for is confirmed), ``reservations`` (a create admitted and not yet
answered: ``admitted``, then ``done`` or ``failed``), ``timers`` (``delete_after``),
``budgets`` (an instance's own budget, ``create(..., budget=)``), ``idle`` (``delete_when_idle``:
the limit in seconds, ``NULL`` once cancelled: a row says the gateway's key is on the VM;
``reserved_idle`` holds it for a create not answered yet, so an instance adopted after a restart
keeps its limit), ``spans`` (an inference instance's billing: each span a constant $/h, the
price per container × its containers, from ``start_ms`` until ``end_ms``; ``owned`` holds the
instance itself, kind ``endpoint``, its price per container) and ``audit``. The upstream's key is never
stored. What a watcher's pass or a create reads has partial indexes of what is live: records not
final (``owned_live``, read by :meth:`Store.live`), admitted reservations, open spans, timers by
time, idle limits still set; :meth:`Store.billed`'s final part is read only when
:func:`gpucloud_nb.gateway.money.spent` sums it again. Indexes are ``CREATE INDEX IF NOT EXISTS``,
so a file of an older gateway gets them at its next start. Every write is one transaction;
:meth:`Store.transaction` takes SQLite's write lock first (``BEGIN IMMEDIATE``), so
admission's read-check-insert cannot interleave with another writer, even another process on the
same file.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucloud_nb.gateway.keys import Person

__all__ = ["STATE_FILE", "AuditEntry", "Owned", "Reservation", "Store"]

STATE_FILE = "gateway.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS people (account TEXT PRIMARY KEY, key_hash TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL, budget REAL, period TEXT NOT NULL, teacher INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS owned (id TEXT PRIMARY KEY, kind TEXT NOT NULL, account TEXT NOT NULL,
    name TEXT NOT NULL, price REAL NOT NULL, created_ms INTEGER NOT NULL, deleted_ms INTEGER,
    status TEXT NOT NULL DEFAULT 'pending', final INTEGER NOT NULL DEFAULT 0,
    delete_asked_ms INTEGER, delete_reason TEXT);
CREATE INDEX IF NOT EXISTS owned_account ON owned (account);
CREATE INDEX IF NOT EXISTS owned_live ON owned (kind, account) WHERE final=0;
CREATE INDEX IF NOT EXISTS owned_account_kind ON owned (account, kind, id);
CREATE INDEX IF NOT EXISTS owned_budget_spent ON owned (account, delete_asked_ms)
    WHERE delete_reason='budget spent';
CREATE TABLE IF NOT EXISTS reservations (rid INTEGER PRIMARY KEY, account TEXT NOT NULL,
    name TEXT NOT NULL, price REAL NOT NULL, admitted_ms INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'admitted', resource TEXT);
CREATE INDEX IF NOT EXISTS reservations_admitted ON reservations (account)
    WHERE state='admitted';
CREATE INDEX IF NOT EXISTS reservations_admitted_name ON reservations (name)
    WHERE state='admitted';
CREATE TABLE IF NOT EXISTS timers (id TEXT PRIMARY KEY, account TEXT NOT NULL,
    at_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS timers_at ON timers (at_ms);
CREATE TABLE IF NOT EXISTS budgets (id TEXT PRIMARY KEY, account TEXT NOT NULL,
    dollars REAL NOT NULL);
CREATE INDEX IF NOT EXISTS budgets_account ON budgets (account);
CREATE TABLE IF NOT EXISTS idle (id TEXT PRIMARY KEY, account TEXT NOT NULL, seconds REAL);
CREATE INDEX IF NOT EXISTS idle_watched ON idle (id) WHERE seconds IS NOT NULL;
CREATE TABLE IF NOT EXISTS reserved_idle (rid INTEGER PRIMARY KEY, seconds REAL NOT NULL);
CREATE TABLE IF NOT EXISTS spans (id TEXT NOT NULL, account TEXT NOT NULL,
    start_ms INTEGER NOT NULL, end_ms INTEGER, price REAL NOT NULL);
CREATE INDEX IF NOT EXISTS spans_account ON spans (account);
CREATE INDEX IF NOT EXISTS spans_id ON spans (id, end_ms);
CREATE INDEX IF NOT EXISTS spans_open ON spans (account) WHERE end_ms IS NULL;
CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY, ms INTEGER NOT NULL,
    account TEXT NOT NULL, action TEXT NOT NULL, resource TEXT NOT NULL, reason TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Owned:
    """An instance or volume created through the gateway, as stored."""

    id: str
    kind: str
    account: str
    name: str
    price: float
    created_ms: int
    deleted_ms: int | None
    status: str
    final: bool
    delete_asked_ms: int | None
    delete_reason: str | None


@dataclass(frozen=True)
class Reservation:
    """A create admitted against a budget, before (or without) the upstream's answer."""

    rid: int
    account: str
    name: str
    price: float
    admitted_ms: int
    state: str


@dataclass(frozen=True)
class AuditEntry:
    """Who created or deleted what, when and why."""

    ms: int
    account: str
    action: str
    resource: str
    reason: str


def _owned(row: Any) -> Owned:
    return Owned(id=row[0], kind=row[1], account=row[2], name=row[3], price=row[4],
                 created_ms=row[5], deleted_ms=row[6], status=row[7], final=bool(row[8]),
                 delete_asked_ms=row[9], delete_reason=row[10])


class Store:
    """The SQLite file ``path`` (``":memory:"`` for none), in WAL mode."""

    def __init__(self, path: str | Path) -> None:
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                                  timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        # No checkpoint inside a commit: one copies the WAL into the file and syncs both, a few
        # ms on the loop that answers the class; :meth:`checkpoint` does it off that loop.
        self.db.execute("PRAGMA wal_autocheckpoint=0")
        self.db.executescript(_SCHEMA)
        self._path = str(path)
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpointing = threading.Lock()  # close() waits for a checkpoint under way
        #: per account, bumped each time one of its billed records becomes final (or a final
        #: one changes): what :func:`gpucloud_nb.gateway.money.spent` cached of it is stale then
        self.settled_gen: dict[str, int] = {}
        #: :func:`gpucloud_nb.gateway.money.spent`'s cache, per account (memory only)
        self.settled_cache: dict[str, Any] = {}

    def data_version(self) -> int:
        """SQLite's ``data_version``: it changes when another connection commits to the file."""
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    def _settled_changed(self, account: str) -> None:
        self.settled_gen[account] = self.settled_gen.get(account, 0) + 1

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the file, on a connection of its own: call it from a
        thread other than the one that writes (the gateway's watcher does, once a pass), so the
        copy and its syncs never hold up a commit. A checkpoint that readers or a writer keep
        from finishing copies what it can and leaves the rest to the next; nothing waits.

            >>> await asyncio.to_thread(store.checkpoint)  # doctest: +SKIP
        """
        if self._path == ":memory:":
            return
        with self._checkpointing:
            if self._checkpointer is None:
                self._checkpointer = sqlite3.connect(self._path, isolation_level=None,
                                                     check_same_thread=False, timeout=30)
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    def close(self) -> None:
        """Close the file (its last connection closing copies the WAL into it)."""
        with self._checkpointing:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        self.db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding SQLite's write lock from its start; inside another,
        part of it (the writes of both are committed together, in one commit).

            >>> with store.transaction():  # doctest: +SKIP
            ...     store.add_owned(id, "instance", account, name, price, ms, rid=rid)
            ...     store.audit(ms, account, "created", id, "asked")
        """
        if self.db.in_transaction:
            yield self.db
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- people --------------------------------------------------------------------------------

    def set_people(self, people: Iterable[Person]) -> None:
        """Replace the people with those of the keys file (what they own stays)."""
        with self.transaction() as db:
            db.execute("DELETE FROM people")
            db.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, ?)",
                           [(p.account, p.key_hash, p.name, p.budget, p.period, int(p.teacher))
                            for p in people])

    # -- owned resources -----------------------------------------------------------------------

    def add_owned(self, id: str, kind: str, account: str, name: str, price: float,
                  created_ms: int, rid: int | None = None) -> None:
        """Record that ``account`` owns ``id``; closes reservation ``rid`` in the same write (and
        moves its idle limit, if it had one, to ``id``)."""
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO owned (id, kind, account, name, price, created_ms) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (id, kind, account, name, price, created_ms))
            if rid is not None:
                db.execute("UPDATE reservations SET state='done', resource=? WHERE rid=?",
                           (id, rid))
                db.execute("INSERT OR REPLACE INTO idle SELECT ?, ?, seconds FROM reserved_idle "
                           "WHERE rid=?", (id, account, rid))
                db.execute("DELETE FROM reserved_idle WHERE rid=?", (rid,))

    def owned(self, account: str | None = None, kind: str = "instance") -> list[Owned]:
        """What ``account`` (or everyone) owns of ``kind``, oldest first."""
        where, args = ("kind=?", [kind]) if account is None else ("kind=? AND account=?",
                                                                  [kind, account])
        rows = self.db.execute(f"SELECT * FROM owned WHERE {where} ORDER BY created_ms, id",
                               args).fetchall()
        return [_owned(row) for row in rows]

    def live(self, account: str | None = None, kind: str = "instance") -> list[Owned]:
        """What :meth:`owned` lists, less the records whose billing is final (deleted or in
        ``error``): what still changes, read through an index of those alone."""
        where, args = ("final=0 AND kind=?", [kind]) if account is None else (
            "final=0 AND kind=? AND account=?", [kind, account])
        rows = self.db.execute(f"SELECT * FROM owned INDEXED BY owned_live WHERE {where} "
                               "ORDER BY created_ms, id", args).fetchall()
        return [_owned(row) for row in rows]

    def find_many(self, ids: Iterable[str]) -> list[Owned]:
        """The records of ``ids`` (any kind) that exist, oldest first."""
        ids = list(ids)
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        rows = self.db.execute(f"SELECT * FROM owned WHERE id IN ({marks}) "
                               "ORDER BY created_ms, id", ids).fetchall()
        return [_owned(row) for row in rows]

    def live_billed(self, account: str | None = None) -> list[Owned]:
        """The part of :meth:`billed` (of ``account``, or everyone's) that is not final: instances
        and volumes not final, and open spans."""
        where, args = ("", []) if account is None else ("AND account=?", [account])
        rows = self.db.execute(f"SELECT * FROM owned INDEXED BY owned_live WHERE final=0 AND "
                               f"kind IN ('instance', 'volume') {where} ORDER BY created_ms, id",
                               args).fetchall()
        return [_owned(row) for row in rows] + self._spans(f"end_ms IS NULL {where}", args)

    def settled_billed(self, accounts: Iterable[str]) -> list[Owned]:
        """The part of :meth:`billed` of ``accounts`` that is final: instances and volumes
        deleted or in ``error``, and closed spans."""
        accounts = list(accounts)
        if not accounts:
            return []
        marks = ", ".join("?" * len(accounts))
        rows = self.db.execute(f"SELECT * FROM owned WHERE account IN ({marks}) AND final=1 "
                               "AND kind IN ('instance', 'volume')", accounts).fetchall()
        return [_owned(row) for row in rows] + self._spans(
            f"account IN ({marks}) AND end_ms IS NOT NULL", accounts)

    def budget_spent_deletes(self, account: str, since: int) -> list[Owned]:
        """``account``'s records the gateway deleted for a spent budget at ``since`` or later."""
        rows = self.db.execute("SELECT * FROM owned WHERE delete_reason='budget spent' AND "
                               "account=? AND delete_asked_ms >= ? ORDER BY delete_asked_ms, id",
                               (account, since)).fetchall()
        return [_owned(row) for row in rows]

    def billed(self, account: str) -> list[Owned]:
        """Everything ``account`` pays for: its instances, its volumes and its inference
        instances' spans (:meth:`spans`), oldest first."""
        return self.owned(account) + self.owned(account, "volume") + self.spans(account=account)

    def find(self, id: str) -> Owned | None:
        """The record of ``id`` of any kind, or ``None``."""
        row = self.db.execute("SELECT * FROM owned WHERE id=?", (id,)).fetchone()
        return None if row is None else _owned(row)

    # -- inference instances' spans ------------------------------------------------------------

    def bill_at(self, id: str, account: str, price: float, at_ms: int) -> None:
        """From ``at_ms`` ``id`` bills ``price`` $/h: the open span is closed and, unless
        ``price`` is 0, a new one opened. Nothing is written when the open span has that price.
        """
        with self.transaction() as db:
            row = db.execute("SELECT rowid, price FROM spans WHERE id=? AND end_ms IS NULL",
                             (id,)).fetchone()
            if row is not None and row[1] == price:
                return
            if row is None and price == 0:
                return
            if row is not None:
                db.execute("UPDATE spans SET end_ms=? WHERE rowid=?", (at_ms, row[0]))
            if price:
                db.execute("INSERT INTO spans VALUES (?, ?, ?, NULL, ?)",
                           (id, account, at_ms, price))
        if row is not None:  # a span closed: after the commit, so no read caches the old one
            self._settled_changed(account)

    def spans(self, id: str | None = None, account: str | None = None) -> list[Owned]:
        """The billing spans of ``id`` (or of ``account``, or everyone's) as records of kind
        ``span``: ``price`` $/h from ``created_ms`` to ``deleted_ms`` (``None``: still open)."""
        where, args = ("id=?", [id]) if id is not None else (
            ("account=?", [account]) if account is not None else ("1", []))
        return self._spans(where, args)

    def _spans(self, where: str, args: list[Any]) -> list[Owned]:
        rows = self.db.execute(f"SELECT id, account, start_ms, end_ms, price FROM spans "
                               f"WHERE {where} ORDER BY start_ms, rowid", args).fetchall()
        return [Owned(id=row[0], kind="span", account=row[1], name="", price=row[4],
                      created_ms=row[2], deleted_ms=row[3], status="running",
                      final=row[3] is not None, delete_asked_ms=None, delete_reason=None)
                for row in rows]

    def owned_ids(self, account: str, kind: str = "instance") -> set[str]:
        """The ids of ``account``'s records of ``kind`` (what :meth:`owned` lists, ids only)."""
        rows = self.db.execute("SELECT id FROM owned WHERE account=? AND kind=?", (account, kind))
        return {row[0] for row in rows}

    def owner(self, id: str) -> str | None:
        """The account that owns ``id``, or ``None``."""
        row = self.db.execute("SELECT account FROM owned WHERE id=?", (id,)).fetchone()
        return None if row is None else str(row[0])

    def update_owned(self, id: str, *, price: float, created_ms: int, status: str,
                     deleted_ms: int | None, final: bool) -> None:
        """The upstream's record of ``id``, as last read."""
        with self.transaction() as db:
            was = db.execute("SELECT account, final FROM owned WHERE id=?", (id,)).fetchone()
            db.execute("UPDATE owned SET price=?, created_ms=?, status=?, deleted_ms=?, final=? "
                       "WHERE id=?", (price, created_ms, status, deleted_ms, int(final), id))
        if was is not None and (final or was[1]):  # after the commit, as in bill_at
            self._settled_changed(str(was[0]))

    def ask_delete(self, id: str, ms: int, reason: str) -> None:
        """Note that the gateway asked the upstream to delete ``id`` (kept until confirmed)."""
        with self.transaction() as db:
            db.execute("UPDATE owned SET delete_asked_ms=COALESCE(delete_asked_ms, ?), "
                       "delete_reason=COALESCE(delete_reason, ?) WHERE id=?", (ms, reason, id))

    def end_volume(self, id: str, ms: int) -> None:
        """A volume deleted at ``ms``: it bills no more, and what it cost stays counted."""
        with self.transaction() as db:
            was = db.execute("SELECT account FROM owned WHERE id=?", (id,)).fetchone()
            db.execute("UPDATE owned SET status='deleted', deleted_ms=?, final=1 WHERE id=?",
                       (ms, id))
        if was is not None:
            self._settled_changed(str(was[0]))

    # -- reservations --------------------------------------------------------------------------

    def reserve(self, account: str, name: str, price: float, now: int) -> int:
        """Insert an admitted reservation inside the caller's transaction; its id."""
        cursor = self.db.execute("INSERT INTO reservations (account, name, price, admitted_ms) "
                                 "VALUES (?, ?, ?, ?)", (account, name, price, now))
        return int(cursor.lastrowid or 0)

    def reservations(self, account: str | None = None) -> list[Reservation]:
        """Admitted creates not answered yet (of ``account``, or everyone's)."""
        where, args = ("state='admitted'", []) if account is None else (
            "state='admitted' AND account=?", [account])
        rows = self.db.execute(f"SELECT rid, account, name, price, admitted_ms, state FROM "
                               f"reservations INDEXED BY reservations_admitted WHERE {where} "
                               "ORDER BY rid", args).fetchall()
        return [Reservation(*row) for row in rows]

    def name_in_flight(self, name: str, account: str) -> bool:
        """True when another account than ``account`` has a create of ``name`` admitted and not
        answered yet."""
        return self.db.execute("SELECT 1 FROM reservations WHERE state='admitted' AND name=? "
                               "AND account!=? LIMIT 1", (name, account)).fetchone() is not None

    def fail_reservation(self, rid: int) -> None:
        """Close a reservation whose create made nothing."""
        with self.transaction() as db:
            db.execute("UPDATE reservations SET state='failed' WHERE rid=?", (rid,))

    # -- delete_after timers ------------------------------------------------------------------

    def set_timer(self, id: str, account: str, at_ms: int) -> None:
        """Delete ``id`` at ``at_ms`` (replaces an earlier timer)."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO timers VALUES (?, ?, ?)", (id, account, at_ms))

    def timers(self, account: str | None = None,
               due: int | None = None) -> list[tuple[str, str, int]]:
        """``(id, account, at_ms)`` of every timer (of ``account``; due by ``due``), soonest
        first."""
        where, args = ("", list[Any]()) if account is None else ("WHERE account=?", [account])
        if due is not None:
            where, args = f"{where} {'AND' if where else 'WHERE'} at_ms<=?", [*args, due]
        rows = self.db.execute(f"SELECT id, account, at_ms FROM timers {where} ORDER BY at_ms",
                               args).fetchall()
        return [(str(row[0]), str(row[1]), int(row[2])) for row in rows]

    def drop_timer(self, id: str) -> bool:
        """Cancel the timer of ``id``; True if there was one."""
        with self.transaction() as db:
            return db.execute("DELETE FROM timers WHERE id=?", (id,)).rowcount > 0

    # -- instance budgets ----------------------------------------------------------------------

    def set_budget(self, id: str, account: str, dollars: float) -> None:
        """Delete ``id`` once it has cost ``dollars`` (replaces an earlier budget)."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO budgets VALUES (?, ?, ?)", (id, account, dollars))

    def budgets(self, account: str | None = None,
                live: bool = False) -> list[tuple[str, str, float]]:
        """``(id, account, dollars)`` of every instance budget (of ``account``; with ``live``,
        only of records not final)."""
        where, args = ("", []) if account is None else ("WHERE account=?", [account])
        if live:
            where = f"{where} {'AND' if where else 'WHERE'} id IN (SELECT id FROM owned " \
                    "WHERE final=0 AND kind IN ('instance', 'endpoint'))"
        rows = self.db.execute(f"SELECT id, account, dollars FROM budgets {where} ORDER BY id",
                               args).fetchall()
        return [(str(row[0]), str(row[1]), float(row[2])) for row in rows]

    def drop_budget(self, id: str) -> bool:
        """Drop the budget of ``id``; True if there was one."""
        with self.transaction() as db:
            return db.execute("DELETE FROM budgets WHERE id=?", (id,)).rowcount > 0

    # -- idle limits --------------------------------------------------------------------------

    def set_idle(self, id: str, account: str, seconds: float) -> None:
        """Delete ``id`` once idle for ``seconds`` (replaces an earlier limit)."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO idle VALUES (?, ?, ?)", (id, account, seconds))

    def reserve_idle(self, rid: int, seconds: float) -> None:
        """Keep ``seconds`` for the instance reservation ``rid`` will become."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO reserved_idle VALUES (?, ?)", (rid, seconds))

    def idle_limits(self, account: str | None = None) -> dict[str, tuple[str, float]]:
        """``{id: (account, seconds)}`` of every idle limit (of ``account``)."""
        where, args = ("", []) if account is None else ("AND account=?", [account])
        rows = self.db.execute(f"SELECT id, account, seconds FROM idle WHERE seconds IS NOT NULL "
                               f"{where} ORDER BY id", args).fetchall()
        return {str(row[0]): (str(row[1]), float(row[2])) for row in rows}

    def idle_keyed(self, id: str) -> bool:
        """True when ``id`` was launched with the gateway's key (with ``delete_when_idle``)."""
        return self.db.execute("SELECT 1 FROM idle WHERE id=?", (id,)).fetchone() is not None

    def cancel_idle(self, id: str) -> bool:
        """Drop the idle limit of ``id`` (its key stays on the VM); True if there was one."""
        with self.transaction() as db:
            return db.execute("UPDATE idle SET seconds=NULL WHERE id=? AND seconds IS NOT NULL",
                              (id,)).rowcount > 0

    # -- audit ---------------------------------------------------------------------------------

    def audit(self, ms: int, account: str, action: str, resource: str, reason: str) -> None:
        """Add one line to the audit log."""
        with self.transaction() as db:
            db.execute("INSERT INTO audit (ms, account, action, resource, reason) "
                       "VALUES (?, ?, ?, ?, ?)", (ms, account, action, resource, reason))

    def audit_entries(self, limit: int = 10_000) -> list[AuditEntry]:
        """The newest ``limit`` audit lines, oldest first."""
        rows = self.db.execute("SELECT ms, account, action, resource, reason FROM audit "
                               "ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
        return [AuditEntry(*row) for row in reversed(rows)]
