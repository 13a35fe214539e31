"""A Dask cluster on rented instances, started from the notebook: ``cloud.cluster(n)``.

    >>> cluster = cloud.cluster(4)  # doctest: +SKIP
    >>> client = distributed.Client(cluster)  # doctest: +SKIP

Needs the ``[cluster]`` extra (``pip install 'gpucloud-nb[cluster]'``: Dask ``distributed``);
``cloud.cluster`` says so in one sentence when it is missing. The pieces: :mod:`.spec` (the
``SpecCluster``, offer choice, cost cap, lost instances) and :mod:`.nodes` (the scheduler and
worker processes over SSH).
"""

from __future__ import annotations

from gpucloud_nb.cluster.spec import GPUCloudCluster

__all__ = ["GPUCloudCluster"]
