"""A change stamp per cloud: a file this package touches after each create or delete.

Whatever makes the change (any kernel, any script of this user on this machine, or a gateway served
here deleting by itself: a timer, an idle limit, a budget; see :mod:`gpucloud_nb.gateway.server`),
the JupyterLab poller (:mod:`gpucloud_nb.lab.poller`) notices it with one ``stat`` and lists the
instances again at once, instead of at its next idle poll. The stamp is an empty file in the user
cache dir (``platformdirs.user_cache_dir("gpucloud-nb")/changes``), named by a hash of the base URL
without any credentials, so one user's clouds never share a stamp. Touching it never raises: a
read-only cache dir only costs the sidebar its quick update. With a key, kernels and the Lab poller
both talk to the user's personal gateway, so they share its URL's stamp; a client with
``GPUCLOUD_GATEWAY=off`` touches the cloud's own, which that poller does not watch (it sees such a
change at its next poll).

    >>> from gpucloud_nb.client import changes
    >>> changes.touch("http://127.0.0.1:8000")  # doctest: +SKIP
    >>> changes.stamp("http://127.0.0.1:8000")  # doctest: +SKIP
    1795608000123456789
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["path", "stamp", "touch"]


def path(base_url: str) -> Path:
    """The stamp file of the cloud at ``base_url`` (user and password ignored)."""
    import platformdirs

    parts = urlsplit(str(base_url).strip())
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    key = f"{parts.scheme.lower()}://{host}{parts.path.rstrip('/')}"
    name = hashlib.sha256(key.encode()).hexdigest()[:24]
    return Path(platformdirs.user_cache_dir("gpucloud-nb", appauthor=False)) / "changes" / name


def touch(base_url: str) -> None:
    """Mark a change to the instances of the cloud at ``base_url``; never raises."""
    try:
        file = path(base_url)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.touch()
        moment = time.time_ns()
        os.utime(file, ns=(moment, moment))
    except (OSError, ValueError):
        pass


def stamp(base_url: str) -> int | None:
    """When the cloud at ``base_url`` last changed from this machine (ns), ``None`` if never."""
    try:
        return path(base_url).stat().st_mtime_ns
    except (OSError, ValueError):
        return None
