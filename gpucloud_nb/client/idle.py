"""Idle deletes: an instance is deleted once nobody has used it for a while.

    >>> instance = cloud.instances.create(..., delete_when_idle=1800)  # seconds  # doctest: +SKIP
    >>> cloud.idle_delete.states()[instance.id].warning  # doctest: +SKIP
    False
    >>> cloud.idle_delete.keep(instance.id)  # "Keep": the idle clock starts again  # doctest: +SKIP

An instance is idle while no SSH session or ``run`` is open on it, no remote kernel on it is
busy, and its GPU utilisation stays under ``THRESHOLD`` % (5; one :data:`QUERY`, ``nvidia-smi
--query-gpu=utilization.gpu,memory.used``, per instance per poll, itself bookkeeping): the one
rule of every watcher, :func:`gpucloud_nb.idle_rule.in_use`. An idle kernel is not use. Five
minutes before the delete (half-way, for a limit under ten minutes) a warning shows.

Who watches, plainly:

- **Sandbox**: the sandbox service (:class:`ServiceIdleDelete`, over the sandbox-only routes of
  :mod:`gpucloud_nb.sandbox.idle`), whether or not a kernel or JupyterLab runs.
- **Class gateway** (:mod:`gpucloud_nb.client.gateway`): the gateway (:class:`ServiceIdleDelete`
  with ``prefix="/gateway"``), with no kernel or JupyterLab running; it reads GPU use over SSH
  with its own key and counts the runs, copies and forwards clients report
  (:mod:`gpucloud_nb.client.use_report`).
- **Real cloud**: the limits go to a private file of this user's, one per cloud and account
  (:class:`~gpucloud_nb.client.idle_file.IdleLimits`, see :mod:`gpucloud_nb.client.idle_file`).
  The JupyterLab server extension watches the limits of its own account's file while JupyterLab
  runs (:mod:`gpucloud_nb.lab.idle`), and names the instances it watches in a heartbeat beside
  it, rewritten at each of its polls. Otherwise this kernel watches
  (:class:`KernelIdleDelete`): a daemon thread reads, every ``poll`` seconds (30), the
  instances whose limit this process set, and stands aside for an instance only while a fresh
  heartbeat (younger than ``STALE_POLLS`` (3) of the extension's poll intervals) names it, so
  the two never watch one instance at once and an instance JupyterLab cannot see is still
  watched. A kernel that is killed, or a client that is closed, watches nothing; a JupyterLab
  started later takes over.

Choices where the issue is silent:

- Durations are seconds (an ``int`` or ``float``) or a ``timedelta``, as ``delete_after`` is.
- After a create, the limit is written without waiting for the file's lock; when it cannot be
  written then (the folder was checked writable just before the create), this kernel watches
  the instance from memory and logs one sentence saying JupyterLab cannot, and keeps trying to
  write it at each poll.
- The kernel watches only the instances whose limit *this process* set (``create(...,
  delete_when_idle=)``, ``cloud.idle_delete.watch``), not every limit of the file: the SSH
  sessions and commands a kernel can see are its own, so the kernel that set a limit is the one
  that can tell whether its instance is in use; and two kernels never measure, nor delete, the
  same instance. An instance whose kernel has gone is watched by JupyterLab if it runs.
- What the kernel sees: an instance is busy at a poll while it is not active yet, while a
  command, copy (SFTP) or connection through a port forward of this client is open on it, or
  ended since the last poll
  (:meth:`gpucloud_nb.client.remote.Remote.open_on`; its own GPU measures are bookkeeping and
  not counted), or when its busiest GPU is at ``THRESHOLD`` % or more. It cannot see a remote
  kernel (the Jupyter server runs those: its extension watches them) nor another process's
  session. An instance whose GPU use cannot be read (unreachable, no key it accepts) counts as
  idle, as in the extension: a watcher that cannot see use must not keep an instance billing
  for ever.
- A kernel that starts (or resumes, when JupyterLab stops) watching starts each clock at that
  moment, or at the last Keep if later: it never deletes early for a time it did not watch.
- Its idle delete is confirmed (the instance shows as ``deleting`` or ``deleted`` within
  ``confirm_within`` seconds, 60) as budget deletes are, on a thread of its own
  (:class:`~gpucloud_nb.client.budgets.ConfirmedDeletes`); a failed or unconfirmed delete is one
  sentence in ``failures``. The warning is one log line (logger ``gpucloud_nb.idle``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client.budgets import CONFIRM_WITHIN, GONE, KernelWatcher
from gpucloud_nb.client.idle_file import LOCK_WAIT, STALE_POLLS, IdleLimits, LockedError
from gpucloud_nb.errors import GPUCloudError, InvalidInputError, NotFoundError
from gpucloud_nb.idle_rule import THRESHOLD, in_use

if TYPE_CHECKING:
    from gpucloud_nb.client.remote import Remote
    from gpucloud_nb.client.run_output import RunResult
    from gpucloud_nb.models import InstanceDetails

__all__ = ["QUERY", "STALE_POLLS", "THRESHOLD", "WARN", "IdleClocks", "IdleLimits", "IdleState",
           "KernelIdleDelete", "ServiceIdleDelete", "idle_seconds", "parse_use", "warn_seconds"]

log = logging.getLogger("gpucloud_nb.idle")
QUERY = "nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits"
WARN = 300.0


def idle_seconds(value: float | timedelta) -> float:
    """An idle limit given as seconds or a ``timedelta``, in seconds, checked to be positive
    and finite.

        >>> idle_seconds(1800), idle_seconds(timedelta(minutes=30))
        (1800.0, 1800.0)
    """
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0 \
            or not math.isfinite(seconds):
        raise InvalidInputError("delete_when_idle must be a positive number of seconds or a "
                                f"timedelta, not {value!r}.")
    return float(seconds)


def warn_seconds(limit: float) -> float:
    """How long before an idle delete the warning starts: 5 minutes, or half a short limit.

        >>> warn_seconds(1800), warn_seconds(60)
        (300.0, 30.0)
    """
    return min(WARN, limit / 2)


def parse_use(text: str) -> tuple[float, float, float] | None:
    """``(mean utilisation %, highest utilisation %, memory used MiB)`` from :data:`QUERY`'s lines.

        >>> parse_use("57, 1210\\n3, 20\\n")
        (30.0, 57.0, 1230.0)
    """
    utils, memory = [], 0.0
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 2:
            continue
        try:
            utils.append(float(parts[0]))
            memory += float(parts[1])
        except ValueError:
            continue
    if not utils:
        return None
    return round(sum(utils) / len(utils), 1), max(utils), memory


def _when(text: object) -> datetime:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


@dataclass(frozen=True)
class IdleState:
    """Where an instance's idle clock stands.

    ``limit`` and ``idle`` are seconds; the instance is deleted at ``delete_at`` if it stays
    idle; ``warning`` is true from ``warn_at`` on. ``gpu_util`` (%) and ``memory_mib`` are the
    last measure, ``None`` before the first.
    """

    instance_id: str
    limit: float
    idle: float
    delete_at: datetime
    warn_at: datetime
    warning: bool
    gpu_util: float | None = None
    memory_mib: float | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IdleState:
        """A state from the sandbox service's JSON (``GET /sandbox/idle``)."""
        util, memory = data.get("gpuUtil"), data.get("memoryMiB")
        return cls(instance_id=str(data["instanceId"]), limit=float(data["seconds"]),
                   idle=float(data["idleSeconds"]), delete_at=_when(data["deleteAt"]),
                   warn_at=_when(data["warnAt"]), warning=bool(data["warning"]),
                   gpu_util=None if util is None else float(util),
                   memory_mib=None if memory is None else float(memory))

    @property
    def deletes_in(self) -> float:
        """Seconds until the delete, if it stays idle."""
        return max((self.delete_at - datetime.now(timezone.utc)).total_seconds(), 0.0)


