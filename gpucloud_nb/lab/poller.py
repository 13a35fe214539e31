"""One poller per Jupyter server: it lists the instances, prices them, and caches the answer.

Every open tab reads the cached snapshot, so however many tabs are open the cloud sees at most one
list request per interval: ``fast`` seconds (5) while an instance is pending, active or deleting,
``slow`` seconds (30) otherwise. ``nudge()`` (a notebook cell just ran, a delete was sent) brings
the next list forward, but never closer than ``fast`` seconds to the last one. A create or delete
made by this package anywhere on this machine (a gateway's own deletes too) touches the cloud's
change stamp (:mod:`gpucloud_nb.client.changes`); the poller stats it every ``WATCH`` seconds and
lists at once when it moved (never closer than ``MIN_INTERVAL`` to the last list), so such a change
shows within a second or two and costs no request beyond the one that shows it. A delete seen that
way (or sent from the sidebar) is then followed until it is done: while an instance is ``deleting``
the next lists come ``MIN_INTERVAL`` × 1, 2, 4... seconds apart (at most ``fast``), so the sidebar
stops showing it and its $/h when the notebook does, at a few extra lists.

The cloud is reached through the async client with short timeouts (``TIMEOUT`` seconds per
request, ``RETRIES`` retries), on Jupyter's own event loop: a cloud that never answers costs
the sidebar one error sentence and never a thread of the executor Jupyter's own routes use.
The blocking bits (finding or starting the sandbox, the sandbox service's auto-delete
deadlines) run in one thread of the poller's own. A list that gets no answer (the personal
gateway or the sandbox stopped or crashed) drops the client: the next poll finds or starts the
gateway (or the sandbox) again, as a kernel's ``connect()`` does, so the sidebar recovers by itself.
A key refused (403, or 401: the key in the environment changed, or the personal gateway came back
with a new local key) drops the client the same way, and the snapshot says :data:`REFUSED` (one
sentence, no key) until a poll with the current settings gets through.

Each poll also asks every active instance for its GPU use, advances the idle clocks and checks
that automatic deletes happened (:mod:`gpucloud_nb.lab.idle`): a row carries ``gpu`` (``util``,
``memoryMiB``, ``history`` of the last 10 minutes), ``idle`` (the limit, ``idleSeconds``,
``deleteAt``, ``warning``) and ``deleteProblem`` (one sentence, or ``None``); the snapshot's
``deleteProblems`` lists those sentences for the status bar. ``keep(id)`` starts an idle clock
again (``POST /gpucloud/instances/ID/keep``). The idle clocks are the gateway's (or the sandbox
service's): the poller reads them and reports the instances whose kernel of this server is busy
executing code as in use (:mod:`gpucloud_nb.lab.idle`); it deletes nothing for idleness. Those
requests run in the poller's thread, never on the event loop.

Through a gateway (a class's or the personal one) the snapshot's ``gateway`` is this key's money
as the gateway keeps it (``{"name", "budget", "spend", "left", "warning", "sentence",
"instanceBudgets", "line"}``, the sentence being the 80 % warning or what was deleted when the
budget was spent; ``instanceBudgets`` the ``create(..., budget=)`` of each live instance,
``{"instanceId", "name", "dollars", "spend", "left", "warning"}``; ``line`` the sidebar's budget
line about both, e.g. ``Instance budgets: train $0.40 of $5.00 spent, eval $0.10 of $2.00
spent``; ``None`` off a gateway), read with each list
(:meth:`~gpucloud_nb.client.management.AsyncGPUCloud.gateway_status`, one request that the real
cloud and the sandbox never get past their first 404; through a gateway one more,
``GET /gateway/budgets``).

Each list also reads the endpoints (the cloud's inference instances, their details for
containers ready/total and $/h): the snapshot's ``endpoints`` and ``endpointsError``
(:mod:`gpucloud_nb.lab.endpoints`); ``endpoint_action(id, action)`` starts, stops or deletes one.
While an endpoint is changing or has containers the poller keeps its ``fast`` interval.
What runs now costs GPU instances and endpoints: ``totals["hourly"]`` adds each endpoint's
``hourly`` (its hourly price times the containers it has up: a stopped endpoint, or one scaled to
zero, adds nothing, as the appendix bills per container), ``totals["endpointsHourly"]`` is that
part alone and ``totals["serving"]`` counts the endpoints with a container up; ``committed``
counts endpoints at their most containers (``endpointsCommitted`` that part alone), as the
cost cap of ``create`` does.

Spend comes from the package's own billing (:class:`gpucloud_nb.client.billing.Ledger`), the
same arithmetic as ``cloud.spend()``. Nothing in a snapshot holds a key or a secret.

    >>> poller = Poller(lambda: connect(quiet=True))
    >>> (await poller.snapshot())["totals"]  # doctest: +SKIP
    {'hourly': 1.98, 'spend': 0.41, 'running': 2, 'endpointsHourly': 0.75, 'serving': 1, ...}
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from gpucloud_nb._secrets import without_userinfo
from gpucloud_nb.client import changes, clusters
from gpucloud_nb.client.billing import Ledger
from gpucloud_nb.client.budgets import BudgetState
from gpucloud_nb.client.gateway import GatewayStatus
from gpucloud_nb.client.idle import IdleState
from gpucloud_nb.client.inference_instance_ops import NOT_BILLING
from gpucloud_nb.client.management import AsyncGPUCloud
from gpucloud_nb.display import format_price
from gpucloud_nb.errors import AuthenticationError, ConnectionFailedError, GPUCloudError
from gpucloud_nb.lab.endpoints import Action, EndpointRows
from gpucloud_nb.lab.idle import CONFIRM, Confirmations, GpuUse, idle_row
from gpucloud_nb.models import Instance

__all__ = ["BUSY", "REFUSED", "RETRIES", "TIMEOUT", "Poller"]

BUSY = ("pending", "active", "deleting")
MIN_INTERVAL = 1.0
WATCH = 0.5
TIMEOUT = 5.0
RETRIES = 1
REPORT_MAX = 600.0  # the longest use a gateway takes from one report
REFUSED = ("The cloud refused this server's key; the sidebar connects again with the current "
           "settings at each poll.")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


class Poller:
    """Lists the instances every ``fast`` or ``slow`` seconds in one asyncio task.

    ``connect`` makes the async client (it may start the user's sandbox, so it runs in the
    poller's own thread); the client's requests run on the event loop.
    """

    def __init__(self, connect: Callable[[], AsyncGPUCloud], *, fast: float = 5.0,
                 slow: float = 30.0, cap: float | None = None,
                 busy: Callable[[], set[str]] | None = None, confirm: float = CONFIRM) -> None:
        self._connect = connect
        self._busy = busy or set
        self._gpu = GpuUse()
        self._idle_states: dict[str, IdleState] = {}
        self._gateway: dict[str, Any] | None = None
        self._listed: tuple[list[Instance], dict[str, datetime]] = ([], {})
        self._ssh_work: asyncio.Future[None] | None = None
        self._confirm = Confirmations(confirm)
        self._endpoints = EndpointRows()
        self.fast = fast
        self.slow = slow
        self.cap = cap
        self.list_requests = 0
        self._cloud: AsyncGPUCloud | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpucloud-lab")
        self._stamp: int | None = None
        self._ledger = Ledger()
        self._ssh: dict[str, str] = {}
        self._snapshot: dict[str, Any] | None = None
        self._first = asyncio.Event()
        self._wake = asyncio.Event()
        self._nudged = False
        self._chase: int | None = None  # lists since a change, while following a delete
        self._last = float("-inf")
        self._task: asyncio.Task[None] | None = None

    # -- settings and life cycle ------------------------------------------------------------
    def set_intervals(self, fast: float | None = None, slow: float | None = None) -> None:
        """Change the intervals (``PUT /gpucloud/settings``); ``slow`` is kept ≥ ``fast``."""
        if fast is not None:
            self.fast = max(float(fast), MIN_INTERVAL)
        if slow is not None:
            self.slow = max(float(slow), MIN_INTERVAL)
        self.slow = max(self.slow, self.fast)
        self._wake.set()

    def interval(self) -> float:
        """Seconds between two list requests, as things stand."""
        instances = (self._snapshot or {}).get("instances", [])
        if self._chase is not None and any(i["status"] == "deleting" for i in instances):
            return min(self.fast, MIN_INTERVAL * 2 ** self._chase)
        if self._nudged or self._endpoints.busy():
            return self.fast
        return self.fast if any(i["status"] in BUSY for i in instances) else self.slow

    def nudge(self) -> None:
        """Poll again soon: ``fast`` seconds after the last list at the latest."""
        self._nudged = True
        self._wake.set()

    def _ensure_started(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="gpucloud-poller")

    async def stop(self) -> None:
        """Stop polling and close the client."""
        task, self._task = self._task, None
        for job in (task, self._ssh_work):
            while job is not None and not job.done():
                # Python 3.11's wait_for swallows a cancel that meets a nudge: cancel until done.
                job.cancel()
                await asyncio.wait([job], timeout=1)
        await self._gpu.close(TIMEOUT)
        if self._cloud is not None:
            await self._cloud.aclose()
            self._cloud = None
        self._thread.shutdown(wait=False, cancel_futures=True)

    # -- reading ----------------------------------------------------------------------------
    async def snapshot(self) -> dict[str, Any]:
        """The latest snapshot (waits for the first one)."""
        self._ensure_started()
        await self._first.wait()
        assert self._snapshot is not None
        return {**self._snapshot, "nextPollSeconds": self.interval()}

    async def info(self) -> dict[str, Any]:
        """Sandbox or real cloud, its URL (without credentials) and the cost cap."""
        try:
            cloud = await self._client()
        except GPUCloudError as error:
            return {"sandbox": None, "url": None, "cap": self.cap, "error": str(error)}
        return {"sandbox": cloud.is_sandbox, "url": without_userinfo(cloud.base_url), "cap": self.cap,
                "error": None}

    async def fate(self, instance_id: str) -> str:
        """What a delete of ``instance_id`` loses, naming the volumes that keep data."""
        cloud = await self._client()
        instance = await cloud.instances.get(instance_id)
        return instance.data_fate(await cloud.volumes.list())

    async def delete(self, instance_id: str) -> None:
        """Delete ``instance_id`` in the cloud; the snapshot shows it deleting at once."""
        cloud = await self._client()
        await cloud.instances.delete(instance_id)
        self._stamp = changes.stamp(cloud.base_url)  # our own change: the nudge below covers it
        if self._snapshot is not None:
            for row in self._snapshot["instances"]:
                if row["id"] == instance_id and row["status"] != "deleted":
                    row["status"] = "deleting"
        self._chase = 0
        self.nudge()

    async def endpoint_action(self, endpoint_id: str, action: Action) -> None:
        """Start, stop or delete the endpoint ``endpoint_id``; the snapshot shows it at once."""
        cloud = await self._client()
        await self._endpoints.act(cloud, endpoint_id, action)
        self._stamp = changes.stamp(cloud.base_url)  # our own change: the nudge below covers it
        if self._snapshot is not None:
            endpoints = self._endpoints.snapshot()
            totals = _totals(self._snapshot["instances"], [self._snapshot["totals"]["spend"]],
                             self.cap, endpoints["endpoints"])
            self._snapshot.update(endpoints, totals=totals)
        self._chase = 0
        self.nudge()

    async def install_kernel(self, instance_id: str) -> dict[str, str]:
        """Install the kernelspec that runs a notebook on ``instance_id``; its name and title."""
        from gpucloud_nb.kernel.spec import display_name_of, install_kernel_async

        cloud = await self._client()
        name = await install_kernel_async(cloud, instance_id)
        title = await asyncio.get_running_loop().run_in_executor(self._thread, display_name_of,
                                                                 name)
        return {"name": name, "displayName": title}

    async def keep(self, instance_id: str) -> None:
        """Start the idle clock of ``instance_id`` again (the Keep button)."""
        cloud = await self._client()
        await asyncio.get_running_loop().run_in_executor(
            self._thread, lambda: cloud.idle_delete.keep(instance_id))
        self.nudge()

    def scrub(self, text: str) -> str:
        """``text`` with the client's key (and the sandbox's secret) masked."""
        return text if self._cloud is None else self._cloud.scrub(text)

    # -- polling ----------------------------------------------------------------------------
    async def _client(self) -> AsyncGPUCloud:
        if self._cloud is None:
            cloud = await asyncio.get_running_loop().run_in_executor(self._thread, self._connect)
            if self._cloud is None:
                self._cloud = cloud
            else:
                await cloud.aclose()
        return self._cloud

    async def _drop(self) -> None:
        """Forget the client (its server stopped answering); the next ``_client()`` makes one."""
        cloud, self._cloud = self._cloud, None
        work, self._ssh_work = self._ssh_work, None
        while work is not None and not work.done():  # it uses the old client
            work.cancel()
            await asyncio.wait([work], timeout=1)
        if cloud is not None:
            with contextlib.suppress(Exception):
                await cloud.aclose()

    def _changed(self) -> bool:
        """True when the change stamp moved since the last list (one ``stat``, no request)."""
        return self._cloud is not None and changes.stamp(self._cloud.base_url) != self._stamp

    async def _run(self) -> None:
        while True:
            await self._poll()
            while True:
                since = time.monotonic() - self._last
                delay = self.interval() - since
                if delay <= 0 or (since >= MIN_INTERVAL and self._changed()):
                    break
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(delay, WATCH))

    async def _poll(self) -> None:
        self._nudged = False
        self._last = time.monotonic()
        try:
            cloud = await self._client()
            stamp = changes.stamp(cloud.base_url)
            if self.list_requests and stamp != self._stamp:  # changed here: follow it
                self._chase = 0
            elif self._chase is not None:
                self._chase = min(self._chase + 1, 8)
            self._stamp = stamp
            self.list_requests += 1
            instances = await cloud.instances.list()
            await self._endpoints.read(cloud)  # the inference instances (lab/endpoints.py)
            status = await cloud.gateway_status()  # first: who keeps timers
            budgets = {} if status is None else await asyncio.get_running_loop().run_in_executor(
                self._thread, lambda: cloud.budgets.states())
            self._gateway = _gateway_row(status, budgets, instances)
            deadlines = await asyncio.get_running_loop().run_in_executor(
                self._thread, lambda: cloud.auto_delete.deadlines())
            await self._forget_kernels(cloud, instances)
            self._listed = (instances, deadlines)
            self._snapshot = self._build(cloud, instances, deadlines, datetime.now(timezone.utc),
                                         self._idle_states)
            # The SSH work (ssh commands, GPU use, idle clocks) runs beside the lists, one at a
            # time, so a slow instance never delays the next list; it updates the snapshot.
            if self._ssh_work is None or self._ssh_work.done():
                self._ssh_work = asyncio.ensure_future(self._over_ssh(cloud, instances))
        except Exception as error:  # the sidebar shows one sentence, never a traceback
            message = self.scrub(str(error) if isinstance(error, GPUCloudError)
                                 else f"Could not read the instances ({type(error).__name__}: "
                                 f"{error}).")
            if isinstance(error, AuthenticationError):
                message = REFUSED  # the key changed: the next poll builds a client from settings
            if isinstance(error, ConnectionFailedError | AuthenticationError):
                await self._drop()  # the next poll connects again (a restarted gateway)
            old = self._snapshot or {"instances": [], "totals": _totals([], [], None)}
            self._snapshot = {**old, "error": message,
                              "polledAt": _iso(datetime.now(timezone.utc))}
        self._first.set()

    async def _forget_kernels(self, cloud: AsyncGPUCloud, instances: list[Instance]) -> None:
        """Remove this account's kernelspecs whose instance is gone (deleted or deleting); those
        of another key or sandbox home stay (:func:`gpucloud_nb.kernel.spec.remove_stale`)."""
        from gpucloud_nb.kernel.spec import remove_stale

        statuses = {instance.id: instance.status for instance in instances}
        kind = "sandbox" if cloud.is_sandbox else "cloud"
        await asyncio.get_running_loop().run_in_executor(self._thread, remove_stale, kind,
                                                         statuses.get, cloud.account)

    async def _over_ssh(self, cloud: AsyncGPUCloud, instances: list[Instance]) -> None:
        try:
            await self._learn_ssh(cloud, instances)
            self._idle_states = await self._watch(cloud, instances)
        except GPUCloudError:
            return  # tried again after the next list
        latest, deadlines = self._listed
        self._snapshot = self._build(cloud, latest, deadlines, datetime.now(timezone.utc),
                                     self._idle_states)

    async def _learn_ssh(self, cloud: AsyncGPUCloud, instances: list[Instance]) -> None:
        """The working ssh command of each newly active instance, once (it connects once)."""
        for instance in instances:
            if instance.status == "active" and instance.ip and instance.id not in self._ssh:
                try:
                    self._ssh[instance.id] = await cloud.instances.ssh_command(instance.id, wait=0)
                except GPUCloudError:
                    continue  # asked again at the next poll

    async def _watch(self, cloud: AsyncGPUCloud,
                     instances: list[Instance]) -> dict[str, IdleState]:
        """GPU use of the active instances; the instances whose kernel here is busy reported as
        in use to whoever keeps the idle clocks (a gateway, the sandbox service), and those
        clocks read."""
        active = {i.id for i in instances if i.status == "active" and i.ip}
        await self._gpu.measure(cloud, sorted(active), TIMEOUT)
        busy = self._busy() & active
        seconds = min(3 * max(self.interval(), self.fast), REPORT_MAX)  # until the next poll

        def clocks() -> dict[str, IdleState]:
            watcher = cloud.idle_delete
            for instance_id in sorted(busy):
                with contextlib.suppress(GPUCloudError):  # the next poll reports it again
                    watcher.report_use(instance_id, seconds)
            return watcher.states()

        return await asyncio.get_running_loop().run_in_executor(self._thread, clocks)

    def _build(self, cloud: AsyncGPUCloud, instances: list[Instance],
               deadlines: dict[str, datetime], now: datetime,
               idle: dict[str, IdleState] | None = None) -> dict[str, Any]:
        idle = idle or {}
        rows, bills = [], []
        watcher = f"the {cloud.idle_delete.where}"
        due: dict[str, tuple[float, str]] = {}
        for instance in instances:
            deadline = instance.auto_delete_at or deadlines.get(instance.id)
            if deadline is not None:
                due[instance.id] = (deadline.timestamp(), "auto-delete timer")
            if instance.id in idle and instance.status == "active":
                due[instance.id] = (idle[instance.id].delete_at.timestamp(), "idle limit")
        self._confirm.track(due)
        problems = self._confirm.problems({i.id: (i.name, i.status) for i in instances})
        where = cloud.auto_delete.where  # known by now: gateway_status() asked
        keeper = "the cloud" if where == "nobody" else f"the {where}"
        clusters.prune(cloud.base_url, {i.id: i.status for i in instances})
        members = clusters.members(cloud.base_url)  # a Dask cluster's instances, one heading
        for instance in instances:
            bill = self._ledger.bill(instance, now)
            bills.append(bill.spend)
            if instance.status == "deleted":
                continue
            deadline = instance.auto_delete_at or deadlines.get(instance.id)
            rows.append({
                "id": instance.id, "name": instance.name, "status": instance.status,
                "gpuModel": instance.gpu_model, "gpuCount": instance.gpu_count,
                "hourlyPrice": instance.hourly_price, "createdAt": _iso(instance.created_at),
                "billedFrom": _iso(bill.start), "spend": round(bill.spend, 6),
                "estimated": bill.estimated, "autoDeleteAt": _iso(deadline),
                "autoDeleteBy": None if deadline is None else keeper,
                "sshCommand": self._ssh.get(instance.id),
                "cluster": members.get(instance.id),
                "gpu": self._gpu.row(instance.id, stale_after=2 * self.fast + TIMEOUT),
                "idle": (idle_row(idle[instance.id], watcher) if instance.id in idle
                         and instance.status == "active" else None),
                "deleteProblem": problems.get(instance.id),
            })
        endpoints = self._endpoints.snapshot()
        return {
            "instances": rows, "totals": _totals(rows, bills, self.cap, endpoints["endpoints"]),
            "sandbox": cloud.is_sandbox, "url": without_userinfo(cloud.base_url), "cap": self.cap,
            "polledAt": _iso(now), "error": None,
            "deleteProblems": [problems[r["id"]] for r in rows if r["id"] in problems],
            "gateway": self._gateway,
            **endpoints,
        }


def _gateway_row(status: GatewayStatus | None, budgets: dict[str, BudgetState],
                 instances: list[Instance]) -> dict[str, Any] | None:
    """A gateway's view of this key for the sidebar, or ``None`` off a gateway: the key's own
    budget, the budgets of its live instances, and the sidebar's ``line`` about them."""
    if status is None:
        return None
    live = {i.id: i.name for i in instances if i.status not in ("deleting", "deleted")}
    held = sorted((live[id], state) for id, state in budgets.items() if id in live)
    rows = [{"instanceId": state.instance_id, "name": name, "dollars": state.dollars,
             "spend": round(state.spend, 6), "left": round(state.left, 6),
             "warning": state.warning} for name, state in held]
    return {"name": status.name, "budget": status.budget, "spend": round(status.spend, 6),
            "left": None if status.left is None else round(status.left, 6),
            "warning": status.warning, "sentence": status.sentence(),
            "instanceBudgets": rows, "line": _budget_line(status, rows)}


