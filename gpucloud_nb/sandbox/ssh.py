"""A real SSH server (asyncssh) for every active sandbox instance, on loopback only.

    >>> server = await InstanceServer.open(servers, record)  # doctest: +SKIP
    $ ssh -p 40122 ubuntu@127.0.0.1 nvidia-smi     # the instance's ip and sshPort

A sandbox instance is the user's own machine: commands run as the local user who started the
sandbox. Each server listens on ``127.0.0.1`` only, on the port stored in the instance's
``doc["sshPort"]`` at create (re-bound after a restart, or a new free port stored if it is taken).

- **Life time.** A vm, baremetal or container instance gets its server up to a second before it
  turns ``active`` (the reconciler of :mod:`gpucloud_nb.sandbox.ssh_servers` looks ahead, and a
  create wakes it at once),
  so an instance the API calls active is already listening; its ``ip`` and ``sshPort`` are shown
  only from then on. Once it is ``deleting`` the server is closed, its connections dropped and
  its processes killed, so new connections are refused. None of it runs inside a request: the
  host key is made and the server opened by the reconciler, on the server's loop.
- **Auth.** Public key only, for the instance's ``sshUser``: the ``sshKey`` given at create, or,
  if none was given, any key registered in ``<home>/ssh/authorized_keys`` (OpenSSH format, one
  key a line; the package's client registers its keys over HTTP, ``POST /sandbox/ssh-keys``,
  before it connects, and :meth:`InstanceServers.register` appends them). Passwords and
  keyboard-interactive are refused.
- **Where instances live.** Instance homes, volumes and the instances' commands live in the
  *machines* directory, ``<home>-machines`` beside the sandbox home (a temporary directory for a
  sandbox without a home), never inside the home: ``cd ..`` from an instance never reaches the
  service's ``service.json``, ``runtime.json``, state, log or SSH keys. That guards against
  stumbling on them by relative paths, not more: a shell runs as the service's OS user and can
  read whatever that user can, by absolute path. (If ``<home>-machines`` cannot be made, or is
  not a directory of this user's, ``<home>/machines`` is used and the log says so.)
- **Several accounts.** A sandbox with several accounts (``SandboxConfig.keys``) runs every
  account's shells as its one OS user, so any of them could read every other account's files,
  volumes and the server's keys. There, every session (shell, command, SFTP, scp) and every port
  forward is refused with :data:`SHARED_SHELL_REFUSAL` after the key is checked, and no instance
  directory is made, unless the server runs with ``shared_shell``, which accepts that risk and
  warns (:data:`SHARED_SHELL_WARNING`) when it starts.
- **Commands** run with ``/bin/sh -c`` in the instance's home ``<machines>/instances/<id>`` (HOME
  and cwd); ``PATH`` starts with a directory holding ``nvidia-smi`` (the offer's GPUs in
  nvidia-smi's table layout) and, for images whose os names vllm, ``vllm`` (``vllm serve MODEL
  [--port 8000]`` serves the sandbox's OpenAI-compatible model, see
  :mod:`gpucloud_nb.sandbox.vllm`), and ``python3`` is the sandbox's own Python (so it has
  ipykernel and ipywidgets). A signal from the client, or the channel closing before the command
  ends, kills its process group. Every command's environment carries the instance's marker
  (:data:`gpucloud_nb.sandbox.gpu_use.MARKER`) and a ``TMUX_TMPDIR`` of its own, so whatever it
  starts (``setsid``, ``nohup … &``, ``tmux new -d``, a daemon) is known to be the instance's:
  measured as its use, and killed when the instance is deleted.
- **Use.** The CPU of every session (command, shell, SFTP, scp) is the instance's GPU use
  (:mod:`gpucloud_nb.sandbox.gpu_use`), except one whose client sent
  :data:`gpucloud_nb.idle_rule.BOOKKEEPING` in its environment (a gateway's GPU read, a
  kernel provisioner's poll): the CPU of its process group while it is open does not count.
  What it leaves running (a kernel started under ``nohup``) is the instance's like anything
  else.
- **Deleting.** When the instance's server closes (it is deleting), every process of the
  instance is killed and its home (with its files: synced notebooks, a cluster's key) removed;
  only its volumes, outside the home, remain.
- **Ports.** A forwarded connection counts as use while open, like a session, unless its
  originator address is :data:`gpucloud_nb.idle_rule.BOOKKEEPING_ORIGIN` (a kernel's channels,
  a cluster's scheduler and dashboard).
  Direct TCP/IP forwarding to ``localhost:8000`` of the instance reaches a host
  port chosen when the server starts (``$GPUCLOUD_PORT_8000`` in commands); to any other port,
  that port of the host's loopback, where the instance's processes listen (a kernel started on
  the instance, see :mod:`gpucloud_nb.kernel`; a Dask scheduler of :mod:`gpucloud_nb.cluster`).
  That reaches nothing a command on the instance could not already connect to. Forwards to other
  hosts are refused.
- **Files.** SFTP is served rooted at the instance home. A volume attached at create is the
  directory ``<machines>/volumes/<volumeId>``, linked into the instance home at the path of its
  ``volumes`` entry (``/mnt/<name>`` is ``~/mnt/<name>`` in commands, ``/mnt/<name>`` over SFTP):
  its files outlive the instance. The link is made only at ``~/mnt/<one folder name>`` inside
  the instance home; an entry with any other path (a state written before volume names were
  checked) is linked at ``~/mnt/<volumeId>`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import asyncssh

from gpucloud_nb.idle_rule import BOOKKEEPING_ORIGIN
from gpucloud_nb.rules import volume_name_problem
from gpucloud_nb.sandbox import nvidia_smi
from gpucloud_nb.sandbox.cloud_init import cloud_init_keys, run_scripts_once
from gpucloud_nb.sandbox.gpu_use import MARKER
from gpucloud_nb.sandbox.home import private_dir
from gpucloud_nb.sandbox.instance_processes import (
    end_processes,
    is_bookkeeping,
    kill_group,
    pump_in,
    pump_out,
)

if TYPE_CHECKING:
    from gpucloud_nb.sandbox.gpu_use import Snapshot
    from gpucloud_nb.sandbox.store import InstanceRecord, Store

__all__ = [
    "SHARED_SHELL_REFUSAL",
    "SHARED_SHELL_WARNING",
    "VOLUME_ID",
    "Host",
    "InstanceServer",
    "free_port",
    "gpu_state",
    "mount_point",
    "nvidia_smi_text",
    "parse_keys",
]

logger = logging.getLogger("gpucloud_nb.sandbox.ssh")
"""How long before an instance turns active its SSH server is opened."""
MODEL_PORT = 8000
VOLUME_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")

SHARED_SHELL_REFUSAL = (
    "SSH to instances is off on this sandbox: it serves several accounts as one OS user, so a "
    "shell, a command, a file copy or a forwarded port could read every other account's files; "
    "whoever starts it can turn it on with shared_shell=True."
)
SHARED_SHELL_WARNING = (
    "gpucloud-nb sandbox: warning: shared_shell: the instance shells of every account run as "
    "this one OS user, so any account can read every other account's files and volumes, and "
    "this server's keys; use it only with people you trust."
)


def mount_point(volume_id: str, name: str) -> str:
    """Where a volume is mounted on an instance: ``/mnt/<name>``, or ``/mnt/<id>`` for an unsafe name.

        >>> mount_point("65a1", "data"), mount_point("65a1", "../../tmp/x")
        ('/mnt/data', '/mnt/65a1')
    """
    return f"/mnt/{name if name and volume_name_problem(name) is None else volume_id}"


def free_port() -> int:
    """A loopback TCP port that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gpu_state(doc: dict[str, Any], util: float = 0.0, memory_mib: float = 0.0) -> dict[str, Any]:
    """What the instance's ``nvidia-smi`` reads: its offer's GPUs and their measured use."""
    return {"model": str(doc.get("gpuModel") or "GPU"), "count": int(doc.get("gpuCount") or 1),
            "mib": round(float(doc.get("vramPerGpu") or 0) * 1024), "util": util,
            "memoryMiB": memory_mib, "at": time.time()}


