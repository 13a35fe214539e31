"""A kernel's channels forwarded: five local Unix sockets whose connections go over SSH.

The sockets (``<stem>-1`` … ``<stem>-5``, ZeroMQ's ``ipc`` transport) are in a folder of
their own, mode 0700, and each is 0600: only this user can open them, where loopback TCP
ports would let any local user read the kernel's IOPub stream (ZeroMQ messages are signed,
not encrypted). Everything here runs on the SSH layer's loop. The listeners outlive SSH
connections: each accepted connection asks for the current SSH connection (reopened after
a drop) and opens a ``direct-tcpip`` channel to the kernel's port on the instance, marked
as bookkeeping (:data:`~gpucloud_nb.idle_rule.BOOKKEEPING_ORIGIN`): an open kernel is not use.

    >>> forwards = Forwards(provisioner.ssh_connection); await forwards.open()  # doctest: +SKIP
    >>> forwards.point([ports[name] for name in PORT_NAMES])  # doctest: +SKIP

IOPub is publish/subscribe: what the kernel publishes before a subscriber's connection is
back is lost, so a cell sent right after a reconnect or a restart would never show its
output. Requests (shell, control, stdin) therefore wait, up to 5 s, until a live IOPub
connection over the same SSH connection has heard from the kernel (its handshake) and 50 ms
more, by which time the client's subscription has gone out ahead of them on that SSH
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gpucloud_nb.idle_rule import BOOKKEEPING_ORIGIN

if TYPE_CHECKING:
    import asyncssh

__all__ = ["PORT_NAMES", "REQUESTS", "Forwards"]

#: The kernel's channels, in the order of the sockets.
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
#: The channels that carry requests (they wait for IOPub, see the module docstring).
REQUESTS = ("shell_port", "stdin_port", "control_port")


class Forwards:
    """The five sockets of one kernel and the connections they carry (see the module docstring)."""

    def __init__(self, connect: Callable[[], Awaitable[asyncssh.SSHClientConnection]]) -> None:
        self.connect = connect
        self.servers: list[asyncio.base_events.Server] = []
        self.targets: list[int] = [0] * len(PORT_NAMES)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.writers: set[Any] = set()
        self.folder = ""
        self._lock: asyncio.Lock | None = None
        self.down_until = 0.0  # the SSH loop's clock: no reconnect tried before then
        # The live IOPub connection that has heard from the kernel: (its token, the SSH
        # connection under it, when the kernel first spoke on it).
        self._iopub: tuple[object, Any, float] | None = None

    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    @staticmethod
    def number(index: int) -> int:
        """The ``ipc`` "port" of channel ``index``: its socket is ``<stem>-<number>``."""
        return index + 1

    @property
    def stem(self) -> str:
        """The connection info's ``ip`` for the ``ipc`` transport."""
        return os.path.join(self.folder, "kernel")

    async def open(self) -> None:
        # 0700, this user's own; in /tmp when TMPDIR is too long for a socket path (~100 bytes)
        parent = tempfile.gettempdir()
        if len(parent) > 60 and os.path.isdir("/tmp"):
            parent = "/tmp"
        self.folder = tempfile.mkdtemp(prefix="gpucloud-kernel-", dir=parent)
        await self.listen()

    async def listen(self) -> None:
        """Listen at every socket path (again, after a restart removed the files)."""
        for server in self.servers:
            server.close()
        self.servers = []
        for index in range(len(PORT_NAMES)):
            path = f"{self.stem}-{self.number(index)}"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            server = await asyncio.start_unix_server(self._handler(index), path)
            os.chmod(path, 0o600)
            self.servers.append(server)

    def point(self, ports: list[int]) -> None:
        self.targets = list(ports)

    def _handler(self, index: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                               Any]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                self.tasks.add(task)
            self.writers.add(writer)
            try:
                await self._carry(index, reader, writer)
            except asyncio.CancelledError:  # closed by cleanup
                pass
            finally:
                self.writers.discard(writer)
                if task is not None:
                    self.tasks.discard(task)
                writer.close()

        return handle

    async def _carry(self, index: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        port = self.targets[index]
        if not port:
            return
        channel = PORT_NAMES[index]
        try:
            connection = await self.connect()
            if channel in REQUESTS:
                await self._subscribed(connection)
            ssh_reader, ssh_writer = await connection.open_connection(
                "127.0.0.1", port, orig_host=BOOKKEEPING_ORIGIN)  # channels are not use
        except Exception:  # the instance is unreachable now; ZeroMQ will try again
            await asyncio.sleep(0.2)
            return
        loop = asyncio.get_running_loop()
        token = object()  # this IOPub connection

        def heard() -> None:
            if self._iopub is None or self._iopub[0] is not token:
                self._iopub = (token, connection, loop.time())

        async def pipe(source: Any, sink: Any, on_data: Callable[[], None] | None) -> None:
            try:
                while data := await source.read(65536):
                    if on_data is not None:
                        on_data()
                    sink.write(data)
                    await sink.drain()
            except Exception:  # either side went away
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        try:
            await asyncio.gather(pipe(reader, ssh_writer, None),
                                 pipe(ssh_reader, writer, heard if channel == "iopub_port" else None))
        finally:
            if self._iopub is not None and self._iopub[0] is token:
                self._iopub = None

    async def _subscribed(self, connection: Any) -> None:
        """Wait (up to 5 s) until IOPub over ``connection`` is back (see the class docs)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while loop.time() < deadline:
            if (self._iopub is not None and self._iopub[1] is connection
                    and loop.time() - self._iopub[2] >= 0.05):
                return
            await asyncio.sleep(0.01)

    async def release(self) -> None:
        """Stop listening and close every connection; keep the folder (a stand-in takes the
        paths: :mod:`gpucloud_nb.kernel.standin`)."""
        for server in self.servers:
            server.close()
        for writer in list(self.writers):
            writer.close()
        for task in list(self.tasks):
            task.cancel()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        self.servers.clear()

    async def close(self) -> None:
        await self.release()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
