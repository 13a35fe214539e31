"""The use reports' thread (gpucloud_nb.client.use_report): stopped with its client."""

from __future__ import annotations

import threading
import time
from typing import Any

from gpucloud_nb.client.use_report import UseReports

DEADLINE = 60.0


def test_stop_waits_for_the_report_in_flight_and_nothing_is_sent_after_it() -> None:
    """#36: the ``gpucloud-nb-use`` thread sent on a client already closed (an unhandled
    exception in a thread): closing must stop the thread and wait for a send in flight."""
    in_flight, release = threading.Event(), threading.Event()
    sends: list[tuple[str, bool]] = []
    stopped = threading.Event()

    def send(method: str, path: str, body: dict[str, Any] | None) -> object:
        sends.append((path, stopped.is_set()))
        in_flight.set()
        assert release.wait(DEADLINE)
        return None

    reports = UseReports(send, is_gateway=lambda: True, every=0.05)
    reports.change("abc", +1)
    assert in_flight.wait(DEADLINE)

    def stop() -> None:
        reports.stop()
        stopped.set()

    stopper = threading.Thread(target=stop)
    stopper.start()
    time.sleep(0.2)  # a chance for stop() to return early, as it did
    assert not stopped.is_set(), "stop() returned while a report was still being sent"
    release.set()
    stopper.join(DEADLINE)
    assert stopped.is_set()
    reports.change("abc", +1)  # a run's end told after close (remote.close()): ignored
    time.sleep(0.2)
    assert [late for _, late in sends] == [False] * len(sends)
    thread = reports._thread
    assert thread is not None and not thread.is_alive()
