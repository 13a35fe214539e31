"""The SSH keys the client logs in with, found as OpenSSH finds them, and the ``ssh`` command
that works as printed.

    >>> print(ssh_command("0123abcd", "127.0.0.1", 40122, "ubuntu", None, Path("/k/known_hosts")))
    ssh -o UserKnownHostsFile=/k/known_hosts -o HostKeyAlias=0123abcd -p 40122 ubuntu@127.0.0.1

- **Keys, in the order they are offered.** An explicit identity first (``ssh_identity=`` of
  ``GPUCloud``/``connect()``, else the ``GPUCLOUD_SSH_KEY`` environment variable: a private key
  file), then the keys of a running ssh-agent (``SSH_AUTH_SOCK``), then ``~/.ssh/id_ed25519``,
  ``~/.ssh/id_ecdsa`` and ``~/.ssh/id_rsa`` (read only; a passphrase-protected file is skipped:
  add it to the agent), and last a key pair the client generates once in its own directory (never
  in ``~/.ssh``). The first one is the public key ``create`` sends when none is given.
- **Read once per process.** A key file is read again only when it changed (its path, size,
  inode, modification and change times); a file modified in the last 2 s is read every time, as
  file times can be coarser than two quick writes. The agent is asked every time (keys come and
  go with ``ssh-add``), so without ``SSH_AUTH_SOCK`` :func:`identities_sync` needs no thread and
  no event loop, and a ``create`` that sends the client's key costs a few ``stat`` calls.
- **The printed command** adds ``-i <file> -o IdentitiesOnly=yes`` when the key the instance
  accepted is one OpenSSH would not find by itself (the explicit identity or the generated key),
  and always ``-o UserKnownHostsFile=<the client's known_hosts> -o HostKeyAlias=<instance id>``:
  the client's known_hosts is OpenSSH's format, one ``<instance id> <key>`` line per instance,
  written the first time the client connects (accept-new), so the command is printed only after
  that connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shlex
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucloud_nb.errors import InvalidInputError

__all__ = ["DEFAULT_FILES", "Identity", "explicit_identity", "identities", "identities_sync",
           "own_key", "ssh_command"]

DEFAULT_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
"""The key files OpenSSH (and this client) try without being told."""


@dataclass(frozen=True)
class Identity:
    """One key the client can offer: where it comes from, its public half, the key pair."""

    label: str
    path: Path | None
    public: str
    found_by_openssh: bool
    pair: Any = field(repr=False)

    @property
    def fingerprint(self) -> str:
        """The public key's SHA256 fingerprint, as ``ssh-keygen -l`` shows it."""
        import asyncssh

        return str(asyncssh.import_public_key(self.public).get_fingerprint())

    def __str__(self) -> str:
        return f"{self.label} ({self.fingerprint})"


def explicit_identity(given: str | os.PathLike[str] | None) -> Path | None:
    """``given``, else ``GPUCLOUD_SSH_KEY``, as a private key file; one sentence if missing."""
    value = given if given is not None else os.environ.get("GPUCLOUD_SSH_KEY") or None
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        where = "ssh_identity" if given is not None else "GPUCLOUD_SSH_KEY"
        raise InvalidInputError(f"The SSH key {os.fspath(path)!r} given by {where} is not a "
                                "file; give the path of a private key such as ~/.ssh/id_ed25519.")
    return path


def own_key(directory: Path) -> Path:
    """The key pair the client generates once in ``directory`` (its private key's path)."""
    import asyncssh

    path = directory / "id_ed25519"
    if path.exists():
        return path
    # Made whole under a name of its own (0600 from the start), then linked into place, which
    # fails if another thread or process got there first: creates from six threads at once
    # read a half-written key otherwise (and found no identity at all).
    key = asyncssh.generate_private_key("ssh-ed25519", comment="gpucloud-nb")
    draft = directory / f".id_ed25519.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(key.export_private_key())
        try:
            os.link(draft, path)
        except FileExistsError:
            return path  # theirs is whole: it was linked, never written in place
        key.write_public_key(str(path.with_suffix(".pub")))
    finally:
        with contextlib.suppress(OSError):
            draft.unlink()
    return path


_Stamp = tuple[int, int, int, int]
_RACY_NS = 2_000_000_000  # a file changed this recently may change again within the same mtime
_KEEP = 32  # files remembered (a test suite makes a new home per test)
_read: dict[tuple[str, bool], tuple[_Stamp, Identity | None]] = {}
_read_lock = threading.Lock()


def _from_file(path: Path, found_by_openssh: bool) -> Identity | None:
    """The identity in the private key file ``path``, read again only when the file changed."""
    try:
        info = path.stat()
    except OSError:
        return None
    stamp = (info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_ino)
    key = (os.fspath(path), found_by_openssh)
    with _read_lock:
        cached = _read.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    identity = _read_file(path, found_by_openssh)
    if time.time_ns() - info.st_mtime_ns > _RACY_NS:
        with _read_lock:
            _read.pop(key, None)
            _read[key] = (stamp, identity)
            while len(_read) > _KEEP:
                del _read[next(iter(_read))]
    return identity


