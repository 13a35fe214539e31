"""A notebook kernel on a rented instance: the provisioner, its kernelspecs, the folder copy.

    >>> name = cloud.instances.install_kernel("train-1")  # doctest: +SKIP

- :mod:`gpucloud_nb.kernel.provisioner`: ``GPUCloudProvisioner``, registered as the
  ``gpucloud-provisioner`` entry point of ``jupyter_client.kernel_provisioners``.
- :mod:`gpucloud_nb.kernel.spec`: the ``gpucloud-<name>`` kernelspecs.
- :mod:`gpucloud_nb.kernel.sync`: the notebook's folder, copied to the instance at start.

Importing this package imports nothing else (jupyter_client is loaded by the modules that need it).
"""
