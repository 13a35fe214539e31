"""Auto-delete timers: instances deleted when their time is up, from this Python process.

A timer lives in a background thread of the kernel that set it, and keeps working after
``cloud.close()`` (it then deletes through a short-lived connection of its own). Every failure of
a timed delete is kept in ``failures`` and shown by the instances panel. What it cannot do, plainly: a
kernel that is killed, restarted or loses its network cannot delete anything, and the cloud keeps
billing; keep ``cloud.spend()`` in view and delete by hand when in doubt.

    >>> instance = cloud.instances.create(..., delete_after=3600)
    >>> cloud.auto_delete.remaining(instance.id)
    3599.2
    >>> cloud.auto_delete.extend(instance.id, 1800)
    >>> cloud.auto_delete.cancel(instance.id)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from gpucloud_nb.errors import GPUCloudError, InvalidInputError, NotFoundError

__all__ = ["AutoDelete", "seconds"]

log = logging.getLogger("gpucloud_nb.autodelete")


def seconds(value: float | timedelta) -> float:
    """A delay given as seconds or a ``timedelta``, checked to be positive."""
    delay = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay > 0:
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


class AutoDelete:
    """The auto-delete timers of one client.

    ``deleted`` maps each instance the timers deleted to when; ``failures`` maps an instance
    whose timed delete failed to the sentence saying why.
    """

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

    def extend(self, instance_id: str, by: float | timedelta) -> datetime:
        """Push the deletion of ``instance_id`` back by ``by`` seconds. Returns the new time."""
        remaining = self.remaining(instance_id)
        if remaining is None:
            raise InvalidInputError(f"Instance {instance_id} has no auto-delete timer to extend.")
        return self.schedule(instance_id, remaining + seconds(by))

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
