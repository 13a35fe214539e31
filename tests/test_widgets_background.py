"""The widgets' background work (:mod:`gpucloud_nb.widgets._background`)."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import wait_for

from gpucloud_nb.widgets._background import Debouncer, Repeater, settle


def test_debouncer_immediate_and_coalescing() -> None:
    calls: list[float] = []
    now = Debouncer(0, lambda: calls.append(time.monotonic()))
    now()
    assert len(calls) == 1

    calls.clear()
    later = Debouncer(0.05, lambda: calls.append(time.monotonic()))
    for _ in range(5):
        later()
    assert later.pending and calls == []
    wait_for(lambda: len(calls) == 1)
    time.sleep(0.1)
    assert len(calls) == 1 and not later.pending

    slow = Debouncer(30, lambda: calls.append(0.0))
    slow()
    slow.flush()
    assert len(calls) == 2 and not slow.pending
    slow()
    slow.cancel()
    assert not slow.pending and len(calls) == 2


def test_repeater_runs_until_stopped_and_restarts() -> None:
    ticks = []
    event = threading.Event()

    def tick() -> None:
        ticks.append(1)
        if len(ticks) >= 3:
            event.set()

    repeater = Repeater(0.01, tick)
    repeater.start()
    repeater.start()  # no second thread
    assert repeater.running and event.wait(2)
    repeater.stop()
    assert not repeater.running
    count = len(ticks)
    time.sleep(0.05)
    assert len(ticks) <= count + 1
    repeater.start()
    wait_for(lambda: len(ticks) > count + 1)
    repeater.stop()


def test_settle_resolves_once_and_lets_bugs_surface() -> None:
    from concurrent.futures import Future

    future: Future[int] = Future()
    assert settle(future, 1) is True
    assert settle(future, error=ValueError("late")) is False  # a stop won the race: fine
    assert future.result() == 1
    with pytest.raises(AttributeError):  # not a Future at all: a bug, not a race
        settle(None, 1)  # type: ignore[arg-type]
