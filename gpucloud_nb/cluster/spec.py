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
- **The first instance** holds the scheduler and a worker. That worker costs nothing of its
  own (the instance bills for the scheduler anyway), so ``adapt`` never retires it: Dask would
  pick the worker with the least data, often that one, and leave its instance billing beside
  the other's; ours retires another in its place. ``scale`` drops the newest workers first, so
  that worker last, and a scale-up that finds no worker beside the scheduler starts one there
  before renting. The instance goes at ``close``.
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
  deleting, deleted or failed without the cluster closing it, at two checks in a row (so that
  a *Delete all* that reaches the workers before the scheduler is one notice, not two that
  contradict each other), is named in one sentence (logged on
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
  2 s of its instances' price plus the time their deletes take. Nothing watches the budget of a
  cluster no process holds (its orphan timer still runs). A cluster found again with
  ``from_name`` keeps its budget (from ``cluster.json``) and counts what the cluster has cost
  since it began, not since it was found: its live instances from when they turned active, and
  the instances of its name already deleted that were created since its scheduler's instance
  (an older namesake's are not counted; one first seen deleted is billed from its ``createdAt``,
  an upper bound).
- **Closing** (``close()``, a ``with`` block, interpreter exit through Dask's own hook when
  ``shutdown_on_close`` is true, and ``connect(cleanup_on_exit=True)``) stops the processes,
  deletes every instance the cluster rented, and confirms each delete: the cloud must show it
  ``deleted`` (it bills while ``deleting``) within 2 minutes, the delete sent once more after
  10 s for a cloud that took it and did nothing; one it could not confirm is named. A scale-down's
  delete is confirmed the same way. After a *Delete all* from outside, the cluster is
  ``closed`` with one notice, and ``close()`` returns at once.
- **Found again.** The cloud has no grouping but names, so a cluster's instances are named
  ``dask-<cluster>-<i>`` (the scheduler's is ``-0``), and a cluster's name is 1 to 40 letters,
  digits, ``.``, ``_`` or ``-`` (a random ``cluster-<hex>`` when none is given). The scheduler's
  instance keeps ``cluster.json`` (offer, region, Python, budget, orphan timer) beside the TLS
  certificate and key. :meth:`GPUCloudCluster.from_name` lists the instances, reads those over
  SSH (whoever can SSH to the instances may use the cluster; nobody else can), reconnects to the
  scheduler and takes its running workers over by their pid files, starting one again where its
  process has gone. Its ``shutdown_on_close`` is false (the end of that process leaves the
  cluster running, as dask-ctl's clusters do), but its ``close()`` deletes the cluster, as
  dask-ctl's ``delete`` expects. ``shutdown_on_close=False`` on the first object keeps the
  cluster past its own process the same way. :mod:`gpucloud_nb.cluster.discovery` is the
  ``dask_cluster_discovery`` entry point dask-ctl reads.
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
- **A start that fails.** An instance other than the scheduler's that turns ``error``, is not
  active within ``timeout``, does not answer over SSH within 30 s of the instances being active,
  or cannot run Dask, is named with its reason in ``cluster.notices`` as soon as that is known,
  deleted, and the cluster starts without it. The scheduler's instance failing fails the start
  in one sentence, every instance deleted.
- **Adapt within a budget.** ``adapt(minimum, maximum)`` is Dask's own: it asks for at most
  ``maximum`` workers, counting those still starting. With ``budget=``, each scale-up must also
  leave the budget able to pay what the cluster has cost so far and one more hour of all its
  instances (the one-hour rule of a class budget): ``scale`` refuses in one sentence, and of the
  workers ``adapt`` asks for at once the first that fit start and the rest are named once and
  dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from distributed.core import Status
from distributed.deploy.adaptive import Adaptive as DaskAdaptive
from distributed.deploy.spec import SpecCluster
from distributed.security import Security
from tornado.ioloop import PeriodicCallback

from gpucloud_nb.client.budgets import WARN_SHARE, ServiceBudgets, budget_dollars
from gpucloud_nb.client.costcap import RUNNING, cap_problem, hourly_price
from gpucloud_nb.cluster.nodes import (
    FOLDER,
    ClusterPlan,
    SchedulerNode,
    WorkerNode,
    blocking,
    instance_name,
    parse_instance_name,
)
from gpucloud_nb.display import format_price, per_hour
from gpucloud_nb.errors import GPUCloudError, InstanceFailedError, InvalidInputError
from gpucloud_nb.models import Instance, InstanceOffer

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["ORPHANS_UNWATCHED", "ORPHAN_SECONDS", "GPUCloudCluster", "budget_problem", "choose_offer"]

logger = logging.getLogger("gpucloud_nb.cluster")
_WATCH_MS = 2000
_LAUNCH_TIMEOUT = 900.0
_CONFIRM_TIMEOUT = 120.0
_REFUSED_PAUSE = 30.0  # after a refused scale-up, adapt's next one waits this long
_REACH_SECONDS = 30.0  # an active instance must answer over SSH this soon
#: How long a cluster's instances outlive the last cluster object that kept them (30 minutes).
ORPHAN_SECONDS = 1800.0
_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")


_Wanted = tuple[int, "InstanceOffer | str | None", dict[str, Any], float, "float | None"]


def _cluster_name(name: object) -> str:
    """A cluster's name, checked (it goes into its instances' names), or a new random one."""
    if name is None:
        return f"cluster-{secrets.token_hex(3)}"
    if not isinstance(name, str) or not _NAME_OK.fullmatch(name):
        raise InvalidInputError(f"A cluster's name is 1 to 40 letters, digits, '.', '_' or '-' "
                                f"(starting with a letter or digit), not {name!r}.")
    return name


#: Said once by a cluster on the cloud directly (``GPUCLOUD_GATEWAY=off``): nobody keeps its timer.
ORPHANS_UNWATCHED = ("Nothing deletes this cluster's instances if its kernel goes away: this "
                     "client talks to the cloud directly (GPUCLOUD_GATEWAY=off), so no gateway "
                     "keeps the orphan timer; close() the cluster when you are done.")


def _orphan_seconds(value: object) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0 \
            or not math.isfinite(seconds):
        raise InvalidInputError("delete_when_orphaned must be a positive number of seconds, a "
                                f"timedelta or None, not {value!r}.")
    return float(seconds)


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
    """The cost cap's or the class budget's refusal of ``count`` more instances, or ``None``.

    The cap counts the inference endpoints at their most containers too, as a create does."""
    listed = cloud.instances.list()
    budgets = cloud.budgets
    left = budgets.account_left() if isinstance(budgets, ServiceBudgets) else None
    cap = cloud.max_hourly_cost
    endpoints = cloud.instances.endpoints_hourly() if cap is not None else 0.0
    return (cap_problem(cap, listed, offer, count=count, endpoints=endpoints)
            or budget_problem(left, listed, offer, count, what))


class KeepsSchedulerWorker(DaskAdaptive):
    """Dask's ``Adaptive``, except that it never retires the worker beside the scheduler: where
    the scheduler would pick it, the next candidate goes instead (see the module docs).

        >>> cluster.adapt(minimum=1, maximum=4)  # uses it  # doctest: +SKIP
    """

    async def workers_to_close(self, target: int) -> list[str]:
        names = await super().workers_to_close(target)
        cluster = self.cluster
        home = cluster.home_worker() if isinstance(cluster, GPUCloudCluster) else None
        if home is None or home not in names:
            return names
        wider = names if target == 0 else await super().workers_to_close(target - 1)
        return [name for name in wider if name != home][:len(names)]


class GPUCloudCluster(SpecCluster):
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
        n = _count(n_workers)
        name = _cluster_name(name)
        #: Dollars the whole cluster may cost before it closes itself (``None``: no limit).
        self.budget = None if budget is None else budget_dollars(budget)
        orphan = None if delete_when_orphaned is None else _orphan_seconds(delete_when_orphaned)
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
        self._configure(cloud, _cluster_name(name), found=True)
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
        problem = _launch_problem(cloud, chosen, n, f"Cluster {name!r}")
        if problem:
            raise InvalidInputError(problem)
        self.security = Security.temporary()
        self.rental = ClusterPlan(cloud=cloud, name=name, offer=chosen, region=region,
                                  os_image=(chosen.configuration.os or ("ubuntu-22.04",))[0],
                                  security=self.security, orphan_seconds=orphan,
                                  budget=self.budget, python=shlex.quote(sys.executable) if cloud.is_sandbox
                                  else "python3")
        self.rental.admit = self._admit
        self._plan(self._launch(n, timeout), adopt=False)

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
        scheduler's instance, and write the specs that take its processes over (blocking)."""
        cloud, name = self.cloud, self._name_given
        ids: dict[int, str] = {}
        listed = cloud.instances.list()
        ours = [(parsed[1], i) for i in listed
                if (parsed := parse_instance_name(i.name)) and parsed[0] == name]
        for index, instance in ours:
            if instance.status in ("pending", "active"):
                ids[index] = instance.id
        if 0 not in ids:
            also = (f" (instances {', '.join(ids.values())} still run: delete them with "
                    "cloud.instances.delete)" if ids else "")
            raise InvalidInputError(f"No running cluster {name!r} on this cloud: no live instance "
                                    f"is named {instance_name(name, 0)!r}{also}.")
        read = cloud.instances.run(
            ids[0], f"cd {FOLDER} && cat cluster.json && echo && cat cert.pem key.pem", timeout=60)
        try:
            info = json.loads(read.stdout.split("\n", 1)[0])
            pem = read.stdout.split("\n", 1)[1]
            marker = "-----BEGIN PRIVATE KEY-----"
            cert, key = pem[:pem.index(marker)], pem[pem.index(marker):]
            chosen, region = choose_offer(cloud, str(info["offer"]), 1,
                                          {"region": str(info["region"])})
        except (ValueError, KeyError, IndexError):
            raise InvalidInputError(f"Instance {ids[0]} does not hold the scheduler of a "
                                    f"cluster {name!r} this package started.") from None
        self.security = Security(require_encryption=True, tls_ca_file=cert,
                                 tls_client_cert=cert, tls_client_key=key,
                                 tls_scheduler_cert=cert, tls_scheduler_key=key,
                                 tls_worker_cert=cert, tls_worker_key=key)
        orphan, budget = info.get("orphanSeconds"), info.get("budget")
        self.budget = float(budget) if budget else None
        self.rental = ClusterPlan(cloud=cloud, name=name, offer=chosen, region=region,
                                  os_image=str(info.get("os") or "ubuntu-22.04"),
                                  security=self.security, python=str(info["python"]),
                                  orphan_seconds=float(orphan) if orphan else None,
                                  budget=self.budget)
        self.rental.admit = self._admit
        for index, instance_id in sorted(ids.items()):
            self.rental.rented(instance_id, instance_name(name, index))
        self._bill_found(ours, ids[0])
        self._plan(ids, adopt=True)

    def _bill_found(self, ours: list[tuple[int, Instance]], scheduler_id: str) -> None:
        """A cluster found again starts its budget from what it has cost since it began: its
        live instances from when they turned active, and those already gone (a scale-down by an
        earlier object) whose name is the cluster's and that were created since its scheduler's
        instance (an older namesake's are not this cluster's)."""
        plan, moment = self.rental, datetime.now(timezone.utc)
        began = next(i.created_at for _, i in ours if i.id == scheduler_id)
        for index, instance in ours:
            if instance.id not in plan.names and (
                    began is None or instance.created_at is None or instance.created_at < began):
                continue
            plan.names.setdefault(instance.id, instance_name(plan.name, index))
            self._spent[instance.id] = plan.ledger.bill(instance, moment).spend

    def _launch(self, n: int, timeout: float) -> dict[int, str]:
        """Create the ``n`` instances, wait for them with one progress line, check Dask on each;
        instance ``i`` → its id. An instance other than the scheduler's that fails (its status
        ``error``, not active within ``timeout``, not reachable over SSH within
        ``_REACH_SECONDS`` of the others being active, or without Dask) is named in
        ``notices`` and deleted, and the others go on; the scheduler's failing fails the start."""
        plan, cloud = self.rental, self.cloud
        ids = {i: plan.create(i) for i in range(n)}
        started = time.monotonic()
        shown = ""
        waiting = dict(ids)
        while waiting:
            listed = [i for i in cloud.instances.list() if i.id in plan.names]
            for instance in listed:
                plan.ledger.observe(instance)  # when each turned active, for the budget
            statuses = {i.id: i.status for i in listed}
            for index, instance_id in list(waiting.items()):
                status = statuses.get(instance_id, "deleted")
                if status == "active":
                    del waiting[index]
                elif status in ("error", "deleting", "deleted"):
                    self._lost_at_start(ids, index, f"is {status}")
                    del waiting[index]
                elif time.monotonic() - started > timeout:
                    self._lost_at_start(ids, index, f"was not active after {timeout:g} s")
                    del waiting[index]
            active = sum(statuses.get(i) == "active" for i in ids.values())
            line = (f"\r{plan.name}: {active}/{len(ids)} instances of {plan.offer.instance_id} "
                    f"active in {plan.region} ({time.monotonic() - started:.0f} s)")
            if line != shown:
                print(line, end="", flush=True)
                shown = line
            if waiting:
                time.sleep(0.25)
        print(flush=True)
        pool = ThreadPoolExecutor(max_workers=len(ids), thread_name_prefix="gpucloud-cluster")
        reached = {index: threading.Event() for index in ids}
        jobs = {index: pool.submit(plan.prepare, instance_id, reached[index])
                for index, instance_id in ids.items()}
        deadline = time.monotonic() + _REACH_SECONDS
        for index, job in jobs.items():
            while not (reached[index].is_set() or job.done()) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not (reached[index].is_set() or job.done()):
                self._lost_at_start(ids, index, "is active but was not reachable over SSH "
                                                f"within {_REACH_SECONDS:g} s")
        for index, job in jobs.items():
            if index not in ids:
                continue
            try:
                job.result()
            except GPUCloudError as error:
                self._lost_at_start(ids, index, f"could not run Dask: {error}")
        pool.shutdown(wait=False)
        return ids

    def _lost_at_start(self, ids: dict[int, str], index: int, why: str) -> None:
        """Instance ``index`` failed while the cluster starts: the scheduler's fails the start;
        another is named, deleted and dropped from ``ids``."""
        plan = self.rental
        instance_id = ids[index]
        named = f"Instance {instance_id} ({instance_name(plan.name, index)})"
        if index == 0:
            raise InstanceFailedError(f"{named}, which was to hold the scheduler of cluster "
                                      f"{plan.name!r}, {why}; the cluster's instances are being "
                                      "deleted.")
        del ids[index]
        plan.gone.add(instance_id)
        threading.Thread(target=self._delete_dropped, args=(instance_id, named), daemon=True,
                         name="gpucloud-cluster-delete").start()  # the start goes on meanwhile
        self._notice(f"{named} of cluster {plan.name!r} {why}: it is deleted, and the cluster "
                     f"starts with {len(ids)} workers.")

    def _delete_dropped(self, instance_id: str, named: str) -> None:
        """Delete an instance dropped while the cluster starts, and say so if the cloud does not
        confirm it (``close`` tries again)."""
        try:
            confirmed = self.rental.delete(instance_id)
        except GPUCloudError as error:
            self._notice(f"{named} of cluster {self.rental.name!r} could not be deleted: {error}")
            return
        if not confirmed:
            self._notice(f"{named} of cluster {self.rental.name!r} was not confirmed deleted; "
                         "check cloud.instances.list().")

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
                _launch_problem(self.rental.cloud, self.rental.offer, more,
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
        of ``count`` instances of its offer; else one sentence. Every scale-up asks it (``scale``
        for all it adds, each worker ``adapt`` starts for itself), so neither goes past the
        budget: it is the budget's own rule of one hour ahead, as a class budget's."""
        assert self.budget is not None
        price = hourly_price(self.rental.offer.hourly_price) or 0.0
        spent = sum(self._spent.values())
        if spent + count * price <= self.budget:
            return None
        return (f"Cluster {self.name!r} has cost {format_price(spent)}; one more hour of {count} "
                f"× {per_hour(price)} would bring it past its budget of "
                f"{format_price(self.budget)}, so no worker was added.")

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

    def _update_worker_status(self, op: str, msg: Any) -> None:
        # A worker removed twice (retired, then its instance deleted under it) must not end
        # Dask's status stream with a KeyError: the second "remove" has nothing left to do.
        if op == "remove" and msg not in self.scheduler_info.get("workers", {}):
            return
        super()._update_worker_status(op, msg)

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

