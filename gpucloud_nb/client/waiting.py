"""The one poll loop of ``wait_until_active``, for GPU and inference instances alike.

    >>> details = yield from poll_until(first, again, settled, late, timeout=900.0,  # doctest: +SKIP
    ...                                 on_progress=None, poll_interval=0.5, max_poll_interval=10.0)

A sans-I/O generator (run by either driver): ``on_progress(details, elapsed)`` after every read,
``settled(details)`` true when done (it raises itself when the instance will never be),
``late(details, timeout)`` the sentence of the :class:`~gpucloud_nb.errors.WaitTimeoutError`
after ``timeout`` seconds. The wait between reads starts at ``poll_interval`` and grows by half
each time up to ``max_poll_interval``, never past the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from gpucloud_nb.client._ops import Op, Sleep
from gpucloud_nb.errors import WaitTimeoutError

__all__ = ["poll_until"]

R = TypeVar("R")


def poll_until(first: R, again: Callable[[R], Op[R]], settled: Callable[[R], bool],
               late: Callable[[R, float], str], *, timeout: float,
               on_progress: Callable[[R, float], Any] | None, poll_interval: float,
               max_poll_interval: float) -> Op[R]:
    """Read ``again(details)`` until ``settled``; the details then (see the module docs)."""
    start = time.monotonic()
    interval, details = poll_interval, first
    while True:
        elapsed = time.monotonic() - start
        if on_progress is not None:
            on_progress(details, elapsed)
        if settled(details):
            return details
        if elapsed >= timeout:
            raise WaitTimeoutError(late(details, timeout))
        yield Sleep(min(interval, max(timeout - elapsed, 0.0)))
        interval = min(interval * 1.5, max_poll_interval)
        details = yield from again(details)
