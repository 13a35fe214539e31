"""Copy one file to or from an instance over SFTP, on an open SSH connection.

    >>> await upload(connection, details, "data.csv", "data.csv")  # doctest: +SKIP

A download never clobbers (as ``cp -n``) unless ``overwrite``, and never leaves a half file:
the bytes go to a hidden ``.<name>.gpucloud-partial`` beside the destination and are moved into
place only once complete; a refused, failed or cancelled copy removes it. A copy cancelled
from outside (a kernel shut down while ``%gpucloud checkpoint --every`` copies) ends quietly:
its SFTP session is closed and the copy's own requests end with it, no traceback logged.
:class:`~gpucloud_nb.client.remote.Remote` opens the connection and counts the copy as use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client.ssh_run import channel
from gpucloud_nb.errors import InvalidInputError

if TYPE_CHECKING:
    import asyncssh

    from gpucloud_nb.models import InstanceDetails

__all__ = ["download", "partial_path", "refuse_existing", "upload"]

#: How long a cancelled copy may take to end once its SFTP session is closed.
_END_SECONDS = 5.0


async def upload(connection: asyncssh.SSHClientConnection, details: InstanceDetails,
                 local: str | os.PathLike[str], remote: str,
                 progress: Callable[[int, int], None] | None = None) -> None:
    """Copy the file ``local`` to ``remote`` (relative to the instance home)."""
    with channel(details):
        async with connection.start_sftp_client() as sftp:
            await _ended_whole(sftp, sftp.put(os.fspath(local), remote,
                                              progress_handler=_progress(progress)))


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
                    await _ended_whole(sftp, sftp.get(remote, os.fspath(partial),
                                                      progress_handler=_progress(progress)))
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


async def _ended_whole(sftp: asyncssh.SFTPClient, copy: Awaitable[None]) -> None:
    """Await ``copy``; when the caller is cancelled (a kernel shut down mid-copy), end it by
    closing its SFTP session and wait for it to fail, instead of abandoning it.

    asyncssh reads and writes a file with parallel tasks; cancelled from outside, it leaves
    them running, and once the connection closes each logs "Task exception was never
    retrieved" with a traceback. Closing the session fails every request, and the copy then
    collects its own tasks' errors.
    """
    task = asyncio.ensure_future(copy)
    # However it ends (cancelled below, or failing after the caller has gone), its error is
    # read here, never left for asyncio to log as "Task exception was never retrieved".
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        sftp.exit()
        await asyncio.wait({task}, timeout=_END_SECONDS)
        if task.done():
            with contextlib.suppress(BaseException):
                task.result()
        else:  # the session did not close in time: cancel it after all
            task.cancel()
        raise


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
