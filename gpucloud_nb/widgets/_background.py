"""The widgets' background work: a Future settled once, a debounced call, a periodic refresh in
a daemon thread that ends with its widget, and a panel's tick that stops after failures.

Background work runs in daemon threads, so a kernel can always exit and headless tests need no
event loop; ipykernel accepts widget updates from any thread.

    >>> calls = []
    >>> Debouncer(0, lambda: calls.append(1))()
    >>> calls
    [1]
"""

from __future__ import annotations

import atexit
import inspect
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from gpucloud_nb.widgets._status import StatusLine, log

__all__ = ["MAX_FAILURES", "Debouncer", "RefreshTicks", "Repeater", "settle", "stop_all_repeaters"]


def settle(future: Future[Any], result: Any = None, error: BaseException | None = None) -> bool:
    """Resolve ``future`` unless it is already done; return True when this call resolved it."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # already settled: a stop won the race
        return False
    return True


class Debouncer:
    """Call ``function`` once, ``delay`` seconds after the last trigger; ``delay=0`` calls at once.

    The delayed call runs in a timer thread; ``function`` must not raise (wrap it with
    :func:`guarded`).
    """

    def __init__(self, delay: float, function: Callable[[], Any]) -> None:
        self.delay = delay
        self._function = function
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        """True while a delayed call is waiting."""
        return self._timer is not None

    def __call__(self) -> None:
        if self.delay <= 0:
            self.cancel()
            self._function()
            return
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            timer = threading.Timer(self.delay, self._fire)
            timer.daemon = True
            self._timer = timer
            timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._timer is None or threading.current_thread() is not self._timer:
                return
            self._timer = None
        self._function()

    def cancel(self) -> None:
        """Forget a waiting call."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def flush(self) -> None:
        """Make a waiting call now."""
        if self.pending:
            self.cancel()
            self._function()


#: Every Repeater that may be running, so that Python's exit (a kernel shutting down) stops them.
_REPEATERS: weakref.WeakSet[Repeater] = weakref.WeakSet()


@atexit.register
def stop_all_repeaters() -> None:
    """Stop every periodic refresh (run at interpreter exit)."""
    for repeater in list(_REPEATERS):
        repeater.close()


class Repeater:
    """Call ``function`` every ``interval`` seconds in a daemon thread, between start and stop.

    ``function`` may call :meth:`stop` itself; a later :meth:`start` begins a fresh thread. A
    bound method is held weakly: once its widget is garbage-collected the thread ends by itself,
    so a dropped widget never polls on. Every repeater stops when Python exits.
    """

    def __init__(self, interval: float, function: Callable[[], Any], name: str = "gpucloud-nb-timer"):
        self.interval = interval
        self._function: Callable[[], Callable[[], Any] | None] = (
            weakref.WeakMethod(function) if inspect.ismethod(function) else lambda: function)
        self._name = name
        self._stop: threading.Event | None = None
        self._closed = False
        self._lock = threading.Lock()
        _REPEATERS.add(self)

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._stop is not None and not self._stop.is_set()

    def start(self, interval: float | None = None) -> None:
        """Start calling, unless already running; a shorter ``interval`` cuts the current wait."""
        with self._lock:
            if interval is not None:
                shorter = interval < self.interval
                self.interval = interval
                if shorter and self._stop is not None:
                    self._stop.set()  # the old thread ends; a new one waits the new interval
            if self.running or self._closed:
                return
            stop = threading.Event()
            self._stop = stop
            threading.Thread(target=self._loop, args=(stop,), name=self._name, daemon=True).start()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            function = self._function()
            if function is None:  # its widget was garbage-collected
                stop.set()
                return
            try:
                function()
            except Exception:
                log.debug("A periodic widget refresh failed", exc_info=True)
            del function  # hold the widget only while calling it

    def stop(self) -> None:
        """Stop calling (a call in progress finishes)."""
        with self._lock:
            if self._stop is not None:
                self._stop.set()

    def close(self) -> None:
        """Stop for good: a later :meth:`start` (say, from a refresh still running) does nothing."""
        with self._lock:
            self._closed = True
        self.stop()


MAX_FAILURES = 3


class RefreshTicks:
    """The tick of a panel that refreshes itself through a :class:`Repeater` (``_poller``):
    after :data:`MAX_FAILURES` failed refreshes in a row it stops, and its status line says so
    (the failure itself is already there, from ``refresh``)."""

    _poller: Repeater
    _failures: int = 0
    status: StatusLine

    def refresh(self) -> Any:
        raise NotImplementedError

    def _tick(self) -> None:
        try:
            self.refresh()
        except Exception:
            self._failures += 1
            if self._failures >= MAX_FAILURES:
                self._poller.stop()
                self.status.error(f"Auto-refresh stopped after {MAX_FAILURES} failed refreshes; "
                                  "press Refresh to try again.")
        else:
            self._failures = 0
