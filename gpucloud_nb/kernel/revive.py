"""Bring a lost kernel back: an instance like the lost one, the newest checkpoint restored there.

When the instance under a kernel is lost, a stand-in answers for the kernel
(:mod:`gpucloud_nb.kernel.standin`), and the notebook still holds its connection. :func:`revive`
is what the sidebar's Restore button runs (:mod:`gpucloud_nb.lab.restore`); it does what
``%gpucloud restore CHECKPOINT --gpu MODEL`` does in a kernel on another instance, for the lost
kernel itself: launch an instance like the lost one (the cheapest available offer with its GPU
model, through the provisioner's client, so the cost cap and budget apply), start a kernel there
with the same session key, copy the checkpoint to it and restore every name, and only then swap:
the stand-in stops, the kernel's local sockets listen again and lead to the new kernel (ZeroMQ
reconnects by itself), and the kernelspec of the same name names the new instance.

    >>> text = await revive(provisioner, say=print)  # doctest: +SKIP
    Restored checkpoint 20261128T1502…-box onto box-l4-24gb-qxzv in 41 s: 3 names ...

Choices (the issue leaves them open):

- **Which checkpoint, which instance.** The newest checkpoint of the notebook's folder (or the
  one named), onto a new instance with the lost one's GPU model; a lost instance that still
  exists (unreachable) is kept, and the answer names it as billing.
- **Nothing lost on failure.** Until every name is restored in the new kernel nothing of the
  notebook's kernel changes: a refused launch, a cut copy or a failed restore stops the new
  kernel, deletes the instance launched for it (or names it when that delete fails), keeps the
  checkpoint, and the stand-in goes on answering; the error is one sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.kernel.agent import Reply
from gpucloud_nb.kernel.move import Movable
from gpucloud_nb.kernel.move_target import find_or_launch
from gpucloud_nb.kernel.session import human

__all__ = ["RestoreFailed", "Revivable", "is_lost", "newest_checkpoint", "revive"]

_RUNTIME = ".local/share/jupyter/runtime"


class RestoreFailed(GPUCloudError):
    """Why a restore of a lost kernel did not happen (one sentence)."""


def is_lost(provisioner: Any) -> bool:
    """True when ``provisioner`` is gpucloud-nb's and a stand-in answers for its lost kernel."""
    return bool(getattr(provisioner, "lost", "")) and bool(getattr(provisioner, "standing_in",
                                                                   False))


def newest_checkpoint(provisioner: Any) -> str:
    """The name of the newest checkpoint in the kernel's notebook folder, or ""."""
    from gpucloud_nb.kernel.session import CHECKPOINTS, checkpoints

    found = checkpoints(provisioner.notebook_folder / CHECKPOINTS)
    return found[-1].name if found else ""


def _label(details: Any) -> str:
    return f"{details.name} ({details.id})" if details.name else str(details.id)


async def revive(provisioner: Any, checkpoint: str = "",
                 say: Callable[[str], None] = lambda line: None) -> str:
    """Restore ``checkpoint`` (default: the newest) of the lost kernel of ``provisioner`` onto a
    new instance like the lost one, and swap it in; the sentence saying what happened.

    Runs on any event loop (the work runs on the SSH layer's). Raises
    :class:`~gpucloud_nb.errors.InvalidInputError` when the kernel is not lost or there is no
    checkpoint, :class:`RestoreFailed` when the restore did not happen (nothing changed).
    """
    if not is_lost(provisioner):
        raise InvalidInputError("This kernel is not lost: its instance answers, so there is "
                                "nothing to restore.")
    return str(await provisioner.revive(checkpoint, say))


