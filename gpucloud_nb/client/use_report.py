"""Use a class gateway cannot see, told to it: runs, copies and forwards this client opened.

    >>> reports = UseReports(send, is_gateway=lambda: True)  # doctest: +SKIP
    >>> reports.change("65a1…", +1)  # a run opens: told now, then every EVERY seconds  # doctest: +SKIP
    >>> reports.change("65a1…", -1)  # it ends: told once more  # doctest: +SKIP

A gateway deletes an idle instance with no notebook open (:mod:`gpucloud_nb.gateway.idle`); it
reads GPU use itself, but a ``run``, a copy or a port forward of this client may use no GPU at
all. While one is open on an instance, this client says so: ``POST /gateway/instances/{id}/use``
with ``{"seconds": 3 × EVERY}`` when it opens, every :data:`EVERY` seconds (10) while it stays
open (one daemon thread, started at the first), and ``{"seconds": 0}`` once when the last thing
open on it ends (use until the gateway's next pass, not for the 30 s the last report gave). :class:`Remote
<gpucloud_nb.client.remote.Remote>` calls :meth:`UseReports.change` around each of them.

Choices: reports go only to a gateway, personal or a class's (``is_gateway()``, asked at the
first report and remembered; the sandbox service and the cloud directly are never sent one); a
report that fails is dropped quietly (the next one, or the gateway's own GPU reading, stands in
for it), and never holds up the run it reports. Closing the client stops the thread and waits for
a report in flight (at most one request) before the HTTP client closes, so nothing is sent on a
closed client; a change after that is ignored. A kernel executing a cell on an instance is
reported the same way, by its provisioner (:mod:`gpucloud_nb.kernel.busy`, under JupyterLab,
nbclient or a plain ``KernelManager``; the Lab extension's poller reports it too,
:mod:`gpucloud_nb.lab.idle`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from gpucloud_nb.errors import GPUCloudError

__all__ = ["EVERY", "UseReports"]

EVERY = 10.0
"""Seconds between two reports of one instance while something stays open on it."""


class UseReports:
    """What this client has open on each instance, told to its gateway (see the module docs).

    ``send(method, path, body)`` makes one request (raising
    :class:`~gpucloud_nb.errors.GPUCloudError`); ``is_gateway()`` says whether the server is a
    class gateway (it may ask the server once).
    """

    def __init__(self, send: Callable[[str, str, dict[str, Any] | None], object],
                 is_gateway: Callable[[], bool | None], every: float = EVERY) -> None:
        self._send = send
        self._is_gateway = is_gateway
        self._gateway: bool | None = None
        self.every = every
        self._open: dict[str, int] = {}
        self._told: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def change(self, id: str, step: int) -> None:
        """``step`` (+1 or -1) things opened or closed on instance ``id``."""
        with self._lock:
            if self._stopped:
                return
            left = self._open.get(id, 0) + step
            if left > 0:
                self._open[id] = left
            else:
                self._open.pop(id, None)
            self._told.add(id)  # an opening, and an end: each told at once
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpucloud-nb-use",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """Stop reporting for good and wait for the thread (a client closing): once this returns
        nothing more is sent."""
        with self._lock:
            self._stopped = True
            self._open.clear()
            self._told.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.every)
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
                ids = set(self._open) | self._told
                still_open = set(self._open)
                self._told.clear()
                gateway = self._gateway
            if not ids:
                continue
            if gateway is None:
                try:
                    gateway = self._gateway = bool(self._is_gateway())
                except GPUCloudError:
                    continue
            if not gateway:
                return
            for id in ids:
                if self._stopped:
                    return
                with contextlib.suppress(GPUCloudError):
                    self._send("POST", f"/gateway/instances/{id}/use",
                               {"seconds": 3 * self.every if id in still_open else 0})
