"""Where a sandbox keeps its instances' files: their homes, volumes and commands, beside its home.

Instance shells run as the sandbox's own user, so their files live outside the service's home:
in ``<home>-machines`` (mode 0700, this user's own), or ``<home>/machines`` when that cannot be
used (with a warning: shells could then reach the service's files by relative paths).

    >>> remove_machines(home)  # the CLI's reset, with the service stopped  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
from pathlib import Path

from gpucloud_nb.sandbox.home import private_dir

__all__ = ["machines_dir", "remove_machines"]

logger = logging.getLogger("gpucloud_nb.sandbox.ssh")


def remove_machines(home: Path) -> None:
    """Remove every instance home, volume and command of the sandbox home ``home`` (``reset``;
    its service must be stopped)."""
    for machines in (home.with_name(f"{home.name}-machines"), home / "machines"):
        if machines.is_dir() and not machines.is_symlink():
            for name in ("instances", "volumes", "bin"):
                shutil.rmtree(machines / name, ignore_errors=True)


def _own_dir(path: Path) -> bool:
    """Make ``path`` (mode 0700) if missing; True when it is a real directory of this user's."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return stat.S_ISDIR(info.st_mode) and mine


def machines_dir(home: Path) -> Path:
    """``<home>-machines`` (or ``<home>/machines`` when that cannot be used), with the instance
    and volume directories of a home written before they moved out of it."""
    machines = home.with_name(f"{home.name}-machines")
    if not _own_dir(machines):
        logger.warning("%s cannot be used for the instances' files; they go in %s/machines, so "
                       "instance shells can reach the service's files by relative paths.",
                       machines, home)
        machines = private_dir(home / "machines")
    with contextlib.suppress(OSError):
        machines.chmod(0o700)
    for name in ("instances", "volumes"):
        old, new = home / name, machines / name
        if old.is_dir() and not old.is_symlink() and not new.exists():
            with contextlib.suppress(OSError):
                os.replace(old, new)
    return machines
