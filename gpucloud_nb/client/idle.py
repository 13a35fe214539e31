"""Idle deletes: an instance is deleted once nobody has used it for a while.

    >>> instance = cloud.instances.create(..., delete_when_idle=30)  # minutes  # doctest: +SKIP
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
- **Real cloud**: the limits go to a file of this user's (:class:`IdleLimits`:
  ``platformdirs.user_cache_dir("gpucloud-nb")/idle/<cloud>.json``, ``{"seconds", "keptAt"}``
  per instance). The JupyterLab server extension watches every limit of that file while
  JupyterLab runs (:mod:`gpucloud_nb.lab.idle`), and says so with a heartbeat beside it
  (:func:`lab_heartbeat`, rewritten at each of its polls). Otherwise this kernel watches
  (:class:`KernelIdleDelete`): a daemon thread reads, every ``poll`` seconds (30), the
  instances whose limit this process set, and steps only while the heartbeat is stale (older
  than ``STALE_POLLS`` (3) of the extension's poll intervals) or missing, so the two never
  watch at once. A kernel that is killed, or a client that is closed, watches nothing; a
  JupyterLab started later takes over.

Choices where the issue is silent:

- The kernel watches only the instances whose limit *this process* set (``create(...,
  delete_when_idle=)``, ``cloud.idle_delete.watch``), not every limit of the file: the SSH
  sessions and commands a kernel can see are its own, so the kernel that set a limit is the one
  that can tell whether its instance is in use; and two kernels never measure, nor delete, the
  same instance. An instance whose kernel has gone is watched by JupyterLab if it runs.
- What the kernel sees: an instance is busy at a poll while it is not active yet, while a
  command, copy (SFTP) or port forward of this client is open on it
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
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucloud_nb.client import changes
from gpucloud_nb.client.budgets import CONFIRM_WITHIN, GONE, KernelWatcher
from gpucloud_nb.errors import GPUCloudError, InvalidInputError, NotFoundError
from gpucloud_nb.idle_rule import THRESHOLD, in_use

try:
    import fcntl
except ImportError:  # Windows: threads of one process are still serialised
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from gpucloud_nb.client.remote import Remote, RunResult
    from gpucloud_nb.models import InstanceDetails

__all__ = ["QUERY", "STALE_POLLS", "THRESHOLD", "WARN", "IdleClocks", "IdleLimits", "IdleState",
           "KernelIdleDelete", "ServiceIdleDelete", "idle_seconds", "lab_heartbeat",
           "lab_watching", "limits_path", "parse_use", "warn_seconds"]

log = logging.getLogger("gpucloud_nb.idle")
QUERY = "nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits"
WARN = 300.0
STALE_POLLS = 3.0


def idle_seconds(value: float | timedelta) -> float:
    """An idle limit given as minutes or a ``timedelta``, in seconds, checked to be positive.

        >>> idle_seconds(30), idle_seconds(timedelta(seconds=90))
        (1800.0, 90.0)
    """
    minutes = value.total_seconds() / 60 if isinstance(value, timedelta) else value
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not minutes > 0 \
            or minutes == float("inf"):
        raise InvalidInputError("delete_when_idle must be a positive number of minutes or a "
                                f"timedelta, not {value!r}.")
    return float(minutes) * 60


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
    """Idle deletes kept by the sandbox service (see the module docstring).

    ``send(method, path, body)`` makes one request and returns the decoded JSON, raising
    :class:`~gpucloud_nb.errors.GPUCloudError`.
    """

    where = "sandbox service"

    def __init__(self, send: Callable[[str, str, dict[str, Any] | None], object]) -> None:
        self._send = send

    @staticmethod
    def _path(instance_id: str, tail: str) -> str:
        if not isinstance(instance_id, str) or not instance_id.strip() or "/" in instance_id:
            raise InvalidInputError(f"{instance_id!r} is not a valid id.")
        return f"/sandbox/instances/{instance_id}/{tail}"

    def watch(self, instance_id: str, after: float | timedelta) -> IdleState:
        """Delete ``instance_id`` once idle for ``after`` minutes (or a ``timedelta``)."""
        seconds = idle_seconds(after)
        answer = self._send("PUT", self._path(instance_id, "idle-delete"), {"seconds": seconds})
        return IdleState.from_json(answer)  # type: ignore[arg-type]

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
        listed = self._send("GET", "/sandbox/idle", None)
        return {state.instance_id: state for state in
                (IdleState.from_json(item) for item in (listed if isinstance(listed, list) else []))}

    def forget(self, instance_id: str) -> None:
        """A deleted instance's limit ends with it (the service drops it); nothing to do."""

    def stop(self) -> None:
        """Nothing runs in this process; the service goes on watching."""


