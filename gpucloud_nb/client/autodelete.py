"""Auto-delete timers: instances deleted when their time is up, from this Python process.

On the real cloud, a timer lives in a background thread of the kernel that set it
(:class:`AutoDelete`), and keeps working after ``cloud.close()`` (it then deletes through a
short-lived connection of its own). Every failure of a timed delete is kept in ``failures`` and
shown by the instances panel. On the sandbox, the sandbox service keeps the timers
(:class:`ServiceAutoDelete`), so they outlive the kernel, as a cloud-side timer would; through a
class gateway, the gateway keeps them the same way (see :mod:`gpucloud_nb.client.gateway`). What a
kernel's timer cannot do, plainly: a kernel that is killed, restarted or loses its network cannot
delete anything, and the cloud keeps billing; keep ``cloud.spend()`` in view and delete by hand
when in doubt.

    >>> instance = cloud.instances.create(..., delete_after=3600)  # doctest: +SKIP
    >>> cloud.auto_delete.remaining(instance.id)  # doctest: +SKIP
    3599.2
    >>> cloud.auto_delete.extend(instance.id, 1800)  # doctest: +SKIP
    >>> cloud.auto_delete.cancel(instance.id)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from gpucloud_nb.errors import GPUCloudError, InvalidInputError, NotFoundError

__all__ = ["AutoDelete", "ServiceAutoDelete", "seconds"]

log = logging.getLogger("gpucloud_nb.autodelete")


def seconds(value: float | timedelta) -> float:
    """A delay given as seconds or a ``timedelta``, checked to be positive and finite."""
    delay = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay > 0 \
            or not math.isfinite(delay):
        raise InvalidInputError(
            f"delete_after must be a positive number of seconds or a timedelta, not {value!r}."
        )
    return float(delay)


def _sentence(error: Exception) -> str:
    """One sentence for a failed timed delete; our errors already are one."""
    if isinstance(error, GPUCloudError):
        return str(error)
    return (f"The delete could not be sent ({type(error).__name__}: {error}); "
            "the instance may still be billing.")


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


class AutoDelete(_Timers):
    """The auto-delete timers of one client.

    ``deleted`` maps each instance the timers deleted to when; ``failures`` maps an instance
    whose timed delete failed to the sentence saying why. ``where`` says who keeps the timers.
    """

    where = "this kernel"

    def __init__(self, delete: Callable[[str], None]) -> None:
        self._delete = delete
        self._timers: dict[str, tuple[threading.Timer, float]] = {}
        self._lock = threading.Lock()
        self.deleted: dict[str, datetime] = {}
        self.failures: dict[str, str] = {}

    def schedule(self, instance_id: str, after: float | timedelta) -> datetime:
        """Delete ``instance_id`` after ``after`` seconds; replaces an earlier timer. Returns when."""
        delay = seconds(after)
        timer = threading.Timer(delay, self._fire, args=(instance_id,))
        timer.daemon = True
        with self._lock:
            old = self._timers.pop(instance_id, None)
            if old:
                old[0].cancel()
            self._timers[instance_id] = (timer, time.monotonic() + delay)
        timer.start()
        return datetime.now(timezone.utc) + timedelta(seconds=delay)

    def cancel(self, instance_id: str) -> bool:
        """Stop the timer of ``instance_id``; the instance keeps running. True if there was one."""
        with self._lock:
            entry = self._timers.pop(instance_id, None)
        if entry:
            entry[0].cancel()
        return entry is not None

    def remaining(self, instance_id: str) -> float | None:
        """Seconds until ``instance_id`` is deleted, or ``None`` without a timer."""
        with self._lock:
            entry = self._timers.get(instance_id)
        return None if entry is None else max(entry[1] - time.monotonic(), 0.0)

    def deadlines(self) -> dict[str, datetime]:
        """When each timed instance will be deleted."""
        now_wall, now = datetime.now(timezone.utc), time.monotonic()
        with self._lock:
            return {key: now_wall + timedelta(seconds=max(due - now, 0.0))
                    for key, (_, due) in self._timers.items()}

    def cancel_all(self) -> None:
        """Stop every timer (the instances keep running)."""
        with self._lock:
            entries, self._timers = list(self._timers.values()), {}
        for timer, _ in entries:
            timer.cancel()

    def _fire(self, instance_id: str) -> None:
        with self._lock:
            entry = self._timers.get(instance_id)
            if entry is None or entry[0] is not threading.current_thread():
                return  # cancelled or replaced while waiting
        # The timer stays listed (remaining 0) until the delete has reached the cloud, so nobody
        # sees the instance as running with no timer in between.
        try:
            self._delete(instance_id)
        except NotFoundError:
            pass
        except Exception as error:  # a timer thread has nobody above it: record every failure
            self.failures[instance_id] = _sentence(error)
            log.warning("Auto-delete of instance %s failed: %s", instance_id,
                        self.failures[instance_id])
        else:
            self.deleted[instance_id] = datetime.now(timezone.utc)
            log.info("Auto-deleted instance %s.", instance_id)
        finally:
            with self._lock:
                if self._timers.get(instance_id, (None,))[0] is threading.current_thread():
                    del self._timers[instance_id]


class ServiceAutoDelete(_Timers):
    """Auto-delete timers kept by the sandbox service: they fire whether or not a kernel runs.

    The same methods as :class:`AutoDelete`, over the sandbox-only endpoints
    ``/sandbox/instances/{id}/auto-delete`` and ``/sandbox/auto-deletes``
    (:mod:`gpucloud_nb.sandbox.service_api`), or a class gateway's mirror of them under
    ``prefix`` ``/gateway`` (:mod:`gpucloud_nb.gateway.timers`; ``where`` is then ``gateway``).
    ``send(method, path, body)`` makes one request and returns the decoded JSON (``None`` for
    an empty answer), raising :class:`GPUCloudError`.
    The deadlines are read at most every ``refresh`` seconds. ``deleted`` and ``failures`` stay
    empty: the service does the deleting (see ``gpucloud-nb sandbox logs``).
    """

    where = "sandbox service"

    def __init__(self, send: Callable[[str, str, dict[str, str] | None], object], *,
                 refresh: float = 0.25, prefix: str = "/sandbox") -> None:
        self._send = send
        self._prefix = prefix
        if prefix != "/sandbox":
            self.where = "gateway"

        self._refresh = refresh
        self._cached: tuple[float, dict[str, datetime]] | None = None
        self._lock = threading.Lock()
        self.deleted: dict[str, datetime] = {}
        self.failures: dict[str, str] = {}

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
