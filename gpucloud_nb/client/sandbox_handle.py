"""What a client knows of the sandbox it talks to: its URLs, secrets, launch time and home.

The client reaches the sandbox only over HTTP (its SSH keys too: ``POST /sandbox/ssh-keys``);
the handle says where the sandbox is and where the client keeps its own files (its key pair
and ``known_hosts`` in ``<home>/client``). ``connect()`` passes the running service's
:class:`~gpucloud_nb.sandbox.service.Runtime`; a test's in-thread
:class:`~gpucloud_nb.sandbox.Sandbox` fits too.

    >>> cloud = GPUCloud(api_key=box.api_key, base_url=box.management_url)  # doctest: +SKIP
    >>> cloud.sandbox = box  # a SandboxHandle  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["SandboxHandle"]


class SandboxHandle(Protocol):
    """The sandbox a client talks to, as the client needs it (read-only attributes).

        >>> connect().sandbox.management_url  # doctest: +SKIP
        'http://127.0.0.1:8765'
    """

    @property
    def management_url(self) -> str:
        """The management API's base URL (the spec's ``{base_url}``)."""

    @property
    def inference_url(self) -> str:
        """The base of the built-in inference endpoint, before ``/v1``."""

    @property
    def api_key(self) -> str:
        """The management key."""

    @property
    def inference_secret(self) -> str:
        """The built-in inference endpoint's secret."""

    @property
    def launch_seconds(self) -> float:
        """How long an instance stays ``pending`` before it is ``active``."""

    @property
    def home(self) -> str | os.PathLike[str] | None:
        """The sandbox home (the client keeps its SSH files in ``<home>/client``), if any."""
