"""Rate-limit a repeated action on an asyncio loop, in runs per second and in bytes per second.

    >>> throttle = Throttle(0.1, flush)  # doctest: +SKIP
    >>> for chunk in chunks:  # doctest: +SKIP
    ...     buffer.append(chunk)
    ...     throttle.poke()                 # flush now, or once the interval has passed
    >>> throttle.flush()                    # the last pending call, at once  # doctest: +SKIP

The first ``poke`` runs the action at once (the first words of a reply show without delay);
later pokes within the interval of the last run schedule one call for the end of the interval
(``loop.call_later``), so the action never runs more than ``1 / interval`` times a second and
no poke waits longer than the interval. Everything happens on the loop's own thread.

With ``cost`` (the bytes the next run would send) and ``bytes_per_second``, the interval
stretches so that runs send at most about ``bytes_per_second``: it is
``min(max_interval, max(interval, cost() / bytes_per_second))``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["Throttle"]


class Throttle:
    """Run ``action`` at most once per interval (see the module docstring), never later."""

    def __init__(self, interval: float, action: Callable[[], object], *,
                 cost: Callable[[], float] | None = None, bytes_per_second: float | None = None,
                 max_interval: float | None = None,
                 loop: asyncio.AbstractEventLoop | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.max_interval = max(interval, max_interval if max_interval is not None else 5 * interval)
        self._cost = cost
        self._bytes_per_second = bytes_per_second
        self.runs = 0
        self._action = action
        self._loop = loop
        self._clock = clock
        self._last = float("-inf")
        self._timer: asyncio.TimerHandle | None = None
        self._dirty = False

    @property
    def pending(self) -> bool:
        """True when a poke has not been acted on yet."""
        return self._dirty

    def current_interval(self) -> float:
        """Seconds that must pass between the last run and the next one."""
        if self._cost is None or not self._bytes_per_second:
            return self.interval
        return min(self.max_interval, max(self.interval, self._cost() / self._bytes_per_second))

    def poke(self) -> None:
        """Say there is something new: run now if the interval has passed, else soon."""
        self._dirty = True
        wait = self._last + self.current_interval() - self._clock()
        if wait <= 0:
            self._run()
        elif self._timer is None:
            loop = self._loop or asyncio.get_running_loop()
            self._timer = loop.call_later(wait, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if not self._dirty:
            return
        wait = self._last + self.current_interval() - self._clock()
        if wait > 1e-3:  # the cost grew since the timer was set
            loop = self._loop or asyncio.get_running_loop()
            self._timer = loop.call_later(wait, self._fire)
        else:
            self._run()

    def _run(self) -> None:
        self.cancel()
        self._dirty = False
        self._last = self._clock()
        self.runs += 1
        self._action()

    def flush(self) -> None:
        """Run now if a poke is pending (at the end of a stream)."""
        if self._dirty:
            self._run()

    def cancel(self) -> None:
        """Forget a scheduled run (a pending poke stays pending until :meth:`flush`)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
