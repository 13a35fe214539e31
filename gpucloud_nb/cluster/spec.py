"""``GPUCloudCluster``: a Dask ``SpecCluster`` whose scheduler and workers run on rented instances.

    >>> cluster = GPUCloudCluster(cloud, 4, gpu_type="H100")  # doctest: +SKIP
    >>> client = distributed.Client(cluster)  # doctest: +SKIP
    >>> cluster.scale(2); cluster.close()  # doctest: +SKIP
    >>> cluster = await GPUCloudCluster(n_workers=2, asynchronous=True)  # doctest: +SKIP
    >>> cluster = GPUCloudCluster.from_name("trio")  # another kernel  # doctest: +SKIP

How it goes: the offer is chosen (the cheapest available one matching the filters, or the one
given) with one region where it is available; the cost cap is checked for all ``n_workers``
instances at once (with the account's inference endpoints at their most containers, as a
create counts them); the instances are created and waited for with one progress line; Dask is
checked on each (see :mod:`gpucloud_nb.cluster.nodes`); the scheduler starts on the first
instance and one worker on each, and the client reaches the scheduler and its dashboard through
SSH forwards. Then it is an ordinary Dask cluster: ``Client(cluster)``, ``scale``, ``adapt``, its
widget, ``asynchronous=True`` (all of the start runs in ``_start``, the blocking client calls on
threads), and dask-labextension's ``labextension.factory`` (see docs/dask-labextension.md).

This module is the cluster object: its start, Dask's hooks (``scale``, ``adapt``, the
worker specs) and its close. The checks before anything
is rented are in :mod:`.checks`, the start of new instances in :mod:`.launch`, finding a
running cluster again in :mod:`.found`, the watch on its instances, budget and orphan
timers in :mod:`.watch`, ``adapt``'s choice of workers in :mod:`.adaptive`, and
the processes over SSH in :mod:`.nodes`.

Choices where nothing says otherwise:

- **Network.** The cluster's members listen on the address the cloud reports for their instance
  (``ip``; on the sandbox ``127.0.0.1``), and speak TLS with a certificate made for this cluster
  (``Security.temporary()``): nothing without it can talk to the scheduler or a worker, which a
  Dask process would otherwise let run any code. The dashboard listens on the scheduler
  instance's loopback only. Workers get no dashboard of their own, and the plain-HTTP server
  Dask keeps in each worker anyway (``/health``, ``/metrics``) listens on its loopback only.
  The client reaches the dashboard through an SSH forward that listens on ``127.0.0.1`` of the
  notebook's machine, without TLS or a token (Dask's dashboard has neither, and a browser
  cannot open a Unix socket). On Linux the forward serves only this user's processes (see
  :mod:`gpucloud_nb.client.local_peer`); elsewhere any user of that machine can read the
  dashboard, though not connect to the scheduler, which wants the cluster's certificate.
- **Python.** Dask runs under ``python3`` on an instance (``distributed`` of the client's version
  is installed with ``pip install --user`` where it is missing). A sandbox instance is this
  machine, so there the processes run this kernel's own interpreter, which has the client's Dask.
- **The cost cap under ``adapt``.** Dask calls ``scale`` on its event loop, where nothing may
  wait for the cloud, so there each worker's create is checked alone, against the cap and the
  creates under way (see :mod:`gpucloud_nb.client.costcap`), and a class budget by the cloud.
  Workers that could not start (refused, or failed) are dropped and their instances deleted,
  named once in ``cluster.notices`` ("has 2 workers, not the 6 asked for: …"), and adapt's next
  scale-up waits 30 s. A ``scale`` from the notebook checks all the workers it adds at once.
- **Closing** (``close()``, a ``with`` block, interpreter exit through Dask's own hook when
  ``shutdown_on_close`` is true, and ``connect(cleanup_on_exit=True)``) stops the processes,
  deletes every instance the cluster rented, and confirms each delete: the cloud must show it
  ``deleted`` (it bills while ``deleting``) within 2 minutes, the delete sent once more after
  10 s for a cloud that took it and did nothing; one it could not confirm is named. A scale-down's
  delete is confirmed the same way. After a *Delete all* from outside, the cluster is
  ``closed`` with one notice, and ``close()`` returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from distributed.core import Status
from distributed.deploy.adaptive import Adaptive as DaskAdaptive
from distributed.security import Security
from tornado.ioloop import PeriodicCallback

from gpucloud_nb.client.budgets import budget_dollars
from gpucloud_nb.cluster.adaptive import KeepsSchedulerWorker
from gpucloud_nb.cluster.checks import (
    ORPHAN_SECONDS,
    budget_room,
    choose_offer,
    cluster_name,
    launch_problem,
    orphan_seconds,
    worker_count,
)
from gpucloud_nb.cluster.found import bill_found, find
from gpucloud_nb.cluster.launch import launch
from gpucloud_nb.cluster.nodes import ClusterPlan, SchedulerNode, WorkerNode, blocking
from gpucloud_nb.cluster.watch import Watched
from gpucloud_nb.errors import GPUCloudError, InstanceFailedError, InvalidInputError
from gpucloud_nb.models import InstanceOffer

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["ORPHANS_UNWATCHED", "GPUCloudCluster"]

_WATCH_MS = 2000
_LAUNCH_TIMEOUT = 900.0
_REFUSED_PAUSE = 30.0  # after a refused scale-up, adapt's next one waits this long
_Wanted = tuple[int, "InstanceOffer | str | None", dict[str, Any], float, "float | None"]



#: Said once by a cluster on the cloud directly (``GPUCLOUD_GATEWAY=off``): nobody keeps its timer.
ORPHANS_UNWATCHED = ("Nothing deletes this cluster's instances if its kernel goes away: this "
                     "client talks to the cloud directly (GPUCLOUD_GATEWAY=off), so no gateway "
                     "keeps the orphan timer; close() the cluster when you are done.")


class GPUCloudCluster(Watched):
    """A Dask cluster on ``n_workers`` rented instances of one offer, in one region (see the
    module docs).

    ``cloud`` is the :class:`~gpucloud_nb.GPUCloud` it rents through (``None``: the one
    :func:`gpucloud_nb.connect` gives, closed with the cluster). The cheapest available vm or
    baremetal offer matching ``offer_filters`` (the filters of ``cloud.instances.offers``) unless
    ``offer`` is given; the cost cap and a class budget are checked for all ``n_workers`` before
    any launch. With ``budget`` (dollars) the cluster closes itself once all its instances
    together have cost that much. ``shutdown_on_close=False`` keeps the cluster running when this
    Python process ends (find it again with :meth:`from_name`); ``delete_when_orphaned``
    (seconds or a ``timedelta``, default 30 minutes, ``None`` for never) deletes its instances
    once no live cluster object has kept them that long. ``asynchronous=True`` as in Dask.

        >>> with GPUCloudCluster(cloud, 3) as cluster, Client(cluster) as client:  # doctest: +SKIP
        ...     client.gather(client.map(lambda x: x * x, range(30)))
    """

    #: The instances, offer and TLS of the cluster (set once it starts).
    rental: ClusterPlan

    def __init__(self, cloud: GPUCloud | None = None, n_workers: int = 1, *,
                 offer: InstanceOffer | str | None = None, name: str | None = None,
                 budget: float | None = None, timeout: float = _LAUNCH_TIMEOUT,
                 shutdown_on_close: bool = True,
                 delete_when_orphaned: float | timedelta | None = ORPHAN_SECONDS,
                 asynchronous: bool = False, loop: Any = None, **offer_filters: Any) -> None:
        n = worker_count(n_workers)
        name = cluster_name(name)
        #: Dollars the whole cluster may cost before it closes itself (``None``: no limit).
        self.budget = None if budget is None else budget_dollars(budget)
        orphan = None if delete_when_orphaned is None else orphan_seconds(delete_when_orphaned)
        self._configure(cloud, name, found=False)
        self._wanted: _Wanted | None = (n, offer, offer_filters, timeout, orphan)
        self._begin(name, asynchronous, loop, shutdown_on_close)

    @classmethod
    def from_name(cls, name: str, cloud: GPUCloud | None = None, *,  # type: ignore[override]
                  shutdown_on_close: bool = False, asynchronous: bool = False,
                  loop: Any = None) -> GPUCloudCluster:
        """The running cluster called ``name``, found again from its instances' names (from
        another kernel, after a restart): its scheduler reconnected, its workers taken over,
        ``close()`` deletes it as the original's would. ``shutdown_on_close`` is false, so the
        end of this process leaves it running.

            >>> cluster = GPUCloudCluster.from_name("trio")  # doctest: +SKIP
            >>> client = Client(cluster)  # doctest: +SKIP
        """
        self = cls.__new__(cls)
        self.budget = None
        self._configure(cloud, cluster_name(name), found=True)
        self._wanted = None
        self._begin(self._name_given, asynchronous, loop, shutdown_on_close)
        return self

    def _configure(self, cloud: GPUCloud | None, name: str, *, found: bool) -> None:
        self._owns_cloud = cloud is None
        #: The client the cluster rents through (``None`` until a cluster given none starts:
        #: then :func:`gpucloud_nb.connect`'s, off the event loop).
        self.cloud: GPUCloud = cloud  # type: ignore[assignment]
        self._name_given = name
        self._found = found
        #: One sentence for each instance that went away under the running cluster.
        self.notices: list[str] = []
        self._noticed: set[str] = set()
        self._suspects: set[str] = set()  # instances seen gone once
        self._spent: dict[str, float] = {}  # instance id -> its bill when last listed
        self._warned = False
        self._unconfirmed: list[str] = []
        self._refused_until = 0.0
        self._kept_at = 0.0
        self._started = False  # until then a worker that cannot start fails the cluster

    def _begin(self, name: str, asynchronous: bool, loop: Any, shutdown_on_close: bool) -> None:
        try:
            super().__init__(scheduler={"cls": SchedulerNode, "options": {}},
                             worker={"cls": WorkerNode, "options": {}}, security=Security(),
                             name=name, asynchronous=asynchronous, loop=loop,
                             shutdown_on_close=shutdown_on_close)
        except BaseException:
            with contextlib.suppress(Exception):
                self._loop_runner.stop()
            raise

    # -- starting ----------------------------------------------------------------------------

    async def _start(self) -> None:
        if self.status != Status.created:
            await super()._start()
            return
        try:
            if self.cloud is None:
                from gpucloud_nb import connect

                self.cloud = await blocking(connect, quiet=True)
            await blocking(self._find if self._found else self._rent)
            self.periodic_callbacks["gpucloud-watch"] = PeriodicCallback(self._watch, _WATCH_MS)
            await super()._start()
            await self._correct_state()
            await self._wait_for_workers(len(self.worker_spec), timeout=60)
            self._started = True
        except BaseException as error:
            plan = getattr(self, "rental", None)
            if self._found and plan is not None:
                plan.keep = True  # a cluster not found again is not ours to delete
            with contextlib.suppress(Exception):
                await self._close()
            raise self._start_failure(error) from None

    def _start_failure(self, error: BaseException) -> BaseException:
        """The one sentence a failed start raises (the instances already deleted)."""
        cause = error.__cause__ if isinstance(error, RuntimeError) else None
        reason = cause if isinstance(cause, Exception) else error
        if isinstance(reason, GPUCloudError) or not isinstance(reason, Exception):
            return reason
        said = " ".join(str(reason).split()) or type(reason).__name__
        if self._found:
            return InstanceFailedError(f"Cluster {self._name_given!r} could not be reconnected: "
                                       f"{said}")
        return InstanceFailedError(f"Cluster {self._name_given!r} did not start, and the "
                                   f"instances it rented are deleted: {said}")

    def _rent(self) -> None:
        """Choose the offer, check the cap and budgets, rent and prepare the instances, and
        write the specs of the scheduler and workers (blocking, before Dask starts)."""
        assert self._wanted is not None
        n, offer, filters, timeout, orphan = self._wanted
        cloud, name = self.cloud, self._name_given
        if orphan is not None and cloud.auto_delete.where == "nobody":
            orphan = None  # the cloud directly: no gateway would keep the orphan timer (#36)
            self._notice(ORPHANS_UNWATCHED)
        chosen, region = choose_offer(cloud, offer, n, filters)
        problem = launch_problem(cloud, chosen, n, f"Cluster {name!r}")
        if problem:
            raise InvalidInputError(problem)
        self.security = Security.temporary()
        self.rental = ClusterPlan(cloud=cloud, name=name, offer=chosen, region=region,
                                  os_image=(chosen.configuration.os or ("ubuntu-22.04",))[0],
                                  security=self.security, orphan_seconds=orphan,
                                  budget=self.budget, python=shlex.quote(sys.executable) if cloud.is_sandbox
                                  else "python3")
        self.rental.admit = self._admit
        self._plan(launch(self.rental, n, timeout, self._notice), adopt=False)

    def _plan(self, ids: dict[int, str], *, adopt: bool) -> None:
        """The specs: the scheduler on instance 0, worker ``i`` on instance ``i``."""
        plan = self.rental
        self.scheduler_spec = {"cls": SchedulerNode, "options": {
            "plan": plan, "instance_id": ids[0], "adopt": adopt}}
        self.worker_spec = {i: {"cls": WorkerNode, "options": {
            "plan": plan, "instance_id": instance_id, "owns_instance": i > 0, "adopt": adopt}}
            for i, instance_id in ids.items()}
        self.new_spec = {"cls": WorkerNode, "options": {"plan": plan}}
        self._i = max(ids) + 1

    def _find(self) -> None:
        """Find the cluster's live instances by name, read its certificate and plan from the
        scheduler's instance (see :mod:`.found`), and write the specs that take its processes
        over (blocking)."""
        plan, ids, ours = find(self.cloud, self._name_given)
        self.security, self.budget, self.rental = plan.security, plan.budget, plan
        plan.admit = self._admit
        self._spent.update(bill_found(plan, ours, ids[0]))
        self._plan(ids, adopt=True)

    def _delete_all(self) -> list[str]:
        """Delete every instance the cluster rented and wait until the cloud says so; the ids
        not confirmed deleted."""
        plan = getattr(self, "rental", None)
        if plan is None or plan.keep:
            return []
        plan.forget_files()
        left = [i for i in plan.instance_ids if i not in plan.confirmed]
        with ThreadPoolExecutor(max_workers=max(1, len(left))) as pool:
            confirmed = list(pool.map(plan.delete, left))
        unconfirmed = [i for i, ok in zip(left, confirmed, strict=True) if not ok]
        for instance_id in unconfirmed:
            print(f"gpucloud-nb: instance {instance_id} of cluster {plan.name!r} was not "
                  "confirmed deleted; check cloud.instances.list().", file=sys.stderr, flush=True)
        return unconfirmed

    # -- Dask's hooks ------------------------------------------------------------------------

    def scale(self, n: int = 0, memory: str | None = None, cores: int | None = None) -> Any:
        """Ask for ``n`` workers: more rents instances (the cost cap and a class budget checked
        for all of them first), fewer deletes the newest ones' instances.

            >>> cluster.scale(4)  # doctest: +SKIP
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidInputError(f"scale takes a number of workers (0 or more), not {n!r}.")
        more = n - len(self.worker_spec)
        if more > 0 and self.status == Status.running and not _on_event_loop():
            problem = (self._budget_room(n) if self.budget is not None else None) or \
                launch_problem(self.rental.cloud, self.rental.offer, more,
                                f"Scaling cluster {self.name!r} to {n}")
            if problem:
                raise InvalidInputError(problem)
        elif more > 0 and time.monotonic() < self._refused_until:
            n = len(self.worker_spec)  # adapt, just refused: it asks again after the pause
        done = super().scale(n, memory=memory, cores=cores)
        if 0 in self.worker_spec and next(iter(self.worker_spec)) != 0:  # put back by a scale-up:
            rest = dict(self.worker_spec)  # it is retired last again
            self.worker_spec = {0: rest.pop(0), **rest}
        return done

    def adapt(self, Adaptive: type[DaskAdaptive] = KeepsSchedulerWorker,
              *args: Any, **kwargs: Any) -> DaskAdaptive:
        """Dask's ``adapt``, with :class:`KeepsSchedulerWorker` unless another class is given.

            >>> cluster.adapt(minimum=1, maximum=4)  # doctest: +SKIP
        """
        return super().adapt(Adaptive, *args, **kwargs)

    def home_worker(self) -> Any:
        """The name of the worker on the scheduler's instance, or ``None`` while none is."""
        home = self.scheduler_spec.get("options", {}).get("instance_id")
        return next((name for name, spec in self.worker_spec.items()
                     if home is not None and spec["options"].get("instance_id") == home), None)

    def new_worker_spec(self) -> dict[Any, Any]:
        """The next worker: beside the scheduler while no worker is there (that instance bills
        anyway), else on a new instance."""
        home = self.scheduler_spec.get("options", {}).get("instance_id")
        plan = getattr(self, "rental", None)
        if (plan is None or home is None or home in plan.gone or 0 in self.worker_spec
                or self.home_worker() is not None):
            return dict(super().new_worker_spec())
        return {0: {"cls": WorkerNode, "options": {
            "plan": plan, "instance_id": home, "owns_instance": False, "adopt": False}}}

    def _budget_room(self, count: int) -> str | None:
        """``None`` when the cluster's ``budget`` pays what it has cost so far and one more hour
        of ``count`` instances of its offer; else one sentence (:func:`.checks.budget_room`)."""
        assert self.budget is not None
        return budget_room(self.name, self.rental.offer, sum(self._spent.values()), self.budget,
                           count)

    def _admit(self, worker_name: Any) -> str | None:
        """A new worker under ``adapt``: refused when it would make the cluster rent past its
        budget. The workers asked for count in name order, so of several asked at once the
        first that fit are rented and the rest refused."""
        if self.budget is None:
            return None
        names = sorted(self.worker_spec)  # ints: 0, 1, 2…
        rank = names.index(worker_name) + 1 if worker_name in names else len(names) + 1
        return self._budget_room(rank)

    async def _correct_state_internal(self) -> None:
        asked = len(self.worker_spec)
        try:
            await super()._correct_state_internal()
        except GPUCloudError as refused:  # the cap, the cloud (a class budget), SSH...
            if not self._started:
                raise
            self._refused_until = time.monotonic() + _REFUSED_PAUSE
            for name, node in list(self.workers.items()):
                if node.status == Status.created:  # did not start: its instance goes
                    self.workers.pop(name)
                    self.worker_spec.pop(name, None)
                    self._futures.add(asyncio.ensure_future(node.close()))
            sentence = (f"Cluster {self.name!r} has {len(self.worker_spec)} workers, not the "
                        f"{asked} asked for: {refused}")
            if sentence not in self.notices:
                self._notice(sentence)

    @property
    def dashboard_link(self) -> str:
        """The scheduler's dashboard, through this client's SSH forward ("" without bokeh)."""
        url = getattr(self.scheduler, "dashboard_url", "")
        return f"{url}/status" if url else ""

    @property
    def instance_ids(self) -> list[str]:
        """The ids of the instances the cluster rented, oldest first (deleted ones too)."""
        plan = getattr(self, "rental", None)
        return [] if plan is None else list(plan.instance_ids)

    def _update_worker_status(self, op: str, msg: Any) -> None:
        # A worker removed twice (retired, then its instance deleted under it) must not end
        # Dask's status stream with a KeyError: the second "remove" has nothing left to do.
        if op == "remove" and msg not in self.scheduler_info.get("workers", {}):
            return
        super()._update_worker_status(op, msg)

    async def _close(self) -> None:
        if self.status == Status.closed:
            return
        plan = getattr(self, "rental", None)
        if self.status == Status.running and plan is not None:
            with contextlib.suppress(GPUCloudError):  # a close right after a Delete all
                listed = await blocking(plan.cloud.instances.list)
                self._scheduler_lost({i.id for i in listed if i.status in ("pending", "active")})
        scheduler = self.scheduler
        if plan is not None and getattr(scheduler, "instance_id", None) in plan.gone:
            # Nothing answers at the scheduler's address: asking it to retire the workers or
            # to stop would wait for Dask's connect timeout (30 s) and end in an OSError.
            self.shutdown_scheduler = False
            if scheduler.status not in (Status.closing, Status.closed):
                await scheduler.close()
        try:
            await super()._close()
        finally:
            self._unconfirmed = await blocking(self._delete_all)
            if self._owns_cloud and self.cloud is not None:
                self.cloud.close()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True

