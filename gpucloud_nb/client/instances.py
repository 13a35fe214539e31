"""``cloud.instances``: offers, create, list, get, delete and wait, sync and async; SSH use.

Each operation is written once, as a sans-IO generator of
:class:`~gpucloud_nb.client.instance_ops.InstanceOps`; the public classes :class:`Instances`
and :class:`AsyncInstances` run it with their driver, one typed line per method,
so ``cloud.instances.get(id)`` is an :class:`~gpucloud_nb.models.InstanceDetails` to a type
checker and ``await acloud.instances.get(id)`` too.

Every method that takes an instance takes its ``_id`` or its name (see
:mod:`gpucloud_nb.client.instance_ops`, where the operations are written).

    >>> instance = cloud.instances.create(name="train-1", cloud_provider="p1",  # doctest: +SKIP
    ...                                   instance_id="h100-1x", region="us-east-1",
    ...                                   vm={"os": "ubuntu-22.04"})
    >>> cloud.instances.wait_until_active(instance.id).ip  # doctest: +SKIP
    '127.0.0.1'
    >>> cloud.instances.ssh_command(instance.id)  # the ssh command that works as printed  # doctest: +SKIP
    'ssh -o UserKnownHostsFile=... -o HostKeyAlias=... -p 40122 ubuntu@127.0.0.1'
    >>> cloud.instances.delete("train-1")  # a unique name works where an id does  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpucloud_nb.client import create as creating
from gpucloud_nb.client import multinode
from gpucloud_nb.client._core import Core
from gpucloud_nb.client._ops import AsyncDriver, Op, SyncDriver
from gpucloud_nb.client.instance_ops import (
    DEPLOYMENT_TYPES,
    InstanceOps,
    ProgressCallback,
    offer_params,
    path_id,
)
from gpucloud_nb.client.remote import (
    KeysRefusedError,
    Remote,
    reachable,
    refuse_existing,
)
from gpucloud_nb.client.run_output import RunResult
from gpucloud_nb.create_request import CreateInstance
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.models import Instance, InstanceDetails, InstanceOffer

if TYPE_CHECKING:
    import pandas

T = TypeVar("T")

__all__ = ["DEPLOYMENT_TYPES", "AsyncInstances", "InstanceOps", "Instances", "ProgressCallback",
           "path_id"]


class Instances:
    """``cloud.instances``: offers, create, list, get, delete and wait for instances; use them
    over SSH with ``run``, ``upload``, ``download`` and ``forward`` (see
    :mod:`gpucloud_nb.client.remote`).

        >>> [i.status for i in cloud.instances.list()]  # doctest: +SKIP
        ['active']
    """

    def __init__(self, core: Core[SyncDriver]) -> None:
        self._ops = InstanceOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> T:
        return self._core.driver.run(op)

    def offers(
        self, region: str | None = None, num_gpus: int | str | None = None,
        gpu_type: str | None = None, available: bool | None = None,
        sort: str | None = None, deployment_type: str | None = None,
    ) -> list[InstanceOffer]:
        """List instance offers, filtered by the cloud; ``sort="price"`` orders by hourly price.

            >>> cloud.instances.offers(gpu_type="H100", num_gpus=8, available=True)  # doctest: +SKIP
        """
        return self._run(self._ops.offers(
            offer_params(region, num_gpus, gpu_type, available, sort, deployment_type)))

    def offers_frame(
        self, region: str | None = None, num_gpus: int | str | None = None,
        gpu_type: str | None = None, available: bool | None = None,
        sort: str | None = None, deployment_type: str | None = None,
    ) -> pandas.DataFrame:
        """The offers as a DataFrame, one row per offer and region, available first, then cheapest.

            >>> cloud.instances.offers_frame(gpu_type="H100").head()  # doctest: +SKIP
        """
        return self._run(self._ops.offers_frame(
            offer_params(region, num_gpus, gpu_type, available, sort, deployment_type)))

    def check_create(
        self, *, name: str, cloud_provider: str, instance_id: str, region: str,
        volume_id: str | None = None, vm: creating.VmSpec | None = None,
        docker_container: Mapping[str, Any] | str | None = None,
        ssh_key_id: str | None = None, ssh_key: str | None = None,
    ) -> list[str]:
        """The reasons :meth:`create` would refuse these arguments, without sending anything.

        The spec's rules against the offer (region, OS image, cloud-init, provider), then the
        ``max_hourly_cost`` cap; ``[]`` when the launch may go ahead.

            >>> cloud.instances.check_create(name="a", cloud_provider="p1",  # doctest: +SKIP
            ...                              instance_id="h100-1x", region="mars-1", vm="ubuntu-22.04")
            ["Offer 'h100-1x' is not offered in region 'mars-1'; it is available in: us-east-1."]
        """
        try:
            request = creating.create_request(
                name=name, cloud_provider=cloud_provider, instance_id=instance_id, region=region,
                volume_id=volume_id, vm=vm, docker_container=docker_container,
                ssh_key_id=ssh_key_id, ssh_key=ssh_key)
        except InvalidInputError as error:
            return [error.message]
        return self._run(self._ops.problems(request))

    def endpoints_hourly(self) -> float:
        """The $/h of the account's inference endpoints at their most containers: what the
        ``max_hourly_cost`` cap counts for them besides these instances (0 where the cloud has
        no inference instances; a stopped endpoint bills nothing).

            >>> cloud.instances.endpoints_hourly()  # doctest: +SKIP
            1.5
        """
        return self._run(self._ops.endpoints_hourly())

    def create(
        self, *, name: str, cloud_provider: str, instance_id: str, region: str,
        volume_id: str | None = None, vm: creating.VmSpec | None = None,
        docker_container: Mapping[str, Any] | str | None = None,
        ssh_key_id: str | None = None, ssh_key: str | None = None,
        delete_after: float | timedelta | None = None, budget: float | None = None,
        delete_when_idle: float | timedelta | None = None,
    ) -> Instance:
        """Launch an instance from an offer, checked against the offer before anything is sent.

        ``vm`` is ``{"os": ..., "cloud_init": text or path}`` for vm and baremetal offers (the
        script is base64-encoded for you); ``docker_container`` is ``{"image": ...}`` or the
        image name, for container offers. ``ssh_key`` (OpenSSH public-key text) or ``ssh_key_id``
        lets you log in; on the real cloud, with neither, the client's own key is sent
        (``~/.ssh/id_ed25519.pub``, else one it generates; see :mod:`gpucloud_nb.client.remote`).
        ``delete_after`` (seconds or a ``timedelta``) deletes the instance when the time is up
        (see ``cloud.auto_delete``): a gateway keeps the timer, with no kernel running; without
        one it is refused before anything is sent. ``budget``
        (dollars) deletes it once it has cost that much, with a warning at 80 % (see
        ``cloud.budgets``: a gateway watches; without one it is refused).
        ``delete_when_idle`` (seconds or a ``timedelta``) deletes it once idle that long (see
        :mod:`gpucloud_nb.client.idle`: a gateway watches; without one it is refused). A launch
        :meth:`check_create` finds a reason against raises
        :class:`~gpucloud_nb.errors.InvalidInputError` with the first one.

            >>> cloud.instances.create(  # doctest: +SKIP
            ...     name="demo", cloud_provider="p1", instance_id="h100-1x",
            ...     region="us-east-1", vm={"os": "ubuntu-22.04"})
        """
        return self.create_from(creating.create_request(
            name=name, cloud_provider=cloud_provider, instance_id=instance_id, region=region,
            volume_id=volume_id, vm=vm, docker_container=docker_container,
            ssh_key_id=ssh_key_id, ssh_key=ssh_key, delete_after=delete_after, budget=budget,
            delete_when_idle=delete_when_idle))

    def create_from(self, request: CreateInstance) -> Instance:
        """Launch the instance a :class:`~gpucloud_nb.models.CreateInstance` describes, as
        :meth:`create` does (the launch form builds one; so does :meth:`create`).

            >>> request = CreateInstance(name="demo", cloud_provider="p1",  # doctest: +SKIP
            ...     instance_id="h100-1x", region="us-east-1",
            ...     vm=VirtualMachine(os="ubuntu-22.04"), delete_after=3600)
            >>> cloud.instances.create_from(request)  # doctest: +SKIP
        """
        return self._run(self._ops.create(request))

    def list(self, deployment_type: str | None = None) -> builtins.list[Instance]:
        """List the instances, optionally of one deployment type.

            >>> [i.status for i in cloud.instances.list()]  # doctest: +SKIP
        """
        return self._run(self._ops.list(deployment_type))

    def get(self, id: str) -> InstanceDetails:
        """Read one instance in full, by its id or its name.

            >>> cloud.instances.get(instance.id).status  # doctest: +SKIP
            'active'
        """
        return self._run(self._ops.get(id))

    def delete(self, id: str) -> None:
        """Delete an instance (by id or name); its data is lost unless it sits on a volume.

        Its auto-delete timer, if any, is cancelled.

            >>> cloud.instances.delete(instance.id)  # doctest: +SKIP
        """
        self._run(self._ops.delete(id))

    def wait_until_active(
        self, id: str, timeout: float = 900.0, *, on_progress: ProgressCallback | None = None,
        poll_interval: float = 0.5, max_poll_interval: float = 10.0,
    ) -> InstanceDetails:
        """Poll until the instance is ``active``, with backoff, and return its details.

        ``on_progress(details, elapsed_seconds)`` is called after every poll. Raises
        :class:`~gpucloud_nb.errors.InstanceFailedError` on ``error``, ``deleting`` or
        ``deleted``, and :class:`~gpucloud_nb.errors.WaitTimeoutError` after ``timeout`` seconds
        (the instance may still come up).

            >>> cloud.instances.wait_until_active(instance.id, on_progress=print)  # doctest: +SKIP
        """
        return self._run(self._ops.wait_until_active(id, timeout, on_progress, poll_interval,
                                                     max_poll_interval))

    def spend(self, include_deleted: bool = False) -> pandas.DataFrame:
        """Spend so far: one row per instance (hourly price × hours billed) and the total.

        Billing runs while an instance is active or deleting (see ``client.billing``); the total
        is in ``frame.attrs["total"]``. Deleted instances keep their rows; the table's display
        hides them unless ``include_deleted`` (see :mod:`gpucloud_nb.tables`).

            >>> cloud.instances.spend().attrs["total"]  # doctest: +SKIP
            1.84
        """
        return self._run(self._ops.spend(include_deleted))

    def _remote(self) -> Remote:
        return self._core.ssh()

    def _target(self, id: str, wait: float) -> InstanceDetails:
        cached = self._remote().cached_target(path_id(id))
        if cached is not None:
            return cached
        details = self.get(id)
        if details.status == "pending" and wait > 0:
            details = self.wait_until_active(id, timeout=wait)
        return reachable(details)

    def run(self, id: str, command: str, *, timeout: float | None = None,
            on_output: Callable[[str], None] | None = None, wait: float = 60.0,
            bookkeeping: bool = False) -> RunResult:
        """Run the shell ``command`` on the instance over SSH and return its output and status.

        ``on_output(line)`` gets each line of stdout and stderr as it arrives. A pending
        instance is waited for up to ``wait`` seconds. Ctrl-C stops the remote command; exit
        status 127 (command not found) raises :class:`~gpucloud_nb.errors.RemoteCommandError`.
        A ``bookkeeping`` command (a look, such as a monitor's ``nvidia-smi``) is not use: it
        keeps no instance from its idle delete (:mod:`gpucloud_nb.idle_rule`).

            >>> cloud.instances.run(instance.id, "nvidia-smi", on_output=print).exit_status  # doctest: +SKIP
            0
        """
        return self._remote().run(self._target(id, wait), command, timeout=timeout,
                                  on_output=on_output, bookkeeping=bookkeeping)

    def run_all(self, ids: Sequence[str], command: str, *,
                on_output: Callable[[str], None] | None = None, timeout: float | None = None,
                master_port: int = multinode.MASTER_PORT, wait: float = 60.0
                ) -> builtins.list[RunResult]:
        """Run ``command`` on every instance of ``ids`` at once, each told its rank; the results
        in rank order.

        ``GPUCLOUD_NODE_RANK``, ``GPUCLOUD_NUM_NODES``, ``GPUCLOUD_NODE_IPS`` and
        ``MASTER_ADDR``/``MASTER_PORT`` are set as SkyPilot sets them for torchrun; each line
        reaches ``on_output`` prefixed ``[rank]`` (see :mod:`gpucloud_nb.client.multinode`).

            >>> cloud.instances.run_all([a.id, b.id], "torchrun --node_rank $GPUCLOUD_NODE_RANK "
            ...                         "train.py", on_output=print)  # doctest: +SKIP
        """
        return multinode.run_all(self, ids, command, on_output=on_output, timeout=timeout,
                                 master_port=master_port, wait=wait)

    def ssh_command(self, id: str, *, wait: float = 60.0) -> str:
        """The ``ssh`` command that logs in to the instance from a terminal, as printed.

        It names the key the instance accepted when OpenSSH would not find it by itself, and
        the client's known_hosts (the host key is stored by connecting once, first). See
        :mod:`gpucloud_nb.client.ssh_keys`.

            >>> cloud.instances.ssh_command(instance.id)  # doctest: +SKIP
            'ssh -i /home/me/.config/gpucloud-nb/ssh/id_ed25519 -o IdentitiesOnly=yes ...'
        """
        return self._remote().ssh_command(self._target(id, wait))

    def ssh_key_in_use(self, id: str) -> str | None:
        """The key this client logs in to the instance with, once it has connected (``run``,
        ``ssh_command``...): where it comes from and its fingerprint; else ``None``.

            >>> cloud.instances.ssh_key_in_use(instance.id)  # doctest: +SKIP
            '~/.ssh/id_rsa (SHA256:1A2b...)'
        """
        return self._remote().key_in_use(path_id(id))

    def upload(self, id: str, local: str | os.PathLike[str], remote: str, *,
               progress: Callable[[int, int], None] | None = None, wait: float = 60.0) -> None:
        """Copy the local file ``local`` to ``remote`` on the instance (SFTP; relative paths
        start in the instance's home). ``progress(done_bytes, total_bytes)`` follows large files.

            >>> cloud.instances.upload(instance.id, "train.py", "train.py")  # doctest: +SKIP
        """
        target = self._target(id, wait)
        self._remote().call(self._remote().upload_async(target, local, remote, progress))

    def download(self, id: str, remote: str, local: str | os.PathLike[str], *,
                 progress: Callable[[int, int], None] | None = None, wait: float = 60.0,
                 overwrite: bool = False) -> None:
        """Copy ``remote`` on the instance to the local file ``local`` (SFTP); an existing
        ``local`` is refused unless ``overwrite=True``, and nothing is written then.

            >>> cloud.instances.download(instance.id, "results.csv", "results.csv")  # doctest: +SKIP
        """
        refuse_existing(Path(local), overwrite)
        target = self._target(id, wait)
        self._remote().call(self._remote().download_async(target, remote, local, progress,
                                                          overwrite=overwrite))

    def forward(self, id: str, remote_port: int, *, wait: float = 60.0,
                bookkeeping: bool = False) -> contextlib.AbstractContextManager[str]:
        """Forward a free local port to ``remote_port`` on the instance; yields its local URL.

            >>> with cloud.instances.forward(instance.id, 8000) as url:  # doctest: +SKIP
            ...     ChatWidget(InferenceClient(url, secret))

        A connection through it is use of the instance while open (the idle rule); a
        ``bookkeeping`` forward (the package's own, such as a cluster's scheduler) never is.
        """
        return self._remote().forward(self._target(id, wait), remote_port, bookkeeping)

    def ssh(self, id: str, *, wait: float = 0.0) -> tuple[Remote, InstanceDetails]:
        """The client's SSH layer and the reachable details of instance ``id``, for code built
        on them (such as the kernel provisioner).

            >>> remote, details = cloud.instances.ssh(instance.id)  # doctest: +SKIP
        """
        return self._remote(), self._target(id, wait)


class AsyncInstances:
    """``cloud.instances`` of :class:`~gpucloud_nb.client.management.AsyncGPUCloud`: the same
    methods as coroutines.

        >>> [i.status for i in await acloud.instances.list()]  # doctest: +SKIP
        ['active']
    """

    def __init__(self, core: Core[AsyncDriver]) -> None:
        self._ops = InstanceOps(core)
        self._core = core

    def _run(self, op: Op[T]) -> Coroutine[Any, Any, T]:
        return self._core.driver.run(op)

    async def offers(
        self, region: str | None = None, num_gpus: int | str | None = None,
        gpu_type: str | None = None, available: bool | None = None,
        sort: str | None = None, deployment_type: str | None = None,
    ) -> list[InstanceOffer]:
        """The coroutine twin of :meth:`Instances.offers`."""
        return await self._run(self._ops.offers(
            offer_params(region, num_gpus, gpu_type, available, sort, deployment_type)))

    async def offers_frame(
        self, region: str | None = None, num_gpus: int | str | None = None,
        gpu_type: str | None = None, available: bool | None = None,
        sort: str | None = None, deployment_type: str | None = None,
    ) -> pandas.DataFrame:
        """The coroutine twin of :meth:`Instances.offers_frame`."""
        return await self._run(self._ops.offers_frame(
            offer_params(region, num_gpus, gpu_type, available, sort, deployment_type)))

    async def check_create(
        self, *, name: str, cloud_provider: str, instance_id: str, region: str,
        volume_id: str | None = None, vm: creating.VmSpec | None = None,
        docker_container: Mapping[str, Any] | str | None = None,
        ssh_key_id: str | None = None, ssh_key: str | None = None,
    ) -> list[str]:
        """The coroutine twin of :meth:`Instances.check_create`."""
        try:
            request = creating.create_request(
                name=name, cloud_provider=cloud_provider, instance_id=instance_id, region=region,
                volume_id=volume_id, vm=vm, docker_container=docker_container,
                ssh_key_id=ssh_key_id, ssh_key=ssh_key)
        except InvalidInputError as error:
            return [error.message]
        return await self._run(self._ops.problems(request))

    async def endpoints_hourly(self) -> float:
        """The coroutine twin of :meth:`Instances.endpoints_hourly`."""
        return await self._run(self._ops.endpoints_hourly())

    async def create(
        self, *, name: str, cloud_provider: str, instance_id: str, region: str,
        volume_id: str | None = None, vm: creating.VmSpec | None = None,
        docker_container: Mapping[str, Any] | str | None = None,
        ssh_key_id: str | None = None, ssh_key: str | None = None,
        delete_after: float | timedelta | None = None, budget: float | None = None,
        delete_when_idle: float | timedelta | None = None,
    ) -> Instance:
        """The coroutine twin of :meth:`Instances.create`."""
        return await self.create_from(creating.create_request(
            name=name, cloud_provider=cloud_provider, instance_id=instance_id, region=region,
            volume_id=volume_id, vm=vm, docker_container=docker_container,
            ssh_key_id=ssh_key_id, ssh_key=ssh_key, delete_after=delete_after, budget=budget,
            delete_when_idle=delete_when_idle))

    async def create_from(self, request: CreateInstance) -> Instance:
        """The coroutine twin of :meth:`Instances.create_from`."""
        return await self._run(self._ops.create(request))

    async def list(self, deployment_type: str | None = None) -> builtins.list[Instance]:
        """The coroutine twin of :meth:`Instances.list`."""
        return await self._run(self._ops.list(deployment_type))

    async def get(self, id: str) -> InstanceDetails:
        """The coroutine twin of :meth:`Instances.get`."""
        return await self._run(self._ops.get(id))

    async def delete(self, id: str) -> None:
        """The coroutine twin of :meth:`Instances.delete`."""
        await self._run(self._ops.delete(id))

    async def wait_until_active(
        self, id: str, timeout: float = 900.0, *, on_progress: ProgressCallback | None = None,
        poll_interval: float = 0.5, max_poll_interval: float = 10.0,
    ) -> InstanceDetails:
        """The coroutine twin of :meth:`Instances.wait_until_active`."""
        return await self._run(self._ops.wait_until_active(id, timeout, on_progress,
                                                           poll_interval, max_poll_interval))

    async def spend(self, include_deleted: bool = False) -> pandas.DataFrame:
        """The coroutine twin of :meth:`Instances.spend`."""
        return await self._run(self._ops.spend(include_deleted))

    def _remote(self) -> Remote:
        return self._core.ssh()

    async def _target(self, id: str, wait: float) -> InstanceDetails:
        cached = self._remote().cached_target(path_id(id))
        if cached is not None:
            return cached
        details = await self.get(id)
        if details.status == "pending" and wait > 0:
            details = await self.wait_until_active(id, timeout=wait)
        return reachable(details)

    async def run(self, id: str, command: str, *, timeout: float | None = None,
                  on_output: Callable[[str], None] | None = None,
                  wait: float = 60.0, bookkeeping: bool = False) -> RunResult:
        """The coroutine twin of :meth:`Instances.run` (``on_output`` runs on the SSH loop)."""
        remote = self._remote()
        target = await self._target(id, wait)
        return remote.checked(target, command, await asyncio.wrap_future(remote.submit(
            remote.run_async(target, command, timeout=timeout, on_output=on_output,
                             bookkeeping=bookkeeping))))

    async def run_all(self, ids: Sequence[str], command: str, *,
                      on_output: Callable[[str], None] | None = None,
                      timeout: float | None = None, master_port: int = multinode.MASTER_PORT,
                      wait: float = 60.0) -> builtins.list[RunResult]:
        """The coroutine twin of :meth:`Instances.run_all` (``on_output`` runs on the SSH loop)."""
        return await multinode.run_all_async(self, ids, command, on_output=on_output,
                                             timeout=timeout, master_port=master_port,
                                             wait=wait)

    async def ssh_command(self, id: str, *, wait: float = 60.0) -> str:
        """The coroutine twin of :meth:`Instances.ssh_command`."""
        remote = self._remote()
        target = await self._target(id, wait)
        with contextlib.suppress(KeysRefusedError):
            await asyncio.wrap_future(remote.submit(remote.connection(target)))
        return remote.command_for(target)

    async def ssh_key_in_use(self, id: str) -> str | None:
        """The coroutine twin of :meth:`Instances.ssh_key_in_use` (it does no I/O)."""
        return self._remote().key_in_use(path_id(id))

    async def upload(self, id: str, local: str | os.PathLike[str], remote: str, *,
                     progress: Callable[[int, int], None] | None = None,
                     wait: float = 60.0) -> None:
        """The coroutine twin of :meth:`Instances.upload`."""
        target = await self._target(id, wait)
        await asyncio.wrap_future(self._remote().submit(
            self._remote().upload_async(target, local, remote, progress)))

    async def download(self, id: str, remote: str, local: str | os.PathLike[str], *,
                       progress: Callable[[int, int], None] | None = None,
                       wait: float = 60.0, overwrite: bool = False) -> None:
        """The coroutine twin of :meth:`Instances.download`."""
        refuse_existing(Path(local), overwrite)
        target = await self._target(id, wait)
        await asyncio.wrap_future(self._remote().submit(
            self._remote().download_async(target, remote, local, progress,
                                          overwrite=overwrite)))

    async def forward(self, id: str, remote_port: int, *, wait: float = 60.0,
                      bookkeeping: bool = False) -> contextlib.AbstractAsyncContextManager[str]:
        """The coroutine twin of :meth:`Instances.forward`: the instance is read (and waited for)
        when awaited, the port forwarded inside the ``async with``.

            >>> async with await acloud.instances.forward(instance.id, 8000) as url:  # doctest: +SKIP
            ...     print(await AsyncInferenceClient(url, secret).models())
        """
        return self._remote().forward_async(await self._target(id, wait), remote_port,
                                            bookkeeping)

    async def ssh(self, id: str, *, wait: float = 0.0) -> tuple[Remote, InstanceDetails]:
        """The coroutine twin of :meth:`Instances.ssh`."""
        return self._remote(), await self._target(id, wait)
