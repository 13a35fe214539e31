"""Copy one file to or from an instance over SFTP, on an open SSH connection.

    >>> await upload(connection, details, "data.csv", "data.csv")  # doctest: +SKIP

A download never clobbers (as ``cp -n``) unless ``overwrite``, and never leaves a half file:
the bytes go to a hidden ``.<name>.gpucloud-partial`` beside the destination and are moved into
place only once complete; a refused, failed or cancelled copy removes it.
:class:`~gpucloud_nb.client.remote.Remote` opens the connection and counts the copy as use.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client.ssh_run import channel
from gpucloud_nb.errors import InvalidInputError

if TYPE_CHECKING:
    import asyncssh

    from gpucloud_nb.models import InstanceDetails

__all__ = ["download", "partial_path", "refuse_existing", "upload"]


async def upload(connection: asyncssh.SSHClientConnection, details: InstanceDetails,
                 local: str | os.PathLike[str], remote: str,
                 progress: Callable[[int, int], None] | None = None) -> None:
    """Copy the file ``local`` to ``remote`` (relative to the instance home)."""
    with channel(details):
        async with connection.start_sftp_client() as sftp:
            await sftp.put(os.fspath(local), remote, progress_handler=_progress(progress))


async def download(connection: asyncssh.SSHClientConnection, details: InstanceDetails,
                   remote: str, local: str | os.PathLike[str],
                   progress: Callable[[int, int], None] | None = None, *,
                   overwrite: bool = False) -> None:
    """Copy ``remote`` on the instance to the file ``local`` (see the module docstring)."""
    import asyncssh

    destination = Path(local)
    refuse_existing(destination, overwrite)
    partial = partial_path(destination)
    try:
        with channel(details):
            async with connection.start_sftp_client() as sftp:
                try:
                    await sftp.get(remote, os.fspath(partial),
                                   progress_handler=_progress(progress))
                except asyncssh.SFTPNoSuchFile:
                    raise InvalidInputError(
                        f"{remote!r} does not exist on instance {details.id}.") from None
        if overwrite:
            partial.replace(destination)
        else:
            try:
                os.link(partial, destination)  # fails if the file appeared meanwhile
            except FileExistsError:
                refuse_existing(destination, overwrite)
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()


def partial_path(destination: Path) -> Path:
    """Where a download to ``destination`` is written until it is complete.

        >>> partial_path(Path("a/b.gpucloud")).as_posix()
        'a/.b.gpucloud.gpucloud-partial'
    """
    return destination.with_name(f".{destination.name}.gpucloud-partial")


def refuse_existing(local: Path, overwrite: bool) -> None:
    """One sentence if ``local`` exists and ``overwrite`` is false (a download never clobbers)."""
    if not overwrite and (local.exists() or local.is_symlink()):
        raise InvalidInputError(f"{os.fspath(local)!r} already exists; pass overwrite=True "
                                "(--force in %gpucloud get) to replace it.")


def _progress(progress: Callable[[int, int], None] | None) -> Any:
    if progress is None:
        return None
    return lambda source, destination, done, total: progress(done, total)
