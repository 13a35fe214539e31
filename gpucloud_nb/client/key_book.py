"""``cloud.ssh_keys``: the account's SSH-key book on the cloud (list, add, make default, delete),
sync and async; and the key a GPU instance create names by id.

(The keys this client logs in with, found on this machine, are :mod:`gpucloud_nb.client.ssh_keys`.)

    >>> key = cloud.ssh_keys.add("laptop", path="~/.ssh/id_ed25519.pub")  # doctest: +SKIP
    >>> cloud.ssh_keys.make_default("laptop").is_default  # doctest: +SKIP
    True

Choices where the appendix is silent:

- Keys are named by id or name wherever one is taken (``make_default``, ``delete``), as
  instances are: the argument is tried as an id, then looked up by name in the list.
- ``add`` takes the key text or a path; a path to a private key is read from its ``.pub``
  beside it. A private key is refused before anything is sent, and so is text that is not one
  OpenSSH public key line.
- On the real cloud a GPU instance create with no key given names a key of the book by
  ``sshKeyId`` instead of sending the text of the public key the client logs in with
  (:func:`key_for_create`): the default key when it is that key, else any key that is, else the
  key is added to the book first, named after this machine (``gpucloud-nb <hostname>``), and
  made the default only when the book had no default. Should the book fail (no such endpoint,
  as a class gateway may answer, a refusal, a lost connection), the create sends the key's
  text, as before. Against the sandbox (when the client
  knows it is one) keys are registered through the sandbox's own route, as before.
"""

from __future__ import annotations

import builtins
import os
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from gpucloud_nb.client._core import Core, D, json_list
from gpucloud_nb.client._ops import AsyncDriver, Call, Op, SyncDriver
from gpucloud_nb.create_request import CreateInstance
from gpucloud_nb.errors import BadRequestError, GPUCloudError, InvalidInputError, NotFoundError
from gpucloud_nb.inference_records import SSHKey
from gpucloud_nb.inference_rules import public_key_problem

T = TypeVar("T")

__all__ = ["KEYS_PATH", "AsyncSSHKeyBook", "KeyBookOps", "SSHKeyBook", "keyed", "machine_key_name",
           "public_key_problem"]

KEYS_PATH = "/gpu-cloud/ssh-keys"
def _segment(id: str) -> str:
    """``id`` as one path segment, or one sentence before anything is sent."""
    if not isinstance(id, str) or not id.strip() or id in (".", "..") \
            or any(c in id for c in "/?#"):
        raise InvalidInputError(f"{id!r} is not a valid id or name of an SSH key.")
    return id


def keyed(core: Core[D], request: CreateInstance, public_key: str) -> Op[CreateInstance]:
    """``request`` naming ``public_key`` by its id in the key book (added when missing; see the
    module docs); with the key's text instead when the cloud has no key book (a 404, as a
    gateway in front of it may answer), refuses it or cannot be reached."""
    try:
        key_id = yield from KeyBookOps(core).key_for_create(public_key)
    except GPUCloudError:
        return msgspec.structs.replace(request, ssh_key=public_key)
    return msgspec.structs.replace(request, ssh_key_id=key_id)


def machine_key_name() -> str:
    """The name a key this client registers gets: ``gpucloud-nb <hostname>``."""
    return f"gpucloud-nb {socket.gethostname() or 'this machine'}"


def _read_key(public_key: str | None, path: str | os.PathLike[str] | None) -> str:
    if (public_key is None) == (path is None):
        raise InvalidInputError("Give the public key's text or its path (path=), one of them.")
    if path is not None:
        file = Path(os.path.expanduser(os.fspath(path)))
        if file.suffix != ".pub" and file.with_name(file.name + ".pub").is_file():
            file = file.with_name(file.name + ".pub")
        try:
            public_key = file.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidInputError(f"Cannot read the key file {file}: "
                                    f"{getattr(error, 'strerror', None) or error}.") from None
    assert public_key is not None
    problem = public_key_problem(public_key)
    if problem:
        raise InvalidInputError(problem)
    return public_key.strip()


