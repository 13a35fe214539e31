"""Checkpoints in the background while the kernel is idle: ``%gpucloud checkpoint --every 15min``.

    >>> from gpucloud_nb.kernel import background
    >>> background.every(15 * 60, keep=5)   # doctest: +SKIP
    >>> background.every(None)              # off  # doctest: +SKIP

A daemon thread of the kernel wakes every interval and makes a checkpoint
(:func:`gpucloud_nb.kernel.session.checkpoint`: to the notebook's ``.gpucloud/checkpoints/``,
the newest ``keep`` kept).

Choices (the issue leaves them open):

- **Never while a cell runs.** Each cell marks itself running from IPython's ``pre_run_cell``
  to ``post_run_cell``; a checkpoint that falls due meanwhile waits, and runs right after the
  cell. While the checkpoint reads the variables (they are pickled and written to a file), a
  cell sent then waits for it; the copy to this machine that follows runs beside the next
  cells. Silent executions (tools, widgets) are not cells and are not held.
- **Only after a change.** A checkpoint falls due only if a cell ran since the last one, so an
  idle notebook does not write the same gigabytes every interval.
- **Quiet.** A background checkpoint prints nothing (a thread's output would land in whichever
  cell ran last); :func:`status` (and ``%gpucloud checkpoint --every`` without a duration)
  says how many were made, the last one, and the last failure, if any.
- **One schedule per kernel**: a new ``--every`` replaces the old one. Stopping waits for a
  checkpoint whose copy is under way to finish, so once ``--every off`` has answered nothing
  more is written.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpucloud_nb.durations import duration_text

__all__ = ["Schedule", "every", "status"]

#: How long ``--every off`` (or a new ``--every``) waits for a checkpoint's copy under way.
_FINISH_SECONDS = 600.0


@dataclass
class Schedule:
    """A running schedule: its interval, what it kept and what it did."""

    seconds: float
    keep: int
    made: int = 0
    last: str = ""
    failure: str = ""
    busy: list[float] = field(default_factory=list)  # how long each held the cells back
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class _Cells:
    """Cells running now, and whether a checkpoint reads the variables (see the module)."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.running = 0
        self.reading = False
        self.ran = 0  # cells finished since the kernel started

    def before(self, *args: Any) -> None:
        with self.condition:
            self.condition.wait_for(lambda: not self.reading)
            self.running += 1

    def after(self, *args: Any) -> None:
        with self.condition:
            self.running = max(self.running - 1, 0)
            self.ran += 1
            self.condition.notify_all()

    @contextlib.contextmanager
    def exclusive(self, stop: threading.Event) -> Iterator[bool]:
        """Wait until no cell runs (or ``stop``), then hold cells back; yields False if
        stopped."""
        with self.condition:
            while self.running and not stop.is_set():
                self.condition.wait(0.5)
            if stop.is_set():
                yield False
                return
            self.reading = True
        try:
            yield True
        finally:
            with self.condition:
                self.reading = False
                self.condition.notify_all()


_cells = _Cells()
_hooked: list[Any] = []
_schedule: Schedule | None = None


def _hook() -> None:
    from gpucloud_nb.kernel.session import _shell

    shell = _shell()
    if shell in _hooked:
        return
    shell.events.register("pre_run_cell", _cells.before)
    shell.events.register("post_run_cell", _cells.after)
    _hooked.append(shell)


def every(seconds: float | None, *, keep: int = 5, limit_gb: float | None = None) -> str:
    """Checkpoint every ``seconds`` while idle (``None``: stop); the sentence that says so."""
    global _schedule
    old, _schedule = _schedule, None
    if old is not None:  # a copy under way finishes first: once stopped, nothing more is written
        old.stop.set()
        if old.thread is not None and old.thread is not threading.current_thread():
            old.thread.join(_FINISH_SECONDS)
    if seconds is None:
        if old is None:
            return "No background checkpoints were running."
        return f"Background checkpoints stopped ({_done(old)})."
    if not seconds > 0:
        raise ValueError("The interval must be more than zero.")
    _hook()
    schedule = Schedule(seconds, keep)
    schedule.thread = threading.Thread(target=_run, args=(schedule, limit_gb),
                                        name="gpucloud-checkpoints", daemon=True)
    _schedule = schedule
    schedule.thread.start()
    return (f"Checkpoints every {duration_text(seconds)} while this kernel is idle (after a "
            f"cell ran), newest {keep} kept in .gpucloud/checkpoints/; stop with "
            "%gpucloud checkpoint --every off.")


def status() -> str:
    """What the background checkpoints did (one sentence)."""
    if _schedule is None:
        return "No background checkpoints are running; start them with --every 15min."
    return (f"Checkpoints every {duration_text(_schedule.seconds)} while idle: "
            f"{_done(_schedule)}.")


def _done(schedule: Schedule) -> str:
    text = f"{schedule.made} made" + (f", the last {schedule.last}" if schedule.last else "")
    return text + (f"; the last failure: {schedule.failure}" if schedule.failure else "")


def _run(schedule: Schedule, limit_gb: float | None) -> None:
    from gpucloud_nb.kernel import session

    seen = _cells.ran
    while not schedule.stop.wait(schedule.seconds):
        if _cells.ran == seen and not _cells.running:
            continue  # nothing ran since the last one
        held: dict[str, float] = {}
        guard = _guard(schedule.stop, held)
        try:
            outcome = session.checkpoint(keep=schedule.keep, limit_gb=limit_gb,
                                         say=lambda line: None, guard=guard)
        except _Stopped:
            return
        except Exception as error:  # said by status(); the schedule goes on
            schedule.failure = str(error)
            continue
        if "busy" in held:  # what ran after the variables were read counts for the next
            seen = int(held["ran"])
            schedule.busy.append(held["busy"])
        if outcome.ok:
            schedule.made += 1
            schedule.last = outcome.path.rsplit("/", 1)[-1]
        else:
            schedule.failure = outcome.text


def _guard(stop: threading.Event, held: dict[str, float]) -> Any:
    """Hold cells back while a checkpoint reads the variables; note how long, and how many
    cells had finished by then, in ``held``."""

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        with _cells.exclusive(stop) as free:
            if not free:
                raise _Stopped
            started, held["ran"] = time.monotonic(), _cells.ran
            try:
                yield
            finally:
                held["busy"] = time.monotonic() - started

    return guard


class _Stopped(Exception):
    """The schedule stopped while a checkpoint waited for a cell."""
