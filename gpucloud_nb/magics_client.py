"""The client ``%gpucloud`` uses in this kernel: the one given to :func:`use`, else the one
``%gpucloud connect`` made, else ``connect()`` at first use (:func:`current_cloud`).

    >>> use(None)          # forget it: the next %gpucloud connects
    >>> session["cloud"] is None
    True
"""

from __future__ import annotations

from typing import Any

from gpucloud_nb.client.management import GPUCloud

__all__ = ["current_cloud", "replace", "session", "use"]

#: The session's client, and whether this module made it (then it closes it when replaced).
session: dict[str, Any] = {"cloud": None, "owned": False}


def use(cloud: GPUCloud | None) -> None:
    """Make ``%gpucloud`` use ``cloud`` from now on; ``None`` forgets it (next use connects).

        >>> import gpucloud_nb.magics
        >>> gpucloud_nb.magics.use(GPUCloud(api_key=..., base_url=...))  # doctest: +SKIP
    """
    replace(cloud, owned=False)


def current_cloud() -> GPUCloud:
    """The client ``%gpucloud`` uses, connecting with ``connect()`` on first use.

        >>> cloud = gpucloud_nb.magics.current_cloud()  # doctest: +SKIP
    """
    if session["cloud"] is None:
        from gpucloud_nb._connect import connect

        replace(connect(), owned=True)
    return session["cloud"]


def replace(cloud: GPUCloud | None, *, owned: bool) -> None:
    """Make ``cloud`` the session's client; the old one is closed if this module made it."""
    old, old_owned = session["cloud"], session["owned"]
    if old is not None and old is not cloud and old_owned and hasattr(old, "close"):
        old.close()
    session["cloud"], session["owned"] = cloud, owned
