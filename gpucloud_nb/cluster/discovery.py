"""dask-ctl's discovery of the running clusters of this cloud: the ``dask_cluster_discovery``
entry point, so that ``dask-ctl list`` and dask-ctl's ``get_cluster(name)`` find a
:class:`~gpucloud_nb.cluster.GPUCloudCluster` from any process.

    >>> from dask_ctl import discover_cluster_names  # doctest: +SKIP
    >>> [name async for name in discover_cluster_names("gpucloud")]  # doctest: +SKIP
    [('trio', <class 'gpucloud_nb.cluster.spec.GPUCloudCluster'>)]

The cloud is the one :func:`gpucloud_nb.connect` gives (``GPUCLOUD_API_KEY`` and
``GPUCLOUD_BASE_URL``, else the sandbox service). A cluster is listed while the instance holding
its scheduler (named ``dask-<cluster>-0``, see :mod:`gpucloud_nb.cluster.nodes`) is pending or
active. Discovery never raises: a cloud it cannot reach lists nothing (dask-ctl asks every
installed discovery method, and one failing must not hide the others).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from gpucloud_nb.cluster.nodes import parse_instance_name
from gpucloud_nb.errors import GPUCloudError

if TYPE_CHECKING:
    from gpucloud_nb.client.management import GPUCloud

__all__ = ["cluster_names", "discover"]


def cluster_names(cloud: GPUCloud) -> list[str]:
    """The names of the clusters whose scheduler's instance is pending or active on ``cloud``.

        >>> cluster_names(cloud)  # doctest: +SKIP
        ['trio']
    """
    names = set()
    for instance in cloud.instances.list():
        parsed = parse_instance_name(instance.name)
        if parsed and parsed[1] == 0 and instance.status in ("pending", "active"):
            names.add(parsed[0])
    return sorted(names)


def _listed() -> list[str]:
    from gpucloud_nb import connect

    with contextlib.suppress(GPUCloudError, OSError), connect(quiet=True) as cloud:
        return cluster_names(cloud)
    return []


async def discover() -> AsyncIterator[tuple[str, Callable[..., Any]]]:
    """dask-ctl's discovery method: ``(name, GPUCloudCluster)`` for each running cluster."""
    from gpucloud_nb.cluster.spec import GPUCloudCluster

    for name in await asyncio.to_thread(_listed):
        yield name, GPUCloudCluster
