"""``cloud.inference_instances``: deploy a catalogue model as an endpoint, scale it, start, stop and
delete it, and chat with it; sync and async.

Each operation is a sans-IO generator of
:class:`~gpucloud_nb.client.inference_instance_ops.InferenceInstanceOps`, run by
:class:`InferenceInstances` or :class:`AsyncInferenceInstances` in one typed line. Every method
that takes an instance takes its ``_id`` or its name.

    >>> chat = cloud.inference_instances.create(name="chat", model="sandbox-vision-1",  # doctest: +SKIP
    ...                                         min=0, max=2, cooldown=300)
    >>> cloud.inference_instances.wait_until_active("chat", on_progress=print)  # doctest: +SKIP
    >>> cloud.inference_instances.chat_client("chat").chat("Hello!").text  # doctest: +SKIP
    >>> cloud.inference_instances.stop("chat")  # no containers, nothing billed  # doctest: +SKIP

Choices where the appendix is silent:

- The secret of an endpoint: the appendix says only "the instance's secret in ``x-api-key``",
  and the interface that the secret is "provided at deployment" and shown in the web console;
  the create's answer holds no secret field. :meth:`InferenceInstances.chat_client` therefore
  sends the account's API key (the one this client holds) in ``x-api-key``, the conventional
  reading for a managed endpoint of the same account; the sandbox's endpoints accept their
  owner's API key and no other. For an endpoint whose console shows another secret, use
  ``InferenceClient(instance.address, secret)``.
- ``wait_until_active`` waits for ``ACTIVE`` (every region ready); ``PARTIALLYDEPLOYED`` is
  progress. ``DISABLED`` (stopped), ``ERROR``, ``FAILED``, ``DELETING`` and ``DELETED`` raise
  :class:`~gpucloud_nb.errors.InstanceFailedError`.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gpucloud_nb._secrets import Secret
from gpucloud_nb.client._core import Core
from gpucloud_nb.client._ops import AsyncDriver, Op, SyncDriver
from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient
from gpucloud_nb.client.inference_instance_ops import (
    EndpointProgress,
    InferenceInstanceOps,
    Seconds,
    Triggers,
)
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.inference_records import (
    FAILED_STATUSES,
    InferenceHardware,
    InferenceInstance,
    InferenceInstanceDetails,
    InferenceModel,
    InferenceRegion,
)

if TYPE_CHECKING:
    import pandas

T = TypeVar("T")

__all__ = ["AsyncEndpointClient", "AsyncInferenceInstances", "EndpointClient", "EndpointProgress",
           "InferenceInstances"]


def _address(details: InferenceInstanceDetails) -> str:
    if not details.address:
        raise InvalidInputError(
            f"Inference instance {details.name or details.id} has no address yet "
            f"(it is {details.status}); wait until it is active.")
    return details.address


class EndpointClient(InferenceClient):
    """The :class:`~gpucloud_nb.client.inference.InferenceClient` of one inference instance,
    which can also say whether the endpoint is waking up (scaled to zero, or a container still
    starting), so that a chat can say why the first reply waits.

        >>> chat = cloud.inference_instances.chat_client("sleepy")  # doctest: +SKIP
        >>> chat.waking()  # doctest: +SKIP
        True
    """

    def __init__(self, address: str, key: Secret, name: str,
                 details: Callable[[], InferenceInstanceDetails]) -> None:
        super().__init__(address, key)
        #: The inference instance's name.
        self.endpoint_name = name
        self._details = details

    def waking(self) -> bool:
        """True when the next request waits for a container to start (scaled to zero, or
        deploying): one request to the management API."""
        details = self._details()
        return details.ready == 0 and details.status.upper() not in FAILED_STATUSES


class AsyncEndpointClient(AsyncInferenceClient):
    """The coroutine twin of :class:`EndpointClient`: an
    :class:`~gpucloud_nb.client.inference.AsyncInferenceClient` whose ``waking()`` is awaited.

        >>> chat = await acloud.inference_instances.chat_client("sleepy")  # doctest: +SKIP
        >>> await chat.waking()  # doctest: +SKIP
        True
    """

    def __init__(self, address: str, key: Secret, name: str,
                 details: Callable[[], Awaitable[InferenceInstanceDetails]]) -> None:
        super().__init__(address, key)
        #: The inference instance's name.
        self.endpoint_name = name
        self._details = details

    async def waking(self) -> bool:
        """True when the next request waits for a container to start (scaled to zero, or
        deploying): one request to the management API."""
        details = await self._details()
        return details.ready == 0 and details.status.upper() not in FAILED_STATUSES


class InferenceInstances:
    """``cloud.inference_instances``: the inference catalogue, and deployed models.

        >>> [e.status for e in cloud.inference_instances.list()]  # doctest: +SKIP
        ['ACTIVE']
    """

    def __init__(self, core: Core[SyncDriver]) -> None:
        self._ops = InferenceInstanceOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> T:
        return self._core.driver.run(op)

    def models(self) -> builtins.list[InferenceModel]:
        """The catalogue's models: ``id``, ``name``, ``port``, ``default_hardware_id``, features.

            >>> [m.id for m in cloud.inference_instances.models()]  # doctest: +SKIP
            ['sandbox-vision-1', 'sandbox-speech-1']
        """
        return self._run(self._ops.models())

    def hardwares(self) -> builtins.list[InferenceHardware]:
        """The catalogue's hardwares: CPU, RAM, GPUs and (where given) the price per hour.

            >>> cloud.inference_instances.hardwares()[0].gpu.model  # doctest: +SKIP
        """
        return self._run(self._ops.hardwares())

    def regions(self) -> builtins.list[InferenceRegion]:
        """The regions and their capacity per hardware (read afresh each time).

            >>> cloud.inference_instances.regions()[0].capacity_for("h100-1")  # doctest: +SKIP
            4
        """
        return self._run(self._ops.regions())

    def models_frame(self) -> pandas.DataFrame:
        """The models as a DataFrame, with the default hardware's price per hour.

            >>> cloud.inference_instances.models_frame()  # doctest: +SKIP
        """
        from gpucloud_nb.inference_frames import models_frame

        return models_frame(self.models(), self.hardwares())

    def hardwares_frame(self) -> pandas.DataFrame:
        """The hardwares as a DataFrame (``hourlyPrice`` where the catalogue gives one), with
        the summed capacity of the regions.

            >>> cloud.inference_instances.hardwares_frame()  # doctest: +SKIP
        """
        from gpucloud_nb.inference_frames import hardwares_frame

        return hardwares_frame(self.hardwares(), self.regions())

    def create(self, *, name: str, model: str, hardware: str | None = None,
               region: str | Sequence[str] | None = None, min: int = 0, max: int = 1,
               cooldown: Seconds | None = None, triggers: Triggers | None = None,
               envs: Mapping[str, str] | None = None, startup_command: str | None = None,
               timeout: float | None = None, delete_after: Seconds | None = None,
               budget: float | None = None) -> InferenceInstance:
        """Deploy ``model`` (id or name) on ``hardware`` (its default when ``None``) in
        ``region`` (one, several, or the first with capacity), from ``min`` to ``max``
        containers per region. With ``min=0`` it scales to zero after ``cooldown`` seconds
        without requests and the next request wakes it (an ``http`` trigger is needed: the
        default ``triggers`` is ``{"http": 10}``). Checked against the catalogue, and the cost
        cap, before anything is sent. Through a gateway, ``delete_after`` (seconds or a
        ``timedelta``) and ``budget`` (dollars, billed per container-hour) are kept by it, as
        for GPU instances; elsewhere they are refused before anything is sent.

            >>> cloud.inference_instances.create(name="chat", model="sandbox-vision-1",  # doctest: +SKIP
            ...                                  min=0, max=2, cooldown=300)
        """
        return self._run(self._ops.create(name, model, hardware, region, min, max, cooldown,
                                          triggers, envs, startup_command, timeout,
                                          delete_after, budget))

    def list(self) -> builtins.list[InferenceInstance]:
        """The account's inference instances.

            >>> [e.name for e in cloud.inference_instances.list()]  # doctest: +SKIP
        """
        return self._run(self._ops.list())

    def get(self, id: str) -> InferenceInstanceDetails:
        """One inference instance in full: containers ready per region, hardware, envs.

            >>> cloud.inference_instances.get("chat").ready  # doctest: +SKIP
            1
        """
        return self._run(self._ops.get(id))

    def update(self, id: str, *, min: int | None = None, max: int | None = None,
               cooldown: Seconds | None = None, triggers: Triggers | None = None,
               envs: Mapping[str, str] | None = None) -> InferenceInstanceDetails:
        """Change the scaling (every region) or the environment; returns the new details.

            >>> cloud.inference_instances.update("chat", max=4)  # doctest: +SKIP
        """
        return self._run(self._ops.update(id, min, max, cooldown, triggers, envs))

    def start(self, id: str) -> InferenceInstanceDetails:
        """Start a stopped instance again; wait with :meth:`wait_until_active`.

            >>> cloud.inference_instances.start("chat").status  # doctest: +SKIP
            'PENDING'
        """
        return self._run(self._ops.start(id))

    def stop(self, id: str) -> InferenceInstanceDetails:
        """Stop an instance: no containers, nothing billed, requests refused until started.

            >>> cloud.inference_instances.stop("chat").status  # doctest: +SKIP
            'DISABLED'
        """
        return self._run(self._ops.stop(id))

    def delete(self, id: str) -> None:
        """Delete an inference instance.

            >>> cloud.inference_instances.delete("chat")  # doctest: +SKIP
        """
        self._run(self._ops.delete(id))

    def wait_until_active(
        self, id: str, timeout: float = 900.0, *, on_progress: EndpointProgress | None = None,
        poll_interval: float = 0.5, max_poll_interval: float = 10.0,
    ) -> InferenceInstanceDetails:
        """Poll until the instance is ``ACTIVE`` and return its details.

        ``on_progress(details, elapsed_seconds)`` is called after every poll
        (``details.ready``/``details.total``: containers ready). Raises
        :class:`~gpucloud_nb.errors.InstanceFailedError` when it is stopped, failed or deleted,
        :class:`~gpucloud_nb.errors.WaitTimeoutError` after ``timeout`` seconds.

            >>> cloud.inference_instances.wait_until_active(
            ...     "chat", on_progress=lambda d, s: print(f"{d.ready}/{d.total}"))  # doctest: +SKIP
        """
        return self._run(self._ops.wait_until_active(id, timeout, on_progress, poll_interval,
                                                     max_poll_interval))

    def chat_client(self, id: str) -> EndpointClient:
        """An :class:`EndpointClient` (an :class:`~gpucloud_nb.client.inference.InferenceClient`)
        for the instance's address, with this account's API key as its secret (see the module
        docs); ``ChatWidget(cloud.inference_instances.chat_client(name))`` chats with it.

            >>> cloud.inference_instances.chat_client("chat").chat("Hello!").text  # doctest: +SKIP
        """
        details = self.get(id)
        return EndpointClient(_address(details), self._core.key, details.name or details.id,
                              lambda: self.get(details.id))


class AsyncInferenceInstances:
    """``cloud.inference_instances`` of an
    :class:`~gpucloud_nb.client.management.AsyncGPUCloud`: the same methods as coroutines.

        >>> [e.name for e in await acloud.inference_instances.list()]  # doctest: +SKIP
    """

    def __init__(self, core: Core[AsyncDriver]) -> None:
        self._ops = InferenceInstanceOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> Coroutine[Any, Any, T]:
        return self._core.driver.run(op)

    async def models(self) -> builtins.list[InferenceModel]:
        """The coroutine twin of :meth:`InferenceInstances.models`."""
        return await self._run(self._ops.models())

    async def hardwares(self) -> builtins.list[InferenceHardware]:
        """The coroutine twin of :meth:`InferenceInstances.hardwares`."""
        return await self._run(self._ops.hardwares())

    async def regions(self) -> builtins.list[InferenceRegion]:
        """The coroutine twin of :meth:`InferenceInstances.regions`."""
        return await self._run(self._ops.regions())

    async def models_frame(self) -> pandas.DataFrame:
        """The coroutine twin of :meth:`InferenceInstances.models_frame`."""
        from gpucloud_nb.inference_frames import models_frame

        return models_frame(await self.models(), await self.hardwares())

    async def hardwares_frame(self) -> pandas.DataFrame:
        """The coroutine twin of :meth:`InferenceInstances.hardwares_frame`."""
        from gpucloud_nb.inference_frames import hardwares_frame

        return hardwares_frame(await self.hardwares(), await self.regions())

    async def create(self, *, name: str, model: str, hardware: str | None = None,
                     region: str | Sequence[str] | None = None, min: int = 0, max: int = 1,
                     cooldown: Seconds | None = None, triggers: Triggers | None = None,
                     envs: Mapping[str, str] | None = None, startup_command: str | None = None,
                     timeout: float | None = None, delete_after: Seconds | None = None,
                     budget: float | None = None) -> InferenceInstance:
        """The coroutine twin of :meth:`InferenceInstances.create`."""
        return await self._run(self._ops.create(name, model, hardware, region, min, max,
                                                cooldown, triggers, envs, startup_command,
                                                timeout, delete_after, budget))

    async def list(self) -> builtins.list[InferenceInstance]:
        """The coroutine twin of :meth:`InferenceInstances.list`."""
        return await self._run(self._ops.list())

    async def get(self, id: str) -> InferenceInstanceDetails:
        """The coroutine twin of :meth:`InferenceInstances.get`."""
        return await self._run(self._ops.get(id))

    async def update(self, id: str, *, min: int | None = None, max: int | None = None,
                     cooldown: Seconds | None = None, triggers: Triggers | None = None,
                     envs: Mapping[str, str] | None = None) -> InferenceInstanceDetails:
        """The coroutine twin of :meth:`InferenceInstances.update`."""
        return await self._run(self._ops.update(id, min, max, cooldown, triggers, envs))

    async def start(self, id: str) -> InferenceInstanceDetails:
        """The coroutine twin of :meth:`InferenceInstances.start`."""
        return await self._run(self._ops.start(id))

    async def stop(self, id: str) -> InferenceInstanceDetails:
        """The coroutine twin of :meth:`InferenceInstances.stop`."""
        return await self._run(self._ops.stop(id))

    async def delete(self, id: str) -> None:
        """The coroutine twin of :meth:`InferenceInstances.delete`."""
        await self._run(self._ops.delete(id))

    async def wait_until_active(
        self, id: str, timeout: float = 900.0, *, on_progress: EndpointProgress | None = None,
        poll_interval: float = 0.5, max_poll_interval: float = 10.0,
    ) -> InferenceInstanceDetails:
        """The coroutine twin of :meth:`InferenceInstances.wait_until_active`."""
        return await self._run(self._ops.wait_until_active(id, timeout, on_progress,
                                                           poll_interval, max_poll_interval))

    async def chat_client(self, id: str) -> AsyncEndpointClient:
        """The coroutine twin of :meth:`InferenceInstances.chat_client`: an
        :class:`AsyncEndpointClient`, whose ``await waking()`` says whether a cold start is
        ahead."""
        details = await self.get(id)
        return AsyncEndpointClient(_address(details), self._core.key, details.name or details.id,
                                   lambda: self.get(details.id))
