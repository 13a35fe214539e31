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
import time
import uuid
from typing import TYPE_CHECKING, Any

from jupyter_client.provisioning import KernelProvisionerBase
from traitlets import CaselessStrEnum, Float, Unicode

from gpucloud_nb.errors import (
    ConnectionFailedError,
    GPUCloudError,
    InvalidInputError,
    KernelStartError,
    NotFoundError,
)
from gpucloud_nb.kernel import sync
from gpucloud_nb.kernel.busy import BusyWatch
from gpucloud_nb.kernel.forwards import PORT_NAMES, Forwards
from gpucloud_nb.kernel.revive import Revivable
from gpucloud_nb.kernel.standin import StandIn

if TYPE_CHECKING:
    import asyncssh
    from jupyter_client.connect import KernelConnectionInfo

    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.client.remote import Remote
    from gpucloud_nb.models import InstanceDetails

__all__ = ["RUNTIME_DIR", "GPUCloudProvisioner"]

#: Where kernel connection files live on the instance, relative to its home (Jupyter's own).
RUNTIME_DIR = ".local/share/jupyter/runtime"
_START_TIMEOUT = 60.0
#: What ``poll`` may take, whatever SSH does (JupyterLab's restarter and ``is_alive`` wait on it).
_POLL_SECONDS = 2.0
#: How long a signal (or the remote cleanup) may try to reach the instance.
_SIGNAL_SECONDS = 5.0
#: After a failed reconnect, how long callers fail at once rather than try again.
_RETRY_SECONDS = 10.0
#: How often ``poll`` asks the cloud about the instance while SSH is down.
_ASK_EVERY = 1.0
#: How often the provisioner itself checks its kernel (a plain ``KernelManager`` polls nobody).
_WATCH_SECONDS = 3.0


