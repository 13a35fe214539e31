"""The gateway reads an instance's GPU use itself, over SSH with its own key.

    >>> reader = GPUReader(gateway_key(home))  # doctest: +SKIP
    >>> await reader.read(vm.id, vm.ip, vm.ssh_port, vm.ssh_user)  # busiest GPU, %  # doctest: +SKIP
    57.0

One command per instance per read, :data:`QUERY` (``nvidia-smi --query-gpu=utilization.gpu
--format=csv,noheader,nounits``), sent with :data:`gpucloud_nb.idle_rule.BOOKKEEPING` in the
session's environment (the sandbox then does not count the gateway's own look as use; a real
sshd drops it, and the command is over in milliseconds). The answer is the busiest GPU's
utilisation, or ``None`` when it could not be read (no route, the key refused, no ``nvidia-smi``,
an answer that is not numbers, :data:`TIMEOUT` seconds passed): by the one rule
(:func:`gpucloud_nb.idle_rule.in_use`) an instance whose use cannot be read is idle.

Choices: one SSH connection per instance is kept open between reads and opened again when it
drops (a connection costs far more CPU than a command); connections to instances no longer
watched are closed (:meth:`GPUReader.keep_only`). Host keys are not checked (``known_hosts``
off): the gateway sends nothing secret over the connection and reads one number back, so an
impostor could at worst make an instance look busy or idle, the same as the instance's own user
can; the gateway's private key proves itself per session and is never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import asyncssh

from gpucloud_nb.idle_rule import BOOKKEEPING

__all__ = ["QUERY", "TIMEOUT", "GPUReader", "busiest"]

QUERY = "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits"
TIMEOUT = 15.0


def busiest(text: str) -> float | None:
    """The highest utilisation in :data:`QUERY`'s lines, or ``None`` without one.

        >>> busiest("3\\n57\\n"), busiest("No devices were found")
        (57.0, None)
    """
    values = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            values.append(float(line.strip().rstrip("%").strip()))
    return max(values) if values else None


class GPUReader:
    """Reads GPU use over SSH with the private ``key``, one kept connection per instance."""

    def __init__(self, key: asyncssh.SSHKey, timeout: float = TIMEOUT) -> None:
        self._key = key
        self._timeout = timeout
        self._connections: dict[str, tuple[tuple[str, int, str], asyncssh.SSHClientConnection]] = {}

    def __repr__(self) -> str:
        return f"GPUReader({len(self._connections)} connections)"

    async def _connection(self, id: str, host: str, port: int,
                          user: str) -> asyncssh.SSHClientConnection:
        where = (host, port, user)
        kept = self._connections.get(id)
        if kept is not None and kept[0] == where and not kept[1].is_closed():
            return kept[1]
        if kept is not None:
            kept[1].close()
        connection = await asyncssh.connect(
            host, port, username=user, client_keys=[self._key], known_hosts=None,
            agent_path=None, config=None, preferred_auth="publickey",
            connect_timeout=self._timeout, keepalive_interval=30)
        self._connections[id] = (where, connection)
        return connection

    async def read(self, id: str, host: str, port: int, user: str) -> float | None:
        """The busiest GPU's utilisation (%) of instance ``id`` at ``user@host:port``, or
        ``None`` when it cannot be read."""
        if not host or not port or not user:
            return None
        async def look() -> asyncssh.SSHCompletedProcess:
            connection = await self._connection(id, host, port, user)
            return await connection.run(QUERY, env={BOOKKEEPING: "1"}, check=False)

        try:
            result = await asyncio.wait_for(look(), self._timeout)
        except (OSError, asyncssh.Error, asyncio.TimeoutError, TimeoutError):
            self.drop(id)
            return None
        if result.exit_status != 0 or not isinstance(result.stdout, str):
            return None
        return busiest(result.stdout)

    def drop(self, id: str) -> None:
        """Close the connection to ``id``, if any."""
        kept = self._connections.pop(id, None)
        if kept is not None:
            kept[1].close()

    def keep_only(self, ids: Iterable[str]) -> None:
        """Close the connections to every instance not in ``ids``."""
        wanted = set(ids)
        for id in [id for id in self._connections if id not in wanted]:
            self.drop(id)

    def close(self) -> None:
        """Close every connection."""
        self.keep_only(())

