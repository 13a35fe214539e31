"""A Dask cluster on rented instances, started from the notebook: ``cloud.cluster(n)``.

    >>> cluster = cloud.cluster(4)  # doctest: +SKIP
    >>> client = distributed.Client(cluster)  # doctest: +SKIP

Needs the ``[cluster]`` extra (``pip install 'gpucloud-nb[cluster]'``: Dask ``distributed``);
``cloud.cluster`` says so in one sentence when it is missing. The pieces: :mod:`.spec` (the
``SpecCluster``, offer choice, cost cap, lost instances) and :mod:`.nodes` (the scheduler and
worker processes over SSH).

Budgets: ``cloud.cluster(n, budget=20)`` closes the cluster once all its instances together have
cost $20 (a warning at 80 %), and a class account's budget must pay one hour of all ``n`` before
any is launched (see :mod:`.spec`).

GPUs: where ``import dask_cuda`` works on an instance, its worker is ``dask cuda worker``
(dask-cuda's ``CUDAWorker``, one worker per GPU); elsewhere ``dask worker`` with
``resources={"GPU": gpuCount}``. The choice of command is tested; a real ``CUDAWorker`` is not,
because no machine we test on has a GPU (the sandbox has no CUDA).
"""

from __future__ import annotations

from gpucloud_nb.cluster.spec import GPUCloudCluster

__all__ = ["GPUCloudCluster"]
