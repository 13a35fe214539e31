"""Where the user's sandbox keeps its files: the sandbox home.

    >>> from gpucloud_nb.sandbox.home import default_home
    >>> default_home()                      # GPUCLOUD_SANDBOX_HOME, else the user data dir  # doctest: +SKIP
    PosixPath('/home/ada/.local/share/gpucloud-nb/sandbox')

The home holds the service's SQLite state, its runtime file (URLs, pid, key and secret; mode
0600), its log, SSH host and client keys and ``known_hosts``. It is created private (mode 0700)
where the OS allows it. The instances' homes and the volumes live beside it, in
``<home>-machines`` (see :mod:`gpucloud_nb.sandbox.ssh`), so that no instance shell starts
inside the directory that holds the service's key.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["HOME_VARIABLE", "default_home", "private_dir"]

HOME_VARIABLE = "GPUCLOUD_SANDBOX_HOME"


def default_home() -> Path:
    """The sandbox home: ``$GPUCLOUD_SANDBOX_HOME``, else the user data dir (platformdirs)."""
    configured = os.environ.get(HOME_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("gpucloud-nb", appauthor=False)) / "sandbox"


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and parents) if missing, mode 0700 where the OS allows; return it."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # a file system without POSIX modes
        directory.chmod(0o700)
    return directory
