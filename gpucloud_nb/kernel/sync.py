"""The notebook's folder, copied to the instance when a remote kernel starts.

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp()) / "my project"
    >>> folder.mkdir(); _ = (folder / "data.csv").write_text("a,b\\n1,2\\n")
    >>> _ = (folder / ".env").write_text("SECRET=1")
    >>> found = plan(folder, cap_bytes=100 * 2**20)
    >>> [name for name, _, _, _ in found.files], found.hidden.names, remote_folder(folder)
    (['data.csv'], ['.env'], 'my-project')

Choices (the issue leaves them open):

- **What is copied.** Every regular file under the folder, in path order, except:
  hidden files and folders (a name starting with ``.``: ``.git``, ``.env``,
  ``.ipynb_checkpoints``); the folders of environments and caches, which belong to this machine
  (``node_modules``, ``venv``, ``__pycache__``, ``site-packages`` and any folder holding a
  ``pyvenv.cfg`` or ``conda-meta``, whatever its name); and symbolic links, which are never
  followed (a link could lead out of the folder, or to a hidden ``.env``). Each kind of skip is
  counted and its first names are shown.
- **The caps.** ``GPUCLOUD_KERNEL_SYNC_MB`` (default 100) megabytes in all: a file that would
  pass it is skipped and named, and smaller files after it are still copied.
  ``GPUCLOUD_KERNEL_SYNC_FILES`` (default 5000) files: the walk stops at the first file past
  it, and says the rest was not looked at (a notebook in ``~`` is the case it is for).
- **Off the loop, in one archive.** :func:`plan` is blocking (the provisioner runs it in a
  worker thread, never on Jupyter's event loop). :func:`upload` asks the instance's ``python3``
  once for the size and modification time of the files it already has, then streams the others
  as one tar archive into ``tar -x`` over one SSH channel: two round trips, whatever the count.
- **Where.** A folder in the instance home named after the notebook's folder (characters other
  than letters, digits, ``.``, ``_`` and ``-`` become ``-``); the kernel starts there.
- **Again.** A file whose copy on the instance has the same size and modification time (whole
  seconds) is not sent again. Files changed on the instance are overwritten by the local copy at
  start; results come back with ``%gpucloud get`` or ``cloud.instances.download``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shlex
import stat
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucloud_nb.errors import InvalidInputError, KernelStartError

__all__ = ["CAP_VARIABLE", "FILES_VARIABLE", "HEAVY_FOLDERS", "Skipped", "SyncPlan", "cap_bytes",
           "cap_files", "plan", "remote_folder", "summary", "upload"]

CAP_VARIABLE = "GPUCLOUD_KERNEL_SYNC_MB"
FILES_VARIABLE = "GPUCLOUD_KERNEL_SYNC_FILES"
DEFAULT_CAP_MB = 100.0
DEFAULT_FILES = 5000
#: Folders never copied, by name: environments and caches of this machine.
HEAVY_FOLDERS = frozenset({"node_modules", "venv", "__pycache__", "site-packages"})
#: A folder holding one of these is an environment, whatever its name.
_ENVIRONMENT_MARKS = ("pyvenv.cfg", "conda-meta")
_SHOWN = 10  # names kept per kind of skip
_SMALL = 2**20  # files up to this size are read whole before they go into the archive

# Run by the instance's python3: the size and whole-second mtime of each name read on stdin
# (relative to the folder given), or null.
_STAT_SCRIPT = """
import json, os, sys
root = sys.argv[1]
found = []
for name in json.load(sys.stdin):
    try:
        st = os.lstat(os.path.join(root, name))
        found.append([st.st_size, int(st.st_mtime)] if os.path.isfile(os.path.join(root, name)) else None)
    except OSError:
        found.append(None)
