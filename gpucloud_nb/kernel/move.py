"""The provisioner's side of checkpoint, restore and move: bytes carried, a kernel swapped.

:class:`Movable` is a mixin of :class:`~gpucloud_nb.kernel.provisioner.GPUCloudProvisioner`.
It keeps the kernel's relay (:mod:`~gpucloud_nb.kernel.agent`) running and answers what a cell
asks through it (:mod:`~gpucloud_nb.kernel.session` asks):

- ``checkpoint`` and ``fetch``: a namespace file copied here or back
  (:class:`~gpucloud_nb.kernel.carry.Carrier`, a base of :class:`Movable`).
- ``move``: the target instance is found, or launched from the cheapest offer that fits the
  filters (:mod:`~gpucloud_nb.kernel.move_target`); a second provisioner (a
  *sibling*, sharing this one's client and SSH loop) starts a kernel there with the same
  session key and copies the notebook's folder; the namespace file goes from the old instance
  to the new one through this machine, streamed in 4 MiB pieces from one SFTP session into the
  other (never to disk here; :func:`~gpucloud_nb.kernel.carry.stream_between`); the
  sibling's kernel restores it (all names, or the move stops); only then does the cell get its
  answer. Once the old kernel has finished that cell (its
  ``idle`` seen on IOPub), this provisioner *adopts* the sibling's kernel: its five local
  sockets now lead to the new kernel's ports (open connections are closed, and ZeroMQ
  reconnects by itself), so JupyterLab, nbclient or a plain ``KernelManager`` keep the same
  kernel, name and connection info. The old kernel is stopped, the old instance deleted
  (unless ``keep``), and the kernelspec of the same name now names the new instance.

Choices (the issue leaves them open):

- **Failures.** Until the cell is answered with success, nothing of the old session changes: a
  refused launch, a cut copy, a restore that fails, or the cell interrupted (its connection to
  the relay closes) stops the sibling's kernel, deletes an instance launched for the move (or
  names it when that delete fails) and answers in one sentence that the kernel still runs where
  it was, with its variables.
- **Cells sent during the swap.** A cell that reaches the old kernel after the move has
  answered (Run All queues the following cells behind the move) never runs there: it fails
  with one sentence (run it again, and it runs on the new kernel), and ipykernel aborts the
  cells queued behind it, as after an error. A cell sent after the swap (under a second
  later) runs on the new kernel.
- **A lost instance.** Starting (or restarting) a kernel whose instance is gone names the
  newest checkpoint of its notebook's folder and ``%gpucloud restore``
  (:func:`~gpucloud_nb.kernel.lost.checkpoint_hint`).
- **Name of a launched instance.** ``<old name>-<gpu model>`` plus four random letters
  (:mod:`~gpucloud_nb.kernel.move_target`).
- **One request at a time** per kernel: a second one while a move runs is refused.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import contextlib
import shlex
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from gpucloud_nb.kernel.agent import Relay, Reply
from gpucloud_nb.kernel.carry import CHUNK, RUNTIME, Carrier, MoveFailed, stream_between
from gpucloud_nb.kernel.lost import checkpoint_hint, lost_sentence
from gpucloud_nb.kernel.move_target import delete_quietly, find_or_launch
from gpucloud_nb.kernel.move_target import label as _label
from gpucloud_nb.kernel.session import human

if TYPE_CHECKING:

    from jupyter_client.connect import KernelConnectionInfo

    from gpucloud_nb.client.management import GPUCloud
    from gpucloud_nb.client.remote import Remote
    from gpucloud_nb.kernel.forwards import Forwards
    from gpucloud_nb.models import InstanceDetails

# CHUNK, MoveFailed, stream_between, checkpoint_hint and lost_sentence were defined here.
__all__ = ["CHUNK", "Handover", "Movable", "MoveFailed", "checkpoint_hint", "lost_sentence",
           "stream_between"]

_RESTORE_SECONDS = 600.0
_IDLE_SECONDS = 30.0


@dataclass
class Handover:
    """What a sibling provisioner hands to the one that adopts its kernel."""

    details: InstanceDetails
    pid: int
    file: str
    ports: list[int]
    forwards: Forwards
    relay: Relay | None


class Movable(Carrier):
    """Checkpoint, restore and move for a provisioner (see the module docstring)."""

    # The provisioner's own state, used here.
    _client: GPUCloud | None
    _remote: Remote | None
    _details: InstanceDetails | None
    _forwards: Forwards | None
    _pid: int | None
    _file: str
    _cwd: str | None
    _exit: int | None
    _gone: bool
    _asked: concurrent.futures.Future[str] | None
    _unreachable_since: float | None
    instance_id: str
    instance_name: str
    cloud: str
    on_shutdown: str
    account: str
    kernel_spec: Any
    kernel_id: str
    parent: Any
    connection_info: KernelConnectionInfo
    log: Any

    _relay: Relay | None = None
    _moving = False
    _busy = False
    _shares_client = False

    if TYPE_CHECKING:  # the provisioner's own methods
        def _say(self, line: str) -> None: ...
        def _label(self) -> str: ...
        async def ssh_connection(self) -> Any: ...
        async def kill(self, restart: bool = False) -> None: ...
        async def _close(self, delete: bool) -> None: ...

    # -- the relay ---------------------------------------------------------------------------

    async def start_relay(self) -> None:
        """Start the kernel's relay (on the SSH layer's loop)."""
        await self.stop_relay()
        relay = Relay(self.ssh_connection, self._file[:-len(".json")] + ".agent",
                      self.on_request, self._say)
        relay.start()
        self._relay = relay

    async def stop_relay(self) -> None:
        """Stop the kernel's relay (on the SSH layer's loop)."""
        relay, self._relay = self._relay, None
        if relay is not None:
            await relay.stop()

    async def on_request(self, request: dict[str, Any], reply: Reply) -> None:
        """Answer one request of the kernel (runs on the SSH layer's loop)."""
        if self._busy:
            reply.final(False, "Another checkpoint, restore or move of this kernel is under "
                               "way; wait for it to finish.")
            return
        self._busy = True
        try:
            op = request.get("op")
            if op == "checkpoint":
                await self._checkpoint(request, reply)
            elif op == "fetch":
                await self._fetch(request, reply)
            elif op == "move":
                await self._move(request, reply)
            else:
                reply.final(False, f"Unknown request {op!r}.")
        finally:
            self._busy = False

    # -- helpers -----------------------------------------------------------------------------

    def share(self, client: GPUCloud, cwd: str | None) -> None:
        """Use ``client`` (another provisioner's, never closed here) and the notebook folder."""
        self._client, self._cwd, self._shares_client = client, cwd, True

    def handover(self) -> Handover:
        """This (sibling) provisioner's kernel, for :meth:`adopt`; it no longer owns it."""
        assert self._details is not None and self._pid is not None
        assert self._forwards is not None
        handed = Handover(self._details, self._pid, self._file, list(self._forwards.targets),
                          self._forwards, self._relay)
        self._pid, self._forwards, self._relay, self._file = None, None, None, ""
        return handed

    # -- move --------------------------------------------------------------------------------

    async def _move(self, request: dict[str, Any], reply: Reply) -> None:
        client, remote, old = self._reach_now()
        old_label = self._label()
        started = time.monotonic()
        launched: InstanceDetails | None = None
        sibling: Any = None
        watcher = await self._watch_iopub()
        timings: list[str] = []
        try:
            target, launched = await find_or_launch(
                client, request, reply, self.instance_id, self.instance_name, self._cancellable)
            timings.append(f"instance {time.monotonic() - started:.0f} s")
            step = time.monotonic()
            reply.progress(f"Starting a kernel on {_label(target)}…")
            sibling = cast(Any, type(self))(kernel_spec=self.kernel_spec, kernel_id=self.kernel_id,
                                 parent=self.parent, instance_id=target.id,
                                 instance_name=target.name, cloud=self.cloud,
                                 on_shutdown=self.on_shutdown, account=self.account)
            sibling.share(client, self._cwd)
            await self._cancellable(reply, sibling.launch_kernel(list(self.kernel_spec.argv)))
            timings.append(f"kernel {time.monotonic() - step:.0f} s")
            step = time.monotonic()
            destination = f"{RUNTIME}/gpucloud-move-{uuid.uuid4().hex}.gpucloud"
            if request.get("file"):
                await self._carry(remote, old, target, str(request["file"]),
                                  destination, int(request.get("size") or 0), reply)
            else:
                found = self._find_checkpoint(str(request.get("checkpoint") or ""))
                reply.progress(f"Copying checkpoint {found.name} ({human(found.stat().st_size)})"
                               f" to {_label(target)}…")
                seen = self._progress(reply, "copied", found.stat().st_size)
                await self._cancellable(reply, remote.upload_async(
                    target, found, destination, lambda done, total: seen(done)))
            timings.append(f"copy {time.monotonic() - step:.1f} s")
            step = time.monotonic()
            report = await self._cancellable(reply, sibling.restore_here(
                destination, list(request.get("extensions") or [])))
            failed = report.get("failed") or {}
            if failed:
                name, why = next(iter(failed.items()))
                raise MoveFailed(f"{name} could not be restored on {_label(target)} ({why})")
            timings.append(f"restore {time.monotonic() - step:.1f} s")
            if reply.cancelled.is_set():
                raise MoveFailed("the cell was interrupted")
        except BaseException as error:
            with contextlib.suppress(Exception):
                watcher.stop_channels()
            reason = _reason(error)
            left = await self._undo(client, sibling, launched)
            reply.final(False, f"The move did not happen ({reason}): this kernel still runs on "
                               f"{old_label} with its variables{left}.")
            if not isinstance(error, Exception):
                raise
            return
        fate = "kept (--keep)" if request.get("keep") else "deleted"
        reply.final(True, f"Moved to {_label(target)} in {time.monotonic() - started:.0f} s "
                          f"({', '.join(timings)}): {len(report.get('names') or [])} names "
                          f"restored; the next cell runs there. Instance {old_label} is {fate}.",
                    where=_label(target))
        await self._wait_idle(watcher, str(request.get("msg_id") or ""))
        old_pid, old_file = self._pid, self._file
        await self.adopt(sibling.handover())
        await self._retire(client, remote, old, old_pid, old_file, bool(request.get("keep")))

    async def _cancellable(self, reply: Reply, awaitable: Any) -> Any:
        """``awaitable``, stopped (as :class:`MoveFailed`) when the cell is interrupted."""
        task = asyncio.ensure_future(awaitable)
        cancelled = asyncio.ensure_future(reply.cancelled.wait())
        try:
            done, _ = await asyncio.wait({task, cancelled}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise MoveFailed("the cell was interrupted")
        finally:
            cancelled.cancel()

    async def _carry(self, remote: Remote, old: InstanceDetails, new: InstanceDetails,
                     source: str, destination: str, size: int, reply: Reply) -> None:
        """Stream ``source`` on ``old`` into ``destination`` on ``new`` through this machine."""
        reply.progress(f"Copying {human(size)} from {_label(old)} to {_label(new)} through "
                       "this machine…")
        seen = self._progress(reply, "copied", size)

        def stop() -> None:
            if reply.cancelled.is_set():
                raise MoveFailed("the cell was interrupted during the copy")

        await self._cancellable(reply, stream_between(remote, old, source, new, destination,
                                                      seen, stop))

    async def restore_here(self, path: str, extensions: list[str]) -> dict[str, Any]:
        """Restore the namespace file ``path`` (relative to the instance home) in this
        provisioner's kernel, all names or none; the kernel's report."""
        from jupyter_client.asynchronous import AsyncKernelClient

        code = ("import os as _gc_os\n"
                "from gpucloud_nb.kernel.session import restore_file as _gc_restore\n"
                f"_gpucloud_moved = _gc_restore(_gc_os.path.join(_gc_os.path.expanduser('~'), "
                f"{path!r}), strict=True, remove=True)\n"
                "if not _gpucloud_moved['failed']:\n"
                f"    for _gc_name in {extensions!r}:\n"
                "        try:\n"
                "            get_ipython().extension_manager.load_extension(_gc_name)\n"
                "        except Exception:\n"
                "            pass\n"
                "del _gc_os, _gc_restore\n")
        client = AsyncKernelClient()
        client.load_connection_info(self.connection_info)
        client.start_channels(hb=False)
        try:
            await client.wait_for_ready(timeout=120)
            msg_id = client.execute(code, silent=True, store_history=False,
                                    user_expressions={"report": "_gpucloud_moved"})
            deadline = time.monotonic() + _RESTORE_SECONDS
            while True:
                answer = await client.get_shell_msg(timeout=max(deadline - time.monotonic(), 1))
                if answer["parent_header"].get("msg_id") == msg_id:
                    break
        finally:
            client.stop_channels()
        content = answer["content"]
        if content.get("status") != "ok":
            raise MoveFailed(f"the restore raised {content.get('ename')}: "
                             f"{str(content.get('evalue'))[:160]}")
        expression = content["user_expressions"]["report"]
        if expression.get("status") != "ok":
            raise MoveFailed("the restore gave no report")
        report: dict[str, Any] = ast.literal_eval(expression["data"]["text/plain"])
        return report

    async def _watch_iopub(self) -> Any:
        """A subscriber to this kernel's IOPub, started now (so it hears the cell finish)."""
        from jupyter_client.asynchronous import AsyncKernelClient

        client = AsyncKernelClient()
        client.load_connection_info(self.connection_info)
        client.start_channels(shell=False, stdin=False, hb=False, control=False)
        return client

    async def _wait_idle(self, watcher: Any, msg_id: str) -> None:
        """Wait until the old kernel is idle after the cell ``msg_id`` (its reply is sent)."""
        deadline = time.monotonic() + _IDLE_SECONDS
        try:
            while msg_id and time.monotonic() < deadline:
                try:
                    message = await watcher.get_iopub_msg(timeout=1)
                except Exception:
                    continue
                if (message["msg_type"] == "status"
                        and message["content"].get("execution_state") == "idle"
                        and message["parent_header"].get("msg_id") == msg_id):
                    break
            await asyncio.sleep(0.2)  # the reply, sent just before, crosses its own channel
        finally:
            watcher.stop_channels()

    async def adopt(self, handed: Handover) -> None:
        """Take over a sibling's kernel: this provisioner's sockets now lead to it."""
        assert self._forwards is not None
        self._moving = True
        try:
            self._details, self._pid, self._file = handed.details, handed.pid, handed.file
            self.instance_id, self.instance_name = handed.details.id, handed.details.name
            self._exit, self._gone = None, False
            self._asked, self._unreachable_since = None, None  # those were the old instance's
            await handed.forwards.close()
            self._forwards.point(handed.ports)
            self._forwards.down_until = 0.0
            self._forwards.cut()  # ZeroMQ reconnects, to the new kernel
            await self.stop_relay()
            if handed.relay is not None:
                handed.relay.handler = self.on_request
                handed.relay.connect = self.ssh_connection
                self._relay = handed.relay
        finally:
            self._moving = False
        self._say(f"The kernel now runs on instance {self._label()} (pid {self._pid}).")

    async def _retire(self, client: GPUCloud, remote: Remote, old: InstanceDetails,
                      pid: int | None, file: str, keep: bool) -> None:
        """Stop the old kernel, remove its files, delete its instance unless ``keep``; rename
        the kernelspec of this kernel's name to the new instance."""
        stem = file[:-len(".json")]
        command = (f"kill -9 {int(pid or 0)} 2>/dev/null; rm -f \"$HOME\"/{shlex.quote(file)} "
                   f"\"$HOME\"/{shlex.quote(stem + '.log')}")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(remote.run_async(old, command, timeout=10, bookkeeping=True),
                                   15)
        if not keep:
            await asyncio.to_thread(delete_quietly, client, old.id)
        name = str(getattr(self.parent, "kernel_name", "") or "")
        if name and self._details is not None:
            from gpucloud_nb.kernel.spec import install

            with contextlib.suppress(Exception):
                await asyncio.to_thread(install, self._details, cloud_kind=self.cloud,
                                        account=self.account, on_shutdown=self.on_shutdown,
                                        name=name)

    async def _undo(self, client: GPUCloud, sibling: Any,
                    launched: InstanceDetails | None) -> str:
        """Stop what a failed move started; "" or the words naming what is still billing."""
        if sibling is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(sibling.abandon(), 30)
        if launched is None:
            return ""
        if await asyncio.to_thread(delete_quietly, client, launched.id):
            return f"; instance {_label(launched)}, launched for the move, is deleted"
        return (f"; instance {_label(launched)}, launched for the move, could not be deleted and "
                f"is billing: delete it with %gpucloud delete {launched.name or launched.id}")

    async def abandon(self) -> None:
        """Stop this (sibling) provisioner's kernel and close its sockets; keep the instance."""
        if self._pid is not None:
            await self.kill()
        await self.cleanup_quietly()

    async def cleanup_quietly(self) -> None:
        """Close this provisioner's sockets and relay (the shared client stays open)."""
        await self._close(delete=False)
        self._pid = None


def _reason(error: BaseException) -> str:
    if isinstance(error, (KeyboardInterrupt, asyncio.CancelledError)):
        return "interrupted"
    text = str(error).rstrip(".") or type(error).__name__
    return text[:1].lower() + text[1:] if isinstance(error, MoveFailed) else text
