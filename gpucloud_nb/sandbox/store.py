"""SQLite state of the sandbox: instances and volumes, with the times their life cycle turns.

The store keeps what was acknowledged and when; it never runs timers. An instance's status is
derived from its stored times when it is read (see :mod:`gpucloud_nb.sandbox.lifecycle`), so a
restarted sandbox carries on exactly where it stopped.

    >>> store = Store("sandbox.db")            # or Store() for a private in-memory database
    >>> volume = store.insert_volume(  # doctest: +SKIP
    ...     user="u1", created_ms=now_ms, doc={"name": "data", ...})
    >>> store.volume("u1", volume.id).doc["name"]  # doctest: +SKIP
    'data'

Every write is committed before the method returns, so a caller that answers 201 after it has
made the resource durable. Files use WAL with ``synchronous=NORMAL``: an acknowledged write
survives the sandbox process being killed; a power cut may lose the last few. One lock guards the
single connection, so the store is safe to share between threads; each call is short.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "APPLICATION_ID",
    "InstanceRecord",
    "InstanceTimes",
    "StateFileError",
    "Store",
    "VolumeInUseError",
    "VolumeMissingError",
    "VolumeRecord",
    "new_object_id",
]

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    user TEXT NOT NULL,
    deployment_type TEXT NOT NULL,
    volume_id TEXT,
    created_ms INTEGER NOT NULL,
    ready_ms INTEGER NOT NULL,
    fails INTEGER NOT NULL,
    delete_ms INTEGER,
    gone_ms INTEGER,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS instances_user ON instances (user, seq);
CREATE INDEX IF NOT EXISTS instances_volume ON instances (volume_id);
CREATE TABLE IF NOT EXISTS volumes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    user TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS volumes_user ON volumes (user, seq);
CREATE TABLE IF NOT EXISTS documents (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    user TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (kind, id)
);
-- The money rules' tables of older state files: a gateway keeps those rules now (issue #36).
DROP TABLE IF EXISTS budgets;
DROP TABLE IF EXISTS auto_deletes;
DROP TABLE IF EXISTS idle_deletes;
"""
_INSTANCE_COLUMNS = (
    "seq, id, user, deployment_type, volume_id, created_ms, ready_ms, fails, delete_ms, gone_ms, doc"
)


def new_object_id(now_ms: int) -> str:
    """A fresh id in the style of a MongoDB ObjectId: 24 lowercase hex digits, time first."""
    return f"{(now_ms // 1000) & 0xFFFFFFFF:08x}{secrets.token_hex(8)}"


class VolumeInUseError(Exception):
    """The volume is attached to an instance that is not being deleted."""

    def __init__(self, volume_id: str, instance_id: str) -> None:
        super().__init__(f"Volume {volume_id} is attached to instance {instance_id}.")
        self.volume_id = volume_id
        self.instance_id = instance_id


class VolumeMissingError(Exception):
    """The volume named by a new instance no longer exists."""


class InstanceTimes(NamedTuple):
    """An instance's life-cycle times (Unix ms), all its status depends on."""

    id: str
    created_ms: int
    ready_ms: int
    fails: bool
    delete_ms: int | None
    gone_ms: int | None


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One stored instance: the fields fixed at creation (``doc``) and its life-cycle times.

    ``ready_ms`` is when pending ends (in ``active``, or ``error`` when ``fails``); ``delete_ms``
    is when DELETE was accepted and ``gone_ms`` when deleting ends. All times are Unix ms.
    """

    seq: int
    id: str
    user: str
    deployment_type: str
    volume_id: str | None
    created_ms: int
    ready_ms: int
    fails: bool
    delete_ms: int | None
    gone_ms: int | None
    doc: dict[str, Any]

    @property
    def times(self) -> InstanceTimes:
        """Its life-cycle times."""
        return InstanceTimes(self.id, self.created_ms, self.ready_ms, self.fails, self.delete_ms,
                             self.gone_ms)


@dataclass(frozen=True, slots=True)
class VolumeRecord:
    """One stored volume: its fields as created (``doc``) and its creation time in Unix ms."""

    seq: int
    id: str
    user: str
    created_ms: int
    doc: dict[str, Any]


def _instance(row: tuple[Any, ...]) -> InstanceRecord:
    seq, id_, user, kind, volume_id, created, ready, fails, delete, gone, doc = row
    return InstanceRecord(seq, id_, user, kind, volume_id, created, ready, bool(fails), delete,
                          gone, json.loads(doc))


def _volume(row: tuple[Any, ...]) -> VolumeRecord:
    seq, id_, user, created, doc = row
    return VolumeRecord(seq, id_, user, created, json.loads(doc))


def _dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


APPLICATION_ID = 0x47434E42  # "GCNB"
"""``PRAGMA application_id`` of every state file this sandbox writes (bytes 68-71 of the file)."""

_OUR_TABLES = {*re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", _SCHEMA), "sqlite_sequence"}
_SQLITE_MAGIC = b"SQLite format 3\x00"


class StateFileError(ValueError):
    """The ``state`` path cannot be the sandbox's state file; the message is one sentence."""