class Revivable(Movable):
    """:func:`revive` for a provisioner: a mixin of
    :class:`~gpucloud_nb.kernel.provisioner.GPUCloudProvisioner` (after checkpoint, restore and
    move, :class:`~gpucloud_nb.kernel.move.Movable`)."""

    # The provisioner's own state, used here.
    lost: str
    _standin: Any
    _executing: Any
    _watching: Any
    _unreachable_since: float | None

    if TYPE_CHECKING:  # the provisioner's own methods
        async def _stop_standin(self) -> None: ...
        async def _watch(self) -> None: ...
        def _in_use(self) -> contextlib.AbstractContextManager[object]: ...

    @property
    def standing_in(self) -> bool:
        """True once a stand-in answers for this provisioner's lost kernel: not as soon as the
        loss is known, while the old forwards still take (and lose) what a cell sends."""
        standin = getattr(self, "_standin", None)
        return standin is not None and bool(standin.serving)

    def label(self) -> str:
        """The kernel's instance, as messages name it: ``name (id)``."""
        return self._label()

    async def revive(self, checkpoint: str = "",
                     say: Callable[[str], None] = lambda line: None) -> str:
        """See :func:`revive`."""
        remote = self._remote
        if remote is None or self._client is None or self._details is None:
            raise InvalidInputError("This kernel never reached its instance; start it again.")
        if self._busy:
            raise InvalidInputError("A restore of this kernel is already under way.")
        self._busy = True  # one request at a time, as the relay's (kernel/move.py)
        try:
            return str(await asyncio.wrap_future(remote.submit(self._revive(checkpoint, say))))
        finally:
            self._busy = False

    async def _revive(self, checkpoint: str, say: Callable[[str], None]) -> str:
        """:func:`revive` on the SSH layer's loop."""
        from gpucloud_nb.kernel.busy import BusyWatch
        from gpucloud_nb.kernel.move import MoveFailed, _reason

        client, remote, old = self._reach_now()
        found = self._find_checkpoint(checkpoint)  # InvalidInputError: no such checkpoint
        started = time.monotonic()

        def send(line: str) -> None:
            with contextlib.suppress(ValueError):
                said = json.loads(line)
                if "progress" in said:
                    say(str(said["progress"]).strip())

        reply = Reply(send)
        launched = sibling = None
        try:
            target, launched = await find_or_launch(
                client, {"gpu": old.gpu_model or None}, reply, self.instance_id,
                self.instance_name, self._cancellable)
            say(f"Starting a kernel on {_label(target)}…")
            sibling = cast(Any, type(self))(
                kernel_spec=self.kernel_spec, kernel_id=self.kernel_id, parent=self.parent,
                instance_id=target.id, instance_name=target.name, cloud=self.cloud,
                              on_shutdown=self.on_shutdown, account=self.account)
            sibling.share(client, self._cwd)
            await sibling.launch_kernel(list(self.kernel_spec.argv))
            size = found.stat().st_size
            say(f"Copying checkpoint {found.name} ({human(size)}) to {_label(target)}…")
            destination = f"{_RUNTIME}/gpucloud-restore-{uuid.uuid4().hex}.gpucloud"
            await remote.upload_async(target, found, destination)
            say(f"Restoring the variables on {_label(target)}…")
            report = await sibling.restore_here(destination, [])
            failed = report.get("failed") or {}
            if failed:
                name, why = next(iter(failed.items()))
                raise MoveFailed(f"{name} could not be restored on {_label(target)} ({why})")
        except BaseException as error:
            left = await self._undo(client, sibling, launched)
            if not isinstance(error, Exception):
                raise
            raise RestoreFailed(f"The restore did not happen ({_reason(error)}): the kernel is still "
                                f"lost and checkpoint {found.name} is kept{left}.") from None
        await self._stop_standin()  # the notebook's sockets lead to the new kernel from now on
        assert self._forwards is not None
        await self._forwards.listen()
        await self.adopt(sibling.handover())
        self.lost, self._unreachable_since = "", None
        self._executing = BusyWatch(dict(self.connection_info), self._in_use)
        self._watching = remote.submit(self._watch())
        name = str(getattr(self.parent, "kernel_name", "") or "")
        if name:
            from gpucloud_nb.kernel.spec import install

            with contextlib.suppress(Exception):
                await asyncio.to_thread(install, self._details, cloud_kind=self.cloud, account=self.account,
                                        on_shutdown=self.on_shutdown, name=name)
        kept = ""
        with contextlib.suppress(Exception):
            status = (await asyncio.to_thread(client.instances.get, old.id)).status
            if status not in ("deleting", "deleted"):
                kept = (f" Instance {_label(old)} is {status} and still bills: delete it with "
                        f"%gpucloud delete {old.name or old.id}.")
        return (f"Restored checkpoint {found.name} onto {_label(self._details)} in "
                f"{time.monotonic() - started:.0f} s: {_names(len(report.get('names') or []))}; "
                f"the next cell runs there.{kept}")


def _names(count: int) -> str:
    return "1 name" if count == 1 else f"{count} names"
