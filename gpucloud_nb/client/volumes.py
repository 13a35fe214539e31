"""``cloud.volumes``: offers, create, list, get and delete persistent volumes, sync and async.

As for instances (:mod:`gpucloud_nb.client.instances`), each operation is a sans-IO generator of
:class:`VolumeOps`, run by :class:`Volumes` or :class:`AsyncVolumes` in one typed line.

    >>> volume = cloud.volumes.create(name="data", cloud_provider="p1", region="us-east-1",  # doctest: +SKIP
    ...                               size_in_gb=100)
    >>> [v.name for v in cloud.volumes.list()]  # doctest: +SKIP
    ['data']
"""

from __future__ import annotations

import builtins
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

from gpucloud_nb.client import create as creating
from gpucloud_nb.client._core import Core, D, json_list
from gpucloud_nb.client._ops import AsyncDriver, Call, Op, SyncDriver
from gpucloud_nb.client.instance_ops import path_id
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Volume, VolumeOffer
from gpucloud_nb.rules import volume_name_problem

T = TypeVar("T")

__all__ = ["AsyncVolumes", "VolumeOps", "Volumes"]

OFFERS_PATH = "/gpu-cloud/volumes/offers"


class VolumeOps(Generic[D]):
    """The volume operations as sans-IO generators, shared by the sync and async classes."""

    def __init__(self, core: Core[D]) -> None:
        self.core: Core[D] = core

    def offers(self) -> Op[list[VolumeOffer]]:
        data = yield from self.core.send(Call("GET", OFFERS_PATH))
        return [VolumeOffer.from_json(item) for item in json_list(data)]

    def create(self, name: str, cloud_provider: str, region: str,
               size_in_gb: float) -> Op[Volume]:
        problem = volume_name_problem(name)  # before anything is sent, the offers included
        if problem:
            raise InvalidInputError(problem)
        body = creating.volume_body(name=name, cloud_provider=cloud_provider, region=region,
                                    size_in_gb=size_in_gb)
        offers = yield from self.core.catalogue(OFFERS_PATH, VolumeOffer)
        problems = creating.volume_problems(body, offers)
        if problems:
            raise InvalidInputError(problems[0])
        data = yield from self.core.create_once("/gpu-cloud/volumes", body, "volume", "created")
        return Volume.from_json(data)

    def list(self) -> Op[builtins.list[Volume]]:
        data = yield from self.core.send(Call("GET", "/gpu-cloud/volumes"))
        return [Volume.from_json(item) for item in json_list(data)]

    def get(self, id: str) -> Op[Volume]:
        data = yield from self.core.send(
            Call("GET", f"/gpu-cloud/volumes/{path_id(id)}", what=f"Volume {id}"))
        return Volume.from_json(data)

    def delete(self, id: str) -> Op[None]:
        yield from self.core.send(
            Call("DELETE", f"/gpu-cloud/volumes/{path_id(id)}", what=f"Volume {id}"))


class Volumes:
    """``cloud.volumes``: offers, create, list, get and delete persistent volumes.

        >>> cloud.volumes.offers()[0].min_size_in_gb  # doctest: +SKIP
        10.0
    """

    def __init__(self, core: Core[SyncDriver]) -> None:
        self._ops = VolumeOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> T:
        return self._core.driver.run(op)

    def offers(self) -> list[VolumeOffer]:
        """List volume offers: provider, minimum size, price per GB-hour and regions.

            >>> cloud.volumes.offers()[0].min_size_in_gb  # doctest: +SKIP
        """
        return self._run(self._ops.offers())

    def create(self, *, name: str, cloud_provider: str, region: str, size_in_gb: float) -> Volume:
        """Create a persistent volume, checked against its provider's offer before sending.

            >>> cloud.volumes.create(name="data", cloud_provider="p1", region="us-east-1",  # doctest: +SKIP
            ...                      size_in_gb=100)
        """
        return self._run(self._ops.create(name, cloud_provider, region, size_in_gb))

    def list(self) -> builtins.list[Volume]:
        """List the volumes.

            >>> [v.name for v in cloud.volumes.list()]  # doctest: +SKIP
        """
        return self._run(self._ops.list())

    def get(self, id: str) -> Volume:
        """Read one volume.

            >>> cloud.volumes.get(volume.id).size_in_gb  # doctest: +SKIP
        """
        return self._run(self._ops.get(id))

    def delete(self, id: str) -> None:
        """Delete a volume and the data on it.

            >>> cloud.volumes.delete(volume.id)  # doctest: +SKIP
        """
        self._run(self._ops.delete(id))


class AsyncVolumes:
    """``cloud.volumes`` of :class:`~gpucloud_nb.client.management.AsyncGPUCloud`: the same
    methods as coroutines.

        >>> [v.name for v in await acloud.volumes.list()]  # doctest: +SKIP
        ['data']
    """

    def __init__(self, core: Core[AsyncDriver]) -> None:
        self._ops = VolumeOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> Coroutine[Any, Any, T]:
        return self._core.driver.run(op)

    async def offers(self) -> list[VolumeOffer]:
        """The coroutine twin of :meth:`Volumes.offers`."""
        return await self._run(self._ops.offers())

    async def create(self, *, name: str, cloud_provider: str, region: str,
                     size_in_gb: float) -> Volume:
        """The coroutine twin of :meth:`Volumes.create`."""
        return await self._run(self._ops.create(name, cloud_provider, region, size_in_gb))

    async def list(self) -> builtins.list[Volume]:
        """The coroutine twin of :meth:`Volumes.list`."""
        return await self._run(self._ops.list())

    async def get(self, id: str) -> Volume:
        """The coroutine twin of :meth:`Volumes.get`."""
        return await self._run(self._ops.get(id))

    async def delete(self, id: str) -> None:
        """The coroutine twin of :meth:`Volumes.delete`."""
        await self._run(self._ops.delete(id))