class KeyBookOps(Generic[D]):
    """The SSH-key book's operations as sans-IO generators."""

    def __init__(self, core: Core[D]) -> None:
        self.core: Core[D] = core

    def list(self) -> Op[builtins.list[SSHKey]]:
        data = yield from self.core.send(Call("GET", KEYS_PATH))
        return [SSHKey.from_json(item) for item in json_list(data)]

    def add(self, name: str, public_key: str | None,
            path: str | os.PathLike[str] | None) -> Op[SSHKey]:
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError("A key needs a name (the first argument).")
        text = _read_key(public_key, path)
        data = yield from self.core.create_once(KEYS_PATH, {"name": name, "publicKey": text},
                                                "SSH key", "added")
        return SSHKey.from_json(data)

    def _by_id_or_name(self, given: str, op: Callable[[str], Op[T]]) -> Op[T]:
        try:
            return (yield from op(_segment(given)))
        except (NotFoundError, BadRequestError) as missing:
            if isinstance(missing, BadRequestError) and missing.status_code != 400:
                raise
            keys = yield from self.list()
            if any(k.id == given for k in keys):
                raise
            named = [k for k in keys if k.name == given]
            if len(named) != 1:
                if named:
                    raise InvalidInputError(
                        f"{len(named)} SSH keys are named {given!r} "
                        f"({', '.join(k.id for k in named)}); give the id.") from None
                raise NotFoundError(f"SSH key {given} not found: none has that id or name.",
                                    status_code=missing.status_code, path=missing.path,
                                    timestamp=missing.timestamp) from None
        return (yield from op(named[0].id))

    def make_default(self, given: str) -> Op[SSHKey]:
        return (yield from self._by_id_or_name(given, self._make_default))

    def _make_default(self, id: str) -> Op[SSHKey]:
        data = yield from self.core.send(Call("PATCH", f"{KEYS_PATH}/{id}/makedefault",
                                              what=f"SSH key {id}"))
        return SSHKey.from_json(data)

    def delete(self, given: str) -> Op[None]:
        yield from self._by_id_or_name(given, self._delete)

    def _delete(self, id: str) -> Op[None]:
        yield from self.core.send(Call("DELETE", f"{KEYS_PATH}/{id}", what=f"SSH key {id}"))

    def key_for_create(self, public_key: str) -> Op[str]:
        """The id of the book's key that is ``public_key`` (see the module docs), added first
        when none is."""
        keys = yield from self.list()
        same = sorted((k for k in keys if k.matches(public_key)), key=lambda k: not k.is_default)
        if same:
            return same[0].id
        added = yield from self.add(machine_key_name(), public_key, None)
        if not any(k.is_default for k in keys):
            added = yield from self._make_default(added.id)
        return added.id


class SSHKeyBook:
    """``cloud.ssh_keys``: the account's SSH keys on the cloud.

        >>> [k.name for k in cloud.ssh_keys.list()]  # doctest: +SKIP
        ['laptop']
    """

    def __init__(self, core: Core[SyncDriver]) -> None:
        self._ops = KeyBookOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> T:
        return self._core.driver.run(op)

    def list(self) -> builtins.list[SSHKey]:
        """The keys of the book, the default one with ``is_default``.

            >>> [k.name for k in cloud.ssh_keys.list() if k.is_default]  # doctest: +SKIP
        """
        return self._run(self._ops.list())

    def add(self, name: str, public_key: str | None = None, *,
            path: str | os.PathLike[str] | None = None) -> SSHKey:
        """Add a public key, given as text or by ``path`` (checked before it is sent).

            >>> cloud.ssh_keys.add("laptop", path="~/.ssh/id_ed25519.pub")  # doctest: +SKIP
        """
        return self._run(self._ops.add(name, public_key, path))

    def make_default(self, id: str) -> SSHKey:
        """Make a key (id or name) the default one.

            >>> cloud.ssh_keys.make_default("laptop")  # doctest: +SKIP
        """
        return self._run(self._ops.make_default(id))

    def delete(self, id: str) -> None:
        """Delete a key (id or name) from the book.

            >>> cloud.ssh_keys.delete("laptop")  # doctest: +SKIP
        """
        self._run(self._ops.delete(id))


class AsyncSSHKeyBook:
    """``cloud.ssh_keys`` of an :class:`~gpucloud_nb.client.management.AsyncGPUCloud`.

        >>> [k.name for k in await acloud.ssh_keys.list()]  # doctest: +SKIP
    """

    def __init__(self, core: Core[AsyncDriver]) -> None:
        self._ops = KeyBookOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> Coroutine[Any, Any, T]:
        return self._core.driver.run(op)

    async def list(self) -> builtins.list[SSHKey]:
        """The coroutine twin of :meth:`SSHKeyBook.list`."""
        return await self._run(self._ops.list())

    async def add(self, name: str, public_key: str | None = None, *,
                  path: str | os.PathLike[str] | None = None) -> SSHKey:
        """The coroutine twin of :meth:`SSHKeyBook.add`."""
        return await self._run(self._ops.add(name, public_key, path))

    async def make_default(self, id: str) -> SSHKey:
        """The coroutine twin of :meth:`SSHKeyBook.make_default`."""
        return await self._run(self._ops.make_default(id))

    async def delete(self, id: str) -> None:
        """The coroutine twin of :meth:`SSHKeyBook.delete`."""
        await self._run(self._ops.delete(id))
