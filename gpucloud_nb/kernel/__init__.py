"""A notebook kernel on a rented instance: the provisioner, its kernelspecs, the folder copy.

    >>> from gpucloud_nb.kernel import install_kernel
    >>> name = install_kernel(cloud, "train-1")  # doctest: +SKIP

- :func:`install_kernel` / :func:`install_kernel_async`: install the kernelspec of an instance
  with a client (:mod:`gpucloud_nb.kernel.spec`; the client itself knows nothing of kernels).
- :mod:`gpucloud_nb.kernel.provisioner`: ``GPUCloudProvisioner``, registered as the
  ``gpucloud-provisioner`` entry point of ``jupyter_client.kernel_provisioners``; its start's
  steps (:mod:`~gpucloud_nb.kernel.launch`), its poll and a lost instance
  (:mod:`~gpucloud_nb.kernel.lost`).
- :mod:`gpucloud_nb.kernel.forwards`: the kernel's channels, from local Unix sockets over SSH.
- :mod:`gpucloud_nb.kernel.spec`: the ``gpucloud-<name>`` kernelspecs.
- :mod:`gpucloud_nb.kernel.sync`: the notebook's folder, copied to the instance at start.
- :func:`checkpoint`, :func:`restore`, :func:`move` (:mod:`gpucloud_nb.kernel.session`, in the
  kernel): its variables saved (:mod:`~gpucloud_nb.kernel.namespace`), brought back, carried to
  another instance by the provisioner (:mod:`~gpucloud_nb.kernel.move`; the bytes:
  :mod:`~gpucloud_nb.kernel.carry`; the target: :mod:`~gpucloud_nb.kernel.move_target`), asked
  over the kernel's relay (:mod:`~gpucloud_nb.kernel.agent`).

Importing this package imports only :mod:`~gpucloud_nb.kernel.spec` (no jupyter_client, which is
loaded by the modules that need it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpucloud_nb.kernel.spec import install_kernel, install_kernel_async

if TYPE_CHECKING:
    from gpucloud_nb.kernel.session import Outcome

__all__ = ["checkpoint", "install_kernel", "install_kernel_async", "move", "restore"]


def checkpoint(**options: Any) -> Outcome:
    """Save this kernel's variables (see :func:`gpucloud_nb.kernel.session.checkpoint`).

        >>> from gpucloud_nb.kernel import checkpoint
        >>> checkpoint(keep=3)  # doctest: +SKIP
    """
    from gpucloud_nb.kernel import session

    return session.checkpoint(**options)


def restore(checkpoint: str | None = None, target: str | None = None,
            **options: Any) -> Outcome:
    """Restore a checkpoint (see :func:`gpucloud_nb.kernel.session.restore`).

        >>> restore()  # the newest, into this kernel  # doctest: +SKIP
    """
    from gpucloud_nb.kernel import session

    return session.restore(checkpoint, target, **options)


def move(target: str | None = None, **options: Any) -> Outcome:
    """Move this kernel to another instance (see :func:`gpucloud_nb.kernel.session.move`).

        >>> move(gpu="H100", max_price=3)  # doctest: +SKIP
    """
    from gpucloud_nb.kernel import session

    return session.move(target, **options)
