"""What counts as use of an instance: the one rule every idle watcher applies, at each poll.

    >>> in_use(active=True, open_uses=0, kernel_busy=False, gpu_util=0.3)
    False
    >>> in_use(active=True, open_uses=0, kernel_busy=True, gpu_util=0.3)
    True

An instance is *in use* at a poll when it is not active yet, or a command (a ``run``), a copy
(SFTP, scp) or a connection through a port forward the user opened (``cloud.instances.forward``,
``%gpucloud forward``) is open or ended since the last poll, or a kernel on it executes code, or
its busiest GPU is at :data:`THRESHOLD` % (5) or more. A forward that only listens is not use:
a connection through it is. An idle kernel is not use: its process exists but runs no code
(SkyPilot's idle autostop treats an open kernel the same way).

Bookkeeping is not use either: a watcher's GPU measure, a kernel provisioner's ``kill -0``
poll, the files it writes to start a kernel, the forwards the package opens for itself (a
kernel's channels, a cluster's scheduler and dashboard). A client says a command is bookkeeping
by sending :data:`BOOKKEEPING` (``=1``) in the SSH session's environment (``env`` request), and a
forwarded connection by sending :data:`BOOKKEEPING_ORIGIN` as the originator address of its
``direct-tcpip`` channel: the sandbox reads both; a real cloud's sshd drops the first
(``AcceptEnv``) and only logs the second, where the watchers count only what they see
themselves (see :mod:`gpucloud_nb.client.idle`).

Dask: a cluster's forwards are bookkeeping, so an open Dask client with no tasks running is not
use, and its instances idle away like any other; tasks running show as CPU (GPU use) on the
workers, which is use. (Counting the client's connection would keep a cluster billing for as
long as a notebook holds a ``Client``, the same trap as an idle kernel.)

Who sees what: a gateway (:mod:`gpucloud_nb.gateway.idle`), the one keeper of idle deletes,
reads the GPU over SSH (on the sandbox, every process of an instance measured as its GPU use,
:mod:`gpucloud_nb.sandbox.gpu_use`) and is told the rest: a client's open
commands, copies and forwards (:mod:`gpucloud_nb.client.use_report`), and kernels while they
execute code (by their provisioner, :mod:`gpucloud_nb.kernel.busy`, and the JupyterLab
extension, :mod:`gpucloud_nb.lab.idle`).
"""

from __future__ import annotations

__all__ = ["BOOKKEEPING", "BOOKKEEPING_ORIGIN", "THRESHOLD", "in_use"]

THRESHOLD = 5.0
"""GPU utilisation (%) from which an instance is in use."""
BOOKKEEPING = "GPUCLOUD_BOOKKEEPING"
"""The SSH environment variable a client sends (``=1``) with a command that is not use."""
BOOKKEEPING_ORIGIN = "gpucloud-bookkeeping"
"""The originator address a client sends with a forwarded connection that is not use."""


def in_use(*, active: bool, open_uses: int, kernel_busy: bool, gpu_util: float | None) -> bool:
    """True when an instance is in use at one poll (see the module docstring).

    ``open_uses`` counts the commands, copies and forwarded connections open now or ended since
    the last poll, bookkeeping left out; ``gpu_util`` is the busiest GPU's utilisation, ``None`` when it
    could not be read (which is idle: a watcher that cannot see use must not keep an instance
    billing for ever).

        >>> in_use(active=False, open_uses=0, kernel_busy=False, gpu_util=None)
        True
    """
    return (not active or open_uses > 0 or kernel_busy
            or (gpu_util is not None and gpu_util >= THRESHOLD))
