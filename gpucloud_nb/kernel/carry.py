"""Namespace files carried between this machine and instances, for the provisioner.

:class:`Carrier` is a mixin of :class:`~gpucloud_nb.kernel.provisioner.GPUCloudProvisioner`
(through :class:`~gpucloud_nb.kernel.move.Movable`); the relay hands it what a cell asks:

- ``checkpoint``: the namespace file the kernel wrote on the instance is copied over SSH
  (SFTP) to the notebook's folder, ``.gpucloud/checkpoints/``, and the newest N are kept. The
  copy goes to a hidden partial file first (:mod:`gpucloud_nb.client.ssh_files`), so a copy cut
  short (the kernel shut down under ``--every``, the connection dropped) leaves no file that
  looks like a checkpoint, and the checkpoints before it stay as they were.
- ``fetch``: a checkpoint of this machine is copied to the instance, for the kernel to load.

:func:`stream_between` carries a file from one instance to another through this machine, for a
move.

    >>> CHUNK // 2**20
    4
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, cast

from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.kernel.session import CHECKPOINTS, human, prune, stamp

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.client.remote import Remote
    from gpucloud_nb.kernel.agent import Reply
    from gpucloud_nb.models import InstanceDetails

__all__ = ["CHUNK", "RUNTIME", "Carrier", "MoveFailed", "stream_between"]

#: The size of the pieces :func:`stream_between` reads and writes.
CHUNK = 4 * 2**20
#: Jupyter's runtime folder on the instance, relative to its home, where carried files land.
RUNTIME = ".local/share/jupyter/runtime"


class MoveFailed(GPUCloudError):
    """Why a move (or a copy for it) stopped (the sentence the cell prints after it)."""


class Carrier:
    """Checkpoint copied here and fetched back, for a provisioner (see the module docstring)."""

    # The provisioner's own state, used here.
    _client: GPUCloud | None
    _remote: Remote | None
    _details: InstanceDetails | None
    _cwd: str | None

    @property
    def notebook_folder(self) -> Path:
        """The notebook's folder on this machine (the Jupyter server's folder without one)."""
        return Path(self._cwd) if self._cwd else Path.cwd()

    def _reach_now(self) -> tuple[GPUCloud, Remote, InstanceDetails]:
        if self._client is None or self._remote is None or self._details is None:
            raise MoveFailed("this kernel's instance is not reachable")
        return self._client, self._remote, self._details

    @staticmethod
    def _progress(reply: Reply, what: str, total: int) -> Callable[[int], None]:
        marks = {int(total * step / 10) for step in range(1, 11)}
        shown = {"next": 0}
        started = time.monotonic()

        def seen(done: int) -> None:
            if done >= shown["next"] or done in marks:
                seconds = max(time.monotonic() - started, 1e-6)
                reply.progress(f"  {what}: {human(done)} of {human(total)} "
                               f"({human(done / seconds)}/s)")
                shown["next"] = done + max(total // 10, 1)

        return seen

    # -- checkpoint and fetch ----------------------------------------------------------------

    async def _checkpoint(self, request: dict[str, Any], reply: Reply) -> None:
        _, remote, details = self._reach_now()
        source = str(request["file"])
        size = int(request.get("size") or 0)
        folder = self.notebook_folder / CHECKPOINTS
        folder.mkdir(parents=True, exist_ok=True)
        local = folder / stamp(details.name or details.id)
        started = time.monotonic()
        seen = self._progress(reply, "copied", size)
        await remote.download_async(details, source, local,
                                    lambda done, total: seen(done))
        prune(folder, int(request.get("keep") or 5))
        where = os.path.relpath(local, self.notebook_folder)
        reply.final(True, f"Checkpoint saved to {where} ({human(local.stat().st_size)}, copied "
                          f"in {time.monotonic() - started:.1f} s).", path=str(local))

    def _find_checkpoint(self, name: str) -> Path:
        from gpucloud_nb.kernel.session import checkpoints

        folder = self.notebook_folder / CHECKPOINTS
        found = checkpoints(folder)
        if not found:
            raise InvalidInputError(f"There is no checkpoint in {folder}; make one with "
                                    "%gpucloud checkpoint.")
        matches = [path for path in found if name in path.name] if name else found
        if not matches:
            raise InvalidInputError(f"No checkpoint matches {name!r}; the newest are: "
                                    f"{', '.join(path.name for path in found[-5:])}.")
        return matches[-1]

    async def _fetch(self, request: dict[str, Any], reply: Reply) -> None:
        _, remote, details = self._reach_now()
        found = self._find_checkpoint(str(request.get("checkpoint") or ""))
        destination = f"{RUNTIME}/gpucloud-restore-{uuid.uuid4().hex}.gpucloud"
        seen = self._progress(reply, "copied", found.stat().st_size)
        await remote.upload_async(details, found, destination, lambda done, total: seen(done))
        reply.final(True, "copied", file=destination, name=found.name)


async def stream_between(remote: Remote, source_instance: InstanceDetails, source: str,
                         target_instance: InstanceDetails, destination: str,
                         seen: Callable[[int], None] = lambda done: None,
                         check: Callable[[], None] = lambda: None) -> int:
    """Copy ``source`` on one instance to ``destination`` on another through this machine, in
    :data:`CHUNK` pieces, reading the next piece while the last one is written (two SFTP
    sessions, nothing on this machine's disk); the bytes copied. ``check`` may raise to stop."""
    first = await remote.connection(source_instance)
    second = await remote.connection(target_instance)
    pieces: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)
    done = 0
    async with first.start_sftp_client() as reading, second.start_sftp_client() as writing, \
            reading.open(source, "rb") as inside, writing.open(destination, "wb") as out:

        async def read() -> None:
            while chunk := await inside.read(CHUNK):
                await pieces.put(cast(bytes, chunk))
            await pieces.put(b"")

        reader = asyncio.ensure_future(read())
        try:
            while chunk := await pieces.get():
                await out.write(chunk)
                done += len(chunk)
                seen(done)
                check()
            await reader
        finally:
            reader.cancel()
    return done