def _check_state_file(path: str) -> None:
    """Refuse, before anything is written, a path that is not (or cannot become) our state file.

    A directory, a read-only file, a file that is not SQLite, and a SQLite file of another program
    (its ``application_id`` is not ours, or it holds tables that are not ours) are refused. An
    empty or missing file is fine, and so is a file of ours written before files were marked.
    """
    if os.path.isdir(path):
        raise StateFileError(f"The sandbox state {path} is a directory; give a file name.")
    if not os.path.exists(path):
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise StateFileError(f"The folder of the sandbox state file {path} does not exist.")
        if not os.access(folder, os.W_OK):
            raise StateFileError(f"The sandbox state file {path} cannot be created there "
                                 "(the folder is read-only).")
        return
    try:
        with open(path, "rb") as file:
            head = file.read(100)
    except OSError as error:
        raise StateFileError(
            f"The sandbox state file {path} cannot be read ({error.strerror}).") from None
    if not os.access(path, os.W_OK):
        raise StateFileError(f"The sandbox state file {path} is read-only.")
    if not head:
        return
    if not head.startswith(_SQLITE_MAGIC) or len(head) < 100:
        raise StateFileError(f"The sandbox state file {path} is not a SQLite database; "
                             "give a new file name.")
    # Read through SQLite, not the header bytes: a sandbox using the file keeps its latest
    # pages (the application_id among them) in the write-ahead log until a checkpoint.
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            application_id = db.execute("PRAGMA application_id").fetchone()[0]
            tables = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        application_id, tables = -1, {"?"}
    if application_id == APPLICATION_ID or (application_id == 0 and tables <= _OUR_TABLES):
        return
    raise StateFileError(f"The sandbox state file {path} belongs to another program; "
                         "give a new file name.")


