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

IOPub is publish/subscribe: the kernel drops what it publishes while a subscriber's
subscription has not reached it, so a cell sent right after a reconnect, a restart or a move
would never show its output. Each client's subscriber reconnects on its own clock (ZeroMQ's
``RECONNECT_IVL`` plus a random part of it, 0.1-0.2 s by default), and a client has its own
request sockets, so the first subscriber back (the busy watcher's, say) tells nothing about
the others. Requests (shell, control, stdin) therefore wait, up to
:data:`SUBSCRIBE_WAIT` seconds after a subscriber was cut, until every subscriber cut from the
kernel's side (the SSH connection dropped, the kernel restarted or moved) has sent its
subscription again over the current SSH connection, and 50 ms more; a subscriber whose client
closed it is not waited for. When none was cut they wait, up to 5 s, for one subscription over
the current SSH connection. A subscription seen here has gone out on the SSH connection
ahead of any request that waited for it.
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

__all__ = ["PORT_NAMES", "REQUESTS", "SUBSCRIBE_WAIT", "Forwards", "Subscribe"]

#: The kernel's channels, in the order of the sockets.
PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
#: The channels that carry requests (they wait for IOPub, see the module docstring).
REQUESTS = ("shell_port", "stdin_port", "control_port")
#: How long after a subscriber was cut requests may wait for it to subscribe again (a client
#: closed meanwhile never does).
SUBSCRIBE_WAIT = 10.0
#: How long after the last subscription went out requests wait more (the kernel's I/O thread
#: files it while the request crosses its own socket).
_SETTLE = 0.05
#: How long requests wait for a first subscriber over a new SSH connection when none was cut.
_ANY_WAIT = 5.0


class Subscribe:
    """Subscribes a subscriber to everything at the kernel as soon as its ZeroMQ handshake is
    done: :meth:`feed` gives the bytes it sent with a subscription added after its ``READY``.

    ZeroMQ sends a reconnected subscriber's own subscriptions from the thread that owns the
    socket, the next time that thread calls into it, not from its I/O thread: a client waiting
    for a reply on its shell socket has not subscribed again when the kernel publishes the
    cell's output. Subscribing to everything is safe: a ``SUB`` socket filters what arrives by
    its own subscriptions, and its own later subscription to ``b""`` is the same one.

        >>> subscribe = Subscribe()
        >>> subscribe.feed(bytes(64)) == bytes(64)  # the greeting
        True
        >>> ready = b"\\x04\\x19\\x05READY\\x0bSocket-Type\\x00\\x00\\x00\\x03SUB"
        >>> own = b"\\x04\\x0a\\x09SUBSCRIBE"  # its own subscription, sent with it here
        >>> subscribe.feed(ready + own) == ready + Subscribe.ALL + own
        True
        >>> subscribe.done
        True
    """

    #: A ZMTP 3 message frame subscribing to every topic (ZeroMQ 4 takes it from 3.0 and 3.1
    #: peers alike).
    ALL = b"\x00\x01\x01"

    def __init__(self) -> None:
        self.done = False
        self._seen = b""  # the handshake so far
        self._next = 64  # where its next frame starts (after the 64-byte greeting)

    def feed(self, data: bytes) -> bytes:
        """The bytes to send on for ``data``, the next bytes the subscriber sent."""
        if self.done:
            return data
        start = len(self._seen)
        self._seen += data
        while len(self._seen) >= self._next + 2:
            flags = self._seen[self._next]
            head = 9 if flags & 0x02 else 2  # a long frame's size has 8 bytes
            size = int.from_bytes(self._seen[self._next + 1:self._next + head], "big")
            end = self._next + head + size
            if len(self._seen) < end:
                break
            ready = flags & 0x04 and self._seen[self._next + head:end].startswith(b"\x05READY")
            self._next = end
            if ready:
                self.done, self._seen = True, b""
                return data[:end - start] + self.ALL + data[end - start:]
        if len(self._seen) > 4096:  # not a handshake we know: leave it alone
            self.done, self._seen = True, b""
        return data


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
        # Live IOPub connections whose subscription went out: the SSH connection under each,
        # and when (the SSH loop's clock).
        self._subscriptions: dict[object, tuple[Any, float]] = {}
        # When subscribed IOPub connections were cut from the kernel's side, oldest first:
        # each is taken off by the next subscription (see the module docstring).
        self._cut: list[float] = []
        self._cutting: set[Any] = set()  # local connections closed here, not by their client

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
                self._cutting.discard(writer)
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
        token = object()  # this connection
        subscribe = Subscribe() if channel == "iopub_port" else None
        first: list[str] = []  # the side that ended first: "client" or "kernel"

        async def pipe(source: Any, sink: Any, side: str) -> None:
            try:
                while data := await source.read(65536):
                    handshake = subscribe is not None and side == "client" and not subscribe.done
                    sink.write(subscribe.feed(data) if subscribe and handshake else data)
                    await sink.drain()
                    if subscribe and handshake and subscribe.done:  # on the SSH connection now
                        self._subscriptions[token] = (connection, loop.time())
                        if self._cut:
                            self._cut.pop(0)
            except Exception:  # either side went away
                pass
            finally:
                first.append(side)
                with contextlib.suppress(Exception):
                    sink.close()

        try:
            await asyncio.gather(pipe(reader, ssh_writer, "client"),
                                 pipe(ssh_reader, writer, "kernel"))
        finally:
            if self._subscriptions.pop(token, None) is not None and (
                    first[:1] != ["client"] or writer in self._cutting):
                self._cut.append(loop.time())  # its client will subscribe again

    async def _subscribed(self, connection: Any) -> None:
        """Wait until every cut subscriber is back over ``connection`` (see the module docs)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            now = loop.time()
            self._cut = [at for at in self._cut if now - at < SUBSCRIBE_WAIT]
            if not self._cut:
                over = [at for via, at in self._subscriptions.values() if via is connection]
                if (over and now - max(over) >= _SETTLE) or now - start >= _ANY_WAIT:
                    return
            await asyncio.sleep(0.01)

    def cut(self) -> None:
        """Close every connection from here: ZeroMQ reconnects (to where the sockets lead
        now), and requests wait for the subscribers (see the module docstring)."""
        for writer in list(self.writers):
            self._cutting.add(writer)
            writer.close()

    async def release(self) -> None:
        """Stop listening and close every connection; keep the folder (a stand-in takes the
        paths: :mod:`gpucloud_nb.kernel.standin`)."""
        for server in self.servers:
            server.close()
        self.cut()
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
