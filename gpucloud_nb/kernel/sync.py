"""The notebook's folder, copied to the instance when a remote kernel starts.

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp()) / "my project"
    >>> folder.mkdir(); _ = (folder / "data.csv").write_text("a,b\\n1,2\\n")
    >>> _ = (folder / ".env").write_text("SECRET=1")
    >>> found = plan(folder, cap_bytes=100 * 2**20)
    >>> [name for name, _, _ in found.files], found.hidden, remote_folder(folder)
    (['data.csv'], ['.env'], 'my-project')

Choices (the issue leaves them open):

- **What is copied.** Every regular file under the folder, in path order, except hidden files
  and folders (a name starting with ``.``: ``.git``, ``.env``, ``.ipynb_checkpoints``), which are
  never copied and are listed as skipped. Symbolic links to folders are not followed.
- **The cap.** ``GPUCLOUD_KERNEL_SYNC_MB`` (default 100) megabytes in all; a file that would pass
  the cap is skipped and named, and smaller files after it are still copied.
- **Where.** A folder in the instance home named after the notebook's folder (characters other
  than letters, digits, ``.``, ``_`` and ``-`` become ``-``); the kernel starts there.
- **Again.** A file whose copy on the instance has the same size and modification time is not
  sent again, so a restarted kernel costs one ``stat`` per file. Files changed on the instance
  are overwritten by the local copy at start; results come back with ``%gpucloud get`` or
  ``cloud.instances.download``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucloud_nb.errors import InvalidInputError

__all__ = ["CAP_VARIABLE", "SyncPlan", "cap_bytes", "plan", "remote_folder", "summary", "upload"]

CAP_VARIABLE = "GPUCLOUD_KERNEL_SYNC_MB"
DEFAULT_CAP_MB = 100.0


@dataclass
class SyncPlan:
    """What to copy (``(relative posix name, local path, size)``) and what is skipped, and why."""

    files: list[tuple[str, Path, int]] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    over_cap: list[str] = field(default_factory=list)
    cap: int = 0

    @property
    def total(self) -> int:
        """The bytes to copy."""
        return sum(size for _, _, size in self.files)


def cap_bytes(environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """The copy cap in bytes from ``GPUCLOUD_KERNEL_SYNC_MB`` (default 100 MB); bad values refused.

        >>> cap_bytes({"GPUCLOUD_KERNEL_SYNC_MB": "2"})
        2097152
    """
    text = (os.environ if environ is None else environ).get(CAP_VARIABLE, "").strip()
    if not text:
        return int(DEFAULT_CAP_MB * 2**20)
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0 or megabytes == float("inf"):
        raise InvalidInputError(f"{CAP_VARIABLE} must be a number of megabytes (0 or more), "
                                f"not {text!r}.")
    return int(megabytes * 2**20)


def remote_folder(folder: str | os.PathLike[str]) -> str:
    """The name of the instance folder for the local ``folder`` (one safe path segment)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(folder).resolve().name).strip("-.")
    return name or "notebook"


def plan(folder: str | os.PathLike[str], cap_bytes: int) -> SyncPlan:
    """The files of ``folder`` to copy within ``cap_bytes``, and those skipped."""
    root = Path(folder)
    result = SyncPlan(cap=cap_bytes)
    used = 0
    for directory, dirs, names in os.walk(root):
        here = Path(directory)
        for name in sorted(d for d in dirs if d.startswith(".")):
            result.hidden.append((here / name).relative_to(root).as_posix())
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = here / name
            relative = path.relative_to(root).as_posix()
            if name.startswith("."):
                result.hidden.append(relative)
                continue
            try:
                if not path.is_file():
                    continue
                size = path.stat().st_size
            except OSError:
                continue
            if used + size > cap_bytes:
                result.over_cap.append(relative)
                continue
            used += size
            result.files.append((relative, path, size))
    return result


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


def summary(found: SyncPlan) -> list[str]:
    """What was skipped, one line per reason (empty when nothing was)."""
    lines = []
    if found.hidden:
        lines.append(f"Skipped {len(found.hidden)} hidden file(s) or folder(s): "
                     f"{', '.join(found.hidden[:10])}{' …' if len(found.hidden) > 10 else ''}.")
    if found.over_cap:
        lines.append(f"Skipped {len(found.over_cap)} file(s) over the {_megabytes(found.cap)} "
                     f"cap: {', '.join(found.over_cap[:10])}"
                     f"{' …' if len(found.over_cap) > 10 else ''} (set {CAP_VARIABLE} to raise "
                     "it).")
    return lines


async def upload(connection: Any, found: SyncPlan, destination: str,
                 on_line: Callable[[str], None]) -> None:
    """Copy the planned files into ``destination`` (relative to the home) over SFTP.

    ``connection`` is an open asyncssh client connection; ``on_line`` gets the progress (about
    every tenth of the bytes) and the skipped summary.
    """
    import asyncssh

    async with connection.start_sftp_client() as sftp:
        await sftp.makedirs(destination, exist_ok=True)
        total, done, shown = max(found.total, 1), 0, -1
        if found.files:
            on_line(f"Copying {len(found.files)} file(s), {_megabytes(found.total)}, to "
                    f"~/{destination} on the instance…")
        for relative, path, size in found.files:
            target = f"{destination}/{relative}"
            parent = target.rsplit("/", 1)[0]
            if parent != destination:
                await sftp.makedirs(parent, exist_ok=True)
            local = path.stat()
            try:
                there = await sftp.stat(target)
                same = there.size == size and there.mtime == int(local.st_mtime)
            except asyncssh.SFTPError:
                same = False
            if not same:
                await sftp.put(str(path), target, preserve=True)
            done += size
            tenth = done * 10 // total
            if tenth != shown:
                shown = tenth
                on_line(f"  {done * 100 // total}% ({_megabytes(done)})")
    for line in summary(found):
        on_line(line)
