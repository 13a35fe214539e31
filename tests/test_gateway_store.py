"""The gateway's SQLite store: what its reads cost as the class's history grows; a transaction
inside another is part of it, one commit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpucloud_nb.gateway.store import STATE_FILE, Store
from tests.helpers import rows_in_the_file_alone

# The tables as the first gateways made them, with none of the indexes added since.
_FIRST_SCHEMA = """
CREATE TABLE owned (id TEXT PRIMARY KEY, kind TEXT NOT NULL, account TEXT NOT NULL,
    name TEXT NOT NULL, price REAL NOT NULL, created_ms INTEGER NOT NULL, deleted_ms INTEGER,
    status TEXT NOT NULL DEFAULT 'pending', final INTEGER NOT NULL DEFAULT 0,
    delete_asked_ms INTEGER, delete_reason TEXT);
CREATE TABLE reservations (rid INTEGER PRIMARY KEY, account TEXT NOT NULL,
    name TEXT NOT NULL, price REAL NOT NULL, admitted_ms INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'admitted', resource TEXT);
INSERT INTO reservations (account, name, price, admitted_ms, state) VALUES ('a', 'x', 1, 0, 'done');
"""


_PARTIAL = {"owned_live", "reservations_admitted", "spans_open", "idle_watched"}


def test_a_file_from_before_gets_the_indexes_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / STATE_FILE
    with sqlite3.connect(path) as db:
        db.executescript(_FIRST_SCHEMA)
    store = Store(path)
    try:
        names = {row[0] for row in store.db.execute("SELECT name FROM sqlite_master "
                                                    "WHERE type='index'")}
        assert {"owned_live", "reservations_admitted", "reservations_admitted_name"} <= names
        assert store.db.execute("SELECT count(*) FROM reservations").fetchone()[0] == 1
        assert store.reservations() == []  # the old one was answered
    finally:
        store.close()


def test_each_create_and_each_tick_searches_what_is_live_not_history() -> None:
    # Admission scanned every reservation ever made (no index on state), and the live records
    # were found among all of them: each read named here must search an index, never scan a table.
    store = Store(":memory:")
    try:
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        store.reservations()
        store.reservations("acc")
        store.name_in_flight("job", "acc")
        store.live()
        store.live("acc", "endpoint")
        store.live_billed()
        store.live_billed("acc")
        store.timers(due=0)
        store.idle_limits()
        store.budgets(live=True)
        store.owned_ids("acc")
        store.budget_spent_deletes("acc", 0)
        store.db.set_trace_callback(None)
        for sql in statements:  # as run, their arguments inlined
            for row in store.db.execute(f"EXPLAIN QUERY PLAN {sql}"):
                detail = str(row[3])
                # a search of an index, or a scan of one that holds only live rows
                assert detail.startswith(("SEARCH", "USE TEMP", "LIST", "CORRELATED")) \
                    or detail.split(" USING INDEX ")[-1] in _PARTIAL, (sql, detail)
    finally:
        store.close()


def test_writes_in_one_outer_transaction_are_one_commit_and_roll_back_together(
        tmp_path: Path) -> None:
    # A create's record, its reservation's close and its audit line: one commit, not two.
    store = Store(tmp_path / "gateway.sqlite3")
    try:
        statements: list[str] = []
        store.db.set_trace_callback(statements.append)
        with store.transaction():
            rid = store.reserve("ada", "one", 1.0, 1_000)
        with store.transaction():
            store.add_owned("i-1", "instance", "ada", "one", 1.0, 2_000, rid=rid)
            store.audit(2_000, "ada", "created", "i-1", "asked")
        assert sum(s.strip().upper() == "COMMIT" for s in statements) == 2, statements
        assert store.owner("i-1") == "ada"
        assert not store.reservations()
        assert [e.resource for e in store.audit_entries()] == ["i-1"]

        with pytest.raises(RuntimeError), store.transaction():
            store.add_owned("i-2", "instance", "ada", "two", 1.0, 3_000)
            store.audit(3_000, "ada", "created", "i-2", "asked")
            raise RuntimeError("the answer could not be read")
        assert store.owner("i-2") is None
        assert [e.resource for e in store.audit_entries()] == ["i-1"]
    finally:
        store.close()


def test_no_commit_copies_the_wal_into_the_file_and_a_checkpoint_does(tmp_path: Path) -> None:
    # SQLite's default: the commit that takes the WAL past 1,000 pages copies it into the file
    # and syncs both, ~4 ms on this machine once every ~80 commits of creates, on the loop that
    # answers the class. The watcher's pass does it in a thread instead (Store.checkpoint).
    path = tmp_path / STATE_FILE
    store = Store(path)
    try:
        for n in range(1_500):  # a page or more each: past the 1,000-page mark
            with store.transaction():
                store.audit(n, "ada", "created", f"i-{n}", "x" * 3_000)
        assert Path(f"{path}-wal").stat().st_size > 1_200 * 4096
        assert rows_in_the_file_alone(path, "audit") < 1_500

        store.checkpoint()
        assert rows_in_the_file_alone(path, "audit") == 1_500
        with store.transaction():  # writing goes on once it is copied
            store.audit(2_000, "ada", "deleted", "i-0", "done")
        assert len(store.audit_entries()) == 1_501
    finally:
        store.close()
    assert not Path(f"{path}-wal").exists()  # the last connection copied the rest and removed it