class GPUCloudProvisioner(Revivable, KernelProvisionerBase):
    """Start, watch, signal and stop an ipykernel on a GPU cloud instance (see the module docs);
    checkpoint, restore and move it (:mod:`gpucloud_nb.kernel.move`)."""

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

    async def _watch(self) -> None:
        """Poll every :data:`_WATCH_SECONDS` (on the SSH loop) until the kernel is gone or a
        stand-in answers for it: nothing else polls under a plain ``KernelManager``."""
        while self._pid is not None and self._standin is None:
            await asyncio.sleep(_WATCH_SECONDS)
            with contextlib.suppress(Exception):
                if await self.poll() is not None:
                    return

    async def poll(self) -> int | None:
        """``None`` while the kernel runs, else an exit code (1 when it is simply gone).

        Answers within about :data:`_POLL_SECONDS` whatever SSH does: ``kill -0`` goes over an
        SSH connection only when one is open (never waiting for a reconnect, which it starts in
        the background); otherwise, or when that is slow, the cloud is asked whether the instance
        is gone, and a kernel whose instance is there is taken as alive.
        """
        if self._pid is None:
            return self._exit if self._exit is not None else 0
        if self._standin is not None:  # the instance is lost; a stand-in answers until shutdown
            return 0 if self._standin.exited.is_set() else None
        if self._moving:  # the sockets are being handed to the kernel it moved to
            return None
        if self._gone:
            return 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _POLL_SECONDS
        remote, details = self._remote, self._details
        if remote is not None and details is not None:
            if remote.cached_target(details.id) is not None:
                command = f"kill -0 {self._pid} 2>/dev/null && echo alive || echo gone"
                with contextlib.suppress(GPUCloudError, OSError, asyncio.TimeoutError,
                                         _ssh_errors()):
                    result = await asyncio.wait_for(
                        self._on_loop(remote.run_async(details, command, timeout=10,
                                                       bookkeeping=True)),
                        _POLL_SECONDS / 2)
                    if "alive" in result.stdout:
                        self._unreachable_since = None
                        return None
                    self._exit = 1
                    return 1
            else:
                self._reconnect_soon()
        if await self._instance_gone(max(deadline - loop.time(), 0.1)):
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
        from gpucloud_nb.kernel.move import lost_sentence

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
                await asyncio.wait_for(self._on_loop(self.stop_relay()), _SIGNAL_SECONDS)
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
        that could not be sent within :data:`_SIGNAL_SECONDS` is a warning in the log.
        """
        if self._standin is not None:  # no process: terminate and kill stop the stand-in
            if signum in (signal.SIGTERM, signal.SIGKILL):
                self._standin.exited.set()
            return
        if self._pid is None or self._gone or self._remote is None:
            return
        try:
            await asyncio.wait_for(self._sh(f"kill -{int(signum)} {self._pid} 2>/dev/null",
                                            timeout=10), _SIGNAL_SECONDS)
        except (GPUCloudError, OSError, asyncio.TimeoutError, _ssh_errors()) as error:
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
                    await asyncio.wait_for(self._on_loop(self.stop_relay()), _SIGNAL_SECONDS)
            if self._file and self._remote is not None and not self._gone:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self._sh(f"rm -f \"$HOME\"/{shlex.quote(self._file)}", timeout=10),
                        _SIGNAL_SECONDS)
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
                await asyncio.wait_for(self._on_loop(self.stop_relay()), _SIGNAL_SECONDS)
        if self._file and self._remote is not None and not self._gone:
            stem = self._file[:-len(".json")]
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._sh(f"rm -f \"$HOME\"/{shlex.quote(self._file)} "
                             f"\"$HOME\"/{shlex.quote(stem + '.log')}", timeout=10),
                    _SIGNAL_SECONDS)
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
        return max(recommended, _START_TIMEOUT)

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

    def _new_client(self) -> GPUCloud:
        if self.cloud == "sandbox":
            from gpucloud_nb._connect import connect

            return connect(sandbox=True, quiet=True)
        from gpucloud_nb._connect import cloud_settings
        from gpucloud_nb.client.management import GPUCloud

        try:  # through the user's personal gateway, as connect() (unless GPUCLOUD_GATEWAY=off)
            key, url, _ = cloud_settings()
            return GPUCloud(api_key=key, base_url=url)
        except InvalidInputError:
            raise InvalidInputError(
                f"Instance {self._label()} is on the cloud and this Jupyter server has no "
                "GPUCLOUD_API_KEY; set it (and GPUCLOUD_BASE_URL) before starting Jupyter."
            ) from None

    async def _reach(self) -> tuple[Remote, InstanceDetails]:
        if not self.instance_id:
            raise InvalidInputError("This kernelspec names no instance; install it again with "
                                    "gpucloud_nb.kernel.install_kernel(cloud, ...).")
        if self._client is None:
            self._client = await asyncio.to_thread(self._new_client)
        client = self._client
        try:
            details = await asyncio.to_thread(client.instances.get, self.instance_id)
        except NotFoundError:
            raise InvalidInputError(self._gone_sentence("no longer exists")) from None
        if details.status in ("deleting", "deleted"):
            raise InvalidInputError(self._gone_sentence(f"is {details.status}"))
        if details.status == "pending":
            self._say(f"Instance {self._label()} is pending; waiting until it is active…")

            def progress(current: InstanceDetails, elapsed: float) -> None:
                self._say(f"  still {current.status} after {elapsed:.0f} s")

            details = await asyncio.to_thread(client.instances.wait_until_active,
                                              self.instance_id, timeout=self.wait_seconds,
                                              on_progress=progress)
        remote, details = await asyncio.to_thread(client.instances.ssh, self.instance_id)
        self._remote, self._details = remote, details
        return remote, details

    def _gone_sentence(self, what: str) -> str:
        from gpucloud_nb.kernel.move import checkpoint_hint

        return (f"Instance {self._label()} {what}, so this kernel cannot start; pick another "
                "kernel, or install one for an active instance with %gpucloud kernel NAME"
                f"{checkpoint_hint(self.notebook_folder)}.")

    async def _instance_gone(self, budget: float) -> bool:
        """True when the cloud says the instance is gone; False when it is there, or has not
        answered within ``budget`` seconds (the question stays asked: the next poll reuses it)."""
        remote, client = self._remote, self._client
        if client is None or remote is None:
            return True
        if self._asked is None or (self._asked.done()
                                   and time.monotonic() - self._asked_at > _ASK_EVERY):
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

    async def _ensure_ipykernel(self, remote: Remote, details: InstanceDetails) -> None:
        check = ("python3 -c 'import sys' >/dev/null 2>&1 || exit 3; "
                 "python3 -c 'import ipykernel' >/dev/null 2>&1 || exit 4")
        status = (await self._sh(check, timeout=60)).exit_status
        if status == 3:
            raise KernelStartError(f"Instance {self._label()} has no working python3, so it cannot "
                                   "run a notebook kernel; use an image with Python 3.")
        if status != 4:
            return
        self._say(f"Installing ipykernel and ipywidgets on instance {self._label()} "
                  "(pip install --user)…")
        lines: list[str] = []

        def seen(line: str) -> None:
            lines.append(line)
            self._say("  " + line)

        async def install() -> Any:
            await self.ssh_connection()
            return await remote.run_async(
                details, "python3 -m pip install --user --progress-bar off ipykernel ipywidgets",
                timeout=900, on_output=seen)

        result = await self._on_loop(install())
        if result.exit_status != 0:
            raise KernelStartError(f"Could not install ipykernel on instance {self._label()}: "
                                   f"{_why_pip_failed(lines)}.")

    async def _write_file(self, text: str) -> None:
        import asyncssh

        connection = await self.ssh_connection()
        async with connection.start_sftp_client() as sftp:
            await sftp.makedirs(RUNTIME_DIR, exist_ok=True)
            attrs = asyncssh.SFTPAttrs(permissions=0o600)
            async with sftp.open(self._file, "w", attrs) as file:
                await file.write(text)

    async def _read_file(self) -> dict[str, Any]:
        connection = await self.ssh_connection()
        async with connection.start_sftp_client() as sftp, sftp.open(self._file, "r") as file:
            data: dict[str, Any] = json.loads(await file.read())
            return data

    async def _start(self, cmd: list[str], folder: str) -> int:
        place = "\"$HOME\"/" + shlex.quote(folder) if folder else "\"$HOME\""
        connection_file = "\"$HOME\"/" + shlex.quote(self._file)
        log = "\"$HOME\"/" + shlex.quote(self._file[:-len(".json")] + ".log")
        argv = " ".join(connection_file if part == "{connection_file}" else shlex.quote(part)
                        for part in cmd)
        command = (f"mkdir -p {place} && cd {place} && "
                   f"nohup {argv} >{log} 2>&1 </dev/null & echo $!")
        result = await self._sh(command, timeout=30)
        try:
            return int(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise KernelStartError(f"The kernel did not start on instance {self._label()}: "
                                   f"{(result.stderr or result.stdout).strip()[:200]}.") from None

    async def _ports(self) -> dict[str, int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT
        checks = 0
        while loop.time() < deadline:
            with contextlib.suppress(Exception):
                info = await self._on_loop(self._read_file())
                ports = {name: int(info.get(name) or 0) for name in PORT_NAMES}
                if all(ports.values()):
                    return ports
            checks += 1
            if checks % 10 == 0 and await self.poll() is not None:
                self._pid = None
                tail = await self._sh(f"tail -n 5 \"$HOME\"/"
                                      f"{shlex.quote(self._file[:-len('.json')] + '.log')}")
                last = [line for line in tail.stdout.splitlines() if line.strip()]
                raise KernelStartError(f"The kernel on instance {self._label()} exited while "
                                       f"starting: {last[-1] if last else 'no output'}.")
            await asyncio.sleep(0.1)
        raise KernelStartError(f"The kernel on instance {self._label()} did not open its ports "
                               f"within {_START_TIMEOUT:.0f} s.")


def _ssh_errors() -> type[Exception]:
    import asyncssh

    return asyncssh.Error


def _why_pip_failed(lines: list[str]) -> str:
    text = "\n".join(lines).lower()
    if "no module named pip" in text:
        return "it has no pip (install python3-pip)"
    if any(word in text for word in ("network is unreachable", "connection refused",
                                     "temporary failure in name resolution",
                                     "could not find a version")):
        return "it cannot reach the package index (no network?)"
    last = [line.strip() for line in lines if line.strip()]
    return last[-1] if last else "pip failed without a message"
