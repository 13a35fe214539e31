"""Whether a provisioner's kernel still runs, and what it says when its instance is lost.

:class:`Watching` is a mixin of :class:`~gpucloud_nb.kernel.provisioner.GPUCloudProvisioner`:
``poll`` (what jupyter_client asks, within :data:`POLL_SECONDS` whatever SSH does), the
provisioner's own check every :data:`WATCH_SECONDS` (a plain ``KernelManager`` polls nobody),
and, once the instance is lost, the one warning and the stand-in that answers every cell
(:mod:`gpucloud_nb.kernel.standin`). The rules (when an instance counts as lost, what is said)
are the provisioner module's choices "Poll and signals" and "Lost".
:func:`lost_sentence` and :func:`checkpoint_hint` are the words, with the newest checkpoint's
``%gpucloud restore`` line.

    >>> POLL_SECONDS
    2.0
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shlex
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.errors import GPUCloudError, NotFoundError
from gpucloud_nb.kernel.session import CHECKPOINTS, SUFFIX
from gpucloud_nb.kernel.standin import StandIn

if TYPE_CHECKING:
    from jupyter_client.connect import KernelConnectionInfo

    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.client.remote import Remote
    from gpucloud_nb.kernel.busy import BusyWatch
    from gpucloud_nb.kernel.forwards import Forwards
    from gpucloud_nb.models import InstanceDetails

__all__ = ["POLL_SECONDS", "SIGNAL_SECONDS", "WATCH_SECONDS", "Watching", "checkpoint_hint",
           "lost_sentence", "ssh_errors"]

#: What ``poll`` may take, whatever SSH does (JupyterLab's restarter and ``is_alive`` wait on it).
POLL_SECONDS = 2.0
#: How long a signal (or the remote cleanup) may try to reach the instance.
SIGNAL_SECONDS = 5.0
#: How often ``poll`` asks the cloud about the instance while SSH is down.
ASK_EVERY = 1.0
#: How often the provisioner itself checks its kernel (a plain ``KernelManager`` polls nobody).
WATCH_SECONDS = 3.0


class Watching:
    """``poll``, the provisioner's own watch, and a lost instance (see the module docstring)."""

    # The provisioner's own state, used here.
    _client: GPUCloud | None
    _remote: Remote | None
    _details: InstanceDetails | None
    _forwards: Forwards | None
    _pid: int | None
    _exit: int | None
    _gone: bool
    _moving: bool
    _asked: concurrent.futures.Future[str] | None
    _asked_at: float
    _reconnecting: concurrent.futures.Future[None] | None
    _executing: BusyWatch | None
    _standin: StandIn | None
    _losing: threading.Lock
    _unreachable_since: float | None
    instance_id: str
    lost: str
    lost_after: float
    connection_info: KernelConnectionInfo
    log: Any

    if TYPE_CHECKING:  # the provisioner's own methods
        @property
        def notebook_folder(self) -> Path: ...
        def _label(self) -> str: ...
        async def _on_loop(self, coroutine: Any) -> Any: ...
        async def ssh_connection(self) -> Any: ...
        async def stop_relay(self) -> None: ...

    async def _watch(self) -> None:
        """Poll every :data:`WATCH_SECONDS` (on the SSH loop) until the kernel is gone or a
        stand-in answers for it: nothing else polls under a plain ``KernelManager``."""
        while self._pid is not None and self._standin is None:
            await asyncio.sleep(WATCH_SECONDS)
            with contextlib.suppress(Exception):
                if await self.poll() is not None:
                    return

    async def poll(self) -> int | None:
        """``None`` while the kernel runs, else an exit code (1 when it is simply gone).

        Answers within about :data:`POLL_SECONDS` whatever SSH does: ``kill -0`` goes over an
        SSH connection only when one is open (never waiting for a reconnect, which it starts in
        the background); otherwise, or when that is slow, the cloud is asked whether the instance
        is gone, and a kernel whose instance is there is taken as alive.
        """
        if self._pid is None:
            return self._exit if self._exit is not None else 0
        if self._exit is None:
            pid, details = self._pid, self._details
            answer = await self._poll()
            if self._pid != pid or self._details is not details:
                return None  # a move or a restore gave the sockets another kernel meanwhile
            self._exit = answer
        return self._exit  # an exit is final: jupyter_client's wait() loops until it sees one

    async def _poll(self) -> int | None:
        if self._standin is not None:  # the instance is lost; a stand-in answers until shutdown
            return 0 if self._standin.exited.is_set() else None
        if self._moving:  # the sockets are being handed to the kernel it moved to
            return None
        if self._gone:
            return 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + POLL_SECONDS
        remote, details = self._remote, self._details
        if remote is not None and details is not None:
            if remote.cached_target(details.id) is not None:
                command = f"kill -0 {self._pid} 2>/dev/null && echo alive || echo gone"
                with contextlib.suppress(GPUCloudError, OSError, asyncio.TimeoutError,
                                         ssh_errors()):
                    result = await asyncio.wait_for(
                        self._on_loop(remote.run_async(details, command, timeout=10,
                                                       bookkeeping=True)),
                        POLL_SECONDS / 2)
                    if "alive" in result.stdout:
                        self._unreachable_since = None
                        return None
                    if "gone" in result.stdout:
                        return 1
                    # No answer at all: the connection was cut under the command. Not an exit.
            else:
                self._reconnect_soon()
        if await self._instance_gone(max(deadline - loop.time(), 0.1)):
            if self._details is not details:  # the answer was about the kernel before a move
                return None
            status = self._asked.result() if self._asked is not None and self._asked.done() \
                and self._asked.exception() is None else "deleted"
            return await self._lose(status)
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        elif now - self._unreachable_since >= self.lost_after:
            return await self._lose("unreachable")
        return None

    async def _lose(self, status: str) -> int | None:
        """The instance is lost (``status``: deleting, deleted, failed or unreachable): say so
        once, at WARNING on the kernel manager's log, with the exact ``%gpucloud restore`` line
        for the newest checkpoint, and start a stand-in that says it to every cell (see the
        module); what ``poll`` answers now."""

        gpu = self._details.gpu_model if self._details is not None else ""
        since = self.lost_after if status == "unreachable" else 0.0
        forwards, key = self._forwards, self.connection_info.get("key", b"")
        with self._losing:  # said once; polls meanwhile see the stand-in (None: alive)
            if self._gone:
                return None if self._standin is not None else 1
            self.lost = lost_sentence(self._label(), status, self.notebook_folder, gpu, since)
            standin = None if forwards is None or self._remote is None else StandIn(
                forwards.stem, key.encode() if isinstance(key, str) else bytes(key), self.lost)
            self._standin, self._gone = standin, True
        self.log.warning("gpucloud-nb: %s", self.lost)
        busy, self._executing = self._executing, None
        if busy is not None:  # a lost kernel executes nothing; and its subscription to IOPub
            await asyncio.to_thread(busy.stop)  # would pass for the client's at the stand-in
        if standin is None or forwards is None:
            return 1
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._on_loop(self.stop_relay()), SIGNAL_SECONDS)
            await self._on_loop(forwards.release())
            await asyncio.to_thread(standin.start)
        except Exception as error:
            self._standin = None
            self.log.warning("gpucloud-nb: no stand-in could answer for the lost kernel: %s",
                             error)
            return 1
        return None

    async def _stop_standin(self) -> None:
        standin, self._standin = self._standin, None
        if standin is not None:
            standin.exited.set()
            await asyncio.to_thread(standin.stop)

    async def _instance_gone(self, budget: float) -> bool:
        """True when the cloud says the instance is gone; False when it is there, or has not
        answered within ``budget`` seconds (the question stays asked: the next poll reuses it)."""
        remote, client = self._remote, self._client
        if client is None or remote is None:
            return True
        if self._asked is None or (self._asked.done()
                                   and time.monotonic() - self._asked_at > ASK_EVERY):
            self._asked_at = time.monotonic()
            self._asked = remote.submit(asyncio.to_thread(self._status, client))
        try:
            status = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._asked)),
                                            budget)
        except (asyncio.TimeoutError, GPUCloudError):
            return False
        return status in ("deleting", "deleted", "failed")

    def _status(self, client: GPUCloud) -> str:
        try:
            return client.instances.get(self.instance_id).status
        except NotFoundError:
            return "deleted"

    def _reconnect_soon(self) -> None:
        """Open the SSH connection again in the background (once at a time), for later polls."""
        if self._remote is None or (self._reconnecting is not None
                                    and not self._reconnecting.done()):
            return

        async def reconnect() -> None:
            with contextlib.suppress(Exception):
                await self.ssh_connection()

        self._reconnecting = self._remote.submit(reconnect())