# -- the real cloud: the limits file, the Lab's heartbeat, the clocks ---------------------------

def limits_path(base_url: str) -> Path:
    """The file of idle limits for the real cloud at ``base_url`` (read by JupyterLab and kernels)."""
    stamp = changes.path(base_url)
    return stamp.parent.parent / "idle" / f"{stamp.name}.json"


_THREADS = threading.Lock()  # the limits files' writers of this process, one at a time


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
    part.write_text(json.dumps(data), encoding="utf-8")
    os.replace(part, path)


def _heartbeat_path(base_url: str) -> Path:
    return limits_path(base_url).with_suffix(".lab.json")


def lab_heartbeat(base_url: str, every: float) -> None:
    """Say that the JupyterLab extension watches the limits of ``base_url`` and polls every
    ``every`` seconds (the poller calls it at each poll); never raises."""
    with contextlib.suppress(OSError, ValueError):
        _write_json(_heartbeat_path(base_url),
                    {"pid": os.getpid(), "at": time.time(), "every": float(every)})


def lab_watching(base_url: str) -> bool:
    """True while the JupyterLab extension's heartbeat for ``base_url`` is fresh: written less
    than ``STALE_POLLS`` of its poll intervals ago.

        >>> lab_watching("http://127.0.0.1:9")  # no JupyterLab here
        False
    """
    try:
        beat = json.loads(_heartbeat_path(base_url).read_text(encoding="utf-8"))
        at, every = float(beat["at"]), float(beat["every"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return time.time() - at <= STALE_POLLS * every


class IdleLimits:
    """The file of idle limits for the real cloud at ``base_url`` (see the module docstring).

    Each entry is ``{"seconds": limit, "keptAt": Unix time of the last Keep}``.
    """

    def __init__(self, base_url: str) -> None:
        self.path = limits_path(base_url)

    def limits(self) -> dict[str, dict[str, float]]:
        """Instance id → ``{"seconds", "keptAt"}`` (``{}`` when the file is missing or unreadable)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        found = {}
        for key, entry in (data.items() if isinstance(data, dict) else []):
            with contextlib.suppress(KeyError, TypeError, ValueError):
                found[str(key)] = {"seconds": float(entry["seconds"]),
                                   "keptAt": float(entry.get("keptAt") or 0.0)}
        return found

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, dict[str, float]]]:
        """The limits to change, written back at the end; one process and thread at a time
        (an exclusive ``flock`` on ``<file>.lock`` where there is one), so two kernels that set
        limits at once never lose one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _THREADS, open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            limits = self.limits()
            yield limits
            _write_json(self.path, limits)

    def set(self, instance_id: str, seconds: float) -> None:
        """Limit ``instance_id`` to ``seconds`` idle; its clock starts now."""
        with self._changing() as limits:
            limits[instance_id] = {"seconds": seconds, "keptAt": time.time()}

    def drop(self, instance_id: str) -> bool:
        """Remove the limit of ``instance_id``; True if it had one."""
        with self._changing() as limits:
            return limits.pop(instance_id, None) is not None

    def keep(self, instance_id: str) -> float:
        """Start the idle clock of ``instance_id`` again, for every watcher; the time of the Keep."""
        with self._changing() as limits:
            if instance_id not in limits:
                raise InvalidInputError(f"Instance {instance_id} is not deleted when idle.")
            limits[instance_id]["keptAt"] = now = time.time()
        return now


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

    def __init__(self, base_url: str, get: Callable[[str], InstanceDetails],
                 delete: Callable[[str], None], ssh: Callable[[], Remote], *,
                 poll: float = 30.0, measure_timeout: float = 10.0,
                 confirm_within: float = CONFIRM_WITHIN) -> None:
        super().__init__(get, delete, poll=poll, confirm_within=confirm_within)
        self.base_url = base_url
        self.file = IdleLimits(base_url)
        self._ssh = ssh
        self.measure_timeout = measure_timeout
        self._mine: set[str] = set()
        self._clocks = IdleClocks()
        self._uses: dict[str, tuple[float, float]] = {}
        self._warned: set[str] = set()
        self._unreadable: set[str] = set()
        self._measuring: dict[str, concurrent.futures.Future[RunResult]] = {}

    @property
    def path(self) -> Path:
        """The limits file."""
        return self.file.path

    def limits(self) -> dict[str, dict[str, float]]:
        """Every limit of the file, this process's or not: id → ``{"seconds", "keptAt"}``."""
        return self.file.limits()

    def watch(self, instance_id: str, after: float | timedelta) -> None:
        """Delete ``instance_id`` once idle for ``after`` minutes (or a ``timedelta``)."""
        seconds = idle_seconds(after)
        self.file.set(instance_id, seconds)
        with self._lock:
            self._mine.add(instance_id)
            self._clocks.clocks.pop(instance_id, None)  # a new limit: its clock starts again
            self._start()

    def cancel(self, instance_id: str) -> bool:
        """Stop watching ``instance_id``; it keeps running. True if it was watched."""
        with self._lock:
            self._mine.discard(instance_id)
            self._clocks.clocks.pop(instance_id, None)
        return self.file.drop(instance_id)

    def keep(self, instance_id: str) -> None:
        """Start the idle clock of ``instance_id`` again (the "Keep" button), for JupyterLab's
        watcher and every kernel's."""
        at = self.file.keep(instance_id)
        with self._lock:
            self._clocks.keep(instance_id, at)
            self._warned.discard(instance_id)

    def states(self) -> dict[str, IdleState]:
        """The clocks of this kernel's watcher: the instances it watches now (none while
        JupyterLab watches; its sidebar shows those clocks)."""
        with self._lock:
            return self._clocks.states(self._uses)

    def forget(self, instance_id: str) -> None:
        """Drop the limit of a deleted instance; never raises."""
        with contextlib.suppress(OSError):
            self.cancel(instance_id)

    # -- the watching ---------------------------------------------------------------------------

    def step(self) -> None:
        """One poll: stand aside while JupyterLab watches; else measure each instance this
        process watches, advance the clocks, warn, and delete those idle past their limit."""
        if lab_watching(self.base_url):
            with self._lock:  # whoever watches next starts the clocks afresh
                self._clocks.clocks.clear()
                self._warned.clear()
            return
        with self._lock:
            mine = set(self._mine)
        limits = {i: entry for i, entry in self.file.limits().items() if i in mine}
        for dropped in mine - set(limits):  # cancelled by another process
            with self._lock:
                self._mine.discard(dropped)
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
                        open_uses=self._ssh().open_on(instance_id), kernel_busy=False,
                        gpu_util=None):
                busy.add(instance_id)  # (this kernel cannot see a remote kernel: the Lab can)
            else:
                reachable[instance_id] = details
        uses = self._measure(reachable)
        busy |= {i for i, (_, peak, _) in uses.items()
                 if in_use(active=True, open_uses=0, kernel_busy=False, gpu_util=peak)}
        with self._lock:
            self._uses.update({i: (util, memory) for i, (util, _, memory) in uses.items()})
            due = self._clocks.step(limits, busy)
            states = self._clocks.states(self._uses)
            for gone in [i for i in self._uses if i not in limits]:
                del self._uses[gone]
        self._warn(states)
        for instance_id in due:
            self._delete_idle(instance_id, limits[instance_id]["seconds"])

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
