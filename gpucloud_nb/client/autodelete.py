"""Auto-delete timers: instances deleted when their time is up, by whoever keeps money rules.

Never by this process (issue #36: every money rule in one place). Through a gateway (the personal
gateway ``connect()`` puts in front of the real cloud, or a class's), the gateway keeps the
timers (:class:`ServiceAutoDelete` with ``prefix="/gateway"``, see
:mod:`gpucloud_nb.client.gateway`), whether or not a kernel runs; on the sandbox, the personal
gateway in front of it. A client of the cloud (or the sandbox) directly (``GPUCLOUD_GATEWAY=off``,
or ``GPUCloud`` built on its own URL) has
:class:`UnkeptAutoDelete`: nothing would fire a timer, so one is refused in one sentence, and a
create with ``delete_after`` is refused before the POST.

    >>> instance = cloud.instances.create(..., delete_after=3600)  # doctest: +SKIP
    >>> cloud.auto_delete.remaining(instance.id)  # doctest: +SKIP
    3599.2
    >>> cloud.auto_delete.extend(instance.id, 1800)  # doctest: +SKIP
    >>> cloud.auto_delete.cancel(instance.id)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from gpucloud_nb.errors import InvalidInputError, NotFoundError

__all__ = ["ServiceAutoDelete", "UnkeptAutoDelete", "seconds"]


def seconds(value: float | timedelta) -> float:
    """A delay given as seconds or a ``timedelta``, checked to be positive and finite."""
    delay = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay > 0 \
            or not math.isfinite(delay):
        raise InvalidInputError(
            f"delete_after must be a positive number of seconds or a timedelta, not {value!r}."
        )
    return float(delay)


class _Timers:
    """What both kinds of timers share: extending is rescheduling from what remains."""

    def schedule(self, instance_id: str, after: float | timedelta) -> datetime:
        raise NotImplementedError

    def remaining(self, instance_id: str) -> float | None:
        raise NotImplementedError

    def extend(self, instance_id: str, by: float | timedelta) -> datetime:
        """Push the deletion of ``instance_id`` back by ``by`` seconds. Returns the new time."""
        remaining = self.remaining(instance_id)
        if remaining is None:
            raise InvalidInputError(f"Instance {instance_id} has no auto-delete timer to extend.")
        return self.schedule(instance_id, remaining + seconds(by))


class ServiceAutoDelete(_Timers):
    """Auto-delete timers kept by a gateway: they fire whether or not a kernel runs.

    Over a gateway's (personal or a class's) ``/gateway/instances/{id}/auto-delete`` and
    ``/gateway/auto-deletes`` (:mod:`gpucloud_nb.gateway.timers`).
    ``send(method, path, body)`` makes one request and returns the decoded JSON (``None`` for
    an empty answer), raising :class:`GPUCloudError`.
    The deadlines are read at most every ``refresh`` seconds; the keeper does the deleting, and
    says what it deleted (the gateway's audit).
    """

    where = "gateway"

    def __init__(self, send: Callable[[str, str, dict[str, str] | None], object], *,
                 refresh: float = 0.25, prefix: str = "/gateway") -> None:
        self._send = send
        self._prefix = prefix
        self._refresh = refresh
        self._cached: tuple[float, dict[str, datetime]] | None = None
        self._lock = threading.Lock()

    def _path(self, instance_id: str) -> str:
        if not isinstance(instance_id, str) or not instance_id.strip() or "/" in instance_id:
            raise InvalidInputError(f"{instance_id!r} is not a valid id.")
        return f"{self._prefix}/instances/{instance_id}/auto-delete"

    def schedule(self, instance_id: str, after: float | timedelta) -> datetime:
        """Have the service delete ``instance_id`` after ``after`` seconds; replaces an earlier
        timer. Returns when."""
        when = datetime.now(timezone.utc) + timedelta(seconds=seconds(after))
        at = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self._send("PUT", self._path(instance_id), {"at": at})
        self._cached = None
        return when

    def cancel(self, instance_id: str) -> bool:
        """Stop the timer of ``instance_id``; the instance keeps running. True if there was one."""
        try:
            self._send("DELETE", self._path(instance_id), None)
        except NotFoundError:
            return False
        finally:
            self._cached = None
        return True

    def remaining(self, instance_id: str) -> float | None:
        """Seconds until ``instance_id`` is deleted, or ``None`` without a timer."""
        when = self.deadlines().get(instance_id)
        if when is None:
            return None
        return max((when - datetime.now(timezone.utc)).total_seconds(), 0.0)

    def deadlines(self) -> dict[str, datetime]:
        """When each timed instance of this account will be deleted."""
        with self._lock:
            cached = self._cached
            if cached is not None and time.monotonic() - cached[0] < self._refresh:
                return dict(cached[1])
            listed = self._send("GET", f"{self._prefix}/auto-deletes", None)
            found: dict[str, datetime] = {}
            for item in listed if isinstance(listed, list) else []:
                try:
                    found[str(item["instanceId"])] = datetime.fromisoformat(
                        str(item["at"]).replace("Z", "+00:00"))
                except (KeyError, TypeError, ValueError):
                    continue
            self._cached = (time.monotonic(), found)
            return dict(found)

    def cancel_all(self) -> None:
        """Stop every timer of this account (the instances keep running)."""
        for instance_id in self.deadlines():
            self.cancel(instance_id)


class UnkeptAutoDelete(_Timers):
    """Timers where nobody keeps them: a client of the cloud directly, not through a gateway.
    Setting one is one sentence saying why (:func:`~gpucloud_nb.client.gateway.unkept`); the
    rest reads as no timers.

        >>> UnkeptAutoDelete().deadlines()
        {}
    """

    where = "nobody"

    def schedule(self, instance_id: str, after: float | timedelta) -> datetime:
        """Refused: nothing would fire it."""
        from gpucloud_nb.client.gateway import unkept

        seconds(after)
        raise InvalidInputError(unkept("delete_after"))

    def cancel(self, instance_id: str) -> bool:
        """Nothing to cancel."""
        return False

    def remaining(self, instance_id: str) -> float | None:
        """No timer is kept here."""
        return None

    def deadlines(self) -> dict[str, datetime]:
        """No timer is kept here."""
        return {}

    def cancel_all(self) -> None:
        """Nothing to cancel."""