print(json.dumps(found))
"""


@dataclass
class Skipped:
    """How many of one kind were skipped, and the first names."""

    count: int = 0
    names: list[str] = field(default_factory=list)

    def add(self, name: str) -> None:
        self.count += 1
        if len(self.names) < _SHOWN:
            self.names.append(name)

    def shown(self) -> str:
        return ", ".join(self.names) + (" …" if self.count > len(self.names) else "")


@dataclass
class SyncPlan:
    """What to copy (``(relative posix name, local path, size, whole-second mtime)``), what is
    skipped and why, and whether the walk stopped at the file cap."""

    files: list[tuple[str, Path, int, int]] = field(default_factory=list)
    hidden: Skipped = field(default_factory=Skipped)
    heavy: Skipped = field(default_factory=Skipped)
    links: Skipped = field(default_factory=Skipped)
    over_cap: Skipped = field(default_factory=Skipped)
    cap: int = 0
    max_files: int = DEFAULT_FILES
    stopped: bool = False

    @property
    def total(self) -> int:
        """The bytes to copy."""
        return sum(size for _, _, size, _ in self.files)


def _number(environ: os._Environ[str] | dict[str, str] | None, name: str, what: str) -> float | None:
    text = (os.environ if environ is None else environ).get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise InvalidInputError(f"{name} must be a number of {what} (0 or more), not {text!r}.")
    return value


def cap_bytes(environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """The copy cap in bytes from ``GPUCLOUD_KERNEL_SYNC_MB`` (default 100 MB); bad values refused.

        >>> cap_bytes({"GPUCLOUD_KERNEL_SYNC_MB": "2"})
        2097152
    """
    megabytes = _number(environ, CAP_VARIABLE, "megabytes")
    return int((DEFAULT_CAP_MB if megabytes is None else megabytes) * 2**20)


def cap_files(environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """The most files copied, from ``GPUCLOUD_KERNEL_SYNC_FILES`` (default 5000).

        >>> cap_files({"GPUCLOUD_KERNEL_SYNC_FILES": "200"})
        200
    """
    count = _number(environ, FILES_VARIABLE, "files")
    return DEFAULT_FILES if count is None else int(count)


def remote_folder(folder: str | os.PathLike[str]) -> str:
    """The name of the instance folder for the local ``folder`` (one safe path segment)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(folder).resolve().name).strip("-.")
    return name or "notebook"


def _is_environment(path: str) -> bool:
    return any(os.path.lexists(os.path.join(path, mark)) for mark in _ENVIRONMENT_MARKS)


