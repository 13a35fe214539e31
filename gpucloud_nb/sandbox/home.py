"""Where the user's sandbox keeps its files: the sandbox home.

    >>> from gpucloud_nb.sandbox.home import default_home
    >>> default_home()                      # GPUCLOUD_SANDBOX_HOME, else the user data dir  # doctest: +SKIP
    PosixPath('/home/ada/.local/share/gpucloud-nb/sandbox')

The home holds the service's SQLite state, its runtime file (URLs, pid, key and secret; mode
0600), its log, SSH host and client keys and ``known_hosts``. It is created private (mode 0700)
where the OS allows it. The instances' homes and the volumes live beside it, in
``<home>-machines`` (see :mod:`gpucloud_nb.sandbox.ssh`), so that no instance shell starts
inside the directory that holds the service's key.

Whatever is in the home is trusted (the runtime file says where the service listens, the
settings file holds the key), so :func:`checked_home` refuses, with one sentence, a home that
another user could have written in: one owned by another user, or writable by group or others.
It never repairs such a home (``chmod 700`` is for its owner to decide, after a look inside).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from gpucloud_nb.errors import ConnectionFailedError

__all__ = ["HOME_VARIABLE", "checked_home", "default_home", "private_dir"]

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


def checked_home(path: str | os.PathLike[str], *, create: bool = True) -> Path:
    """The sandbox home at ``path``, made private (0700) when missing and ``create`` is true.

    Raises :class:`~gpucloud_nb.errors.ConnectionFailedError` (one sentence) when the home cannot
    be made, is not a directory, belongs to another user, or is writable by group or others.

        >>> checked_home("/tmp")  # doctest: +SKIP
        Traceback (most recent call last):
        ConnectionFailedError: The sandbox home /tmp is writable by other users (mode 1777); ...
    """
    directory = Path(path)
    if create:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise ConnectionFailedError(
                f"Cannot create the sandbox home {directory}: {error.strerror or error}; set "
                f"{HOME_VARIABLE} to a directory you can write.") from None
    try:
        info = directory.stat()
    except FileNotFoundError:
        return directory  # create=False: no home yet, so no service either
    except OSError as error:
        raise ConnectionFailedError(f"Cannot read the sandbox home {directory}: "
                                    f"{error.strerror or error}.") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConnectionFailedError(f"The sandbox home {directory} is not a directory; set "
                                    f"{HOME_VARIABLE} to a directory of your own.")
    if os.name == "posix":  # elsewhere the mode bits do not describe who may write
        if info.st_uid != os.getuid():
            raise ConnectionFailedError(
                f"The sandbox home {directory} belongs to another user (uid {info.st_uid}), so "
                f"its files cannot be trusted; set {HOME_VARIABLE} to a directory of your own.")
        if info.st_mode & 0o022:
            raise ConnectionFailedError(
                f"The sandbox home {directory} is writable by other users "
                f"(mode {stat.S_IMODE(info.st_mode):04o}), so its files cannot be trusted; "
                "`chmod 700` it if you trust what is inside, or set "
                f"{HOME_VARIABLE} to a private directory.")
        if info.st_mode & 0o077:  # only ever tightened: a home made read-only stays so
            with contextlib.suppress(OSError):
                directory.chmod(stat.S_IMODE(info.st_mode) & 0o700)
    return directory
