"""What a sandbox instance's processes really do: the stand-in for its GPU's use.

    >>> meter = TreeMeter()
    >>> meter.sample(set(), sessions_of_processes()).util
    0.0

An instance's processes are those of the sessions its SSH server started (every command runs
in a session of its own, see :mod:`gpucloud_nb.sandbox.ssh`), and their descendants, even those
that started a session of their own. Between two samples, the CPU time they used (their own and
that of children they reaped) over the wall time passed is the utilisation, in percent of one
core: a busy loop is 100 %. Where Linux tells it (``/proc/PID/schedstat``), the time a process
waited for a core while ready to run counts as used too: a GPU kernel queued behind another is
still GPU work, and a busy loop stays 100 % on a machine whose cores are shared. Their
resident memory (RSS) is the memory used. A process first seen at a sample counts from when it
started if that was after the previous sample, else from that sample on. A process that ended
since the last sample and whose parent is still measured shows again in its parent's
reaped-children time: what was counted of it already is taken off.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

__all__ = ["TreeMeter", "Use", "sessions_of_processes"]


@dataclass(frozen=True)
class Use:
    """One sample: ``util`` in percent of one core, ``rss`` bytes, ``processes`` counted."""

    util: float
    rss: int
    processes: int

    @property
    def memory_mib(self) -> float:
        """The memory used, in MiB."""
        return self.rss / 1048576


def sessions_of_processes() -> dict[int, list[int]]:
    """Every process id on this machine, by session id (one pass, shared by all instances)."""
    found: dict[int, list[int]] = {}
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            found.setdefault(os.getsid(pid), []).append(pid)
    return found


def _wanted(pid: int, cpu: float) -> float:
    """Seconds ``pid`` ran or waited to run (schedstat), else ``cpu``, its seconds on a core."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as file:
            ran, waited = (int(part) for part in file.read().split()[:2])
    except (OSError, ValueError):
        return cpu
    return (ran + waited) / 1e9


class TreeMeter:
    """The use of one instance's process tree, sampled again and again."""

    def __init__(self) -> None:
        self._cpu: dict[int, tuple[float, int]] = {}
        self._at: float | None = None

    def sample(self, sessions: Iterable[int], by_session: dict[int, list[int]]) -> Use:
        """The use since the last sample of the processes in ``sessions`` and their children."""
        now = time.time()
        pids: set[int] = set()
        for session in sessions:
            for pid in by_session.get(session, ()):
                pids.add(pid)
                with contextlib.suppress(psutil.Error):
                    pids.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        cpu: dict[int, tuple[float, int]] = {}
        used = 0.0
        rss = 0
        for pid in pids:
            try:
                process = psutil.Process(pid)
                with process.oneshot():
                    times = process.cpu_times()
                    total = (_wanted(pid, times.user + times.system)
                             + times.children_user + times.children_system)
                    memory = process.memory_info().rss
                    started = process.create_time()
                    parent = process.ppid()
            except psutil.Error:
                continue
            cpu[pid] = (total, parent)
            rss += memory
            if pid in self._cpu:
                used += max(total - self._cpu[pid][0], 0.0)
            elif self._at is not None and started >= self._at:
                used += total  # started since the last sample: all of its time is new
        for pid, (total, parent) in self._cpu.items():
            if pid not in cpu and parent in cpu:
                used -= total  # reaped by a measured parent: counted again in its children time
        used = max(used, 0.0)
        window = None if self._at is None else now - self._at
        self._cpu, self._at = cpu, now
        util = 0.0 if not window or window <= 0 else 100.0 * used / window
        return Use(util=round(util, 1), rss=rss, processes=len(cpu))
