"""Run one command on an instance over an open SSH connection: output streamed in batches of
lines, the last :data:`~gpucloud_nb.client.run_output.TAIL_BYTES` kept, a timeout that stops the
remote process, a refusal as one sentence.

    >>> result = await execute(connection, details, "nvidia-smi", emit=print)  # doctest: +SKIP

:class:`~gpucloud_nb.client.remote.Remote` opens the connection and counts the command as use;
this module runs it. A ``bookkeeping`` command carries
:data:`~gpucloud_nb.idle_rule.BOOKKEEPING` ``=1`` in its SSH environment, so the sandbox's idle
watcher does not count it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client.run_output import TAIL_BYTES, Lines, RunResult, Tail
from gpucloud_nb.errors import RemoteCommandError, RemoteTimeoutError
from gpucloud_nb.idle_rule import BOOKKEEPING

if TYPE_CHECKING:
    import asyncssh

    from gpucloud_nb.models import InstanceDetails

__all__ = ["BACKLOG", "channel", "checked", "deliver", "execute"]

#: Batches of lines waiting for the caller's thread before the reader pauses.
BACKLOG = 64


async def execute(connection: asyncssh.SSHClientConnection, details: InstanceDetails,
                  command: str, timeout: float | None = None,
                  emit: Callable[[list[str]], None] | None = None,
                  backlog: Callable[[], int] = lambda: 0,
                  bookkeeping: bool = False) -> RunResult:
    """Run ``command``: ``emit`` gets batches of lines; reading pauses while ``backlog()`` is
    above :data:`BACKLOG` (so a flood waits for the reader instead of filling memory). A
    ``timeout`` (seconds, from when the command starts) stops the remote process and raises
    :class:`RemoteTimeoutError`."""
    with channel(details):
        process = await connection.create_process(
            command, encoding=None, env={BOOKKEEPING: "1"} if bookkeeping else ())
    tails = (Tail(TAIL_BYTES), Tail(TAIL_BYTES))

    async def pump(stream: Any, tail: Tail) -> None:
        lines = Lines()
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                break
            tail.add(chunk)
            if emit is not None:
                batch = lines.feed(chunk)
                if batch:
                    emit(batch)
                while backlog() > BACKLOG:
                    await asyncio.sleep(0.005)
        if emit is not None and (rest := lines.end()):
            emit(rest)

    gathered = asyncio.gather(pump(process.stdout, tails[0]), pump(process.stderr, tails[1]),
                              process.wait_closed())
    # A shutdown cancels the pumps' tasks one by one (not through the gather), and the gather
    # then ends with a CancelledError nobody awaits: asyncio would log it as a traceback.
    gathered.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        await asyncio.wait_for(gathered, timeout)
    except (asyncio.TimeoutError, TimeoutError):  # one class on 3.11+, two on 3.10
        _stop(process)
        raise RemoteTimeoutError(
            f"The command on instance {details.id} did not finish within {timeout:g} s "
            "and was stopped.") from None
    except BaseException:
        _stop(process)
        raise
    status = process.exit_status
    if status is None:
        status = 128 + 15 if process.exit_signal else -1
    return RunResult(tails[0].text(), tails[1].text(), status,
                     tails[0].dropped, tails[1].dropped)


def checked(details: InstanceDetails, command: str, result: RunResult) -> RunResult:
    """``result``, unless the command was not found (exit status 127): one sentence."""
    if result.exit_status == 127:
        try:
            word = shlex.split(command)[0]
        except (ValueError, IndexError):
            word = command.strip()
        raise RemoteCommandError(
            f"{word!r} was not found on instance {details.id} (exit status 127).")
    return result


@contextlib.contextmanager
def channel(details: InstanceDetails) -> Iterator[None]:
    """An instance's refusal to open a channel (a command, SFTP) as one sentence of its own."""
    import asyncssh

    try:
        yield
    except asyncssh.ChannelOpenError as refused:
        raise RemoteCommandError(
            f"Instance {details.id} refused the request: {refused.reason}") from None


def deliver(batch: list[str], on_output: Callable[[str], None] | None) -> None:
    """Hand each line of ``batch`` to ``on_output`` (if any)."""
    if on_output is not None:
        for line in batch:
            on_output(line)


def _stop(process: Any) -> None:
    """Interrupt the remote process and close its channel (the server kills its group)."""
    with contextlib.suppress(Exception):
        process.send_signal("INT")
    with contextlib.suppress(Exception):
        process.close()
