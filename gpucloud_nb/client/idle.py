"""Idle deletes: an instance is deleted once nobody has used it for a while.

    >>> instance = cloud.instances.create(..., delete_when_idle=1800)  # seconds  # doctest: +SKIP
    >>> cloud.idle_delete.states()[instance.id].warning  # doctest: +SKIP
    False
    >>> cloud.idle_delete.keep(instance.id)  # "Keep": the idle clock starts again  # doctest: +SKIP

An instance is idle while no SSH session, ``run``, copy or forward of the user is open on it, no
kernel on it is executing code, and its GPU utilisation stays under ``THRESHOLD`` % (5): the one
rule, :func:`gpucloud_nb.idle_rule.in_use`. An idle kernel is not use. Five minutes before the
delete (half-way, for a limit under ten minutes) a warning shows.

Who watches (issue #36: every money rule in one place, never a thread of this process):

- **A gateway** (the personal gateway ``connect()`` puts in front of the real cloud, or a
  class's; :mod:`gpucloud_nb.client.gateway`): :class:`ServiceIdleDelete` with
  ``prefix="/gateway"``, with no kernel or JupyterLab running; it reads GPU use over SSH with
  its own key and counts what clients report (:mod:`gpucloud_nb.client.use_report`; the Lab
  server extension reports its kernels while they execute, :meth:`ServiceIdleDelete.report_use`).
- **The cloud directly** (``GPUCLOUD_GATEWAY=off``): nobody (:class:`UnkeptIdleDelete`); a
  create with ``delete_when_idle`` is refused in one sentence before anything is sent.

Durations are seconds (an ``int`` or ``float``) or a ``timedelta``, as ``delete_after`` is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from gpucloud_nb.errors import InvalidInputError, NotFoundError
from gpucloud_nb.idle_rule import THRESHOLD

__all__ = ["QUERY", "THRESHOLD", "IdleState", "ServiceIdleDelete", "UnkeptIdleDelete",
           "idle_seconds", "parse_use"]

QUERY = "nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits"


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
        """A state from the gateway's JSON (``GET /gateway/idle``)."""
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
    """Idle deletes kept by a gateway, under ``prefix`` ``/gateway``
    (:mod:`gpucloud_nb.gateway.idle_routes`; ``where`` is
    ``gateway``, and the limit travels in the create itself, so :meth:`watch_created` sends
    nothing). See the module docstring.

    ``send(method, path, body)`` makes one request and returns the decoded JSON, raising
    :class:`~gpucloud_nb.errors.GPUCloudError`.
    """

    where = "gateway"

    def __init__(self, send: Callable[[str, str, dict[str, Any] | None], object], *,
                 prefix: str = "/gateway") -> None:
        self._send = send
        self._prefix = prefix

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
        """The limit of an instance just created: nothing to send, the gateway had it in the
        create."""

    def report_use(self, instance_id: str, seconds: float) -> None:
        """``instance_id`` is in use for the next ``seconds`` (a kernel on it executing code):
        the gateway's ``POST /gateway/instances/{id}/use``."""
        self._send("POST", self._path(instance_id, "use"), {"seconds": seconds})

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


class UnkeptIdleDelete:
    """Idle deletes where nobody keeps them: a client of the cloud directly, not through a
    gateway. A limit is one sentence saying why (:func:`~gpucloud_nb.client.gateway.unkept`),
    also before a create (:meth:`check`); the rest reads as no limits.

        >>> UnkeptIdleDelete().states()
        {}
    """

    where = "nobody"

    def check(self) -> None:
        """Refused before a create: nothing would watch the limit."""
        from gpucloud_nb.client.gateway import unkept

        raise InvalidInputError(unkept("delete_when_idle", at_create=True))

    def watch(self, instance_id: str, after: float | timedelta) -> IdleState:
        """Refused: nothing would watch it."""
        from gpucloud_nb.client.gateway import unkept

        idle_seconds(after)
        raise InvalidInputError(unkept("delete_when_idle"))

    def watch_created(self, instance_id: str, seconds: float) -> None:
        """Never reached: :meth:`check` refused the create."""

    def keep(self, instance_id: str) -> IdleState:
        """Refused: no idle clock runs anywhere."""
        raise InvalidInputError(f"Instance {instance_id} has no idle delete to keep: nothing "
                                "watches money without a gateway.")

    def report_use(self, instance_id: str, seconds: float) -> None:
        """Nobody to tell."""

    def cancel(self, instance_id: str) -> bool:
        """Nothing to cancel."""
        return False

    def states(self) -> dict[str, IdleState]:
        """No limit is kept here."""
        return {}

    def forget(self, instance_id: str) -> None:
        """Nothing is kept."""

    def stop(self) -> None:
        """Nothing runs in this process."""