def _budget_line(status: GatewayStatus, rows: list[dict[str, Any]]) -> str:
    """The sidebar's budget line: the key's budget left, then each live instance's budget.

        >>> _budget_line(GatewayStatus("me", None, 0.5, None, False),
        ...              [{"name": "train", "spend": 0.4, "dollars": 5.0}])
        'Instance budget: train $0.40 of $5.00 spent'
        >>> _budget_line(GatewayStatus("me", None, 0.5, None, False), [])
        '$0.50 spent; no budget on this key'
    """
    parts = [f"{row['name']} {format_price(row['spend'])} of {format_price(row['dollars'])} spent"
             for row in rows]
    if status.budget is not None and status.left is not None:
        head = f"{format_price(status.left)} left of your {format_price(status.budget)} budget"
        return head + (f"; instance budgets: {', '.join(parts)}" if parts else "")
    if parts:
        return f"Instance budget{'s' if len(parts) > 1 else ''}: {', '.join(parts)}"
    return f"{format_price(status.spend)} spent; no budget on this key"


def _totals(rows: list[dict[str, Any]], bills: list[float], cap: float | None,
            endpoints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """$/h billed now (GPU instances active and deleting, and the containers each endpoint has
    up), spend so far (every GPU instance), running count, and the price the cost cap is
    compared with (pending and active instances, and endpoints at their most containers, as
    ``create`` counts them).

        >>> _totals([{"status": "active", "hourlyPrice": 2.0}], [1.0], None,
        ...         [{"status": "ACTIVE", "hourly": 0.75, "hourlyPrice": 0.75, "total": 1,
        ...           "maxContainers": 2}])["hourly"]
        2.75
    """
    endpoints = endpoints or []
    served = sum(e["hourly"] or 0.0 for e in endpoints)
    hourly = sum(r["hourlyPrice"] for r in rows if r["status"] in ("active", "deleting")) + served
    worst = sum((e["hourlyPrice"] or 0.0) * e["maxContainers"] for e in endpoints
                if e["status"] not in NOT_BILLING)
    committed = sum(r["hourlyPrice"] for r in rows if r["status"] in ("pending", "active")) + worst
    return {
        "hourly": round(hourly, 6), "spend": round(sum(bills), 6),
        "running": sum(1 for r in rows if r["status"] == "active"),
        "endpointsHourly": round(served, 6),
        "serving": sum(1 for e in endpoints if e["total"]),
        "endpointsCommitted": round(worst, 6),
        "committed": round(committed, 6),
        "capReached": cap is not None and committed >= cap,
    }
