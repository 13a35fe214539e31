"""An instance's processes on the sandbox: their I/O carried over SSH, and all of them ended.

A command runs as a child process in a process group of its own; its output is pumped to the
SSH channel and the client's input (and signals) to it. An instance's processes are ended as
one, marked ones and session groups alike, again until none is left. A session the client
marks ``BOOKKEEPING=1`` is the client's own bookkeeping, not use of the instance
(:mod:`gpucloud_nb.idle_rule`).

    >>> end_processes(marker, groups)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import asyncssh

from gpucloud_nb.idle_rule import BOOKKEEPING
from gpucloud_nb.sandbox.gpu_use import ProcessTable

__all__ = ["end_processes", "is_bookkeeping", "kill_group", "pump_in", "pump_out"]


def kill_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pid``, if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def is_bookkeeping(env: Any) -> bool:
    """True when the client sent ``BOOKKEEPING=1`` with the session (names and values may be
    bytes: the server runs without an encoding)."""
    for name, value in dict(env or {}).items():
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        value = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        if name == BOOKKEEPING and value.strip() == "1":
            return True
    return False


def end_processes(marker: str, groups: set[int]) -> None:
    """Kill every process of an instance: its marked ones and its sessions' groups, again until
    none is left (one may fork meanwhile)."""
    table = ProcessTable()
    for _ in range(10):
        for group in groups:
            kill_group(group, signal.SIGKILL)
        left = table.snapshot().of(marker, ())
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


async def pump_out(reader: asyncio.StreamReader | None, writer: Any) -> None:
    if reader is None:
        return
    while True:
        data = await reader.read(65536)
        if not data:
            return
        try:
            writer.write(data)
            await writer.drain()
        except Exception:  # the channel went away; keep draining so the child is not blocked
            continue


async def pump_in(process: Any, child: asyncio.subprocess.Process) -> int | None:
    """Copy the client's stdin to the child; return a signal number the client sent, if any."""
    names = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL,
             "HUP": signal.SIGHUP, "QUIT": signal.SIGQUIT}
    assert child.stdin is not None
    while True:
        try:
            data = await process.stdin.read(65536)
        except asyncssh.SignalReceived as received:
            return int(names.get(received.signal, signal.SIGTERM))
        except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
            continue
        except Exception:
            return None
        if not data:
            with contextlib.suppress(Exception):
                child.stdin.close()
            await asyncio.Event().wait()  # stdin ended; only a signal or close matters now
        try:
            child.stdin.write(data)
            await child.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            await asyncio.Event().wait()
