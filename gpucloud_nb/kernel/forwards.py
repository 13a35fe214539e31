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


class _Frames:
    """One side's ZMTP 3 stream through its handshake: a 64-byte greeting, then frames."""

    def __init__(self) -> None:
        self.seen = b""
        self.next = 64  # where the next frame starts
        self.ready = False  # its READY command went by

    def feed(self, data: bytes) -> list[tuple[int, bool]]:
        """The frames ``data`` completes: where each ends (in all bytes seen), and whether
        the READY had gone by then."""
        self.seen += data
        ends = []
        while len(self.seen) >= self.next + 2:
            flags = self.seen[self.next]
            head = 9 if flags & 0x02 else 2  # a long frame's size has 8 bytes
            size = int.from_bytes(self.seen[self.next + 1:self.next + head], "big")
            end = self.next + head + size
            if len(self.seen) < end:
                break
            if flags & 0x04 and self.seen[self.next + head:end].startswith(b"\x05READY"):
                self.ready = True
            self.next = end
            ends.append((end, self.ready))
        return ends


class Subscribe:
    """Subscribes a subscriber to everything at the kernel as soon as the ZeroMQ handshake
    between them is done: :meth:`client` and :meth:`kernel` see the bytes each side sends and
    give what goes to the kernel, with a subscription added once both ``READY`` went by.

    ZeroMQ sends a reconnected subscriber's own subscriptions from the thread that owns the
    socket, the next time that thread calls into it, not from its I/O thread: a client waiting
    for a reply on its shell socket has not subscribed again when the kernel publishes the
    cell's output. Subscribing to everything is safe: a ``SUB`` socket filters what arrives by
    its own subscriptions, and its own later subscription to ``b""`` is the same one. Before
    the kernel's ``READY`` the kernel would take a message for a protocol error.

        >>> subscribe = Subscribe()
        >>> ready = b"\\x04\\x19\\x05READY\\x0bSocket-Type\\x00\\x00\\x00\\x03SUB"
        >>> subscribe.client(bytes(64) + ready) == bytes(64) + ready  # the kernel's READY is due
        True
        >>> subscribe.kernel(bytes(64) + b"\\x04\\x1a\\x05READY\\x0bSocket-Type\\x00\\x00\\x00\\x04XPUB")
        b'\\x00\\x01\\x01'
        >>> subscribe.sent
        True
    """

    #: A ZMTP 3 message frame subscribing to every topic (ZeroMQ 4 takes it from 3.0 and 3.1
    #: peers alike).
    ALL = b"\x00\x01\x01"
    #: A handshake longer than this is not one we know: it is left alone.
    _LIMIT = 4096

    def __init__(self) -> None:
        self.done = False  # nothing more to look at
        self.sent = False  # the subscription went to the kernel
        self._client, self._kernel = _Frames(), _Frames()

    def client(self, data: bytes) -> bytes:
        """What goes to the kernel for ``data``, the next bytes the subscriber sent."""
        if self.done:
            return data
        start = len(self._client.seen)
        for end, ready in self._client.feed(data):
            if ready and self._kernel.ready:
                self.done = self.sent = True
                return data[:end - start] + self.ALL + data[end - start:]
        self._give_up()
        return data

    def kernel(self, data: bytes) -> bytes:
        """What goes to the kernel now that it sent ``data`` (sent on to the subscriber)."""
        if self.done or self._kernel.ready:
            return b""
        self._kernel.feed(data)
        if (self._kernel.ready and self._client.ready
                and len(self._client.seen) == self._client.next):  # between its frames
            self.done = self.sent = True
            return self.ALL
        self._give_up()
        return b""

    def _give_up(self) -> None:
        if max(len(self._client.seen), len(self._kernel.seen)) > self._LIMIT:
            self.done = True


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
                    if subscribe is None or subscribe.done:
                        sink.write(data)
                    elif side == "client":
                        sink.write(subscribe.client(data))
                    else:
                        sink.write(data)
                        if extra := subscribe.kernel(data):
                            ssh_writer.write(extra)
                    await sink.drain()
                    if subscribe is not None and subscribe.sent and token not in self._subscriptions:
                        self._subscriptions[token] = (connection, loop.time())  # sent
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
