"""The sandbox's SQLite store and the life cycle derived from it."""

from __future__ import annotations

import os
import re
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpucloud_nb.models import parse_datetime
from gpucloud_nb.sandbox.lifecycle import (
    EPOCH_TEXT,
    details_json,
    instance_json,
    iso,
    status_of,
    volume_json,
)
from gpucloud_nb.sandbox.store import (
    Store,
    VolumeInUseError,
    VolumeMissingError,
    new_object_id,
)

T0 = 1_795_000_000_000  # some Unix time in ms

DOC = {
    "name": "job", "provider": "Nimbus Compute",
    "region": {"id": "us-east-1", "name": "US East (Virginia)", "countryCode": "US"},
    "volumes": [], "gpuCount": 1, "gpuModel": "H100 SXM5 80GB", "ram": 225, "storage": 1000,
    "vramPerGpu": 80, "vcpus": 26, "interconnect": "SXM5", "nvlink": False,
    "os": "ubuntu-22.04", "sshUser": "ubuntu", "dockerImage": "", "dockerCommand": "",
    "hourlyPrice": 2.49, "sshKey": {}, "sshPort": 40122,
}
VOLUME_DOC = {"name": "data", "sizeInGb": 50, "region": "us-east-1",
              "cloudProvider": {"_id": "p" * 24, "displayName": "Nimbus Compute"}}


def _instance(store: Store, user: str = "u1", *, fails: bool = False,
              volume_id: str | None = None, kind: str = "vm"):
    return store.insert_instance(user=user, deployment_type=kind, volume_id=volume_id,
                                 created_ms=T0, ready_ms=T0 + 3000, fails=fails, doc=DOC)


