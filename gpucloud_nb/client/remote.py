"""Use an instance over SSH: run commands, copy files, forward a port. Sandbox or real cloud.

    >>> cloud.instances.run(instance.id, "nvidia-smi", on_output=print).exit_status  # doctest: +SKIP
    0
    >>> cloud.instances.upload(instance.id, "data.csv", "data.csv")  # doctest: +SKIP
    >>> with cloud.instances.forward(instance.id, 8000) as url:  # doctest: +SKIP
    ...     InferenceClient(url, secret).models()

One code path for the sandbox and the real cloud: the instance's ``ip``, ``sshPort`` and
``sshUser`` from the management API, and asyncssh. The connections live on one background event
loop per client and are cached per instance, so a second ``run`` costs one round trip.
:class:`Remote` keeps the loop, the connections and what is in use; the jobs are in modules of
their own: logging in (:mod:`.ssh_login`), a command (:mod:`.ssh_run`), a file copy
(:mod:`.ssh_files`), a forward (:mod:`.forwards`).

- **Keys.** The client offers keys as OpenSSH does (an explicit ``ssh_identity=`` /
  ``GPUCLOUD_SSH_KEY``, the ssh-agent, ``~/.ssh/id_ed25519``, ``id_ecdsa``, ``id_rsa``), and last
  a key pair it generates once: in ``<sandbox home>/client`` for the sandbox, in the user config
  dir (platformdirs) for the real cloud; see :mod:`gpucloud_nb.client.ssh_keys`. It never writes
  into ``~/.ssh``. For the sandbox the public keys are registered over HTTP
  (``POST /sandbox/ssh-keys``, once per client and key), and the sandbox accepts them for
  instances created without ``ssh_key``; :func:`default_public_key` is what ``create`` sends
  when no key is given. A refusal names the keys tried and how to give the right one.
- **Host keys.** Accept-new: the first key an instance shows is stored in the client's own
  ``known_hosts`` (next to its key pair, one ``<instance id> <key>`` line each: OpenSSH's format,
  read by the printed command through ``HostKeyAlias``); a different key later is refused with
  one sentence.
- **The ssh command** (:meth:`Remote.ssh_command`) connects once, so that the host key is stored
  and the accepted key known, then prints a command that works as printed in a terminal.
- **Forwards** listen on ``127.0.0.1`` and, on Linux, forward only connections from this user's
  processes (see :mod:`gpucloud_nb.client.local_peer`): another user of the machine gets the
  connection closed. A connection through one is use while open (:mod:`.forwards`).
- **Bookkeeping.** A command run with ``bookkeeping=True`` (an idle watcher's GPU measure, a
  kernel provisioner's poll) is not use of the instance (:mod:`gpucloud_nb.idle_rule`): it is
  not counted by :meth:`Remote.open_on`, and it is sent with
  :data:`~gpucloud_nb.idle_rule.BOOKKEEPING` ``=1`` in its SSH environment, so the sandbox's
  idle watcher does not count it either.
- **Bad input** is one sentence: an unknown instance (404), one that is still pending after
  ``wait`` seconds, one that is deleting, deleted or failed, and a command the instance does not
  have (exit status 127).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client import ssh_files, ssh_keys, ssh_run
from gpucloud_nb.client.forwards import Forward
from gpucloud_nb.client.run_output import TAIL_BYTES, RunResult
from gpucloud_nb.client.ssh_files import refuse_existing
from gpucloud_nb.client.ssh_login import default_public_key, key_dir, log_in
from gpucloud_nb.client.ssh_run import deliver
from gpucloud_nb.errors import (  # the three SSH errors are re-exported: they were public here
    InvalidInputError,
    KeysRefusedError,
    RemoteCommandError,
    RemoteTimeoutError,
)

if TYPE_CHECKING:
    import asyncssh

    from gpucloud_nb.client.sandbox_handle import SandboxHandle
    from gpucloud_nb.models import InstanceDetails

__all__ = [
    "TAIL_BYTES",
    "THREAD_NAME",
    "KeysRefusedError",
    "Remote",
    "RemoteCommandError",
    "RemoteTimeoutError",
    "RunResult",
    "default_public_key",
    "key_dir",
    "reachable",
    "refuse_existing",
]

THREAD_NAME = "gpucloud-nb-ssh"
"""The SSH loop's thread; its worker threads are ``gpucloud-nb-ssh-worker_N``."""


def reachable(details: InstanceDetails) -> InstanceDetails:
    """``details`` if the instance can be reached over SSH now, else one sentence why not."""
    if details.status == "pending":
        raise InvalidInputError(f"Instance {details.id} is still pending; wait until it is "
                                "active (cloud.instances.wait_until_active).")
    if details.status != "active":
        raise InvalidInputError(f"Instance {details.id} is {details.status}; only an active "
                                "instance can be reached over SSH.")
    if not details.ip or not details.ssh_port:
        raise InvalidInputError(f"Instance {details.id} has no SSH address.")
    return details


