"""``GPUCloudProvisioner``: a Jupyter kernel provisioner that runs the kernel on an instance.

JupyterLab (or nbclient, or ``jupyter_client.KernelManager``) starts a kernelspec written by
:func:`gpucloud_nb.kernel.spec.install`; its ``kernel_provisioner`` stanza names this class
(entry point ``gpucloud-provisioner``) and the instance id:

    >>> from jupyter_client.manager import KernelManager  # doctest: +SKIP
    >>> km = KernelManager(kernel_name="gpucloud-train-1"); km.start_kernel(cwd="project")  # doctest: +SKIP

Everything goes through the package's one SSH layer (:mod:`gpucloud_nb.client.remote`, asyncssh,
on the client's background loop):

1. The instance must exist and be active (a pending one is waited for, with progress in the
   log); a deleted one is one sentence.
2. ``python3`` must be there; if ``import ipykernel`` fails, ``python3 -m pip install --user
   ipykernel ipywidgets`` runs with its output in the log, or one sentence says why not.
3. The notebook's folder is walked in a worker thread and copied to ``~/<folder name>`` as one
   tar stream (:mod:`gpucloud_nb.kernel.sync`).
4. A connection file with the session key and ports 0 is written over SFTP (mode 0600) to
   ``~/.local/share/jupyter/runtime/gpucloud-kernel-<kernel id>.json``; ``python3 -m
   ipykernel_launcher -f <file>`` starts under ``nohup``, detached, with its output in a ``.log``
   next to it, so it outlives a dropped SSH connection. The kernel binds free ports and writes
   them back into the file, where the provisioner reads them.
5. Five local Unix sockets (:mod:`gpucloud_nb.kernel.forwards`) carry each connection to the
   kernel's TCP port on the instance over an SSH channel (``direct-tcpip``); Jupyter connects to
   them with ZeroMQ's ``ipc`` transport. They belong to the provisioner, not to the SSH
   connection: when the connection drops, the next connection (ZeroMQ reconnects by itself) opens
   a new SSH connection, so the kernel, its variables and the local sockets all survive. (A
   request sent in the very instant the connection drops is lost, as through any tunnel; the next
   one goes through.)

Choices (the issue leaves them open):

- **Who can listen in.** ZeroMQ messages are signed, not encrypted, so a kernel's loopback TCP
  ports let any local user read its IOPub stream (cell code and output) — as with every TCP
  Jupyter kernel. The local end is therefore Unix sockets in a folder of their own (mode
  0700, each socket 0600, under the temporary directory): only this user can open them. On the
  instance the kernel listens on its loopback TCP ports, which on a rented machine only its one
  user reaches; a *sandbox* instance is this machine, so there its kernel's ports are this
  machine's loopback, as for a local TCP kernel.
- **Credentials.** The kernelspec holds no secret: the sandbox's client is found with
  :func:`gpucloud_nb.connect` (``GPUCLOUD_SANDBOX_HOME`` as the server sees it), the real cloud's
  with ``GPUCLOUD_API_KEY`` / ``GPUCLOUD_BASE_URL`` from the Jupyter server's environment.
- **Poll and signals.** ``poll`` answers within 2 s whatever SSH does: ``kill -0 <pid>`` over
  an open SSH connection (like every command of the provisioner, bookkeeping: not use of the
  instance, see :mod:`gpucloud_nb.idle_rule`), else (or when that is slow) the cloud's word on the
  instance; while SSH is down the kernel is taken as alive unless the cloud says the instance is
  gone. A reconnect that failed is not tried again for 10 s, so the forwards, polls and signals
  never queue behind one another's ~9 s of tries. ``interrupt`` sends SIGINT to the kernel's
  process only (IPython stops the child processes of ``!`` commands itself); ``terminate`` and
  ``kill`` send SIGTERM and SIGKILL. A signal that cannot be sent within 5 s is a warning in the
  log, never an error: jupyter_client interrupts before every shutdown, and a shutdown must get
  to its cleanup.
- **Messages.** Progress (waiting for a pending instance, pip, the copy and what it skipped) is
  logged at INFO on the kernel manager's log: the Jupyter server's terminal under JupyterLab.
  A failed start is one sentence, leaves no process and no listener, and keeps the instance.
  An instance lost under a running kernel is said once at WARNING, with the newest
  checkpoint's ``%gpucloud restore`` line, and the kernel's next execution says the same as its
  only output (:mod:`gpucloud_nb.kernel.standin`).
- **Lost.** An instance is lost when the cloud says it is deleting, deleted or failed, or when
  it has not answered over SSH (while the cloud calls it there) for ``lost_after`` seconds,
  5 minutes unless set (``c.GPUCloudProvisioner.lost_after``, or the kernelspec's provisioner
  config): long enough for a rebooting machine or a network blip, short enough that nobody
  waits on a cell for long. An unreachable instance is not deleted: it may come back, and
  the sentence names it as still billing. Besides JupyterLab's own polls, the provisioner
  checks every 3 s on the SSH layer's loop, so a plain ``KernelManager`` (which polls nobody)
  finds it too; then a stand-in answers in the kernel's place.
- **Cleanup.** Removes the remote connection file and log (if SSH answers within 5 s), closes
  the listeners and the client; with ``on_shutdown="delete"`` it then deletes the instance over
  HTTP, whether or not SSH answers, and logs that the cloud confirms it (``deleting`` or
  ``deleted``). A restart keeps the sockets' paths (jupyter_client removes the files; they are
  listened on again at once), so the connection info stays the same.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import shlex
import signal
import threading
import uuid
from typing import TYPE_CHECKING, Any

from jupyter_client.provisioning import KernelProvisionerBase
from traitlets import CaselessStrEnum, Float, Unicode

from gpucloud_nb.errors import (  # KernelStartError: once public here
    ConnectionFailedError,
    GPUCloudError,
    KernelStartError,
    NotFoundError,
)
from gpucloud_nb.kernel import sync
from gpucloud_nb.kernel.busy import BusyWatch
from gpucloud_nb.kernel.forwards import PORT_NAMES, Forwards
from gpucloud_nb.kernel.launch import RUNTIME_DIR, START_TIMEOUT, Launching
from gpucloud_nb.kernel.lost import SIGNAL_SECONDS, Watching, ssh_errors
from gpucloud_nb.kernel.revive import Revivable
from gpucloud_nb.kernel.standin import StandIn

if TYPE_CHECKING:
    import asyncssh
    from jupyter_client.connect import KernelConnectionInfo

    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.client.remote import Remote
    from gpucloud_nb.models import InstanceDetails

__all__ = ["RUNTIME_DIR", "GPUCloudProvisioner", "KernelStartError"]

#: After a failed reconnect, how long callers fail at once rather than try again.
_RETRY_SECONDS = 10.0


class GPUCloudProvisioner(Launching, Watching, Revivable, KernelProvisionerBase):
    """Start, watch, signal and stop an ipykernel on a GPU cloud instance (see the module docs);
    its start's steps (:mod:`~gpucloud_nb.kernel.launch`), its poll and a lost instance
    (:mod:`~gpucloud_nb.kernel.lost`); checkpoint, restore and move it
    (:mod:`gpucloud_nb.kernel.move`), and revive it from the sidebar
    (:mod:`gpucloud_nb.kernel.revive`)."""

    instance_id = Unicode("", help="The id of the instance the kernel runs on.").tag(config=True)
    instance_name = Unicode("", help="Its name, for messages.").tag(config=True)
    cloud = CaselessStrEnum(["sandbox", "cloud"], default_value="sandbox",
                            help="Which cloud the instance is in.").tag(config=True)
    on_shutdown = CaselessStrEnum(["keep", "delete"], default_value="keep",
                                  help="What happens to the instance when the kernel shuts "
                                       "down.").tag(config=True)
    account = Unicode("", help="The account that installed the kernelspec (a digest, never "
                               "the key).").tag(config=True)
    wait_seconds = Float(600.0, help="How long to wait for a pending instance.").tag(config=True)
    lost_after = Float(300.0, help="How long the instance may stay unreachable over SSH before "
                                   "its kernel counts as lost.").tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client: GPUCloud | None = None
        self._remote: Remote | None = None
        self._details: InstanceDetails | None = None
        self._forwards: Forwards | None = None
        self._pid: int | None = None
        self._exit: int | None = None
        self._cwd: str | None = None
        self._file = ""
        self._gone = False  # the cloud said the instance is gone: no more SSH
        self._asked: concurrent.futures.Future[str] | None = None
        self._asked_at = 0.0
        self._reconnecting: concurrent.futures.Future[None] | None = None
        self._executing: BusyWatch | None = None  # executing cells told as use (kernel/busy.py)
        #: The sentence said when the instance was found lost ("" until then).
        self.lost = ""
        self._standin: StandIn | None = None  # answers in the kernel's place once it is lost
        self._losing = threading.Lock()  # poll runs on Jupyter's loop and on the SSH loop
        self._unreachable_since: float | None = None
        self._watching: concurrent.futures.Future[None] | None = None

    # -- what jupyter_client asks --------------------------------------------------------------

    @property
    def has_process(self) -> bool:
        """True while a kernel started by this provisioner may be running on the instance."""
        return self._pid is not None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Keep the notebook's folder; the command is the kernelspec's ``argv``."""
        kwargs.pop("extra_arguments", None)
        cwd = kwargs.pop("cwd", None)
        self._cwd = None if cwd is None else str(cwd)
        return await super().pre_launch(cmd=list(self.kernel_spec.argv), **kwargs)

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Start the kernel on the instance and return local connection info (see the module)."""
        try:
            return await self._launch(cmd)
        except BaseException:  # nothing left behind: no process, no listener, no client
            with contextlib.suppress(Exception):
                if self._pid is not None:
                    await self.kill()
                self._pid = None
                await self._close(delete=False)
            raise

    async def _launch(self, cmd: list[str]) -> KernelConnectionInfo:
        remote, details = await self._reach()
        self._exit, self._gone = None, False
        await self._ensure_ipykernel(remote, details)
        folder = ""
        if self._cwd is not None:
            folder = sync.remote_folder(self._cwd)
            found = await asyncio.to_thread(sync.plan, self._cwd, sync.cap_bytes(),
                                            sync.cap_files())
            await self._on_loop(sync.upload(await self._on_loop(self.ssh_connection()), found,
                                            folder, self._say))
        if self._forwards is None:
            self._forwards = Forwards(self.ssh_connection)
            await self._on_loop(self._forwards.open())
        key = self._session_key()
        self._file = f"{RUNTIME_DIR}/gpucloud-kernel-{self.kernel_id or uuid.uuid4()}.json"
        remote_info: dict[str, Any] = {
            "transport": "tcp", "ip": "127.0.0.1", "key": key, "signature_scheme": "hmac-sha256",
            "kernel_name": str(getattr(self.parent, "kernel_name", "") or ""),
            **dict.fromkeys(PORT_NAMES, 0),  # the kernel binds free ports and writes them here
        }
        await self._on_loop(self._write_file(json.dumps(remote_info)))
        self._pid = await self._start(cmd, folder)
        ports = await self._ports()
        self._forwards.point([ports[name] for name in PORT_NAMES])
        self._say(f"Kernel started on instance {self._label()} (pid {self._pid}, in "
                  f"~/{folder}).")
        info: dict[str, Any] = {"transport": "ipc", "ip": self._forwards.stem,
                                "key": key.encode(), "signature_scheme": "hmac-sha256"}
        info.update({name: Forwards.number(i) for i, name in enumerate(PORT_NAMES)})
        self.connection_info = info  # type: ignore[assignment]
        await self._on_loop(self.start_relay())  # the kernel's line to us (kernel/agent.py)
        if not self._shares_client:  # a move's sibling: the adopting provisioner watches
            self._executing = BusyWatch(info, self._in_use)
        self._unreachable_since = None
        if self._watching is None or self._watching.done():
            self._watching = remote.submit(self._watch())
        return self.connection_info

    def _in_use(self) -> contextlib.AbstractContextManager[object]:
        """Use of the kernel's instance now (after a move, the new one's), told as the client's."""
        remote = self._remote
        return contextlib.nullcontext() if remote is None else remote.in_use(self.instance_id)

    async def wait(self) -> int | None:
        """Wait until the kernel is gone; its exit code."""
        while (status := await self.poll()) is None:
            await asyncio.sleep(0.1)
        self._pid = None
        return status

    async def send_signal(self, signum: int) -> None:
        """Send ``signum`` (e.g. SIGINT to interrupt) to the kernel's process on the instance.

        Never raises: jupyter_client interrupts before it shuts a kernel down, and a shutdown
        must reach its cleanup (and the delete) when the instance cannot be reached. A signal
        that could not be sent within :data:`SIGNAL_SECONDS` is a warning in the log.
        """
        if self._standin is not None:  # no process: terminate and kill stop the stand-in
            if signum in (signal.SIGTERM, signal.SIGKILL):
                self._standin.exited.set()
            return
        if self._pid is None or self._gone or self._remote is None:
            return
        try:
            await asyncio.wait_for(self._sh(f"kill -{int(signum)} {self._pid} 2>/dev/null",
                                            timeout=10), SIGNAL_SECONDS)
        except (GPUCloudError, OSError, asyncio.TimeoutError, ssh_errors()) as error:
            self.log.warning("gpucloud-nb: could not send signal %d to the kernel on instance "
                             "%s (%s).", int(signum), self._label(),
                             str(error) or type(error).__name__)

    async def kill(self, restart: bool = False) -> None:
        """SIGKILL the kernel."""
        await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        """SIGTERM the kernel."""
        await self.send_signal(signal.SIGTERM)

    async def cleanup(self, restart: bool = False) -> None:
        """Remove the remote files; unless restarting, close the forwards, then keep or delete."""
        busy, self._executing = self._executing, None
        if busy is not None:
            await asyncio.to_thread(busy.stop)
        if self._watching is not None:
            self._watching.cancel()
        await self._stop_standin()
        if restart:
            if self._remote is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._on_loop(self.stop_relay()), SIGNAL_SECONDS)
            if self._file and self._remote is not None and not self._gone:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self._sh(f"rm -f \"$HOME\"/{shlex.quote(self._file)}", timeout=10),
                        SIGNAL_SECONDS)
            self._file = ""
            if self._forwards is not None and self._remote is not None:
                # jupyter_client has just removed the socket files ("cleanup_ipc_files"):
                # listen again at the same paths, so the connection info stays the same.
                await self._on_loop(self._forwards.listen())
        else:
            await self._close(delete=self.on_shutdown == "delete")
        self._pid = None  # stopped, or given up on: jupyter_client forgets it

    async def _close(self, delete: bool) -> None:
        """Remove the remote files (if SSH answers soon), close the forwards, then delete the
        instance if asked: the delete goes over HTTP, so it happens whatever SSH does."""
        if self._remote is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._on_loop(self.stop_relay()), SIGNAL_SECONDS)
        if self._file and self._remote is not None and not self._gone:
            stem = self._file[:-len(".json")]
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._sh(f"rm -f \"$HOME\"/{shlex.quote(self._file)} "
                             f"\"$HOME\"/{shlex.quote(stem + '.log')}", timeout=10),
                    SIGNAL_SECONDS)
        self._file = ""
        if self._forwards is not None and self._remote is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._on_loop(self._forwards.close()), 15)
        self._forwards = None
        client, self._client, self._remote = self._client, None, None
        if client is None or self._shares_client:  # a move's sibling: the client is not its own
            return
        try:
            if delete:
                await asyncio.to_thread(self._delete, client)
        finally:
            await asyncio.to_thread(client.close)

    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        """Copying files and installing ipykernel take longer than a local start."""
        return max(recommended, START_TIMEOUT)

    # -- steps -------------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        self.log.info("gpucloud-nb: %s", line)

    def _label(self) -> str:
        name = self.instance_name or (self._details.name if self._details else "")
        return f"{name} ({self.instance_id})" if name else self.instance_id

    def _session_key(self) -> str:
        session = getattr(self.parent, "session", None)
        key = getattr(session, "key", b"") or b""
        return key.decode() if isinstance(key, bytes) and key else str(uuid.uuid4())

    def _delete(self, client: GPUCloud) -> None:
        try:
            client.instances.delete(self.instance_id)
            status = client.instances.get(self.instance_id).status
        except NotFoundError:
            status = "deleted"
        self._say(f"Instance {self._label()} is {status}: the kernel shut down with "
                  "on_shutdown='delete'.")

    async def _on_loop(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the SSH layer's loop (where the connections live)."""
        assert self._remote is not None
        return await asyncio.wrap_future(self._remote.submit(coroutine))

    async def ssh_connection(self) -> asyncssh.SSHClientConnection:
        """The SSH connection (on the SSH loop), reopened once for all callers after a drop.

        Once the kernel runs, a reopening that failed is not tried again for
        :data:`_RETRY_SECONDS`: callers meanwhile fail at once instead of queueing behind one
        another's reconnects (ZeroMQ keeps knocking on every forward).
        """
        assert self._remote is not None and self._details is not None
        forwards = self._forwards
        if forwards is None:
            return await self._remote.connection(self._details)
        async with forwards.lock():
            cached = self._remote.cached_target(self._details.id)
            loop = asyncio.get_running_loop()
            if cached is None and loop.time() < forwards.down_until:
                raise ConnectionFailedError(f"Instance {self._label()} cannot be reached over "
                                            "SSH just now.")
            try:
                return await self._remote.connection(self._details)
            except BaseException:
                forwards.down_until = loop.time() + _RETRY_SECONDS
                raise

    async def _sh(self, command: str, timeout: float | None = None) -> Any:
        assert self._remote is not None and self._details is not None
        remote, details = self._remote, self._details

        async def run() -> Any:  # bookkeeping, never use: an idle kernel lets its instance idle
            await self.ssh_connection()
            return await remote.run_async(details, command, timeout=timeout, bookkeeping=True)

        return await self._on_loop(run())