def test_object_ids() -> None:
    ids = {new_object_id(T0) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{24}", i) for i in ids)
    assert new_object_id(T0).startswith(f"{T0 // 1000:08x}")


def test_iso() -> None:
    assert iso(0) == EPOCH_TEXT
    ms = 1_795_000_930_123
    expected = datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    assert iso(ms) == expected.replace("+00:00", "Z") == "2026-11-18T11:22:10.123Z"
    assert parse_datetime(iso(ms)) == datetime.fromtimestamp(ms / 1000, timezone.utc)


def test_instances_round_trip_and_user_scope() -> None:
    store = Store()
    first = _instance(store)
    second = _instance(store, kind="container")
    other = _instance(store, user="u2")
    assert [r.id for r in store.instances("u1")] == [first.id, second.id]
    assert [r.id for r in store.instances("u1", "container")] == [second.id]
    assert store.instance("u1", first.id) == first
    assert store.instance("u1", other.id) is None
    assert store.instance("u1", "nope") is None
    assert first.doc == DOC
    store.close()


def test_delete_instance_is_recorded_once() -> None:
    store = Store()
    record = _instance(store)
    deleted = store.delete_instance("u1", record.id, delete_ms=T0 + 5000, gone_ms=T0 + 6000)
    assert deleted is not None
    assert (deleted.delete_ms, deleted.gone_ms) == (T0 + 5000, T0 + 6000)
    again = store.delete_instance("u1", record.id, delete_ms=T0 + 9000, gone_ms=T0 + 9500)
    assert again is not None and again.delete_ms == T0 + 5000
    assert store.delete_instance("u1", "missing", delete_ms=T0, gone_ms=T0) is None
    assert store.delete_instance("u2", record.id, delete_ms=T0, gone_ms=T0) is None


def test_status_is_derived_from_times() -> None:
    store = Store()
    record = _instance(store)
    assert status_of(record, T0).name == "pending"
    assert status_of(record, T0 + 2999) == ("pending", T0, None)
    assert status_of(record, T0 + 3000) == ("active", T0 + 3000, None)
    failing = _instance(store, fails=True)
    assert status_of(failing, T0 + 3000).name == "error"
    deleted = store.delete_instance("u1", record.id, delete_ms=T0 + 5000, gone_ms=T0 + 6000)
    assert deleted is not None
    assert status_of(deleted, T0 + 5500) == ("deleting", T0 + 5000, None)
    assert status_of(deleted, T0 + 6000) == ("deleted", T0 + 6000, T0 + 6000)


def test_rendered_instance_fields_follow_the_status() -> None:
    store = Store()
    record = _instance(store)
    pending = details_json(record, T0 + 1)
    assert (pending["status"], pending["isPending"], pending["ip"], pending["sshPort"]) == (
        "pending", True, "", 0)
    assert pending["portForwards"] == [] and pending["deletedAt"] == EPOCH_TEXT
    active = details_json(record, T0 + 3000)
    assert active["isPending"] is False
    # Loopback only: each instance's own SSH server, on the port stored at create.
    assert active["ip"] == "127.0.0.1"
    assert active["sshPort"] == DOC["sshPort"] and active["portForwards"] == [f"22:{DOC['sshPort']}"]
    listed = instance_json(record, T0 + 3000)
    assert listed["updatedAt"] == iso(T0 + 3000)
    assert "isPending" not in listed and "updatedAt" not in active
    container = details_json(_instance(store, kind="container"), T0 + 3000)
    assert container["sshPort"] > 1024
    assert container["portForwards"] == [f"22:{container['sshPort']}"]
    deleted = store.delete_instance("u1", record.id, delete_ms=T0 + 5000, gone_ms=T0 + 6000)
    assert deleted is not None
    gone = instance_json(deleted, T0 + 7000)
    assert gone["deletedAt"] == iso(T0 + 6000) and gone["ip"] == "" and gone["sshPort"] == 0


def test_volumes_and_attachment() -> None:
    store = Store()
    volume = store.insert_volume(user="u1", created_ms=T0, doc=VOLUME_DOC)
    assert store.volume("u1", volume.id) == volume
    assert store.volume("u2", volume.id) is None
    assert [v.id for v in store.volumes("u1")] == [volume.id]
    body = volume_json(volume)
    assert body["createdAt"] == body["updatedAt"] == iso(T0) and body["user"] == "u1"
    holder = _instance(store, volume_id=volume.id)
    with pytest.raises(VolumeInUseError) as caught:
        store.delete_volume("u1", volume.id)
    assert caught.value.instance_id == holder.id
    store.delete_instance("u1", holder.id, delete_ms=T0, gone_ms=T0 + 1)
    assert store.delete_volume("u1", volume.id) is True
    assert store.delete_volume("u1", volume.id) is False
    assert store.volume("u1", volume.id) is None
    with pytest.raises(VolumeMissingError):
        _instance(store, volume_id=volume.id)
    # The instance keeps its record of the volume after the volume is gone.
    assert store.instance("u1", holder.id) is not None


def test_file_state_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    volume = store.insert_volume(user="u1", created_ms=T0, doc=VOLUME_DOC)
    record = _instance(store, volume_id=volume.id)
    store.delete_instance("u1", record.id, delete_ms=T0 + 10, gone_ms=T0 + 20)
    store.close()
    reopened = Store(str(path))
    again = reopened.instance("u1", record.id)
    assert again is not None and again.gone_ms == T0 + 20 and again.volume_id == volume.id
    assert reopened.volume("u1", volume.id) == volume
    assert reopened._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # Sequence numbers (hence addresses) keep growing across restarts.
    assert _instance(reopened).seq > record.seq
    reopened.close()


def test_concurrent_writers_share_one_store() -> None:
    store = Store()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                record = _instance(store)
                store.delete_instance("u1", record.id, delete_ms=T0, gone_ms=T0)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    records = store.instances("u1")
    assert len(records) == 160 and len({r.id for r in records}) == 160
    assert len({r.seq for r in records}) == 160


# -- the state file is ours or refused before anything is written ------------------------------


def _foreign_db(path: Path) -> bytes:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('keep me')")
    db.close()
    return path.read_bytes()


def test_state_files_are_marked_with_our_application_id(tmp_path: Path) -> None:
    from gpucloud_nb.sandbox.store import APPLICATION_ID

    path = tmp_path / "state.db"
    store = Store(path)
    store.close()
    assert int.from_bytes(path.read_bytes()[68:72], "big") == APPLICATION_ID
    Store(path).close()  # ours: opened again


def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    from gpucloud_nb.sandbox.store import StateFileError

    path = tmp_path / "other.db"
    before = _foreign_db(path)
    with pytest.raises(StateFileError, match="belongs to another program"):
        Store(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, no -shm


@pytest.mark.parametrize("kind", ["directory", "text", "read-only"])
def test_unusable_state_paths_give_one_sentence(tmp_path: Path, kind: str) -> None:
    from gpucloud_nb.sandbox.store import StateFileError

    path = tmp_path / "state.db"
    if kind == "directory":
        path.mkdir()
    elif kind == "text":
        path.write_text("hello, I am a text file\n" * 10)
    else:
        Store(path).close()
        path.chmod(0o444)
        if os.access(path, os.W_OK):
            pytest.skip("running as root: a read-only file is still writable")
    with pytest.raises(StateFileError) as caught:
        Store(path)
    message = str(caught.value)
    assert "\n" not in message and message.endswith(".")
    assert {"directory": "is a directory", "text": "not a SQLite database",
            "read-only": "read-only"}[kind] in message