def ssh_errors() -> type[Exception]:
    """asyncssh's base error (imported only when asked: asyncssh is slow to import)."""
    import asyncssh

    return asyncssh.Error


def checkpoint_hint(folder: Path) -> str:
    """What a kernel whose instance is lost says about the newest checkpoint in ``folder``
    (its notebook's folder): "" when there is none.

        >>> checkpoint_hint(Path("/nonexistent"))
        ''
    """
    from gpucloud_nb.kernel.session import checkpoints

    found = checkpoints(folder / CHECKPOINTS)
    if not found:
        return ""
    minutes = max(time.time() - found[-1].stat().st_mtime, 0) / 60
    age = f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.0f} h"
    return (f"; its variables are in checkpoint {found[-1].name} ({age} old): start a kernel "
            "on another instance and run %gpucloud restore there")


def lost_sentence(label: str, status: str, folder: Path, gpu: str = "",
                  since: float = 0.0) -> str:
    """The one sentence a kernel says when its instance ``label`` is lost (``status``:
    deleting, deleted, failed, or unreachable over SSH for ``since`` seconds), with the exact
    restore line for the newest checkpoint in ``folder`` (its notebook's folder).

        >>> print(lost_sentence("box (i-1)", "failed", Path("/nonexistent")))
        ... # doctest: +NORMALIZE_WHITESPACE
        Instance box (i-1) is in an error state (failed), so its kernel and variables are gone;
        there is no checkpoint of them in .gpucloud/checkpoints/.
        >>> print(lost_sentence("box (i-1)", "unreachable", Path("/nonexistent"), since=300))
        ... # doctest: +NORMALIZE_WHITESPACE
        Instance box (i-1) has not answered over SSH for 5 min (it still exists and bills until
        you delete it: %gpucloud delete box), so this kernel and its variables count as lost;
        there is no checkpoint of them in .gpucloud/checkpoints/.
    """
    from gpucloud_nb.kernel.session import checkpoints

    if status == "unreachable":
        name = label.split(" (")[0]
        span = f"{since:.0f} s" if since < 120 else f"{since / 60:.0f} min"
        text = (f"Instance {label} has not answered over SSH for {span} (it still exists and "
                f"bills until you delete it: %gpucloud delete {name}), so this kernel and its "
                "variables count as lost; ")
    else:
        what = ("is in an error state (failed)" if status == "failed"
                else "was deleted from outside this notebook")
        text = f"Instance {label} {what}, so its kernel and variables are gone; "
    found = checkpoints(folder / CHECKPOINTS)
    if not found:
        return text + f"there is no checkpoint of them in {CHECKPOINTS.as_posix()}/."
    minutes = max(time.time() - found[-1].stat().st_mtime, 0) / 60
    age = f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.0f} h"
    stem = found[-1].name.removesuffix(SUFFIX)
    like = f" --gpu {shlex.quote(gpu)}" if gpu else " INSTANCE"
    return (text + f"to launch an instance like it and restore checkpoint {stem} ({age} old), "
            f"run %gpucloud restore {stem}{like} in a kernel on another instance.")