class ServiceIdleDelete:
    """Idle deletes kept by the sandbox service, or by a class gateway's mirror of its routes
    under ``prefix`` ``/gateway`` (:mod:`gpucloud_nb.gateway.idle_routes`; ``where`` is then
    ``gateway``, and the limit travels in the create itself, so :meth:`watch_created` sends
    nothing). See the module docstring.

    ``send(method, path, body)`` makes one request and returns the decoded JSON, raising
    :class:`~gpucloud_nb.errors.GPUCloudError`.
    """

    where = "sandbox service"

    def __init__(self, send: Callable[[str, str, dict[str, Any] | None], object], *,
                 prefix: str = "/sandbox") -> None:
        self._send = send
        self._prefix = prefix
        if prefix != "/sandbox":
            self.where = "gateway"

    def _path(self, instance_id: str, tail: str) -> str:
        if not isinstance(instance_id, str) or not instance_id.strip() or "/" in instance_id:
            raise InvalidInputError(f"{instance_id!r} is not a valid id.")
        return f"{self._prefix}/instances/{instance_id}/{tail}"

    def check(self) -> None:
        """Nothing to check before a create: the service keeps the limits."""

    def watch(self, instance_id: str, after: float | timedelta) -> IdleState:
        """Delete ``instance_id`` once idle for ``after`` seconds (or a ``timedelta``)."""
        seconds = idle_seconds(after)
        answer = self._send("PUT", self._path(instance_id, "idle-delete"), {"seconds": seconds})
        return IdleState.from_json(answer)  # type: ignore[arg-type]

    def watch_created(self, instance_id: str, seconds: float) -> None:
        """The limit of an instance just created, told to the service (a gateway had it in
        the create)."""
        if self.where != "gateway":
            self.watch(instance_id, seconds)

    def cancel(self, instance_id: str) -> bool:
        """Stop watching ``instance_id``; it keeps running. True if it was watched."""
        try:
            self._send("DELETE", self._path(instance_id, "idle-delete"), None)
        except NotFoundError:
            return False
        return True

    def keep(self, instance_id: str) -> IdleState:
        """Start the idle clock of ``instance_id`` again (the "Keep" button)."""
        answer = self._send("POST", self._path(instance_id, "keep"), None)
        return IdleState.from_json(answer)  # type: ignore[arg-type]

    def states(self) -> dict[str, IdleState]:
        """The idle clock of every watched instance of this account."""
        listed = self._send("GET", f"{self._prefix}/idle", None)
        return {state.instance_id: state for state in
                (IdleState.from_json(item) for item in (listed if isinstance(listed, list) else []))}

    def forget(self, instance_id: str) -> None:
        """A deleted instance's limit ends with it (the service drops it); nothing to do."""

    def stop(self) -> None:
        """Nothing runs in this process; the service goes on watching."""