class Remote:
    """SSH use of a client's instances on one background asyncio loop (see the module docs).

    The operations are coroutines run on that loop (``submit``); the sync client waits for
    them (``call``), the async client awaits them (``wrap_future``). Both fetch an instance's
    details themselves and pass them in. ``sandbox()`` is the sandbox the client talks to
    (``None`` for the real cloud), and ``register(public_keys)`` registers keys with it (a
    blocking HTTP request, made in a worker thread).
    """

    def __init__(self, sandbox: Callable[[], SandboxHandle | None] = lambda: None,
                 identity: str | os.PathLike[str] | None = None,
                 register: Callable[[list[str]], None] = lambda publics: None,
                 on_use: Callable[[str, int], None] = lambda id, step: None) -> None:
        self._identity = identity
        self._on_use = on_use  # told +1/-1 as a command, copy or forward opens and ends
        self._accepted: dict[str, ssh_keys.Identity] = {}
        self._sandbox_of = sandbox
        self._register = register
        self._registered: set[tuple[str, str]] = set()  # (sandbox URL, public key)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, asyncssh.SSHClientConnection] = {}
        self._targets: dict[str, InstanceDetails] = {}
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._ended: dict[str, float] = {}  # when the last one ended, per instance
        self._open_lock = threading.Lock()

    @property
    def _sandbox(self) -> SandboxHandle | None:
        return self._sandbox_of()

    # -- the loop ----------------------------------------------------------------------------

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                loop.set_exception_handler(_quiet_cut_copies)
                # its worker threads (key registration, asyncssh's address lookups) named as its
                # own: asyncio's default "asyncio_N" is every loop's in the process
                loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(
                    thread_name_prefix=f"{THREAD_NAME}-worker"))
                thread = threading.Thread(target=loop.run_forever, name=THREAD_NAME,
                                          daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def submit(self, coroutine: Any) -> concurrent.futures.Future[Any]:
        """Run ``coroutine`` on the SSH loop; the future is its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._start())

    def call(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the SSH loop and wait; Ctrl-C cancels it and re-raises."""
        future = self.submit(coroutine)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            with contextlib.suppress(BaseException):
                future.result(timeout=5)
            raise

    def forget(self, id: str) -> None:
        """Drop (and close) the cached connection to instance ``id``: it is being deleted."""
        self._targets.pop(id, None)
        connection = self._connections.pop(id, None)
        if connection is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(connection.close)

    def close(self) -> None:
        """Close every cached connection, cancel what still runs on the loop (a kernel's
        watch, a forward: each ends its own way, its ``finally`` run), then stop and close it."""
        loop = self._loop
        if loop is None:
            return

        async def close_all() -> None:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()
            # as asyncio.run ends: a task left pending would be destroyed with the loop, and
            # say so on stderr ("Task was destroyed but it is pending!")
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            # the worker thread key registration used (asyncio.to_thread) ends with the loop
            await asyncio.get_running_loop().shutdown_default_executor()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close_all(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
            if not self._thread.is_alive():
                loop.close()
        self._loop = self._thread = None

    # -- what is open ------------------------------------------------------------------------

    def open_on(self, id: str, since: float | None = None) -> int:
        """How many commands, copies (SFTP) and connections through port forwards of this
        client are open on instance ``id`` now, plus one if one ended at or after ``since`` (a
        ``time.monotonic()``): what the idle watcher counts as use at a poll.

            >>> Remote().open_on("i-1")
            0
        """
        with self._open_lock:
            ended = since is not None and self._ended.get(id, -1.0) >= since
            return self._open.get(id, 0) + int(ended)

    def in_use(self, id: str) -> contextlib.AbstractContextManager[None]:
        """A context during which instance ``id`` is in use, as while a command of this client
        runs there: counted by :meth:`open_on` and told to the client's use reporter (a kernel
        on it executing a cell, :mod:`gpucloud_nb.kernel.busy`).

            >>> with Remote().in_use("i-1"):
            ...     pass
        """
        return self._using(id)

    @contextlib.contextmanager
    def _using(self, id: str) -> Iterator[None]:
        with self._open_lock:
            self._open[id] = self._open.get(id, 0) + 1
        self._on_use(id, +1)
        try:
            yield
        finally:
            with self._open_lock:
                self._ended[id] = time.monotonic()
                left = self._open.pop(id, 1) - 1
                if left > 0:
                    self._open[id] = left
            self._on_use(id, -1)

    # -- connections -------------------------------------------------------------------------

    def cached_target(self, id: str) -> InstanceDetails | None:
        """The details of instance ``id`` while a cached connection to it is open (so a second
        ``run`` costs no request; a deleted instance's server closes the connection, so the
        next call asks again), else ``None``."""
        cached = self._connections.get(id)
        if cached is not None and not cached.is_closed():
            return self._targets.get(id)
        return None

    async def connection(self, details: InstanceDetails) -> asyncssh.SSHClientConnection:
        """The cached connection to the instance, opened (and its host key checked) if needed."""
        cached = self._connections.get(details.id)
        if cached is not None and not cached.is_closed():
            return cached
        directory = key_dir(self._sandbox)
        offered = await ssh_keys.identities(self._identity, directory)
        await self._register_with_sandbox([identity.public for identity in offered])
        connection, accepted = await log_in(details, offered, directory)
        if accepted is not None:
            self._accepted[details.id] = accepted
        self._connections[details.id] = connection
        self._targets[details.id] = details
        return connection

    def ssh_command(self, details: InstanceDetails) -> str:
        """The ``ssh`` command that logs in to the instance from a terminal, as printed.

        It connects first (once per client and instance), so the host key is stored in the
        client's known_hosts and the key the instance accepts is known. If the instance refuses
        every key this client has, the command names none: whoever holds the key it was
        created with (in ``~/.ssh`` or an agent) can still use it.
        """
        with contextlib.suppress(KeysRefusedError):
            self.call(self.connection(details))
        return self.command_for(details)

    def key_in_use(self, id: str) -> str | None:
        """The key this client logged in to instance ``id`` with (where from, fingerprint), once
        it has connected; else ``None``."""
        identity = self._accepted.get(id)
        return None if identity is None else str(identity)

    def command_for(self, details: InstanceDetails) -> str:
        """The ``ssh`` command for an instance this client has connected to (see ssh_command)."""
        return ssh_keys.ssh_command(
            details.id, details.ip, details.ssh_port, details.ssh_user or "ubuntu",
            self._accepted.get(details.id), key_dir(self._sandbox) / "known_hosts")

    async def _register_with_sandbox(self, publics: list[str]) -> None:
        """Register with the sandbox (over HTTP) the keys it has not been sent by this client."""
        sandbox = self._sandbox
        if sandbox is None:
            return
        new = [public for public in publics
               if public and (sandbox.management_url, public) not in self._registered]
        if new:
            await asyncio.to_thread(self._register, new)
            self._registered.update((sandbox.management_url, public) for public in new)

    # -- operations --------------------------------------------------------------------------

    async def run_async(self, details: InstanceDetails, command: str, *,
                        timeout: float | None = None,
                        on_output: Callable[[str], None] | None = None,
                        bookkeeping: bool = False) -> RunResult:
        """Run ``command`` and collect (and stream) its output; see :meth:`run`."""
        def each(batch: list[str]) -> None:
            for line in batch:
                on_output(line)  # type: ignore[misc]

        return await self.execute(details, command, timeout=timeout,
                                  emit=each if on_output is not None else None,
                                  bookkeeping=bookkeeping)

    async def execute(self, details: InstanceDetails, command: str, *,
                      timeout: float | None = None,
                      emit: Callable[[list[str]], None] | None = None,
                      backlog: Callable[[], int] = lambda: 0,
                      bookkeeping: bool = False) -> RunResult:
        """Run ``command``: ``emit`` gets batches of lines; reading pauses while ``backlog()``
        is above :data:`~.ssh_run.BACKLOG` (so a flood waits for the reader instead of filling memory).

        A ``timeout`` (seconds, from when the command starts) stops the remote process and
        raises :class:`RemoteTimeoutError`. A ``bookkeeping`` command is not use of the
        instance (see the module docstring).
        """
        if bookkeeping:
            return await self._execute(details, command, timeout, emit, backlog, bookkeeping)
        with self._using(details.id):
            return await self._execute(details, command, timeout, emit, backlog, bookkeeping)

    async def _execute(self, details: InstanceDetails, command: str, timeout: float | None,
                       emit: Callable[[list[str]], None] | None,
                       backlog: Callable[[], int], bookkeeping: bool) -> RunResult:
        connection = await self.connection(details)
        return await ssh_run.execute(connection, details, command, timeout, emit, backlog,
                                     bookkeeping)

    def run(self, details: InstanceDetails, command: str, *, timeout: float | None = None,
            on_output: Callable[[str], None] | None = None,
            bookkeeping: bool = False) -> RunResult:
        """Run ``command``; ``on_output`` gets each line (without its newline) in this thread.

        Ctrl-C (KeyboardInterrupt), or any exception from ``on_output``, stops the remote
        process and re-raises. A ``timeout`` raises :class:`RemoteTimeoutError`; exit status 127
        is :class:`RemoteCommandError` ("not found"); other statuses are in the result.
        """
        batches: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        future = self.submit(self.execute(
            details, command, timeout=timeout,
            emit=batches.put if on_output is not None else None, backlog=batches.qsize,
            bookkeeping=bookkeeping))
        future.add_done_callback(lambda _: batches.put([]))  # wakes the wait below at once
        try:
            # Done-ness is asked, never inferred from an exception: on 3.11+
            # concurrent.futures.TimeoutError *is* TimeoutError, which the command may raise.
            while not future.done():
                try:
                    batch = batches.get(timeout=0.05)
                except queue.Empty:  # no `continue` here: on 3.11 a Ctrl-C arriving at that
                    batch = []       # jump escapes the enclosing try (seen in tests)
                deliver(batch, on_output)
            while not batches.empty():
                deliver(batches.get_nowait(), on_output)
        except BaseException:
            future.cancel()
            concurrent.futures.wait([future], timeout=5)
            raise
        return self.checked(details, command, future.result())

    checked = staticmethod(ssh_run.checked)


    async def upload_async(self, details: InstanceDetails, local: str | os.PathLike[str],
                           remote: str, progress: Callable[[int, int], None] | None = None
                           ) -> None:
        """Copy the file ``local`` to ``remote`` (relative to the instance home) over SFTP."""
        if not Path(local).is_file():
            raise InvalidInputError(f"{os.fspath(local)!r} is not a file.")
        connection = await self.connection(details)
        with self._using(details.id):
            await ssh_files.upload(connection, details, local, remote, progress)

    async def download_async(self, details: InstanceDetails, remote: str,
                             local: str | os.PathLike[str],
                             progress: Callable[[int, int], None] | None = None, *,
                             overwrite: bool = False) -> None:
        """Copy ``remote`` on the instance to the file ``local`` over SFTP.

        An existing ``local`` is refused unless ``overwrite`` (as ``cp -n``): the copy goes to a
        temporary file beside it and is moved into place only once complete, so a refused or
        failed download leaves nothing behind (:mod:`.ssh_files`).
        """
        refuse_existing(Path(local), overwrite)
        connection = await self.connection(details)
        with self._using(details.id):
            await ssh_files.download(connection, details, remote, local, progress,
                                     overwrite=overwrite)


    async def open_forward(self, details: InstanceDetails, remote_port: int,
                           bookkeeping: bool = False) -> Forward:
        """Listen on a free local port, forwarded to ``remote_port`` on the instance; each
        connection through it is use unless ``bookkeeping`` (see :mod:`.forwards`)."""
        connection = await self.connection(details)
        using = None if bookkeeping else (lambda: self._using(details.id))
        return await Forward(connection, remote_port, using).start()

    @staticmethod
    async def close_forward(listener: Forward) -> None:
        """Stop a forward :meth:`open_forward` started."""
        await listener.close()

    @contextlib.contextmanager
    def forward(self, details: InstanceDetails, remote_port: int,
                bookkeeping: bool = False) -> Iterator[str]:
        """Forward a free local port to ``remote_port`` on the instance; yield its URL."""
        listener = self.call(self.open_forward(details, remote_port, bookkeeping))
        try:
            yield f"http://127.0.0.1:{listener.get_port()}"
        finally:
            with contextlib.suppress(Exception):
                self.call(self.close_forward(listener))

    @contextlib.asynccontextmanager
    async def forward_async(self, details: InstanceDetails, remote_port: int,
                            bookkeeping: bool = False) -> AsyncIterator[str]:
        """The async twin of :meth:`forward`, for a caller on another event loop."""
        listener = await asyncio.wrap_future(
            self.submit(self.open_forward(details, remote_port, bookkeeping)))
        try:
            yield f"http://127.0.0.1:{listener.get_port()}"
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(self.submit(self.close_forward(listener)))


def _quiet_cut_copies(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The SSH loop's exception handler: asyncssh's own leftovers of a copy cut short go to
    the debug log; everything else to asyncio's default handler.

    asyncssh copies a file with parallel tasks. A copy cut by a shutdown (when closing its
    session did not end it in time, see :func:`~.ssh_files.download`) leaves them to fail
    with the lost connection, unawaited, and asyncio would print each one as "Task exception
    was never retrieved" with a traceback: in a notebook, a traceback about nothing wrong.
    """
    asyncssh = sys.modules.get("asyncssh")
    error = context.get("exception")
    if (asyncssh is not None and context.get("message") == "Task exception was never retrieved"
            and isinstance(error, (asyncssh.SFTPConnectionLost, asyncssh.ConnectionLost))):
        logging.getLogger("gpucloud_nb.ssh").debug("A cut copy's SFTP task ended: %s", error)
        return
    loop.default_exception_handler(context)
