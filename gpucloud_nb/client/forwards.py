"""A local port forwarded to a port of an instance over SSH, each connection through it use.

    >>> with cloud.instances.forward(instance.id, 8000) as url:  # doctest: +SKIP
    ...     InferenceClient(url, secret).models()

The forward listens on ``127.0.0.1`` (a free port) and, on Linux, carries only connections from
this user's processes (:mod:`gpucloud_nb.client.local_peer`); another user's is closed at once.
Each connection is one SSH ``direct-tcpip`` channel to ``localhost:<port>`` of the instance.

Use (:mod:`gpucloud_nb.idle_rule`): a forward the user opened is use while a connection through
it is open (and at the next poll after it ended), not while it merely listens: a forgotten
``with forward(...)`` keeps nothing billing. A bookkeeping forward (the package's own, such as a
cluster's scheduler and dashboard) is never use: its channels carry
:data:`~gpucloud_nb.idle_rule.BOOKKEEPING_ORIGIN` as their originator address, which the sandbox
reads (a real cloud's sshd only logs it), and the client does not count them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client import local_peer
from gpucloud_nb.idle_rule import BOOKKEEPING_ORIGIN

if TYPE_CHECKING:
    import asyncssh

__all__ = ["Forward"]


class Forward:
    """A listening forward; :meth:`start` it, :meth:`close` it (which ends its connections).

    ``using`` wraps each connection of a forward that is use (the client's count of what is
    open on the instance); ``None`` makes it bookkeeping.
    """

    def __init__(self, connection: asyncssh.SSHClientConnection, remote_port: int,
                 using: Callable[[], contextlib.AbstractContextManager[None]] | None) -> None:
        self.connection = connection
        self.remote_port = remote_port
        self.using = using
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Forward:
        self._server = await asyncio.start_server(self._carry, "127.0.0.1", 0)
        return self

    def get_port(self) -> int:
        """The local port it listens on."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and end every connection through it."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            peer = writer.get_extra_info("peername") or ("", 0)
            if not local_peer.same_user(str(peer[0]), int(peer[1])):
                return
            origin = (str(peer[0]), int(peer[1])) if self.using else (BOOKKEEPING_ORIGIN, 0)
            with self.using() if self.using else contextlib.nullcontext():
                try:
                    far_reader, far_writer = await self.connection.open_connection(
                        "localhost", self.remote_port, orig_host=origin[0], orig_port=origin[1])
                except Exception:  # refused or unreachable: the local connection just closes
                    return
                try:
                    await asyncio.gather(_pipe(reader, far_writer), _pipe(far_reader, writer))
                finally:
                    far_writer.close()
        except asyncio.CancelledError:  # closed with the forward
            pass
        finally:
            self._tasks.discard(task)
            writer.close()


async def _pipe(source: Any, sink: Any) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        with contextlib.suppress(Exception):
            sink.write_eof()
    except Exception:  # either side went away
        with contextlib.suppress(Exception):
            sink.close()
