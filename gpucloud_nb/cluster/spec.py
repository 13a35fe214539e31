"""``GPUCloudCluster``: a Dask ``SpecCluster`` whose scheduler and workers run on rented instances.

    >>> cluster = GPUCloudCluster(cloud, 4, gpu_type="H100")  # doctest: +SKIP
    >>> client = distributed.Client(cluster)  # doctest: +SKIP
    >>> cluster.scale(2); cluster.close()  # doctest: +SKIP

How it goes: the offer is chosen (the cheapest available one matching the filters, or the one
given) with one region where it is available; the cost cap is checked for all ``n`` instances at
once; the ``n`` instances are created and waited for with one progress line; Dask is checked on
each (see :mod:`gpucloud_nb.cluster.nodes`); the scheduler starts on the first instance and one
worker on each, and the client reaches the scheduler and its dashboard through SSH forwards.
Then it is an ordinary Dask cluster: ``Client(cluster)``, ``scale``, ``adapt``, its widget.

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
- **The first instance** holds the scheduler and a worker. Scaling down retires that worker last
  (``scale`` drops the newest workers first) and never deletes that instance: it goes at
  ``close``.
- **Availability.** The interface says only whether an offer is available in a region, not how
  many: a region where it is available is taken to hold all ``n``. If a create is refused
  part-way, the instances already created are deleted and the refusal is raised.
- **The cost cap under ``adapt``.** Dask calls ``scale`` on its event loop, where nothing may
  wait for the cloud, so there each worker's create is checked alone, against the cap and the
  creates under way (see :mod:`gpucloud_nb.client.costcap`), and a class budget by the cloud.
  Workers that could not start (refused, or failed) are dropped and their instances deleted,
  named once in ``cluster.notices`` ("has 2 workers, not the 6 asked for: …"), and adapt's next
  scale-up waits 30 s. A ``scale`` from the notebook checks all the workers it adds at once.
- **Lost instances.** Every 2 s the cluster lists the instances; one of its own that is
  deleting, deleted or failed without the cluster closing it is named in one sentence (logged on
  ``gpucloud_nb.cluster`` and kept in ``cluster.notices``) and its worker dropped; with ``adapt``
  on, Dask starts a replacement on a new instance.
- **A lost scheduler.** When the scheduler's instance is deleted from outside the cluster (the
  sidebar's Delete all), the cluster cannot work: it says so once in ``cluster.notices``, closes
  itself (status ``closed``) and deletes its other instances, without waiting on the scheduler
  that is gone; a ``close()`` before the 2 s check noticed does the same at once.
- **Budgets.** Before any launch, through a class gateway whose keys file gives the key a budget
  (``cloud.budgets.account_left()``), the budget left must pay one hour of the ``n`` instances
  and of what the key already runs, as the gateway asks of every create; otherwise one
  sentence names what is left and what the cluster needs, and nothing is launched. ``scale``
  asks the same for the instances it adds. ``budget=`` dollars watches the cluster's spend as
  one: every instance it rented, those already deleted by a scale-down too, billed as
  ``cloud.spend()`` bills (price × time active or deleting, from what this client has seen).
  The check runs with the lost-instance check, every 2 s: at 80 % one warning (logged and in
  ``cluster.notices``); at the budget the cluster closes itself, as ``close()`` does (every
  instance deleted and confirmed), and says so in ``cluster.notices``. So it may overshoot by
  2 s of its instances' price plus the time their deletes take. Nothing watches a cluster
  whose kernel has ended.
- **Closing** (``close()``, a ``with`` block, interpreter exit through Dask's own hook, and
  ``connect(cleanup_on_exit=True)``) stops the processes, deletes every instance the cluster
  rented, and waits until the cloud reports them deleted; one it could not confirm is named.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from distributed.core import Status
from distributed.deploy.spec import SpecCluster
from distributed.security import Security
from tornado.ioloop import PeriodicCallback

from gpucloud_nb.client.budgets import WARN_SHARE, ServiceBudgets, budget_dollars
from gpucloud_nb.client.costcap import RUNNING, cap_problem, hourly_price
from gpucloud_nb.cluster.nodes import ClusterPlan, SchedulerNode, WorkerNode, blocking
from gpucloud_nb.display import format_price, per_hour
from gpucloud_nb.errors import GPUCloudError, InstanceFailedError, InvalidInputError
from gpucloud_nb.models import Instance, InstanceOffer

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["GPUCloudCluster", "budget_problem", "choose_offer"]

logger = logging.getLogger("gpucloud_nb.cluster")
_WATCH_MS = 2000
_LAUNCH_TIMEOUT = 900.0
_CONFIRM_TIMEOUT = 120.0
_REFUSED_PAUSE = 30.0  # after a refused scale-up, adapt's next one waits this long


def _count(n: object, what: str = "A cluster") -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidInputError(f"{what} needs a whole number of instances, not {n!r}.")
    if n < 1:
        raise InvalidInputError(f"{what} needs at least 1 instance; n={n} was given.")
    return n


def choose_offer(cloud: GPUCloud, offer: InstanceOffer | str | None, n: int,
                 filters: dict[str, Any]) -> tuple[InstanceOffer, str]:
    """The offer and the one region the ``n`` instances go to, or one sentence why none can.

    ``offer`` is an offer, an offer's ``instanceId``, or ``None`` for the cheapest available
    vm or baremetal offer matching ``filters`` (``cloud.instances.offers`` filters).
    """
    region = filters.get("region")
    try:
        listed = cloud.instances.offers(**filters)
    except TypeError as error:
        raise InvalidInputError(f"GPUCloudCluster takes the filters of cloud.instances.offers "
                                f"(region, num_gpus, gpu_type, deployment_type): {error}.") from None
    if isinstance(offer, InstanceOffer):
        candidates = [o for o in listed if (o.cloud.id, o.instance_id)
                      == (offer.cloud.id, offer.instance_id)] or [offer]
    elif isinstance(offer, str):
        candidates = [o for o in listed if o.instance_id == offer]
        if not candidates:
            raise InvalidInputError(f"No offer {offer!r} matches; see cloud.instances.offers().")
    elif offer is None:
        candidates = sorted((o for o in listed if o.deployment_type in ("vm", "baremetal")),
                            key=lambda o: o.hourly_price)
        if not candidates:
            raise InvalidInputError("No vm or baremetal offer matches the filters "
                                    f"{filters or '(none)'}; a cluster needs instances with SSH.")
    else:
        raise InvalidInputError(f"offer must be an offer or an offer's instanceId, not "
                                f"{type(offer).__name__}.")
    for candidate in candidates:
        regions = [r for r in candidate.available_regions if region in (None, r)]
        if regions and candidate.deployment_type in ("vm", "baremetal"):
            return candidate, regions[0]
    first = candidates[0]
    if first.deployment_type not in ("vm", "baremetal"):
        raise InvalidInputError(f"Offer {first.instance_id!r} is a {first.deployment_type} "
                                "offer; a cluster needs vm or baremetal instances.")
    where = f"region {region!r}" if region else "any region"
    raise InvalidInputError(f"Offer {first.instance_id!r} is not available in {where}, so "
                            f"{n} instances of it cannot be rented in one region; see "
                            "cloud.instances.offers(available=True).")


def budget_problem(left: float | None, running: Iterable[Instance], offer: InstanceOffer,
                   count: int, what: str) -> str | None:
    """``None`` when ``left`` dollars (``None``: no class budget) pay one hour of ``count`` more
    instances of ``offer`` and of the pending and active ``running`` ones; else one sentence.

        >>> budget_problem(2.5, [], InstanceOffer(instance_id="a", hourly_price=1.0), 3,
        ...                "Cluster 'trio'")
        "Cluster 'trio' needs $3.00 for one hour of 3 × $1.00/h, but your class budget has ..."
    """
    if left is None:
        return None
    price = hourly_price(offer.hourly_price) or 0.0
    already = sum(hourly_price(i.hourly_price) or 0.0 for i in running if i.status in RUNNING)
    needed = count * price + already
    if left >= needed:
        return None
    also = f" and the {per_hour(already)} already running" if already else ""
    return (f"{what} needs {format_price(needed)} for one hour of {count} × {per_hour(price)}"
            f"{also}, but your class budget has {format_price(left)} left; nothing was launched.")


def _launch_problem(cloud: GPUCloud, offer: InstanceOffer, count: int, what: str) -> str | None:
    """The cost cap's or the class budget's refusal of ``count`` more instances, or ``None``."""
    listed = cloud.instances.list()
    budgets = cloud.budgets
    left = budgets.account_left() if isinstance(budgets, ServiceBudgets) else None
    return (cap_problem(cloud.max_hourly_cost, listed, offer, count=count)
            or budget_problem(left, listed, offer, count, what))


class GPUCloudCluster(SpecCluster):
    """A Dask cluster on ``n`` rented instances of one offer, in one region (see the module docs).

    ``cloud`` is the :class:`~gpucloud_nb.GPUCloud` it rents through. The cheapest available vm
    or baremetal offer matching ``offer_filters`` (the filters of ``cloud.instances.offers``) unless
    ``offer`` is given; the cost cap and a class budget are checked for all ``n`` before any
    launch. With ``budget`` (dollars) the cluster closes itself once all its instances together
    have cost that much.

        >>> with GPUCloudCluster(cloud, 3) as cluster, Client(cluster) as client:  # doctest: +SKIP
        ...     client.gather(client.map(lambda x: x * x, range(30)))
    """

    def __init__(self, cloud: GPUCloud, n: int, *, offer: InstanceOffer | str | None = None,
                 name: str = "cluster", budget: float | None = None,
                 timeout: float = _LAUNCH_TIMEOUT, **offer_filters: Any) -> None:
        n = _count(n)
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(f"A cluster needs a name, not {name!r}.")
        #: Dollars the whole cluster may cost before it closes itself (``None``: no limit).
        self.budget = None if budget is None else budget_dollars(budget)
        chosen, region = choose_offer(cloud, offer, n, offer_filters)
        problem = _launch_problem(cloud, chosen, n, f"Cluster {name!r}")
        if problem:
            raise InvalidInputError(problem)
        self.rental = ClusterPlan(cloud=cloud, name=name, offer=chosen, region=region,
                                os_image=(chosen.configuration.os or ("ubuntu-22.04",))[0],
                                security=Security.temporary(),
                                python=shlex.quote(sys.executable) if cloud.is_sandbox
                                else "python3")
        #: One sentence for each instance that went away under the running cluster.
        self.notices: list[str] = []
        self._noticed: set[str] = set()
        self._spent: dict[str, float] = {}  # instance id -> its bill when last listed
        self._warned = False
        self._unconfirmed: list[str] = []
        self._refused_until = 0.0
        self._started = False  # until then a worker that cannot start fails the cluster
        try:
            ids = self._launch(n, timeout)
            workers = {i: {"cls": WorkerNode, "options": {
                "plan": self.rental, "instance_id": ids[i], "owns_instance": i > 0}}
                for i in range(n)}
            super().__init__(
                workers=workers,
                scheduler={"cls": SchedulerNode, "options": {"plan": self.rental,
                                                              "instance_id": ids[0]}},
                worker={"cls": WorkerNode, "options": {"plan": self.rental}},
                security=self.rental.security, name=name)
            self.wait_for_workers(n, timeout=60)
            self._started = True
        except BaseException as error:
            self._abandon()
            cause = error.__cause__ if isinstance(error, RuntimeError) else None
            reason = cause if isinstance(cause, Exception) else error
            if isinstance(reason, GPUCloudError):
                raise reason from None
            if not isinstance(reason, Exception):
                raise
            said = " ".join(str(reason).split()) or type(reason).__name__
            raise InstanceFailedError(f"Cluster {name!r} did not start, and the instances it "
                                      f"rented are deleted: {said}") from reason
        watch = PeriodicCallback(self._watch, _WATCH_MS)
        self.periodic_callbacks["gpucloud-watch"] = watch
        loop = self.loop
        assert loop is not None  # a started cluster has its loop
        loop.add_callback(watch.start)

    # -- launching ---------------------------------------------------------------------------

    def _launch(self, n: int, timeout: float) -> list[str]:
        """Create the ``n`` instances, wait for all with one progress line, check Dask on each."""
        plan, cloud = self.rental, self.rental.cloud
        ids = [plan.create(f"{plan.name}-{i}") for i in range(n)]
        started = time.monotonic()
        shown = ""
        while True:
            listed = [i for i in cloud.instances.list() if i.id in ids]
            for instance in listed:
                plan.ledger.observe(instance)  # when each turned active, for the budget
            statuses = {i.id: i.status for i in listed}
            active = sum(statuses.get(i) == "active" for i in ids)
            line = (f"\r{plan.name}: {active}/{n} instances of {plan.offer.instance_id} active "
                    f"in {plan.region} ({time.monotonic() - started:.0f} s)")
            if line != shown:
                print(line, end="", flush=True)
                shown = line
            failed = [i for i in ids if statuses.get(i, "deleted") in ("error", "deleting",
                                                                       "deleted")]
            if failed:
                print(flush=True)
                raise InstanceFailedError(f"Instance {failed[0]} of cluster {plan.name!r} is "
                                          f"{statuses.get(failed[0], 'deleted')}; the cluster's "
                                          "instances are being deleted.")
            if active == n:
                print(flush=True)
                break
            if time.monotonic() - started > timeout:
                print(flush=True)
                raise InstanceFailedError(f"{n - active} of the {n} instances of cluster "
                                          f"{plan.name!r} were not active after {timeout:g} s; "
                                          "the cluster's instances are being deleted.")
            time.sleep(0.25)
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="gpucloud-cluster") as pool:
            list(pool.map(plan.prepare, ids))
        return ids

    def _abandon(self) -> None:
        """After a failed start: stop what started, delete every instance rented."""
        with contextlib.suppress(Exception):
            if getattr(self, "_loop_runner", None) is not None and self.status != Status.closed:
                self.close()
        self._delete_all()

    def _delete_all(self) -> list[str]:
        """Delete every instance the cluster rented and wait until the cloud says so; the ids
        not confirmed deleted."""
        plan = self.rental
        plan.forget_files()
        for instance_id in list(plan.instance_ids):
            with contextlib.suppress(GPUCloudError):
                plan.delete(instance_id)
        deadline = time.monotonic() + _CONFIRM_TIMEOUT
        left = list(plan.instance_ids)
        while left and time.monotonic() < deadline:
            statuses = {i.id: i.status for i in plan.cloud.instances.list()}
            left = [i for i in left if statuses.get(i, "deleted") != "deleted"]
            if left:
                time.sleep(0.25)
        for instance_id in left:
            print(f"gpucloud-nb: instance {instance_id} of cluster {plan.name!r} was not "
                  "confirmed deleted; check cloud.instances.list().", file=sys.stderr, flush=True)
        return left

    # -- Dask's hooks ------------------------------------------------------------------------

    def scale(self, n: int = 0, memory: str | None = None, cores: int | None = None) -> Any:
        """Ask for ``n`` workers: more rents instances (the cost cap and a class budget checked
        for all of them first), fewer deletes the newest ones' instances.

            >>> cluster.scale(4)  # doctest: +SKIP
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidInputError(f"scale takes a number of workers (0 or more), not {n!r}.")
        more = n - len(self.worker_spec)
        if more > 0 and not _on_event_loop():
            problem = _launch_problem(self.rental.cloud, self.rental.offer, more,
                                      f"Scaling cluster {self.name!r} to {n}")
            if problem:
                raise InvalidInputError(problem)
        elif more > 0 and time.monotonic() < self._refused_until:
            n = len(self.worker_spec)  # adapt, just refused: it asks again after the pause
        return super().scale(n, memory=memory, cores=cores)

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
        return list(self.rental.instance_ids)

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
        for worker_name, node in list(self.workers.items()):
            instance_id = getattr(node, "instance_id", None)
            if (instance_id is None or instance_id in alive or instance_id in self._noticed
                    or node.status in (Status.closing, Status.closed)):
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

    def _update_worker_status(self, op: str, msg: Any) -> None:
        # A worker removed twice (retired, then its instance deleted under it) must not end
        # Dask's status stream with a KeyError: the second "remove" has nothing left to do.
        if op == "remove" and msg not in self.scheduler_info.get("workers", {}):
            return
        super()._update_worker_status(op, msg)

    def _notice(self, sentence: str) -> None:
        self.notices.append(sentence)
        logger.warning(sentence)

    async def _close(self) -> None:
        if self.status == Status.running:
            with contextlib.suppress(GPUCloudError):  # a close right after a Delete all
                listed = await blocking(self.rental.cloud.instances.list)
                self._scheduler_lost({i.id for i in listed if i.status in ("pending", "active")})
        scheduler = self.scheduler
        if getattr(scheduler, "instance_id", None) in self.rental.gone:
            # Nothing answers at the scheduler's address: asking it to retire the workers or
            # to stop would wait for Dask's connect timeout (30 s) and end in an OSError.
            self.shutdown_scheduler = False
            if scheduler.status not in (Status.closing, Status.closed):
                await scheduler.close()
        await super()._close()
        self._unconfirmed = await blocking(self._delete_all)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True

