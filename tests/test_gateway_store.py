"""``gpucloud_nb.gateway.store``: a transaction inside another is part of it, one commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucloud_nb.gateway.store import Store


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
