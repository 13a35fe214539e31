r"""Which instances belong to a Dask cluster (``GPUCloudCluster``), for the JupyterLab sidebar.

The cloud knows nothing of clusters: an instance has a name, not a group. So each cluster notes
its instances on this machine, one empty-but-named file per instance, in the user cache dir
beside the change stamps (``platformdirs.user_cache_dir("gpucloud-nb")/clusters/<cloud>/
<instance id>``, the file holding the cluster's name), and removes the note when it deletes the
instance. One file per instance means two kernels never rewrite each other's notes. Noting never
raises: an unwritable cache dir only costs the sidebar its grouping. An instance deleted some
other way (the sidebar's Delete all, a delete from outside) leaves its note until the Lab poller
:func:`prune`\ s it.

    >>> from gpucloud_nb.client import clusters
    >>> clusters.note("http://127.0.0.1:8000", "6b06d7", "trio")  # doctest: +SKIP
    >>> clusters.members("http://127.0.0.1:8000")  # doctest: +SKIP
    {'6b06d7': 'trio'}
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path

from gpucloud_nb.client import changes

__all__ = ["folder", "forget", "members", "note", "prune"]

_NAME_CHARS = 200


def folder(base_url: str) -> Path:
    """The notes of the cloud at ``base_url`` (named like its change stamp)."""
    stamp = changes.path(base_url)
    return stamp.parent.parent / "clusters" / stamp.name


def _safe(instance_id: str) -> bool:
    return bool(instance_id) and instance_id not in (".", "..") and "/" not in instance_id \
        and "\0" not in instance_id


def note(base_url: str, instance_id: str, cluster: str) -> None:
    """Note that ``instance_id`` belongs to the cluster named ``cluster``; never raises."""
    if not _safe(instance_id):
        return
    with contextlib.suppress(OSError, ValueError):
        where = folder(base_url)
        where.mkdir(parents=True, exist_ok=True)
        partial = where / f".{instance_id}.partial"
        partial.write_text(cluster[:_NAME_CHARS], encoding="utf-8")
        os.replace(partial, where / instance_id)


def forget(base_url: str, instance_id: str) -> None:
    """Remove the note of ``instance_id``; never raises."""
    if _safe(instance_id):
        with contextlib.suppress(OSError, ValueError):
            (folder(base_url) / instance_id).unlink()


def members(base_url: str) -> dict[str, str]:
    """Instance id → cluster name for every note of the cloud at ``base_url``."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        for entry in folder(base_url).iterdir():
            if entry.name.startswith("."):
                continue
            with contextlib.suppress(OSError, UnicodeDecodeError):
                found[entry.name] = entry.read_text(encoding="utf-8")[:_NAME_CHARS].strip()
    return found


def prune(base_url: str, statuses: Mapping[str, str], *, grace: float = 60.0) -> list[str]:
    """Remove the notes of instances ``statuses`` (id → status, a whole listing) shows deleted,
    or does not show though noted over ``grace`` seconds ago (a listing taken just before a
    create may not show it yet); the ids pruned. Never raises."""
    pruned = []
    with contextlib.suppress(OSError, ValueError):
        for entry in folder(base_url).iterdir():
            status = statuses.get(entry.name)
            with contextlib.suppress(OSError):
                if entry.name.startswith(".") or status not in (None, "deleted") or (
                        status is None and time.time() - entry.stat().st_mtime < grace):
                    continue
                entry.unlink()
                pruned.append(entry.name)
    return pruned