def nvidia_smi_text(doc: dict[str, Any]) -> str:
    """What ``nvidia-smi`` prints on an idle instance: its GPUs in nvidia-smi's table layout."""
    return nvidia_smi.table(gpu_state(doc))


def _load_or_make_host_key(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    path.chmod(0o600)
    return key


def parse_keys(text: str) -> list[asyncssh.SSHKey]:
    keys = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            with contextlib.suppress(asyncssh.KeyImportError, ValueError):
                keys.append(asyncssh.import_public_key(line))
    return keys


class Host(Protocol):
    """What an instance's server needs of the servers it is one of (an
    :class:`~.ssh_servers.InstanceServers`): the store, the sandbox's folders, whether shells
    are on, and the keys file."""

    store: Store
    home: Path | None
    machines: Path | None
    shell: bool

    @property
    def authorized_keys(self) -> Path: ...


class InstanceServer:
    """One instance's asyncssh server, its directories and the processes it started."""

    def __init__(self, servers: Host, record: InstanceRecord) -> None:
        assert servers.machines is not None
        self.servers = servers
        self.record = record
        self.user = str(record.doc.get("sshUser") or "ubuntu")
        self.home = servers.machines / "instances" / record.id  # made only when shells are on
        self.bin = servers.machines / "bin" / record.id
        self.model_port = free_port()
        self.groups: set[int] = set()
        self.boot_tasks: set[asyncio.Task[int]] = set()  # cloud-init's scripts, reaped
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.acceptor: asyncssh.SSHAcceptor | None = None
        self.port = 0
        #: Sessions open now (commands, shells, SFTP), and when one last opened or closed (s);
        #: the process groups of bookkeeping commands open now, which are not use.
        self.looking: set[int] = set()
        self.sessions = 0
        self.session_at = 0.0

    def session(self, change: int) -> None:
        """Count a session opened (+1) or closed (-1): what keeps an instance from idling."""
        self.sessions += change
        self.session_at = time.time()

    def write_use(self, util: float, memory_mib: float) -> None:
        """Give the instance's ``nvidia-smi`` the use just measured (written whole, then moved)."""
        if not self.servers.shell:
            return
        path = self.bin / "gpu.json"
        part = path.with_suffix(".part")
        part.write_text(json.dumps(gpu_state(self.record.doc, util, memory_mib)))
        os.replace(part, path)

    @classmethod
    async def open(cls, servers: Host, record: InstanceRecord) -> InstanceServer:
        self = cls(servers, record)
        if servers.shell:
            private_dir(self.home)
            private_dir(self.bin)
            self._mount_volumes()
            self._write_commands()
            await run_scripts_once(self)
        await self._listen()
        return self

    def _mount_volumes(self) -> None:
        """Link each attached volume at ``~/mnt/<folder>``, never anywhere outside the home."""
        assert self.servers.machines is not None
        entries = self.record.doc.get("volumes") or []
        if not entries:
            return
        mnt = self.home / "mnt"
        if not mnt.is_symlink():
            mnt.mkdir(exist_ok=True)
        if mnt.is_symlink() or not mnt.resolve().is_relative_to(self.home.resolve()):
            logger.warning("Instance %s: ~/mnt leads out of its home; no volume is mounted.",
                           self.record.id)
            return
        for entry in entries:
            try:
                volume_id, path = (str(part) for part in entry)
            except (TypeError, ValueError):
                volume_id, path = "", ""
            if not VOLUME_ID.fullmatch(volume_id):
                logger.warning("Instance %s: volume entry %r is not mounted.", self.record.id,
                               entry)
                continue
            folder = path.removeprefix("/mnt/")
            if path == folder or mount_point(volume_id, folder) != path:
                folder = volume_id  # not /mnt/<one safe folder name>: see the module docstring
            link = mnt / folder
            if link.is_symlink() or link.exists():
                continue
            target = private_dir(self.servers.machines / "volumes" / volume_id)
            link.symlink_to(target, target_is_directory=True)

    def _write_commands(self) -> None:
        self.write_use(0.0, 0.0)
        smi = self.bin / "nvidia-smi"  # stdlib only (-S): it starts in milliseconds
        smi.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -SI "
                       f"{shlex.quote(nvidia_smi.__file__)} {shlex.quote(str(self.bin / 'gpu.json'))}"
                       " \"$@\"\n")
        smi.chmod(0o755)
        python = self.bin / "python3"  # the sandbox's own Python: ipykernel and ipywidgets
        python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
        python.chmod(0o755)
        if "vllm" in str(self.record.doc.get("os") or "").lower():
            vllm = self.bin / "vllm"
            vllm.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                            "-m gpucloud_nb.sandbox.vllm \"$@\"\n")
            vllm.chmod(0o755)

    async def _listen(self) -> None:
        assert self.servers.home is not None
        keys = private_dir(self.servers.home / "ssh" / "host_keys")
        host_key = _load_or_make_host_key(keys / self.record.id)
        stored = int(self.record.doc.get("sshPort") or 0)
        chroot = os.fsencode(self.home)
        options: dict[str, Any] = {
            "server_host_keys": [host_key],
            "encoding": None,
            "line_editor": False,
            "x11_forwarding": False,
            "agent_forwarding": False,
        }
        if self.servers.shell:  # else no factory: sessions go to _Auth.session_requested
            options.update(process_factory=self._process, allow_scp=True,
                           sftp_factory=lambda chan: _SFTP(self, chan, chroot=chroot))
        try:
            self.acceptor = await asyncssh.create_server(lambda: _Auth(self), "127.0.0.1", stored,
                                                         **options)
            self.port = stored
        except OSError:
            self.port = free_port()
            self.acceptor = await asyncssh.create_server(lambda: _Auth(self), "127.0.0.1",
                                                         self.port, **options)
            doc = dict(self.record.doc, sshPort=self.port)
            self.servers.store.update_instance_doc(self.record.id, doc)

    def accepts(self, username: str, key: asyncssh.SSHKey) -> bool:
        """True when ``key`` may log in as ``username``: for the instance's user, the
        create-time key (else a registered one) or its cloud-init keys; for a user cloud-init
        made (``users: [{name: ...}]``), that user's cloud-init keys."""
        allowed = parse_keys("\n".join(cloud_init_keys(self.record.doc, username, self.user)))
        if username == self.user:
            given = str(self.record.doc.get("sshPublicKey") or "")
            if given:
                allowed += parse_keys(given)
            else:
                path = self.servers.authorized_keys
                allowed += parse_keys(path.read_text()) if path.exists() else []
        wanted = key.public_data
        return any(candidate.public_data == wanted for candidate in allowed)

    @property
    def marker(self) -> str:
        """The value of :data:`~gpucloud_nb.sandbox.gpu_use.MARKER` in its processes."""
        return str(self.home)

    @property
    def tmux_dir(self) -> Path:
        """Its own ``TMUX_TMPDIR`` (short: a socket path has at most 107 bytes)."""
        digest = hashlib.sha256(self.marker.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"gpucloud-tmux-{digest}"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in [n for n in env if n.startswith(("GPUCLOUD_", "JPY_", "VIRTUAL_ENV"))]:
            env.pop(name)
        env.update({
            "HOME": str(self.home),
            "USER": os.environ.get("USER", self.user),
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "GPUCLOUD_PORT_8000": str(self.model_port),
            "GPUCLOUD_INSTANCE_ID": self.record.id,
            MARKER: self.marker,
            "TMUX_TMPDIR": str(private_dir(self.tmux_dir)),
            "PYTHONUNBUFFERED": "1",
        })
        return env

    async def _process(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        # Bookkeeping (a watcher's measure, a provisioner's poll) keeps nothing from idling.
        counted = not is_bookkeeping(process.env)
        if counted:
            self.session(+1)
        try:
            await self._run_process(process, counted)
        finally:
            if counted:
                self.session(-1)

    async def _run_process(self, process: asyncssh.SSHServerProcess[bytes],
                           counted: bool = True) -> None:
        command = process.command or "exec /bin/sh -i"
        try:
            child = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", command, cwd=self.home, env=self.environment(),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        except OSError as error:
            process.stderr.write(f"{error}\n".encode())
            process.exit(127)
            return
        self.groups.add(child.pid)
        if not counted:  # nor is its CPU, while it is open, measured as the instance's use
            self.looking.add(child.pid)
        pumps = [asyncio.create_task(pump_out(child.stdout, process.stdout)),
                 asyncio.create_task(pump_out(child.stderr, process.stderr))]
        feeder = asyncio.create_task(pump_in(process, child))
        closed = asyncio.create_task(process.wait_closed())
        done: asyncio.Future[Any] = asyncio.ensure_future(asyncio.gather(child.wait(), *pumps))
        watched: list[asyncio.Future[Any]] = [done, closed, feeder]
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        while not done.done():
            if closed.done() or (feeder.done() and feeder.result() is not None):
                kill_group(child.pid, (feeder.result() if feeder.done() else None) or signal.SIGTERM)
                try:
                    await asyncio.wait_for(asyncio.shield(done), 2)
                except asyncio.TimeoutError:
                    kill_group(child.pid, signal.SIGKILL)
                    await asyncio.wait([done], timeout=2)
                break
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        feeder.cancel()
        closed.cancel()
        self.looking.discard(child.pid)  # what it left running (a kernel) is the instance's
        try:  # forget the group once empty; one left running in the background (nohup) is
            os.killpg(child.pid, 0)  # killed with the instance
        except (ProcessLookupError, PermissionError):
            self.groups.discard(child.pid)
        with contextlib.suppress(Exception):
            process.exit(child.returncode if child.returncode is not None and
                         child.returncode >= 0 else 128 + abs(child.returncode or 15))

    async def close(self, ended: bool = False) -> None:
        """Stop serving and kill every process of the instance; when it ``ended`` (it is
        deleting), remove its home too (a service that stops keeps its instances' files)."""
        if self.acceptor is not None:
            self.acceptor.close()
            with contextlib.suppress(Exception):
                await self.acceptor.wait_closed()
        for connection in list(self.connections):
            connection.close()
        groups, self.groups = set(self.groups), set()
        await asyncio.to_thread(end_processes, self.marker, groups)
        gone = [self.tmux_dir, self.home, self.bin] if ended else [self.tmux_dir]
        for directory in gone:
            await asyncio.to_thread(shutil.rmtree, directory, True)

    def processes(self, snapshot: Snapshot) -> set[int]:
        """Its processes in ``snapshot``, less the bookkeeping commands open now."""
        return snapshot.of(self.marker, self.groups, skip_groups=self.looking)


class _SFTP(asyncssh.SFTPServer):
    """SFTP (and scp) rooted at the instance home, counted as a session while open."""

    def __init__(self, server: InstanceServer, chan: Any, chroot: bytes) -> None:
        super().__init__(chan, chroot=chroot)
        self._server = server
        server.session(+1)

    def exit(self) -> None:
        self._server.session(-1)
        super().exit()


class _Auth(asyncssh.SSHServer):
    """asyncssh server callbacks: public keys only, for the instance's user; port 8000 only."""

    def __init__(self, server: InstanceServer) -> None:
        self.server = server
        self.connection: Any = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.connection = conn
        self.server.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self.connection)

    def begin_auth(self, username: str) -> bool:
        return True  # always ask for a key

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return self.server.accepts(username, key)

    def session_requested(self) -> bool:
        # Called only when shells are off (else the process and SFTP factories take sessions).
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                                        SHARED_SHELL_REFUSAL)

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str,
                             orig_port: int) -> Any:
        if not self.server.servers.shell:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                                            SHARED_SHELL_REFUSAL)
        if dest_host not in ("localhost", "127.0.0.1", "::1") or not 0 < dest_port < 65536:
            return False
        port = self.server.model_port if dest_port == MODEL_PORT else dest_port
        if orig_host == BOOKKEEPING_ORIGIN:  # a kernel's channel, a cluster's scheduler
            return self.connection.forward_connection("127.0.0.1", port)
        return _counted_forward(self.server, port)


async def _counted_forward(server: InstanceServer, port: int) -> asyncssh.SSHForwarder:
    """A forwarded connection to ``port`` of the host's loopback, counted as a session (use of
    the instance) until its channel closes."""
    try:
        _, peer = await asyncio.get_running_loop().create_connection(
            asyncssh.SSHForwarder, "127.0.0.1", port)
    except OSError as error:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(error)) from None
    return _CountedForwarder(peer, server)


class _CountedForwarder(asyncssh.SSHForwarder):
    def __init__(self, peer: asyncssh.SSHForwarder, server: InstanceServer) -> None:
        super().__init__(peer)
        self._server: InstanceServer | None = server
        server.session(+1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._server is not None:
            self._server.session(-1)
            self._server = None
        super().connection_lost(exc)