def plan(folder: str | os.PathLike[str], cap_bytes: int, max_files: int = DEFAULT_FILES
         ) -> SyncPlan:
    """The files of ``folder`` to copy within ``cap_bytes`` and ``max_files``, and those skipped.

    Blocking (it walks the folder): run it in a worker thread from async code.
    """
    result = SyncPlan(cap=cap_bytes, max_files=max_files)
    used = 0
    pending = [(str(Path(folder)), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        folders = []
        for entry in entries:
            relative = prefix + entry.name
            if entry.name.startswith("."):
                result.hidden.add(relative)
                continue
            try:
                if entry.is_symlink():
                    result.links.add(relative)
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in HEAVY_FOLDERS or _is_environment(entry.path):
                        result.heavy.add(relative)
                    else:
                        folders.append((entry.path, relative + "/"))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if len(result.files) >= max_files:
                result.stopped = True
                return result
            if used + info.st_size > cap_bytes:
                result.over_cap.add(relative)
                continue
            used += info.st_size
            result.files.append((relative, Path(entry.path), info.st_size, int(info.st_mtime)))
        pending.extend(reversed(folders))  # depth first, in path order
    return result


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


def summary(found: SyncPlan) -> list[str]:
    """What was skipped, one line per reason (empty when nothing was)."""
    lines = []
    if found.hidden.count:
        lines.append(f"Skipped {found.hidden.count} hidden file(s) or folder(s): "
                     f"{found.hidden.shown()}.")
    if found.heavy.count:
        lines.append(f"Skipped {found.heavy.count} environment or cache folder(s), which belong "
                     f"to this machine: {found.heavy.shown()}.")
    if found.links.count:
        lines.append(f"Skipped {found.links.count} symbolic link(s), never followed: "
                     f"{found.links.shown()}.")
    if found.over_cap.count:
        lines.append(f"Skipped {found.over_cap.count} file(s) over the {_megabytes(found.cap)} "
                     f"cap: {found.over_cap.shown()} (set {CAP_VARIABLE} to raise it).")
    if found.stopped:
        lines.append(f"Stopped at {found.max_files} files: the rest of the folder was not "
                     f"copied (set {FILES_VARIABLE} to raise the limit).")
    return lines


class _Pipe(io.RawIOBase):
    """A file a worker thread writes the archive into; the SSH loop reads it from ``queue``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | None],
                 stop: threading.Event) -> None:
        self.loop, self.queue, self.stop = loop, queue, stop

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.stop.is_set():
            raise OSError("the copy was stopped")
        chunk = bytes(data)
        asyncio.run_coroutine_threadsafe(self.queue.put(chunk), self.loop).result()
        return len(chunk)


def _archive(files: list[tuple[str, Path, int, int]], pipe: _Pipe,
             on_bytes: Callable[[int], None]) -> None:
    """Write ``files`` as one tar archive into ``pipe`` (in a worker thread)."""
    with tarfile.open(fileobj=pipe, mode="w|", format=tarfile.PAX_FORMAT,
                      bufsize=256 * 1024) as tar:
        for relative, path, size, mtime in files:
            info = tarfile.TarInfo(relative)
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            with path.open("rb") as file:
                info.mode = stat.S_IMODE(os.fstat(file.fileno()).st_mode)
                if size <= _SMALL:  # read whole: a file that changes size meanwhile is no error
                    data = file.read(_SMALL + 1)[:_SMALL]
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    info.size = size
                    tar.addfile(info, file)
            on_bytes(size)


async def upload(connection: Any, found: SyncPlan, destination: str,
                 on_line: Callable[[str], None]) -> None:
    """Copy the planned files into ``destination`` (relative to the home): see the module.

    ``connection`` is an open asyncssh client connection (this runs on its loop); ``on_line``
    gets the progress (about every tenth of the bytes) and the skipped summary.
    """
    names = [relative for relative, _, _, _ in found.files]
    there: list[Any] = []
    if names:
        listing = await connection.run(
            f"python3 -c {shlex.quote(_STAT_SCRIPT)} {shlex.quote(destination)}",
            input=json.dumps(names), check=False)
        with contextlib.suppress(ValueError, TypeError):
            there = json.loads(str(listing.stdout or "[]"))
    if len(there) != len(names):
        there = [None] * len(names)
    send = [item for item, copy in zip(found.files, there, strict=True)
            if copy != [item[2], item[3]]]
    if send:
        total = sum(size for _, _, size, _ in send)
        on_line(f"Copying {len(send)} file(s), {_megabytes(total)}, to ~/{destination} on the "
                f"instance ({len(found.files) - len(send)} already there)…")
        await _stream(connection, send, destination, total, on_line)
    for line in summary(found):
        on_line(line)


async def _stream(connection: Any, send: list[tuple[str, Path, int, int]], destination: str,
                  total: int, on_line: Callable[[str], None]) -> None:
    place = shlex.quote(destination)
    process = await connection.create_process(
        f"mkdir -p {place} && tar -xf - -C {place}", encoding=None)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=16)
    stop = threading.Event()
    done, shown = 0, -1

    def counted(size: int) -> None:
        nonlocal done, shown
        done += size
        tenth = done * 10 // max(total, 1)
        if tenth != shown:
            shown = tenth
            line = f"  {done * 100 // max(total, 1)}% ({_megabytes(done)})"
            loop.call_soon_threadsafe(on_line, line)

    def produce() -> None:
        try:
            _archive(send, _Pipe(loop, queue, stop), counted)
        finally:
            asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()

    producer = asyncio.ensure_future(asyncio.to_thread(produce))
    try:
        while (chunk := await queue.get()) is not None:
            process.stdin.write(chunk)
            await process.stdin.drain()
        await producer  # its error (a file that vanished) before the remote's
        process.stdin.write_eof()
        await process.wait_closed()
    except BaseException as error:
        stop.set()
        while not producer.done():  # let the thread finish its last put
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            await asyncio.sleep(0.01)
        process.close()
        if isinstance(error, Exception):  # a file that vanished, a channel that closed
            why = str(error).rstrip(".") or type(error).__name__
            raise KernelStartError(f"Could not copy the notebook's folder to the instance: "
                                   f"{why}.") from None
        raise
    if process.exit_status != 0:
        errors = bytes(await process.stderr.read() or b"").decode(errors="replace").strip()
        last = errors.splitlines()[-1] if errors else f"tar exited with {process.exit_status}"
        raise KernelStartError(f"Could not copy the notebook's folder to the instance: {last}.")
