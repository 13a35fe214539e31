"""client.ssh_keys: the keys offered, read once per process and again when a file changes."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest

from gpucloud_nb.client import ssh_keys

_LONG_AGO = 1_700_000_000_000_000_000  # ns: a file older than the 2 s a cached read waits for


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "user-home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("GPUCLOUD_SSH_KEY", raising=False)
    return home


def _write_key(path: Path, comment: str) -> str:
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment)
    key.write_private_key(str(path))
    path.chmod(0o600)
    return str(key.export_public_key().decode().strip())


def test_a_key_file_is_read_once_and_again_when_it_changes(own_home: Path,
                                                          tmp_path: Path) -> None:
    path = own_home / ".ssh" / "id_ed25519"
    first = _write_key(path, "first")
    os.utime(path, ns=(_LONG_AGO, _LONG_AGO))
    own = tmp_path / "client"
    own.mkdir()

    found = ssh_keys.identities_sync(None, own)
    assert found[0].public == first and found[0].path == path
    again = ssh_keys.identities_sync(None, own)
    assert again[0] is found[0]  # not read again: the same identity, key pair and all

    second = _write_key(path, "second")  # same size and inode; its times tell it changed
    os.utime(path, ns=(_LONG_AGO, _LONG_AGO))
    changed = ssh_keys.identities_sync(None, own)
    assert changed[0].public == second != first
    path.unlink()
    assert ssh_keys.identities_sync(None, own)[0].path == own / "id_ed25519"


def test_a_file_written_just_now_is_read_every_time(own_home: Path, tmp_path: Path) -> None:
    """Two writes within one tick of the file clock have the same times, so a file changed in
    the last 2 s is not remembered; once older, it is."""
    path = own_home / ".ssh" / "id_ed25519"
    public = _write_key(path, "fresh")
    own = tmp_path / "client"
    own.mkdir()
    first, second = (ssh_keys.identities_sync(None, own)[0] for _ in range(2))
    assert first.public == second.public == public and first is not second
    os.utime(path, ns=(_LONG_AGO, _LONG_AGO))
    third, fourth = (ssh_keys.identities_sync(None, own)[0] for _ in range(2))
    assert third is fourth


def test_the_key_pair_is_not_in_the_repr(own_home: Path, tmp_path: Path) -> None:
    identity = ssh_keys.identities_sync(None, tmp_path)[0]
    assert "pair=" not in repr(identity) and "KeyPair" not in repr(identity)
    assert identity.public in repr(identity)


def test_the_own_key_made_from_many_threads_at_once_is_one_whole_key(tmp_path: Path) -> None:
    """Six creates at once on a fresh machine each asked for the client's key: some read it
    half-written and found no identity (an IndexError in create). It is made whole, then
    linked into place, so every caller reads the same complete key."""
    import threading

    own = tmp_path / "own"
    own.mkdir()
    start = threading.Barrier(8)
    found: list[str | None] = []

    def one() -> None:
        start.wait()
        identity = ssh_keys._from_file(ssh_keys.own_key(own), False)
        found.append(None if identity is None else identity.public)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(found) == 8 and None not in found and len(set(found)) == 1
    assert oct((own / "id_ed25519").stat().st_mode & 0o777) == "0o600"
    assert (own / "id_ed25519.pub").read_text().split()[1] == found[0].split()[1]
    assert sorted(p.name for p in own.iterdir()) == ["id_ed25519", "id_ed25519.pub"]
