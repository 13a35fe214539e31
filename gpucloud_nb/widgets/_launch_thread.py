"""The launch form's background thread: create an instance, then follow it until it is active.

The thread talks to the form only through :class:`LaunchView` and holds it only through a weak
reference (and only while drawing), so a form dropped mid-wait is garbage-collected, which sets
``stop`` and ends the wait at the next poll. Whatever happens, the Future settles.

    >>> threading.Thread(target=launch_thread,  # doctest: +SKIP
    ...                  args=(weakref.ref(form), cloud, request, future, stop)).start()
"""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import Future
from typing import Protocol

import ipywidgets as widgets

from gpucloud_nb.client.management import GPUCloud
from gpucloud_nb.create_request import CreateInstance
from gpucloud_nb.display import format_duration
from gpucloud_nb.errors import WaitStopped
from gpucloud_nb.models import Instance, InstanceDetails
from gpucloud_nb.widgets._background import settle
from gpucloud_nb.widgets._format import escape
from gpucloud_nb.widgets._status import StatusLine

__all__ = ["MAX_POLL_SECONDS", "LaunchView", "launch_thread"]

#: The longest wait between two polls of a launching instance: Stop and close() end the
#: launch thread within this time.
MAX_POLL_SECONDS = 2.0


class LaunchView(Protocol):
    """What the launch thread reads and draws on (:class:`~gpucloud_nb.widgets.LaunchForm`)."""

    instance: Instance | InstanceDetails | None
    status: StatusLine
    progress: widgets.FloatProgress
    elapsed: widgets.HTML
    expected_launch_seconds: float
    timeout: float

    def show_failure(self, error: BaseException) -> None: ...
    def show_active(self, details: InstanceDetails, waited: float) -> None: ...
    def refresh_used_hourly(self) -> None: ...
    def set_idle(self) -> None: ...


class _StopSignal(Exception):
    """Raised inside on_progress to leave wait_until_active after the user stopped waiting."""


def launch_thread(ref: weakref.ref[LaunchView], cloud: GPUCloud, request: CreateInstance,
                  future: Future[InstanceDetails],
                   stop: threading.Event) -> None:
    """Create, wait, draw the outcome: whatever happens, the Future settles and the form goes
    idle."""
    gone = WaitStopped("Stopped waiting: the launch form is gone; the instance keeps launching "
                       "and is billed once active: check InstancesPanel.")
    try:
        details, waited = _launch_and_wait(ref, cloud, request, stop)
    except _StopSignal:
        if ref() is None:
            settle(future, error=gone)
        return
    except BaseException as error:
        form = ref()
        if form is None:
            settle(future, error=error)
        elif not stop.is_set():
            form.show_failure(error)
            settle(future, error=error)
            form.refresh_used_hourly()
        return
    form = ref()
    if form is None:
        if details is None:
            settle(future, error=gone)
        else:
            settle(future, details)
        return
    if stop.is_set() or details is None:
        return
    try:
        form.show_active(details, waited)
    except Exception as error:  # drawing the result failed; the instance is active anyway
        form.status.error(error)
    finally:
        form.set_idle()
        settle(future, details)


def _launch_and_wait(ref: weakref.ref[LaunchView], cloud: GPUCloud, request: CreateInstance,
                     stop: threading.Event) -> tuple[InstanceDetails | None, float]:
    """Create, then wait; returns the active details (``None`` once the form is gone or
    stopped) and the seconds waited."""
    name = request.name
    instance = cloud.instances.create_from(request)
    form = ref()
    if form is None or stop.is_set():
        return None, 0.0
    form.instance = instance
    form.status.info(f"Launched {name} (id {instance.id}); waiting for it to become active…")
    form.refresh_used_hourly()
    expected, timeout = form.expected_launch_seconds, form.timeout
    del form  # from here on the thread holds the form only while drawing progress
    waited = [0.0]

    def on_progress(details: InstanceDetails, elapsed: float) -> None:
        form = ref()
        if form is None or stop.is_set():
            raise _StopSignal
        form.instance = details
        waited[0] = elapsed
        if details.status == "pending":
            form.progress.value = min(elapsed / expected, 0.95)
        form.elapsed.value = escape(f"{details.status}… {format_duration(elapsed)}")

    details = cloud.instances.wait_until_active(instance.id, timeout=timeout,
                                                on_progress=on_progress,
                                                max_poll_interval=MAX_POLL_SECONDS)
    return details, waited[0]
