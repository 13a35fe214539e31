"""A Dask cluster on rented instances, started from the notebook: ``GPUCloudCluster(cloud, n)``.

    >>> from gpucloud_nb.cluster import GPUCloudCluster  # doctest: +SKIP
    >>> cluster = GPUCloudCluster(cloud, 4, gpu_type="H100")  # doctest: +SKIP
    >>> client = distributed.Client(cluster)  # doctest: +SKIP

The cluster is offered from this package, as Dask offers its cluster classes, and takes the
client it rents through: the client (a lower layer) knows nothing of clusters.

Needs the ``[cluster]`` extra (``pip install 'gpucloud-nb[cluster]'``: Dask ``distributed``);
importing this package says so in one sentence when it is missing. The pieces: :mod:`.spec` (the
``SpecCluster``: its start, scale and close), :mod:`.watch` (lost instances, the budget, orphan
timers), :mod:`.checks` (what is checked before anything is rented), :mod:`.launch` (new instances
started, failures named), :mod:`.found` (``from_name``), :mod:`.adaptive` (``adapt``) and
:mod:`.nodes` (the scheduler and worker processes over SSH).

Budgets: ``GPUCloudCluster(cloud, n, budget=20)`` closes the cluster once all its instances
together have cost $20 (a warning at 80 %), and a class account's budget must pay one hour of
all ``n`` before any is launched (see :mod:`.checks`).

GPUs: where ``import dask_cuda`` works on an instance, its worker is ``dask cuda worker``
(dask-cuda's ``CUDAWorker``, one worker per GPU); elsewhere ``dask worker`` with
``resources={"GPU": gpuCount}``. The choice of command is tested; a real ``CUDAWorker`` is not,
because no machine we test on has a GPU (the sandbox has no CUDA).
"""

from __future__ import annotations

from gpucloud_nb.errors import InvalidInputError

try:
    import distributed  # noqa: F401
except ImportError:
    raise InvalidInputError(
        "gpucloud_nb.cluster needs Dask, which is not installed: pip install "
        "'gpucloud-nb[cluster]' (the [cluster] extra), then restart the kernel.") from None

from gpucloud_nb.cluster.spec import GPUCloudCluster

__all__ = ["GPUCloudCluster"]
