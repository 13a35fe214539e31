"""What a sandbox instance's processes really do: the stand-in for its GPU's use.

    >>> table = ProcessTable()
    >>> TreeMeter().sample(table.snapshot().of("/no/such/instance", set())).util
    0.0

An instance's processes are every process whose environment carries its marker (:data:`MARKER`,
set by :mod:`gpucloud_nb.sandbox.ssh` on every command it starts, to the instance's home), and
every process of the sessions its SSH server started and their descendants. A process inherits
its parent's environment, so the marker follows whatever was started on the instance, however
it left its session or parent: ``setsid``, ``nohup … &``, ``tmux new -d`` (each instance has a
tmux server of its own: ``TMUX_TMPDIR`` is set too) and double-forking daemons. (A process that
clears its environment, ``env -i``, is still found while it is a descendant of a session.)
The service's own process is never one of them. Deleting an instance kills them all.

Between two samples, the CPU time they used (their own and that of children they reaped) over
the wall time passed is the utilisation, in percent of one core: a busy loop is 100 %. Where
Linux tells it (``/proc/PID/schedstat``), the time a process waited for a core while ready to
run counts as used too: a GPU kernel queued behind another is still GPU work, and a busy loop
stays 100 % on a machine whose cores are shared. Their resident memory (RSS) is the memory
used. A process first seen at a sample counts from when it started if that was after the
previous sample, else from that sample on. A process that ended since the last sample and whose
parent is still measured shows again in its parent's reaped-children time: what was counted of
it already is taken off.

While the service runs, :func:`measuring` samples every running instance each :data:`POLL`
seconds (1) and hands the figures to the instance's ``nvidia-smi``
(:mod:`gpucloud_nb.sandbox.nvidia_smi`), as a VM's driver would. A server with shells off
(several accounts under one OS user) runs nothing on its instances, so it walks no ``/proc``
(some 14 ms of CPU a second, holding the GIL while the event loop answers). The sandbox deletes
nothing for being idle: a gateway in front of it does (issue #36), reading that ``nvidia-smi``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import psutil

__all__ = ["MARKER", "POLL", "GPUMeter", "ProcessTable", "Snapshot", "TreeMeter", "Use",
           "measuring"]

log = logging.getLogger("uvicorn.error")  # the service log, next to uvicorn's own lines
POLL = 1.0
"""Seconds between two measures of every running instance."""

MARKER = "GPUCLOUD_MACHINE"
"""The environment variable that marks a process as an instance's: its value is the instance home."""


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


@dataclass
class Snapshot:
    """Every process of this machine at one moment: by session, by marker, and their children."""

    by_session: dict[int, list[int]] = field(default_factory=dict)
    by_marker: dict[str, list[int]] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)
    group: dict[int, int] = field(default_factory=dict)

    def of(self, marker: str, sessions: Collection[int],
           skip_groups: Collection[int] = ()) -> set[int]:
        """The processes of the instance marked ``marker`` whose SSH sessions are ``sessions``
        (each with its descendants), less those in the process groups ``skip_groups``."""
        roots = list(self.by_marker.get(marker, ()))
        for session in sessions:
            roots.extend(self.by_session.get(session, ()))
        found: set[int] = set()
        while roots:
            pid = roots.pop()
            if pid not in found:
                found.add(pid)
                roots.extend(self.children.get(pid, ()))
        found.discard(os.getpid())
        return {pid for pid in found if self.group.get(pid) not in skip_groups}


class ProcessTable:
    """Reads the process table; each process's marker is read once (by pid and start time)."""

    def __init__(self) -> None:
        self._markers: dict[int, tuple[float, str | None]] = {}

    def _marker(self, process: psutil.Process, started: float) -> str | None:
        known = self._markers.get(process.pid)
        if known is not None and known[0] == started:
            return known[1]
        try:
            value = process.environ().get(MARKER)
        except psutil.Error:  # another user's process, or gone
            value = None
        self._markers[process.pid] = (started, value)
        return value

    def snapshot(self) -> Snapshot:
        """Every process now (one pass, shared by all instances)."""
        found = Snapshot()
        alive: set[int] = set()
        for pid in psutil.pids():
            try:
                process = psutil.Process(pid)
                with process.oneshot():
                    started, parent = process.create_time(), process.ppid()
                session, group = os.getsid(pid), os.getpgid(pid)
            except (psutil.Error, OSError):
                continue
            alive.add(pid)
            found.by_session.setdefault(session, []).append(pid)
            found.children.setdefault(parent, []).append(pid)
            found.group[pid] = group
            marker = self._marker(process, started)
            if marker:
                found.by_marker.setdefault(marker, []).append(pid)
        for gone in [pid for pid in self._markers if pid not in alive]:
            del self._markers[gone]
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
    """The use of one instance's processes, sampled again and again."""

    def __init__(self) -> None:
        self._cpu: dict[int, tuple[float, int]] = {}
        self._at: float | None = None

    def sample(self, pids: Iterable[int]) -> Use:
        """The use since the last sample of the processes ``pids`` (see :meth:`Snapshot.of`)."""
        now = time.time()
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


class Measured(Protocol):
    """An instance's server, as the meter sees it (an :class:`~.ssh.InstanceServer`)."""

    def processes(self, snapshot: Snapshot) -> set[int]: ...
    def write_use(self, util: float, memory_mib: float) -> None: ...


class Servers(Protocol):
    """The servers the meter measures (:class:`~.ssh_servers.InstanceServers`)."""

    shell: bool

    def running(self) -> Mapping[str, Measured]: ...


class GPUMeter:
    """Measures the running instances of one sandbox and writes their use for ``nvidia-smi``."""

    def __init__(self, servers: Servers, poll: float = POLL) -> None:
        self.servers = servers
        self.poll = poll
        self.uses: dict[str, Use] = {}
        self._meters: dict[str, TreeMeter] = {}
        self._table = ProcessTable()

    def _measure(self, running: Mapping[str, Measured]) -> dict[str, Use]:
        snapshot = self._table.snapshot()
        return {id_: self._meters.setdefault(id_, TreeMeter()).sample(server.processes(snapshot))
                for id_, server in running.items()}

    async def step(self) -> None:
        """Measure every running instance once (none with shells off)."""
        running = self.servers.running() if self.servers.shell else {}
        uses = await asyncio.to_thread(self._measure, running) if running else {}
        for id_, use in uses.items():
            with contextlib.suppress(OSError):
                running[id_].write_use(use.util, use.memory_mib)
        self.uses = uses
        for gone_id in [i for i in self._meters if i not in running]:
            del self._meters[gone_id]


async def _watch(meter: GPUMeter) -> None:
    while True:
        try:
            await meter.step()
        except Exception:  # a bug must not end the measuring: log it and try again
            log.exception("The GPU-use meter failed; trying again.")
        await asyncio.sleep(meter.poll)


@contextlib.asynccontextmanager
async def measuring(servers: Servers) -> AsyncIterator[GPUMeter]:
    """Run a :class:`GPUMeter` over ``servers`` while the app is served (part of its lifespan)."""
    meter = GPUMeter(servers)
    task = asyncio.create_task(_watch(meter), name="gpucloud-nb-gpu-use")
    try:
        yield meter
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