# -- the real cloud: the clocks ---------------------------------------------------------------

@dataclass
class _Clock:
    limit: float
    since: float


class IdleClocks:
    """The idle clocks of some instances of a limits file, one :meth:`step` per poll.

    The Lab extension and a kernel each keep their own, from the same limits; only a Keep
    (``keptAt`` in the file) is shared.

        >>> clocks = IdleClocks()
        >>> clocks.step({"i-1": {"seconds": 60, "keptAt": 0}}, busy=set(), now=1000)
        []
        >>> clocks.step({"i-1": {"seconds": 60, "keptAt": 0}}, busy=set(), now=1060)
        ['i-1']
    """

    def __init__(self) -> None:
        self.clocks: dict[str, _Clock] = {}

    def step(self, limits: dict[str, dict[str, float]], busy: Collection[str],
             now: float | None = None) -> list[str]:
        """Advance the clock of each instance of ``limits``; ``busy`` ones start again. The
        instances idle past their limit; clocks of instances not in ``limits`` are dropped."""
        now = time.time() if now is None else now
        due = []
        for instance_id, entry in limits.items():
            clock = self.clocks.setdefault(instance_id,
                                           _Clock(entry["seconds"], max(entry["keptAt"], now)))
            clock.limit = entry["seconds"]
            clock.since = max(clock.since, entry["keptAt"])  # a Keep from any process
            if instance_id in busy:
                clock.since = now
            elif now - clock.since >= clock.limit:
                due.append(instance_id)
        for gone in [i for i in self.clocks if i not in limits]:
            del self.clocks[gone]
        return due

    def keep(self, instance_id: str, at: float) -> None:
        """Start the clock of ``instance_id`` again from ``at`` (a Keep)."""
        clock = self.clocks.get(instance_id)
        if clock is not None:
            clock.since = max(clock.since, at)

    def states(self, uses: dict[str, tuple[float, float]] | None = None) -> dict[str, IdleState]:
        """Where each clock stands; ``uses`` maps instances to their last ``(util, MiB)``."""
        uses = uses or {}
        now = time.time()
        moment = datetime.fromtimestamp(now, timezone.utc)
        found = {}
        for instance_id, clock in self.clocks.items():
            idle = max(now - clock.since, 0.0)
            delete_at = moment + timedelta(seconds=clock.limit - idle)
            warn_at = delete_at - timedelta(seconds=warn_seconds(clock.limit))
            util, memory = uses.get(instance_id, (None, None))
            found[instance_id] = IdleState(instance_id, clock.limit, idle, delete_at, warn_at,
                                           moment >= warn_at, util, memory)
        return found


