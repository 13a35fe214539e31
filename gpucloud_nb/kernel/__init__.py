"""A notebook kernel on a rented instance: the provisioner, its kernelspecs, the folder copy.

    >>> from gpucloud_nb.kernel import install_kernel
    >>> name = install_kernel(cloud, "train-1")  # doctest: +SKIP

- :func:`install_kernel` / :func:`install_kernel_async`: install the kernelspec of an instance
  with a client (:mod:`gpucloud_nb.kernel.spec`; the client itself knows nothing of kernels).
- :mod:`gpucloud_nb.kernel.provisioner`: ``GPUCloudProvisioner``, registered as the
  ``gpucloud-provisioner`` entry point of ``jupyter_client.kernel_provisioners``.
- :mod:`gpucloud_nb.kernel.forwards`: the kernel's channels, from local Unix sockets over SSH.
- :mod:`gpucloud_nb.kernel.spec`: the ``gpucloud-<name>`` kernelspecs.
- :mod:`gpucloud_nb.kernel.sync`: the notebook's folder, copied to the instance at start.

Importing this package imports only :mod:`~gpucloud_nb.kernel.spec` (no jupyter_client, which is
loaded by the modules that need it).
"""

from gpucloud_nb.kernel.spec import install_kernel, install_kernel_async

__all__ = ["install_kernel", "install_kernel_async"]