def _read_file(path: Path, found_by_openssh: bool) -> Identity | None:
    import asyncssh

    try:
        key = asyncssh.read_private_key(str(path))
    except (asyncssh.KeyImportError, OSError, ValueError):
        return None
    public = key.export_public_key().decode().strip()
    pair = asyncssh.load_keypairs([key])[0]
    return Identity(_shown(path), path, public, found_by_openssh, pair)


def _shown(path: Path) -> str:
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else os.fspath(path)


async def _agent_identities() -> list[Identity]:
    import asyncssh
    from asyncssh.public_key import decode_ssh_public_key

    socket = os.environ.get("SSH_AUTH_SOCK")
    if not socket:
        return []

    async def listed() -> Any:
        agent = await asyncssh.connect_agent(socket)
        if agent is None:
            return []
        try:
            return await agent.get_keys()
        finally:  # fully closed, a key pair reopens the agent when it signs (on its loop)
            agent.close()
            await agent.wait_closed()

    try:
        pairs = await asyncio.wait_for(listed(), 5)
    except (OSError, asyncssh.Error, ValueError, asyncio.TimeoutError, TimeoutError):
        return []
    found = []
    for pair in pairs:
        public = decode_ssh_public_key(pair.public_data)
        comment = (pair.get_comment() or "").strip()
        if comment:
            public.set_comment(comment)
        text = public.export_public_key().decode().strip()
        label = f"the ssh-agent's key {comment or public.get_fingerprint()}"
        found.append(Identity(label, None, text, True, pair))
    return found


def _explicit(given: str | os.PathLike[str] | None) -> list[Identity]:
    """The explicit identity (none, or one), or one sentence why it cannot be used."""
    explicit = explicit_identity(given)
    if explicit is None:
        return []
    identity = _from_file(explicit, False)
    if identity is None:
        raise InvalidInputError(f"The SSH key {os.fspath(explicit)!r} cannot be read as a "
                                "private key (is it the .pub file, or protected by a "
                                "passphrase? Then add it to ssh-agent).")
    return [identity]


def _files(explicit: bool, own_directory: Path) -> list[Identity]:
    """The default key files that hold a key, then (without an explicit one) the client's own."""
    found = []
    for name in DEFAULT_FILES:
        path = Path(name).expanduser()
        if path.is_file() and (identity := _from_file(path, True)) is not None:
            found.append(identity)
    if not explicit:
        own = _from_file(own_key(own_directory), False)
        if own is not None:
            found.append(own)
    return found


def _unique(found: list[Identity]) -> list[Identity]:
    unique: dict[str, Identity] = {}
    for identity in found:
        unique.setdefault(identity.public.split()[1], identity)
    return list(unique.values())


async def identities(given: str | os.PathLike[str] | None, own_directory: Path) -> list[Identity]:
    """Every key the client can offer, in order (see the module docs); never empty."""
    explicit = _explicit(given)
    agent = await _agent_identities()
    return _unique([*explicit, *agent, *_files(bool(explicit), own_directory)])


def identities_sync(given: str | os.PathLike[str] | None,
                    own_directory: Path) -> list[Identity]:
    """:func:`identities` from synchronous code (even inside a running event loop); without an
    ssh-agent, no thread and no event loop."""
    if os.environ.get("SSH_AUTH_SOCK"):
        return _blocking(identities(given, own_directory))
    explicit = _explicit(given)
    return _unique([*explicit, *_files(bool(explicit), own_directory)])


def _blocking(coroutine: Coroutine[Any, Any, list[Identity]]) -> list[Identity]:
    with concurrent.futures.ThreadPoolExecutor(1, "gpucloud-nb-keys") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def ssh_command(alias: str, host: str, port: int, user: str, identity: Identity | None,
                known_hosts: Path) -> str:
    """The ``ssh`` command for a terminal: the key (if OpenSSH would not find it) and the
    client's known_hosts under ``alias``; every value shell-quoted."""
    words = ["ssh"]
    if identity is not None and identity.path is not None and not identity.found_by_openssh:
        words += ["-i", os.fspath(identity.path), "-o", "IdentitiesOnly=yes"]
    file = os.fspath(known_hosts)
    file = f'"{file}"' if any(c.isspace() for c in file) else file  # ssh splits on spaces
    words += ["-o", f"UserKnownHostsFile={file}", "-o", f"HostKeyAlias={alias}"]
    if port and port != 22:
        words += ["-p", str(port)]
    words.append(f"{user}@{host}" if user else host)
    return shlex.join(words)
