"""GPU use in view, busy kernels reported as use, and automatic deletes confirmed, for the poller.

    >>> use = GpuUse()
    >>> use.peak("i-1", since=0) is None  # nothing measured yet
    True

Three jobs of the JupyterLab server extension's poller (:mod:`gpucloud_nb.lab.poller`), each run
once per list:

- **GPU use** (:class:`GpuUse`): one ``nvidia-smi --query-gpu=utilization.gpu,memory.used
  --format=csv,noheader,nounits`` (:data:`gpucloud_nb.client.idle.QUERY`) per active instance
  per poll, over the client's cached SSH connection (``instances.run``), all instances at once;
  the last 10 minutes are kept for the sidebar's sparkline. An instance that cannot be reached
  keeps its last values and says nothing: the sidebar shows its use as unknown after two polls.
- **Busy kernels reported** (:func:`busy_instance_ids`): a kernel of this server on an instance
  (its kernelspec is ``gpucloud-…`` and names the instance) that is executing code is use; the
  poller tells whoever keeps the idle clocks, at each poll
  (:meth:`~gpucloud_nb.client.idle.ServiceIdleDelete.report_use`: a gateway's
  ``POST /gateway/instances/{id}/use``, or the sandbox service's Keep). An idle kernel is not
  use and is not reported. The clocks themselves, and the deletes, are the gateway's (or the
  sandbox service's); nothing here deletes for idleness.
- **Deletes confirmed** (:class:`Confirmations`): every automatic delete the poller knows of (a
  timer's deadline passed, an idle delete due or sent) is expected to show as ``deleting`` or
  ``deleted``; one that does not within ``CONFIRM`` seconds (60) becomes one sentence in the
  snapshot, which turns the sidebar, the status bar and the panel red.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from gpucloud_nb.client.idle import QUERY, IdleState, parse_use

__all__ = ["CONFIRM", "HISTORY", "Confirmations", "GpuUse", "busy_instance_ids", "idle_row"]

HISTORY = 600.0
CONFIRM = 60.0


class GpuUse:
    """The GPU use of each active instance over the last :data:`HISTORY` seconds."""

    def __init__(self) -> None:
        self.history: dict[str, collections.deque[tuple[float, float, float, float]]] = {}
        self.running: set[asyncio.Future[None]] = set()

    async def measure(self, cloud: Any, instance_ids: Iterable[str], timeout: float) -> None:
        """Ask each instance once, all at once, for at most ``timeout`` seconds; forget
        instances no longer active. A command still running then finishes on its own (its own
        ``timeout`` ends it) and is never cancelled: cancelling an SSH command mid-way can
        leave its channel waiting."""
        ids = list(instance_ids)
        for gone in [i for i in self.history if i not in ids]:
            del self.history[gone]
        tasks = {asyncio.ensure_future(self._one(cloud, i, timeout)) for i in ids}
        self.running |= tasks
        for task in tasks:
            task.add_done_callback(self.running.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def _one(self, cloud: Any, instance_id: str, timeout: float) -> None:
        try:
            result = await cloud.instances.run(instance_id, QUERY, timeout=timeout, wait=0,
                                               bookkeeping=True)
        except Exception:  # unreachable, no key it accepts, gone: no measure this time
            return
        use = parse_use(result.stdout) if result.exit_status == 0 else None
        if use is not None:
            now = time.time()
            kept = self.history.setdefault(instance_id, collections.deque())
            kept.append((now, *use))
            while kept and kept[0][0] < now - HISTORY:
                kept.popleft()

    async def close(self, timeout: float) -> None:
        """Let the commands still running end (at most ``timeout`` seconds)."""
        if self.running:
            await asyncio.wait(set(self.running), timeout=timeout)

    def peak(self, instance_id: str, since: float) -> float | None:
        """The highest utilisation measured since ``since`` (Unix time), or ``None``."""
        found = [peak for at, _, peak, _ in self.history.get(instance_id, ()) if at >= since]
        return max(found) if found else None

    def row(self, instance_id: str, stale_after: float) -> dict[str, Any] | None:
        """The snapshot's ``gpu`` field: last utilisation and memory, and the sparkline's points."""
        kept = self.history.get(instance_id)
        if not kept:
            return None
        at, util, _, memory = kept[-1]
        return {"util": util, "memoryMiB": memory, "measuredAt": round(at, 3),
                "stale": time.time() - at > stale_after,
                "history": [[round(t, 1), u] for t, u, _, _ in kept]}


def _iso(value: float) -> str:
    return datetime.fromtimestamp(value, timezone.utc).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def idle_row(state: IdleState, by: str) -> dict[str, Any]:
    """The snapshot's ``idle`` field for one instance."""
    return {"limitSeconds": state.limit, "idleSeconds": round(state.idle, 1),
            "deleteAt": state.delete_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
            "deletesIn": round(state.deletes_in, 1), "warning": state.warning,
            "halfway": state.idle >= state.limit / 2, "by": by}


class Confirmations:
    """Automatic deletes expected to show, and the sentence for each that did not in time."""

    def __init__(self, confirm: float = CONFIRM) -> None:
        self.confirm = confirm
        self.expected: dict[str, tuple[float, str]] = {}

    def expect(self, instance_id: str, due: float, why: str) -> None:
        """An automatic delete of ``instance_id`` (``why``) is due at ``due`` (Unix time)."""
        self.expected[instance_id] = (due, why)

    def track(self, deadlines: dict[str, tuple[float, str]]) -> None:
        """This poll's known deadlines: kept while listed; one gone before it fell due was
        cancelled (a Keep, a cancelled timer); one past stays expected."""
        now = time.time()
        for instance_id, (due, why) in deadlines.items():
            self.expected[instance_id] = (due, why)
        for instance_id in [i for i, (due, _) in self.expected.items()
                            if i not in deadlines and due > now]:
            del self.expected[instance_id]

    def problems(self, statuses: dict[str, tuple[str, str]]) -> dict[str, str]:
        """Instance id → the sentence for each expected delete not seen within ``confirm``.

        ``statuses`` maps each listed instance to ``(name, status)``.
        """
        now = time.time()
        found = {}
        for instance_id, (due, why) in list(self.expected.items()):
            name, status = statuses.get(instance_id, ("", "deleted"))
            if status in ("deleting", "deleted"):
                del self.expected[instance_id]
            elif now - due >= self.confirm:
                found[instance_id] = (
                    f"{name or instance_id} was to be deleted by its {why} at {_iso(due)}, but "
                    f"is still {status} {now - due:.0f} s later: it may still be billing; delete "
                    "it by hand.")
        return found


def busy_instance_ids(kernels: Iterable[tuple[str, dict[str, Any]]]) -> set[str]:
    """The instances with a busy kernel, from ``(execution_state, provisioner config)`` pairs."""
    return {str(config.get("instance_id")) for state, config in kernels
            if state == "busy" and config.get("instance_id")}

