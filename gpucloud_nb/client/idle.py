"""Idle deletes: an instance is deleted once nobody has used it for a while.

    >>> instance = cloud.instances.create(..., delete_when_idle=30)  # minutes  # doctest: +SKIP
    >>> cloud.idle_delete.states()[instance.id].warning  # doctest: +SKIP
    False
    >>> cloud.idle_delete.keep(instance.id)  # "Keep": the idle clock starts again  # doctest: +SKIP

An instance is idle while no SSH session or ``run`` is open on it, no remote kernel on it is
busy, and its GPU utilisation stays under 5 % (``nvidia-smi --query-gpu=utilization.gpu``).
Five minutes before the delete (half-way, for a limit under ten minutes) a warning shows.

Who watches, plainly:

- **Sandbox**: the sandbox service (:class:`ServiceIdleDelete`, over the sandbox-only routes of
  :mod:`gpucloud_nb.sandbox.idle`), whether or not a kernel or JupyterLab runs.
- **Real cloud**: the JupyterLab server extension, while JupyterLab runs
  (:class:`LabIdleDelete` writes the limits to a file of this user's that the extension reads:
  ``platformdirs.user_cache_dir("gpucloud-nb")/idle/<cloud>.json``). Without JupyterLab running
  nothing watches, and an idle instance keeps billing: the launch form and the README say so.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpucloud_nb.client import changes
from gpucloud_nb.errors import InvalidInputError, NotFoundError

__all__ = ["IdleState", "LabIdleDelete", "ServiceIdleDelete", "idle_seconds", "limits_path"]


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


def limits_path(base_url: str) -> Path:
    """The file of idle limits for the real cloud at ``base_url``, which the Lab extension reads."""
    stamp = changes.path(base_url)
    return stamp.parent.parent / "idle" / f"{stamp.name}.json"


class LabIdleDelete:
    """Idle limits for the real cloud, kept in a file the JupyterLab server extension watches.

    Each entry is ``{"seconds": limit, "keptAt": Unix time of the last Keep}``.
    """

    where = "JupyterLab server extension (while JupyterLab runs)"

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

    def _write(self, limits: dict[str, dict[str, float]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        part = self.path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(limits), encoding="utf-8")
        os.replace(part, self.path)

    def watch(self, instance_id: str, after: float | timedelta) -> None:
        """Delete ``instance_id`` once idle for ``after`` minutes (or a ``timedelta``)."""
        seconds = idle_seconds(after)
        limits = self.limits()
        limits[instance_id] = {"seconds": seconds, "keptAt": time.time()}
        self._write(limits)

    def cancel(self, instance_id: str) -> bool:
        """Stop watching ``instance_id``; it keeps running. True if it was watched."""
        limits = self.limits()
        found = limits.pop(instance_id, None) is not None
        if found:
            self._write(limits)
        return found

    def keep(self, instance_id: str) -> None:
        """Start the idle clock of ``instance_id`` again (the "Keep" button)."""
        limits = self.limits()
        if instance_id not in limits:
            raise InvalidInputError(f"Instance {instance_id} is not deleted when idle.")
        limits[instance_id]["keptAt"] = time.time()
        self._write(limits)

    def states(self) -> dict[str, IdleState]:
        """Nothing here: on the real cloud the idle clock runs in the JupyterLab extension."""
        return {}

    def forget(self, instance_id: str) -> None:
        """Drop the limit of a deleted instance; never raises."""
        with contextlib.suppress(OSError):
            self.cancel(instance_id)
