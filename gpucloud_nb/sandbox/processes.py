"""Which process is a home's service: processes of the current user, and the locks a service
holds for its life (:mod:`gpucloud_nb.sandbox.service`, and a personal gateway's,
:mod:`gpucloud_nb.gateway.personal`, each in its own home).

    >>> from gpucloud_nb.sandbox.processes import pid_alive
    >>> import os; pid_alive(os.getpid())
    True

``service.lock`` is held (``flock``) by the running service for its whole life, with its pid
written in it; ``/proc/locks`` names the holder on Linux, the written pid elsewhere. A lock on
another file (``start.lock``) is held by whoever finds or starts a service, so two kernels
calling ``connect()`` at once end on one. No web framework here: ``connect()`` stays light.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from gpucloud_nb.errors import ConnectionFailedError

__all__ = ["SERVICE_LOCK", "lock_held", "lock_holder", "locked", "owned_by_us", "pid_alive",
           "service_lock"]

SERVICE_LOCK = "service.lock"


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        import psutil

        return bool(psutil.pid_exists(pid)) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except ImportError:
        pass
    except Exception:  # psutil.NoSuchProcess between the two calls
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def owned_by_us(pid: int) -> bool:
    """True when process ``pid`` runs as the current user (its real uid is ours).

    psutil, else ``/proc``; with neither (macOS without psutil) a process we may signal counts
    as ours, which is exact except for root.
    """
    if not hasattr(os, "getuid"):  # pragma: no cover - Windows: no uids; the home is per user
        return True
    try:
        import psutil

        return bool(psutil.Process(pid).uids().real == os.getuid())
    except ImportError:
        pass
    except Exception:  # psutil.NoSuchProcess, AccessDenied
        return False
    if Path("/proc/self").exists():
        try:
            return os.stat(f"/proc/{pid}").st_uid == os.getuid()
        except OSError:
            return False
    try:  # pragma: no cover - no psutil and no /proc
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _try_lock(file: IO[bytes]) -> bool:
    """Take an exclusive lock on ``file`` without waiting; True if taken."""
    if sys.platform == "win32":  # pragma: no cover - Windows: a byte-range lock on the first byte
        import msvcrt

        try:
            msvcrt.locking(file.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def locked(path: Path, timeout: float, what: str = "the sandbox service",
           logs: str = "gpucloud-nb sandbox logs") -> Iterator[None]:
    """Hold the exclusive lock on ``path``, waiting up to ``timeout`` seconds for it."""
    with open(path, "a+b") as file:
        deadline = time.monotonic() + timeout
        while not _try_lock(file):
            if time.monotonic() > deadline:
                raise ConnectionFailedError(
                    f"Another process has been starting {what} in {path.parent} for "
                    f"over {timeout:g} s; see `{logs}`.")
            time.sleep(0.05)
        yield  # closing the file releases the lock


def service_lock(home: Path) -> IO[bytes] | None:
    """Take ``service.lock`` for the life of a service: the open file, or ``None`` if held."""
    file = open(home / SERVICE_LOCK, "a+b")  # noqa: SIM115 - held open until the service ends
    if _try_lock(file):
        return file
    file.close()
    return None


def lock_held(home: Path) -> bool:
    try:
        file = open(home / SERVICE_LOCK, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return False
    with file:
        return not _try_lock(file)  # closing the file releases a lock just taken


def _proc_locks_holder(path: Path) -> int | None:
    """The pid that ``/proc/locks`` says holds a ``flock`` on ``path`` (Linux), else ``None``."""
    try:
        info = path.stat()
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    identity = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in table.splitlines():
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 6129 fe:00:2146321 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == identity:
            with contextlib.suppress(ValueError):
                return int(fields[4])
    return None


def lock_holder(home: Path) -> int | None:
    """The pid of the process holding ``service.lock`` of ``home``; ``None`` when nobody does.

    On Linux ``/proc/locks`` names it; elsewhere (or where that table does not show the file)
    it is the pid the service wrote in the lock file when it took it.
    """
    if not lock_held(home):
        return None
    path = home / SERVICE_LOCK
    holder = _proc_locks_holder(path)
    if holder is not None:
        return holder
    try:
        return int(path.read_text(encoding="ascii").strip() or "0") or None
    except (OSError, ValueError):
        return None
