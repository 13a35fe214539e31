"""The kernel's line to its provisioner: a request from a cell, answered by the Jupyter server.

A kernel on an instance holds no key and cannot reach this machine; its provisioner (in the
Jupyter server, or whatever runs ``jupyter_client``) can reach both. So the provisioner keeps one
small relay running on the instance over SSH (a bookkeeping session: it is not use), which
listens on a Unix socket (mode 0600, in a 0700 folder) and writes where that socket is next to
the kernel's connection file. A cell connects, sends one JSON request line and reads JSON lines
back (``{"progress": ...}`` lines, then one ``{"final": true, ...}``); the relay carries them
over the session's stdin and stdout. A cell interrupted while it waits closes its connection,
which the provisioner sees as the request cancelled.

    >>> ask({"op": "checkpoint", "file": path}, on_progress=print)  # doctest: +SKIP
    {'final': True, 'ok': True, 'text': 'Saved to .gpucloud/checkpoints/...'}

- :func:`ask` (in the kernel): send one request and wait for its answer.
- :class:`Relay` (in the provisioner, on the SSH layer's loop): keeps the relay running
  (started again after a dropped connection) and hands each request to its handler.

Choices (the issue leaves them open):

- **Where the socket is.** In a fresh ``gpucloud-agent-*`` folder of the instance's temporary
  directory, or of ``/tmp`` when that directory's path is too long for one (a Unix socket path
  has at most 107 bytes; an instance home or ``TMPDIR`` can be longer), named in
  ``<connection file>.agent`` (0600) next to the connection file, so a kernel finds its own
  relay from :func:`ipykernel.connect.get_connection_file` alone. The relay removes its folder
  when it ends (its input closed, SIGTERM or SIGHUP); one killed outright leaves it, with a
  ``pid`` file, and the next relay started there removes the folders whose process is gone
  (on a VM ``/tmp`` goes with the machine; on the sandbox's shared host it would pile up).
- **One answer per request.** A second request while one is running is refused by the
  provisioner's handler, not queued: a move and a checkpoint at once would race.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.idle_rule import BOOKKEEPING

if TYPE_CHECKING:
    import asyncssh

__all__ = ["NoProvisionerError", "Relay", "Reply", "agent_file", "ask", "connection_file"]

#: Run by the instance's python3: the relay (stdlib only).
_RELAY = r"""
import glob, json, os, shutil, signal, socket, sys, tempfile, threading
info = sys.argv[1]
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True
def sweep(where):  # folders of relays that were killed (their pid file names a dead process)
    for old in glob.glob(os.path.join(where, "gpucloud-agent-*")):
        try:
            with open(os.path.join(old, "pid")) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            continue
        if not alive(pid):
            shutil.rmtree(old, ignore_errors=True)
folder = tempfile.mkdtemp(prefix="gpucloud-agent-")
if len(os.path.join(folder, "s").encode()) > 100:  # a socket path has at most 107 bytes
    os.rmdir(folder)
    folder = tempfile.mkdtemp(prefix="gpucloud-agent-", dir="/tmp")
sweep(os.path.dirname(folder))
with open(os.path.join(folder, "pid"), "w") as f:
    f.write(str(os.getpid()))
def ended(*_):
    raise SystemExit(0)