class Store:
    """Instances and volumes in one SQLite database: a file, or private memory when ``path`` is None.

    A file is marked with :data:`APPLICATION_ID`; a path that is a directory, read-only, not
    SQLite, or another program's database raises :class:`StateFileError` before anything is
    written.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        if self.path is not None:
            _check_state_file(self.path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            ":memory:" if self.path is None else self.path,
            check_same_thread=False,
            isolation_level=None,  # explicit BEGIN/COMMIT below
        )
        with self._lock:
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA busy_timeout=5000")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                self._db.close()
                raise RuntimeError(
                    f"The sandbox state file {self.path} was written by a newer gpucloud-nb."
                )
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            self._db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        self._closed = False

    def close(self) -> None:
        """Close the database; further calls fail."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- instances ---------------------------------------------------------------------------

    def insert_instance(self, *, user: str, deployment_type: str, volume_id: str | None,
                        created_ms: int, ready_ms: int, fails: bool,
                        doc: dict[str, Any]) -> InstanceRecord:
        """Store a new instance and return it with its fresh id.

        Raises :class:`VolumeMissingError` when ``volume_id`` no longer names a volume of ``user``.
        """
        text = _dump(doc)
        with self._transaction() as db:
            if volume_id is not None and db.execute(
                "SELECT 1 FROM volumes WHERE id = ? AND user = ?", (volume_id, user)
            ).fetchone() is None:
                raise VolumeMissingError(volume_id)
            while True:
                id_ = new_object_id(created_ms)
                if db.execute("SELECT 1 FROM instances WHERE id = ?", (id_,)).fetchone() is None:
                    break
            cursor = db.execute(
                "INSERT INTO instances (id, user, deployment_type, volume_id, created_ms, ready_ms,"
                " fails, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (id_, user, deployment_type, volume_id, created_ms, ready_ms, int(fails), text),
            )
            seq = cursor.lastrowid
        assert seq is not None
        return InstanceRecord(seq, id_, user, deployment_type, volume_id, created_ms, ready_ms,
                              fails, None, None, json.loads(text))

    def instances(self, user: str, deployment_type: str | None = None) -> list[InstanceRecord]:
        """The instances of ``user`` in creation order, deleted ones included."""
        query = f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE user = ?"
        params: tuple[Any, ...] = (user,)
        if deployment_type is not None:
            query += " AND deployment_type = ?"
            params += (deployment_type,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY seq", params).fetchall()
        return [_instance(row) for row in rows]

    def instance(self, user: str, id_: str) -> InstanceRecord | None:
        """The instance ``id_`` of ``user``, or ``None``."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE id = ? AND user = ?", (id_, user)
            ).fetchone()
        return None if row is None else _instance(row)

    def live_instance_times(self) -> list[InstanceTimes]:
        """The times of every user's instances whose deletion has not ended yet, in creation
        order: what the SSH servers' reconciler reads five times a second, without the docs."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, created_ms, ready_ms, fails, delete_ms, gone_ms FROM instances"
                " WHERE gone_ms IS NULL OR gone_ms > ? ORDER BY seq", (time.time_ns() // 1_000_000,)
            ).fetchall()
        return [InstanceTimes(id_, created, ready, bool(fails), delete, gone)
                for id_, created, ready, fails, delete, gone in rows]

    def instance_by_id(self, id_: str) -> InstanceRecord | None:
        """The instance ``id_`` of any user, or ``None`` (for the sandbox's own use)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE id = ?", (id_,)).fetchone()
        return None if row is None else _instance(row)

    def update_instance_doc(self, id_: str, doc: dict[str, Any]) -> None:
        """Replace the stored ``doc`` of instance ``id_`` (the SSH port after a re-bind)."""
        with self._transaction() as db:
            db.execute("UPDATE instances SET doc = ? WHERE id = ?", (_dump(doc), id_))

    def delete_instance(self, user: str, id_: str, *, delete_ms: int,
                        gone_ms: int) -> InstanceRecord | None:
        """Record that deletion started, unless it already had; ``None`` for an unknown id."""
        with self._transaction() as db:
            db.execute(
                "UPDATE instances SET delete_ms = ?, gone_ms = ?"
                " WHERE id = ? AND user = ? AND delete_ms IS NULL",
                (delete_ms, gone_ms, id_, user),
            )
            row = db.execute(
                f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE id = ? AND user = ?", (id_, user)
            ).fetchone()
        return None if row is None else _instance(row)

    # -- volumes -----------------------------------------------------------------------------

    def insert_volume(self, *, user: str, created_ms: int, doc: dict[str, Any]) -> VolumeRecord:
        """Store a new volume and return it with its fresh id."""
        text = _dump(doc)
        with self._transaction() as db:
            while True:
                id_ = new_object_id(created_ms)
                if db.execute("SELECT 1 FROM volumes WHERE id = ?", (id_,)).fetchone() is None:
                    break
            cursor = db.execute(
                "INSERT INTO volumes (id, user, created_ms, doc) VALUES (?, ?, ?, ?)",
                (id_, user, created_ms, text),
            )
            seq = cursor.lastrowid
        assert seq is not None
        return VolumeRecord(seq, id_, user, created_ms, json.loads(text))

    def volumes(self, user: str) -> list[VolumeRecord]:
        """The volumes of ``user`` in creation order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, id, user, created_ms, doc FROM volumes WHERE user = ? ORDER BY seq",
                (user,),
            ).fetchall()
        return [_volume(row) for row in rows]

    def volume_ids(self) -> set[str]:
        """The ids of every stored volume, of every account."""
        with self._lock:
            return {row[0] for row in self._db.execute("SELECT id FROM volumes")}

    def volume(self, user: str, id_: str) -> VolumeRecord | None:
        """The volume ``id_`` of ``user``, or ``None``."""
        with self._lock:
            row = self._db.execute(
                "SELECT seq, id, user, created_ms, doc FROM volumes WHERE id = ? AND user = ?",
                (id_, user),
            ).fetchone()
        return None if row is None else _volume(row)

    def delete_volume(self, user: str, id_: str) -> bool:
        """Delete a volume; ``False`` for an unknown id.

        Raises :class:`VolumeInUseError` while an instance whose deletion has not started
        (pending, active or error) has it attached.
        """
        with self._transaction() as db:
            if db.execute(
                "SELECT 1 FROM volumes WHERE id = ? AND user = ?", (id_, user)
            ).fetchone() is None:
                return False
            holder = db.execute(
                "SELECT id FROM instances WHERE volume_id = ? AND user = ? AND delete_ms IS NULL"
                " ORDER BY seq LIMIT 1",
                (id_, user),
            ).fetchone()
            if holder is not None:
                raise VolumeInUseError(id_, holder[0])
            db.execute("DELETE FROM volumes WHERE id = ? AND user = ?", (id_, user))
        return True

    # -- documents: the appendix's inference instances and SSH-key books, each as one JSON ------

    def put_document(self, kind: str, id_: str, user: str, doc: dict[str, Any]) -> None:
        """Store (or replace) the ``kind`` document ``id_`` of ``user``."""
        text = _dump(doc)
        with self._transaction() as db:
            db.execute("INSERT INTO documents (kind, id, user, doc) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (kind, id) DO UPDATE SET user = excluded.user, "
                       "doc = excluded.doc", (kind, id_, user, text))

    def documents(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """``(id, user, doc)`` of every ``kind`` document, in the order they were first stored."""
        with self._lock:
            rows = self._db.execute("SELECT id, user, doc FROM documents WHERE kind = ? "
                                    "ORDER BY rowid", (kind,)).fetchall()
        return [(id_, user, json.loads(doc)) for id_, user, doc in rows]