# -- the real cloud: this kernel's watcher ------------------------------------------------------

class KernelIdleDelete(KernelWatcher):
    """Idle limits for the real cloud: written to the limits file, and watched by a thread of
    this kernel while JupyterLab does not watch them (see the module docstring).

    ``get(id)`` reads an instance and ``delete(id)`` deletes it, both blocking; ``ssh()`` is the
    client's SSH (the :class:`~gpucloud_nb.client.remote.Remote` its ``run`` uses). ``poll``
    and ``measure_timeout`` are seconds; ``deleted`` maps each instance the watcher deleted to
    when, ``failures`` an instance whose idle delete failed or was not confirmed to the
    sentence saying why.
    """

    where = "JupyterLab server extension while JupyterLab runs, else this kernel"
    thread_name, what, logger = "gpucloud-nb-idle", "idle watcher", log

    def __init__(self, base_url: str, account: str, get: Callable[[str], InstanceDetails],
                 delete: Callable[[str], None], ssh: Callable[[], Remote], *,
                 poll: float = 30.0, measure_timeout: float = 10.0,
                 confirm_within: float = CONFIRM_WITHIN) -> None:
        super().__init__(get, delete, poll=poll, confirm_within=confirm_within)
        self.base_url = base_url
        self.file = IdleLimits(base_url, account)
        self._ssh = ssh
        self.measure_timeout = measure_timeout
        self._mine: set[str] = set()
        self._unsaved: dict[str, dict[str, float]] = {}  # limits the file does not hold yet
        self._clocks = IdleClocks()
        self._polled = time.monotonic()
        self._uses: dict[str, tuple[float, float]] = {}
        self._warned: set[str] = set()
        self._unreadable: set[str] = set()
        self._measuring: dict[str, concurrent.futures.Future[RunResult]] = {}

    @property
    def path(self) -> Path:
        """The limits file."""
        return self.file.path

    def limits(self) -> dict[str, dict[str, float]]:
        """Every limit of the file, this process's or not, and this process's limits the file
        does not hold yet: id → ``{"seconds", "keptAt"}``."""
        with self._lock:
            unsaved = dict(self._unsaved)
        return {**self.file.limits(), **unsaved}

    def lab_watches(self, instance_id: str) -> bool:
        """True while a fresh JupyterLab heartbeat of this account says it watches ``instance_id``."""
        return instance_id in self.file.lab_watches()

    def check(self) -> None:
        """Raise one sentence unless the limits folder can be written (before a create)."""
        self.file.check()

    def watch(self, instance_id: str, after: float | timedelta) -> None:
        """Delete ``instance_id`` once idle for ``after`` seconds (or a ``timedelta``)."""
        seconds = idle_seconds(after)
        self.file.set(instance_id, seconds)
        self._adopt(instance_id, None)

    def watch_created(self, instance_id: str, seconds: float) -> None:
        """The limit of an instance just created: written without waiting for the file's lock,
        else kept in memory (and written at a later poll); never raises nor waits."""
        entry = {"seconds": seconds, "keptAt": time.time()}
        try:
            self.file.set(instance_id, seconds, wait=0)
        except GPUCloudError as error:
            self._adopt(instance_id, entry)
            if not isinstance(error, LockedError):  # merely busy: the next poll writes it
                log.warning("%s: this kernel watches instance %s from memory, and JupyterLab "
                            "cannot see its limit.", error.message.rstrip("."), instance_id)
            return
        self._adopt(instance_id, None)

    def _adopt(self, instance_id: str, unsaved: dict[str, float] | None) -> None:
        with self._lock:
            self._mine.add(instance_id)
            if unsaved is None:
                self._unsaved.pop(instance_id, None)
            else:
                self._unsaved[instance_id] = unsaved
            self._clocks.clocks.pop(instance_id, None)  # a new limit: its clock starts again
            self._start()

    def cancel(self, instance_id: str, *, wait: float = LOCK_WAIT) -> bool:
        """Stop watching ``instance_id``; it keeps running. True if it was watched."""
        with self._lock:
            self._mine.discard(instance_id)
            self._clocks.clocks.pop(instance_id, None)
            held = self._unsaved.pop(instance_id, None) is not None
        return self.file.drop(instance_id, wait=wait) or held

    def keep(self, instance_id: str) -> None:
        """Start the idle clock of ``instance_id`` again (the "Keep" button), for JupyterLab's
        watcher and every kernel's."""
        with self._lock:
            entry = self._unsaved.get(instance_id)
            if entry is not None:
                entry["keptAt"] = at = time.time()
        if entry is None:
            at = self.file.keep(instance_id)
        with self._lock:
            self._clocks.keep(instance_id, at)
            self._warned.discard(instance_id)

    def states(self) -> dict[str, IdleState]:
        """The clocks of this kernel's watcher: the instances it watches now (not those a
        fresh JupyterLab heartbeat names; its sidebar shows those clocks)."""
        with self._lock:
            return self._clocks.states(self._uses)

    def forget(self, instance_id: str) -> None:
        """Drop the limit of a deleted instance; never raises nor waits (a limit left behind
        is harmless: no watcher counts a deleted instance)."""
        with contextlib.suppress(OSError, GPUCloudError):
            self.cancel(instance_id, wait=0)

    # -- the watching ---------------------------------------------------------------------------

    def step(self) -> None:
        """One poll: write the limits not written yet; stand aside for the instances a fresh
        JupyterLab heartbeat names; measure the others this process watches, advance their
        clocks, warn, and delete those idle past their limit."""
        polled, self._polled = self._polled, time.monotonic()  # what ended since counts
        self._save()
        with self._lock:
            mine, unsaved = set(self._mine), dict(self._unsaved)
        limits = {i: entry for i, entry in self.file.limits().items() if i in mine}
        for dropped in mine - set(limits) - set(unsaved):  # cancelled by another process
            with self._lock:
                self._mine.discard(dropped)
        limits.update(unsaved)
        for instance_id in self.file.lab_watches() & set(limits):  # JupyterLab watches it
            del limits[instance_id]
            self._warned.discard(instance_id)
        busy: set[str] = set()
        reachable: dict[str, InstanceDetails] = {}
        for instance_id in list(limits):
            try:
                details = self._get(instance_id)
            except NotFoundError:
                self.forget(instance_id)
                del limits[instance_id]
                continue
            except GPUCloudError as error:  # the cloud cannot be read: nothing can be deleted
                log.warning("Instance %s could not be read for its idle limit: %s", instance_id,
                            error)
                busy.add(instance_id)
                continue
            if details.status in GONE:
                self.forget(instance_id)
                del limits[instance_id]
            elif in_use(active=details.status == "active" and bool(details.ip),
                        open_uses=self._ssh().open_on(instance_id, since=polled),
                        kernel_busy=False,
                        gpu_util=None):
                busy.add(instance_id)  # (this kernel cannot see a remote kernel: the Lab can)
            else:
                reachable[instance_id] = details
        uses = self._measure(reachable)
        busy |= {i for i, (_, peak, _) in uses.items()
                 if in_use(active=True, open_uses=0, kernel_busy=False, gpu_util=peak)}
        with self._lock:
            self._uses.update({i: (util, memory) for i, (util, _, memory) in uses.items()})
            due = self._clocks.step(limits, busy)  # whoever watches next starts afresh
            states = self._clocks.states(self._uses)
            for gone in [i for i in self._uses if i not in limits]:
                del self._uses[gone]
        self._warn(states)
        for instance_id in due:
            self._delete_idle(instance_id, limits[instance_id]["seconds"])

    def _save(self) -> None:
        """Write to the file the limits kept in memory (a create could not); quietly retried."""
        with self._lock:
            unsaved = dict(self._unsaved)
        for instance_id, entry in unsaved.items():
            try:
                self.file.set(instance_id, entry["seconds"], kept_at=entry["keptAt"], wait=1.0)
            except GPUCloudError:
                continue
            with self._lock:
                if self._unsaved.get(instance_id) is entry:
                    del self._unsaved[instance_id]

    def _measure(self, targets: dict[str, InstanceDetails]) -> dict[str, tuple[float, float, float]]:
        """:data:`QUERY` on each instance, all at once, for at most ``measure_timeout`` seconds.

        A measure still running then (an instance slow to connect) is left to end on its own
        (its own timeout stops it) and not started again until it has.
        """
        remote = self._ssh()
        for instance_id, details in targets.items():
            if instance_id not in self._measuring:
                self._measuring[instance_id] = remote.submit(
                    remote.execute(details, QUERY, timeout=self.measure_timeout,
                                   bookkeeping=True))
        asking = {i: self._measuring[i] for i in targets}
        concurrent.futures.wait(list(asking.values()), timeout=self.measure_timeout + 1)
        found = {}
        for instance_id, future in asking.items():
            if not future.done():
                continue
            del self._measuring[instance_id]
            try:
                result = future.result()
            except Exception as error:  # unreachable, no key it accepts: no measure this time
                if instance_id not in self._unreadable:  # said once, not at every poll
                    self._unreadable.add(instance_id)
                    log.warning("The GPU use of instance %s could not be read (%s); it counts "
                                "as idle.", instance_id, error)
                continue
            use = parse_use(result.stdout) if result.exit_status == 0 else None
            if use is not None:
                found[instance_id] = use
                self._unreadable.discard(instance_id)
        return found

    def _warn(self, states: dict[str, IdleState]) -> None:
        for instance_id, state in states.items():
            if not state.warning:
                self._warned.discard(instance_id)
            elif instance_id not in self._warned:
                self._warned.add(instance_id)
                log.warning("Instance %s has been idle for %.0f s; it will be deleted in %.0f s "
                            "unless it is used or kept (cloud.idle_delete.keep).", instance_id,
                            state.idle, state.deletes_in)

    def _delete_idle(self, instance_id: str, limit: float) -> None:
        self._deletes.delete(
            instance_id, self.confirm_within, f"was idle for its limit of {limit:g} s",
            "was idle for its limit", forget=self.forget,
            said=("Deleted instance %s: idle for its limit of %g s (no session or run of this "
                  "kernel, GPU under %g %%).", instance_id, limit, THRESHOLD))

    def _watching(self) -> bool:
        return bool(self._mine)
