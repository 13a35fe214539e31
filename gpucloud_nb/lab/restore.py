"""Lost kernels of this Jupyter server, and the sidebar's Restore button behind them.

A kernel whose instance is lost is answered for by a stand-in (:mod:`gpucloud_nb.kernel.standin`);
these routes list such kernels of this server and restore one
(:func:`gpucloud_nb.kernel.revive.revive`: the newest checkpoint onto a new instance like the
lost one, swapped in under the same notebook):

=========================================  ==================================================
``GET /gpucloud/kernels/lost``             ``{"kernels": [row, ...]}``, one row per lost kernel
``POST /gpucloud/kernels/ID/restore``      start restoring kernel ID (202; 404 or 400 with one
                                           sentence)
=========================================  ==================================================

A row is ``{"kernelId", "notebook", "instance", "sentence", "checkpoint", "state",
"progress", "message"}``: ``state`` is ``lost``, ``restoring`` (``progress`` its last line),
``failed`` (``message`` the one sentence; the kernel is still lost and can be restored again)
or ``restored`` (``message`` what happened; shown for :data:`SHOWN_SECONDS`). Reading the rows
asks the cloud nothing: they come from the kernels' provisioners.

    $ curl -H "Authorization: token $TOKEN" http://127.0.0.1:8888/gpucloud/kernels/lost
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler

from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.kernel.revive import is_lost, newest_checkpoint, revive

__all__ = ["Restores", "handlers"]

#: How long a finished restore stays in the list.
SHOWN_SECONDS = 120.0


@dataclass
class _Restore:
    state: str  # restoring, failed or restored
    instance: str
    sentence: str
    checkpoint: str
    progress: str = ""
    message: str = ""
    ended: float = 0.0


class Restores:
    """The lost kernels of ``kernels()`` (a Jupyter kernel manager) and their restores."""

    def __init__(self, kernels: Callable[[], Any], sessions: Callable[[], Any]) -> None:
        self._kernels = kernels
        self._sessions = sessions
        self._restores: dict[str, _Restore] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _provisioner(self, kernel_id: str) -> Any:
        manager = self._kernels()
        if manager is None or kernel_id not in manager:
            return None
        return getattr(manager.get_kernel(kernel_id), "provisioner", None)

    async def _notebooks(self) -> dict[str, str]:
        """Kernel id → the notebook's path, for the sessions of this server."""
        found: dict[str, str] = {}
        with contextlib.suppress(Exception):
            for session in await self._sessions().list_sessions():
                kernel = (session.get("kernel") or {}).get("id")
                if kernel:
                    found[str(kernel)] = str(session.get("path") or "")
        return found

    async def rows(self) -> list[dict[str, Any]]:
        """One row per lost kernel, restoring or just restored (see the module)."""
        manager = self._kernels()
        notebooks = await self._notebooks()
        rows: list[dict[str, Any]] = []
        now = time.monotonic()
        ids = list(manager.list_kernel_ids()) if manager is not None else []
        for kernel_id in ids + [k for k in self._restores if k not in ids]:
            restore = self._restores.get(kernel_id)
            provisioner = self._provisioner(kernel_id)
            if restore is not None and restore.state != "restoring" and (
                    now - restore.ended > SHOWN_SECONDS or kernel_id not in ids):
                del self._restores[kernel_id]  # shown long enough, or the kernel is gone
                restore = None
            lost = provisioner is not None and is_lost(provisioner)
            if restore is None and not lost:
                continue
            row = {"kernelId": kernel_id, "notebook": notebooks.get(kernel_id, ""),
                   "instance": "", "sentence": "", "checkpoint": "", "state": "lost",
                   "progress": "", "message": ""}
            if lost:
                row.update(instance=provisioner.label(), sentence=str(provisioner.lost),
                           checkpoint=newest_checkpoint(provisioner))
            if restore is not None:
                row.update(state=restore.state, progress=restore.progress,
                           message=restore.message)
                if not lost:
                    row.update(instance=restore.instance, sentence=restore.sentence,
                               checkpoint=restore.checkpoint)
            rows.append(row)
        return rows

    def start(self, kernel_id: str) -> None:
        """Start restoring the lost kernel ``kernel_id``; raises ``LookupError`` (unknown)
        or ``ValueError`` (not lost, no checkpoint, already restoring) with one sentence."""
        provisioner = self._provisioner(kernel_id)
        if provisioner is None:
            raise LookupError(f"There is no kernel {kernel_id} on this server.")
        if not is_lost(provisioner):
            raise ValueError("This kernel is not lost: its instance answers, so there is "
                             "nothing to restore.")
        current = self._restores.get(kernel_id)
        if current is not None and current.state == "restoring":
            raise ValueError("A restore of this kernel is already under way.")
        checkpoint = newest_checkpoint(provisioner)
        if not checkpoint:
            raise ValueError("There is no checkpoint of this kernel's variables in its "
                             "notebook's folder, so there is nothing to restore.")
        restore = _Restore("restoring", provisioner.label(), str(provisioner.lost), checkpoint,
                           progress=f"Restoring checkpoint {checkpoint}…")
        self._restores[kernel_id] = restore

        def say(line: str) -> None:
            restore.progress = line

        async def run() -> None:
            try:
                restore.message = await revive(provisioner, say=say)
                restore.state = "restored"
            except GPUCloudError as error:
                restore.message, restore.state = str(error), "failed"
            except Exception as error:  # one sentence, never a traceback in the sidebar
                restore.message = f"The restore did not happen ({error or type(error).__name__})."
                restore.state = "failed"
            finally:
                restore.ended = time.monotonic()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _Handler(APIHandler):
    def initialize(self, restores: Restores) -> None:
        self.restores = restores

    def _answer(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))


class LostHandler(_Handler):
    @tornado.web.authenticated
    async def get(self) -> None:
        self._answer({"kernels": await self.restores.rows()})


class RestoreHandler(_Handler):
    @tornado.web.authenticated
    def post(self, kernel_id: str) -> None:
        try:
            self.restores.start(kernel_id)
        except LookupError as error:
            self._answer({"message": str(error.args[0])}, 404)
        except ValueError as error:
            self._answer({"message": str(error)}, 400)
        else:
            self._answer({"state": "restoring"}, 202)


def handlers(restores: Restores) -> list[tuple[str, type[APIHandler], dict[str, Any]]]:
    """The routes, relative to the server's base URL, bound to ``restores``."""
    bound = {"restores": restores}
    return [
        ("/gpucloud/kernels/lost", LostHandler, bound),
        ("/gpucloud/kernels/(?P<kernel_id>[^/?#]+)/restore", RestoreHandler, bound),
    ]
