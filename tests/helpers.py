"""Helpers the tests share (one copy each)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout: float = 5.0, *,
             what: Callable[[], str] = lambda: "") -> None:
    """Poll ``condition`` until it is true; fail after ``timeout`` seconds, saying ``what()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = what()
            raise AssertionError("condition not met in time" + (f"; {detail}" if detail else ""))
        time.sleep(0.01)
