"""A token bucket per key: ``rate`` requests per second, bursts of up to ``burst``.

    >>> bucket = TokenBuckets(rate=2.0)
    >>> bucket.take("secret"), bucket.take("secret"), bucket.take("secret") > 0
    (0.0, 0.0, True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["TokenBuckets"]


class TokenBuckets:
    """One bucket per key, each refilled at ``rate`` tokens/second up to ``burst`` tokens.

    ``burst`` defaults to ``max(1, rate)``: one second's worth of requests may arrive at once.
    """

    def __init__(self, rate: float, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0:
            raise ValueError("rate must be a positive number of requests per second.")
        self.rate = float(rate)
        self.burst = float(burst) if burst is not None else max(1.0, self.rate)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take a token for ``key``: ``0.0`` when allowed, else the seconds until one is free."""
        with self._lock:
            now = self._clock()
            tokens, at = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
