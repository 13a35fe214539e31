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
