"""The watch on a running :class:`~gpucloud_nb.cluster.GPUCloudCluster`, every 2 s: its
instances lost from outside (a worker's, or the scheduler's), its ``budget=``, and its
instances' orphan timers kept going while the cluster object lives.

    >>> cluster.notices  # what the watch saw, one sentence each  # doctest: +SKIP
    ["Instance 6b0b… (dask-trio-2) of cluster 'trio' was deleted from outside the cluster, …"]

Choices where nothing says otherwise:

- **Lost instances.** Every 2 s the cluster lists the instances; one of its own that is deleting,
  deleted or failed without the cluster closing it, at two checks in a row (so that a *Delete all*
  that reaches the workers before the scheduler is one notice, not two that contradict each
  other), is named in one sentence (logged on ``gpucloud_nb.cluster`` and kept in
  ``cluster.notices``) and its worker dropped; with ``adapt`` on, Dask starts a replacement on a
  new instance.
- **A lost scheduler.** When the scheduler's instance is deleted from outside the cluster (the
  sidebar's Delete all), the cluster cannot work: it says so once in ``cluster.notices``, closes
  itself (status ``closed``) and deletes its other instances, without waiting on the scheduler
  that is gone; a ``close()`` before the 2 s check noticed does the same at once.
- **Budgets.** ``budget=`` dollars watches the cluster's spend as one: every instance it rented,
  those already deleted by a scale-down too, billed as ``cloud.spend()`` bills (price × time
  active or deleting, from what this client has seen). The check runs with the lost-instance
  check, every 2 s: at 80 % one warning (logged and in ``cluster.notices``); at the budget the
  cluster closes itself, as ``close()`` does (every instance deleted and confirmed), and says so
  in ``cluster.notices``. So it may overshoot by 2 s of its instances' price plus the time their
  deletes take. Nothing watches the budget of a cluster no process holds (its orphan timer still
  runs). What is checked before a launch and at each scale-up: :mod:`.checks`; the budget of a
  cluster found again: :mod:`.found`.
- **Orphans.** A cluster kept past its process must not bill for ever: each instance, once its
  worker runs, gets an auto-delete timer of ``delete_when_orphaned`` (30 minutes by default;
  ``cloud.auto_delete``, kept by the sandbox service or the gateway, so it fires with no kernel
  left), and every live cluster object holding the instances (the first, or one found again)
  starts the timers again every third of their length, at most every minute. So the instances
  go once no process has held the cluster for that long, and the Lab sidebar shows each timer.
  Chosen over ``delete_when_idle``: the idle rule counts GPU use, and an idle Dask process's
  housekeeping is not what makes a cluster an orphan; nor is a client that merely stays
  connected use. What cannot be seen: a bare ``distributed.Client`` connected from elsewhere
  does not hold the cluster. On the real cloud without a gateway (``GPUCLOUD_GATEWAY=off``) the
  timers live in the kernel and die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime, timezone

from distributed.core import Status
from distributed.deploy.spec import SpecCluster

from gpucloud_nb.client.budgets import WARN_SHARE
from gpucloud_nb.cluster.nodes import ClusterPlan, blocking
from gpucloud_nb.display import format_price
from gpucloud_nb.errors import GPUCloudError
from gpucloud_nb.models import Instance

__all__ = ["Watched"]

logger = logging.getLogger("gpucloud_nb.cluster")


class Watched(SpecCluster):
    """A ``SpecCluster`` on rented instances that watches them (see the module docs); the
    cluster class starts ``_watch`` every 2 s once it runs.

        >>> cluster.periodic_callbacks["gpucloud-watch"]  # doctest: +SKIP
    """

    rental: ClusterPlan
    budget: float | None
    notices: list[str]
    _noticed: set[str]
    _suspects: set[str]
    _spent: dict[str, float]
    _warned: bool
    _kept_at: float
    _unconfirmed: list[str]

    async def _watch(self) -> None:
        """Notice instances of the running cluster that went away without it (see the docs)."""
        if self.status != Status.running:
            return
        try:
            listed = await blocking(self.rental.cloud.instances.list)
        except GPUCloudError:
            return
        if self.budget is not None and await self._over_budget(listed, self.budget):
            return
        alive = {i.id for i in listed if i.status in ("pending", "active")}
        if self._scheduler_lost(alive):
            await self._close()
            return
        await self._keep(alive)
        for worker_name, node in list(self.workers.items()):
            instance_id = getattr(node, "instance_id", None)
            if (instance_id is None or instance_id in alive or instance_id in self._noticed
                    or node.status in (Status.closing, Status.closed)):
                continue
            if instance_id not in self._suspects:
                # Seen gone once: named at the next check if the scheduler's instance is still
                # there, so a Delete all that reaches the workers first says one thing (#40).
                self._suspects.add(instance_id)
                continue
            self._noticed.add(instance_id)
            self.rental.gone.add(instance_id)
            self.worker_spec.pop(worker_name, None)
            self.workers.pop(worker_name, None)
            self._futures.add(asyncio.ensure_future(node.close()))
            adaptive = getattr(self, "_adaptive", None)
            if adaptive is not None and adaptive.periodic_callback is not None:
                then = "adapt starts a replacement."
            else:
                left = len(self.worker_spec)
                then = f"the cluster has {left} workers now (cluster.scale({left + 1}) adds one)."
            self._notice(f"Instance {instance_id} ({self.rental.names.get(instance_id)}) of "
                         f"cluster {self.name!r} was deleted from outside the cluster, and "
                         f"its worker with it; {then}")

    def _scheduler_lost(self, alive: set[str]) -> bool:
        """Whether the scheduler's instance is gone (not among the ``alive`` ids): then the
        cluster is dead, and is closed without a word to its scheduler (see the docs)."""
        scheduler_id = getattr(self.scheduler, "instance_id", None)
        if not scheduler_id or scheduler_id in alive:
            return False
        if scheduler_id not in self._noticed:
            self._noticed.add(scheduler_id)
            self.rental.gone.update(set(self.rental.instance_ids) - alive)
            self._notice(f"Instance {scheduler_id} ({self.rental.names.get(scheduler_id)}), which "
                         f"holds the scheduler of cluster {self.name!r}, was deleted from "
                         "outside the cluster: the cluster is closed, and its other instances "
                         "are deleted.")
        return True

    async def _over_budget(self, listed: list[Instance], budget: float) -> bool:
        """Bill the cluster's instances as one: warn at 80 %; at the budget close the cluster
        (every instance deleted and confirmed) and say so. True once it has closed."""
        plan, moment = self.rental, datetime.now(timezone.utc)
        for instance in listed:
            if instance.id in plan.names:  # deleted ones too; one no longer listed keeps its bill
                self._spent[instance.id] = plan.ledger.bill(instance, moment).spend
        spent = sum(self._spent.values())
        if spent < budget:
            if spent >= WARN_SHARE * budget and not self._warned:
                self._warned = True
                self._notice(f"Cluster {self.name!r} has cost {format_price(spent)}, "
                             f"{round(100 * spent / budget)} % of its budget of "
                             f"{format_price(budget)}; at the budget it closes itself and "
                             "deletes its instances.")
            return False
        logger.info("Cluster %r has cost %s, its budget: closing it.", self.name,
                    format_price(spent))
        await self._close()
        unconfirmed = self._unconfirmed
        count = len(plan.instance_ids)
        done = (f"it closed itself, and its {count} instances are deleted." if not unconfirmed
                else f"it closed itself, but instance {', '.join(unconfirmed)} was not confirmed "
                     "deleted; check cloud.instances.list().")
        self._notice(f"Cluster {self.name!r} has cost {format_price(spent)}, its budget of "
                     f"{format_price(budget)}: {done}")
        return True

    def _notice(self, sentence: str) -> None:
        self.notices.append(sentence)
        logger.warning(sentence)

    async def _keep(self, alive: set[str]) -> None:
        """While this object lives, its instances' orphan timers start again every third of
        their length (at most every minute)."""
        plan = self.rental
        if plan.orphan_seconds is None or plan.keep:
            return
        if time.monotonic() - self._kept_at < min(60.0, plan.orphan_seconds / 3):
            return
        self._kept_at = time.monotonic()
        for instance_id in [i for i in plan.instance_ids if i in alive]:
            with contextlib.suppress(GPUCloudError):
                await blocking(plan.guard, instance_id)