signal.signal(signal.SIGTERM, ended)
signal.signal(signal.SIGHUP, ended)
path = os.path.join(folder, "s")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
os.chmod(path, 0o600)
server.listen(8)
with open(os.open(info + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    f.write(path)
os.replace(info + ".tmp", info)
out = threading.Lock()
conns = {}
def say(doc):
    with out:
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()
def serve(n, conn):
    try:
        for line in conn.makefile("rb"):
            say({"id": n, "line": line.decode("utf-8", "replace")})
    except OSError:
        pass
    say({"id": n, "closed": True})
def accept():
    n = 0
    while True:
        conn, _ = server.accept()
        n += 1
        conns[n] = conn
        threading.Thread(target=serve, args=(n, conn), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
try:
    say({"ready": path})
    for line in sys.stdin:
        doc = json.loads(line)
        conn = conns.get(doc["id"])
        if conn is None:
            continue
        try:
            conn.sendall(doc["line"].encode())
        except OSError:
            pass
finally:
    try:
        os.unlink(info)
    except OSError:
        pass
    shutil.rmtree(folder, ignore_errors=True)
"""


class NoProvisionerError(GPUCloudError):
    """This kernel was not started by the gpucloud-nb provisioner (no relay next to it)."""


def connection_file() -> str:
    """The running kernel's connection file ("" outside a kernel)."""
    try:
        from ipykernel.connect import get_connection_file

        return str(get_connection_file())
    except Exception:
        return ""


def agent_file(connection: str) -> str:
    """Where the relay of the kernel with connection file ``connection`` names its socket."""
    return connection[:-len(".json")] + ".agent" if connection.endswith(".json") else ""


def relay_path() -> str | None:
    """The running kernel's relay socket, or ``None`` when no provisioner of ours runs it."""
    info = agent_file(connection_file())
    if not info:
        return None
    try:
        with open(info) as file:
            return file.read().strip() or None
    except OSError:
        return None


def ask(request: dict[str, Any], on_progress: Callable[[str], None] = print,
        path: str | None = None) -> dict[str, Any]:
    """Send ``request`` to this kernel's provisioner; its final answer (progress lines go to
    ``on_progress``). Ctrl-C closes the connection, which cancels the request."""
    where = path or relay_path()
    if where is None:
        raise NoProvisionerError("This kernel does not run on an instance through "
                                 "gpucloud-nb's kernel provisioner.")
    with socket.socket(socket.AF_UNIX) as conn:
        try:
            conn.connect(where)
        except OSError:
            raise NoProvisionerError("This kernel's provisioner does not answer (is the Jupyter "
                                     "server that started it still running?).") from None
        conn.sendall(json.dumps(request).encode() + b"\n")
        for line in conn.makefile("rb"):
            doc: dict[str, Any] = json.loads(line)
            if doc.get("final"):
                return doc
            if "progress" in doc:
                on_progress(str(doc["progress"]))
    raise NoProvisionerError("The kernel's provisioner went away before it answered.")


class Reply:
    """How a handler answers one request: :meth:`progress` lines, then :meth:`final` once."""

    def __init__(self, send: Callable[[str], None]) -> None:
        self._send = send
        self.cancelled = asyncio.Event()
        self.done = False

    def progress(self, text: str) -> None:
        """One line for the cell to print."""
        if not self.done:
            self._send(json.dumps({"progress": text}) + "\n")

    def final(self, ok: bool, text: str, **extra: Any) -> None:
        """The answer; the cell prints ``text``."""
        if not self.done:
            self.done = True
            self._send(json.dumps({"final": True, "ok": ok, "text": text, **extra}) + "\n")


Handler = Callable[[dict[str, Any], Reply], Awaitable[None]]


class Relay:
    """The relay on the instance, kept running; each request goes to ``handler``."""

    def __init__(self, connect: Callable[[], Awaitable[asyncssh.SSHClientConnection]],
                 info: str, handler: Handler, log: Callable[[str], None]) -> None:
        self.connect = connect
        self.info = info  # relative to the instance home
        self.handler = handler
        self.log = log
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self._process: Any = None
        self._replies: dict[int, Reply] = {}
        self._handling: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start keeping the relay running (call on the SSH layer's loop)."""
        self.task = asyncio.get_running_loop().create_task(self._keep())

    async def stop(self) -> None:
        """Stop the relay (its socket and note are removed on the instance)."""
        task, self.task = self.task, None
        if self._process is not None:
            with contextlib.suppress(Exception):
                self._process.stdin.write_eof()
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5)
        others = [running for running in self._handling
                  if running is not asyncio.current_task()]  # a move stops the old relay itself
        for running in others:
            running.cancel()
        if others:  # let them end (a copy removes its partial file) before the loop may stop
            await asyncio.wait(others, timeout=5)

    async def _keep(self) -> None:
        while True:
            try:
                await self._run_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.log(f"the kernel's relay stopped ({error or type(error).__name__}); "
                         "starting it again")
            self.ready.clear()
            await asyncio.sleep(2)

    async def _run_once(self) -> None:
        connection = await self.connect()
        command = (f"python3 -u -c {shlex.quote(_RELAY)} \"$HOME\"/{shlex.quote(self.info)}")
        process = await connection.create_process(command, env={BOOKKEEPING: "1"})
        self._process = process
        try:
            async for line in process.stdout:
                doc = json.loads(line)
                if "ready" in doc:
                    self.ready.set()
                    continue
                number = int(doc["id"])
                if doc.get("closed"):
                    reply = self._replies.pop(number, None)
                    if reply is not None:
                        reply.cancelled.set()
                    continue
                self._request(number, str(doc.get("line") or ""), process)
        finally:
            self._process = None
            for reply in self._replies.values():
                reply.cancelled.set()
            self._replies.clear()
            with contextlib.suppress(Exception):
                process.close()

    def _request(self, number: int, line: str, process: Any) -> None:
        def send(text: str) -> None:
            with contextlib.suppress(Exception):
                process.stdin.write(json.dumps({"id": number, "line": text}) + "\n")

        reply = Reply(send)
        self._replies[number] = reply
        try:
            request = json.loads(line)
        except ValueError:
            reply.final(False, "The request was not JSON.")
            return

        async def handle() -> None:
            try:
                await self.handler(request, reply)
            except Exception as error:
                text = str(error) if isinstance(error, GPUCloudError) else (
                    f"{type(error).__name__}: {error}")
                if reply.done:  # after the answer: only the log can tell
                    self.log(f"after answering the kernel: {text}")
                reply.final(False, text)
            finally:
                reply.final(False, "The provisioner gave no answer.")  # no-op once answered

        task = asyncio.get_running_loop().create_task(handle())
        self._handling.add(task)
        task.add_done_callback(self._handling.discard)

