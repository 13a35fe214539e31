"""``cloud.instances``: offers, create, list, get, delete and wait, sync and async; SSH use.

Each operation is written once, as a sans-IO generator of :class:`InstanceOps`; the public
classes :class:`Instances` and :class:`AsyncInstances` run it with their driver, one typed line
per method, so ``cloud.instances.get(id)`` is an :class:`~gpucloud_nb.models.InstanceDetails` to
a type checker and ``await acloud.instances.get(id)`` too.

Every method that takes an instance (``get``, ``delete``, ``wait_until_active``, ``run``,
``upload``, ``download``, ``forward``) takes its ``_id`` or its name. Chosen where the interface
is silent: the argument is tried as an id first, so an id costs no extra request and is never
taken for a name; only when the cloud answers 404 (or 400, which a server that checks the
shape of its ids may send) is it looked up by name, with one list request. A name must be
unique among the instances not deleted or being deleted (such a one is found by name only when
no other has it); otherwise the error names the ids that match.
An argument that cannot be an id (empty, ``..``, or holding ``/``, ``?`` or ``#``) is refused
before anything is sent.

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
import math
import os
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from gpucloud_nb import rules
from gpucloud_nb.client import changes, multinode
from gpucloud_nb.client import create as creating
from gpucloud_nb.client._core import Core, D, decode_offers, json_list, now, unreadable
from gpucloud_nb.client._ops import AsyncDriver, Call, Op, Sleep, SyncDriver
from gpucloud_nb.client.remote import (
    KeysRefusedError,
    Remote,
    RunResult,
    default_public_key,
    reachable,
    refuse_existing,
)
from gpucloud_nb.errors import (
    APIError,
    BadRequestError,
    GPUCloudError,
    InstanceFailedError,
    InvalidInputError,
    NotFoundError,
    WaitTimeoutError,
)
from gpucloud_nb.models import CreateInstance, Instance, InstanceDetails, InstanceOffer

if TYPE_CHECKING:
    import pandas

T = TypeVar("T")

__all__ = ["DEPLOYMENT_TYPES", "AsyncInstances", "InstanceOps", "Instances", "ProgressCallback",
           "path_id"]

DEPLOYMENT_TYPES = ("vm", "container", "baremetal")
ProgressCallback = Callable[[InstanceDetails, float], Any]
OFFERS_PATH = "/gpu-cloud/instances/offers"


def path_id(id: str) -> str:
    """``id`` as one path segment, or InvalidInputError before anything is sent."""
    if not isinstance(id, str) or not id.strip() or id in (".", ".."):
        raise InvalidInputError(f"{id!r} is not a valid id: give the id of an instance or volume.")
    odd = sorted({c for c in id if c in "/?#"})
    if odd:
        shown = ", ".join(repr(c) for c in odd)
        raise InvalidInputError(f"{id!r} is not a valid id: an id cannot hold {shown}.")
    return id


def offer_params(
    region: str | None, num_gpus: int | str | None, gpu_type: str | None,
    available: bool | None, sort: str | None, deployment_type: str | None,
) -> dict[str, str]:
    """The query of ``GET /gpu-cloud/instances/offers``; a bad ``sort`` or type is one sentence."""
    if sort is not None and sort != "price":
        raise InvalidInputError(
            f"sort must be 'price' (the only order the cloud offers), not {sort!r}.")
    if deployment_type is not None and deployment_type not in DEPLOYMENT_TYPES:
        raise InvalidInputError(
            f"deployment_type must be one of vm, container, baremetal, not {deployment_type!r}."
        )
    params = {
        "region": region,
        "numGpus": None if num_gpus is None else str(num_gpus),
        "gpuType": gpu_type,
        "available": None if available is None else ("true" if available else "false"),
        "sort": sort,
        "deploymentType": deployment_type,
    }
    return {key: value for key, value in params.items() if value is not None}


class InstanceOps(Generic[D]):
    """The instance operations as sans-IO generators, shared by the sync and async classes."""

    def __init__(self, core: Core[D]) -> None:
        self.core: Core[D] = core

    def offers(self, params: dict[str, str]) -> Op[list[InstanceOffer]]:
        body = yield from self.core.send(Call("GET", OFFERS_PATH, params=params, decode=False))
        return decode_offers(OFFERS_PATH, InstanceOffer, body)

    def offers_frame(self, params: dict[str, str]) -> Op[pandas.DataFrame]:
        body = yield from self.core.send(Call("GET", OFFERS_PATH, params=params, decode=False))
        from gpucloud_nb import frames

        try:
            return frames.offers_frame(body or b"[]")
        except ValueError as error:  # not JSON, or not a JSON array
            raise unreadable(OFFERS_PATH, error) from None

    def problems(self, request: CreateInstance) -> Op[builtins.list[str]]:
        """Why this create would be refused (rules, then the cost cap): ``[]`` when it may go."""
        problems, _ = yield from self.checked(request, keep=False)
        return problems

    def checked(self, request: CreateInstance, *,
                keep: bool) -> Op[tuple[builtins.list[str], int | None]]:
        """:meth:`problems`, the cap counting this client's creates under way; with ``keep``
        and no problem, the ticket under which the create's $/h stays reserved (see
        :class:`~gpucloud_nb.client.costcap.Reservations`), ``None`` without a cap."""
        offers = yield from self.core.catalogue(OFFERS_PATH, InstanceOffer)
        cap = self.core.max_hourly_cost
        problems = creating.launch_problems(request, offers, cap=None, running=())
        if problems or cap is None:
            return problems, None
        holds = self.core.reservations
        ticket = holds.open()  # before the listing, which may miss creates answered after
        try:
            running = yield from self.list(None)
            offer = rules.find_offer(offers, request.instance_id, request.cloud_provider)
            problem = holds.reserve(ticket, cap, running, offer, keep=keep)
        except BaseException:
            holds.release(ticket)
            raise
        if problem or not keep:
            holds.release(ticket)
            return ([problem] if problem else []), None
        return [], ticket

    def create(self, request: CreateInstance) -> Op[Instance]:
        """Check, send and remember one create; the client-only options act here.

        Everything that can refuse it runs before the POST: the options, the rules and the cap
        (:func:`~gpucloud_nb.client.create.launch_problems`), and whether this client can keep
        the budget and the idle limit asked for.
        """
        if not isinstance(request, CreateInstance):
            raise InvalidInputError(
                f"create_from takes a CreateInstance, not {type(request).__name__}.")
        if request.ssh_key is None and request.ssh_key_id is None and self.core.sandbox is None:
            # so that run/upload/forward can log in
            request = msgspec.structs.replace(
                request, ssh_key=default_public_key(identity=self.core.ssh_identity))
        if (request.delete_after is not None or request.budget is not None) \
                and self.core.sandbox is None and self.core.gateway is None:
            yield from self.core.recognise_gateway()  # a gateway keeps them, not this kernel
        problems, ticket = yield from self.checked(request, keep=True)
        if problems:
            raise InvalidInputError(problems[0])
        holds = self.core.reservations
        try:
            if request.delete_when_idle is not None:
                try:
                    self.core.idle_delete.check()
                except GPUCloudError as error:
                    raise GPUCloudError(f"{error.message.rstrip('.')}, so delete_when_idle cannot "
                                        "be kept; nothing was launched.") from None
        except BaseException:
            holds.release(ticket)
            raise
        try:
            data = yield from self.core.create_once("/gpu-cloud/instances", request.body(),
                                                    "instance", "launched")
            instance = Instance.from_json(data)
        except APIError:  # the cloud answered with a refusal: nothing was made
            holds.release(ticket)
            raise
        except BaseException:  # lost, cancelled or unreadable: something may have been made
            holds.unsure(ticket)
            raise
        holds.answered(ticket, instance.id)
        self.core.created_instance_ids.append(instance.id)
        changes.touch(str(self.core.driver.http.base_url))  # the Lab sidebar shows it now
        if request.delete_after is not None:
            self.core.auto_delete.schedule(instance.id, request.delete_after)
        if request.budget is not None:
            self.core.budgets.set(instance.id, request.budget)
        if request.delete_when_idle is not None:
            self.core.idle_delete.watch_created(instance.id, float(request.delete_when_idle))
        return instance

    def list(self, deployment_type: str | None) -> Op[builtins.list[Instance]]:
        params = (None if deployment_type is None
                  else offer_params(None, None, None, None, None, deployment_type))
        data = yield from self.core.send(Call("GET", "/gpu-cloud/instances", params=params))
        instances = [Instance.from_json(item) for item in json_list(data)]
        for instance in instances:
            self.core.ledger.observe(instance)
        return instances

    def by_id_or_name(self, given: str, op: Callable[[str], Op[T]]) -> Op[T]:
        """``op(id)`` for the instance whose id or name is ``given`` (see the module docs).

        ``given`` is tried as an id first, so an id is never taken for a name and costs nothing
        extra; only when the cloud answers 404 (or 400, as a server that checks the shape of ids
        may) is it looked up by name, with one list request.
        """
        try:
            return (yield from op(path_id(given)))
        except (NotFoundError, BadRequestError) as missing:
            if isinstance(missing, BadRequestError) and missing.status_code != 400:
                raise
            id = yield from self._named(given, missing)
        return (yield from op(id))

    def _named(self, given: str, missing: APIError) -> Op[str]:
        """The id of the one instance named ``given``, preferring those not (being) deleted."""
        instances = yield from self.list(None)
        if any(i.id == given for i in instances):
            raise missing  # the id exists, so the refusal was about something else: as sent
        named = [i for i in instances if i.name == given]
        chosen = [i for i in named if i.status not in ("deleting", "deleted")] or named
        if len(chosen) == 1:
            return chosen[0].id
        if chosen:
            raise InvalidInputError(
                f"{len(chosen)} instances are named {given!r} ({', '.join(i.id for i in chosen)}); "
                "give the id of the one you mean.")
        raise NotFoundError(f"Instance {given} not found: no instance has that id or name.",
                            status_code=missing.status_code, path=missing.path,
                            timestamp=missing.timestamp)

    def get(self, given: str) -> Op[InstanceDetails]:
        return (yield from self.by_id_or_name(given, self._get))

    def _get(self, id: str) -> Op[InstanceDetails]:
        data = yield from self.core.send(
            Call("GET", f"/gpu-cloud/instances/{id}", what=f"Instance {id}"))
        details = InstanceDetails.from_json(data)
        self.core.ledger.observe(details)
        return details

    def delete(self, given: str) -> Op[None]:
        yield from self.by_id_or_name(given, self._delete)

    def _delete(self, id: str) -> Op[None]:
        yield from self.core.send(
            Call("DELETE", f"/gpu-cloud/instances/{path_id(id)}", what=f"Instance {id}"))
        changes.touch(str(self.core.driver.http.base_url))
        self.core.reservations.forget(id)
        self.core.auto_delete.cancel(id)
        self.core.idle_delete.forget(id)
        if self.core.remote is not None:
            self.core.remote.forget(id)

    def wait_until_active(self, id: str, timeout: float, on_progress: ProgressCallback | None,
                          poll_interval: float, max_poll_interval: float) -> Op[InstanceDetails]:
        start = time.monotonic()
        interval = poll_interval
        details = yield from self.get(id)
        id = details.id
        while True:
            elapsed = time.monotonic() - start
            if on_progress is not None:
                on_progress(details, elapsed)
            if details.status == "active":
                return details
            if details.status in ("error", "deleting", "deleted"):
                raise InstanceFailedError(
                    f"Instance {details.name or id} is {details.status}; it will not become active."
                )
            if elapsed >= timeout:
                raise WaitTimeoutError(
                    f"Instance {details.name or id} is still {details.status} after {timeout:g} s; "
                    "it may yet become active: wait again or check instances.get()."
                )
            yield Sleep(min(interval, max(timeout - elapsed, 0.0)))
            interval = min(interval * 1.5, max_poll_interval)
            details = yield from self._get(id)

    def spend(self, include_deleted: bool) -> Op[pandas.DataFrame]:
        data = yield from self.core.send(Call("GET", "/gpu-cloud/instances"))
        moment = now()
        deadlines = self.core.auto_delete.deadlines()
        rows = []
        for instance in (Instance.from_json(item) for item in json_list(data)):
            bill = self.core.ledger.bill(instance, moment)
            rows.append({
                "_id": instance.id, "name": instance.name, "status": instance.status,
                "hourlyPrice": 0.0 if math.isnan(instance.hourly_price) else instance.hourly_price,
                "billedFrom": bill.start, "billedUntil": bill.end, "hoursBilled": bill.hours,
                "spend": bill.spend, "estimated": bill.estimated,
                "autoDeleteAt": deadlines.get(instance.id),
            })
        from gpucloud_nb import frames

        return frames.spend_frame(rows, include_deleted=include_deleted)


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
        (see ``cloud.auto_delete``): on the sandbox the service keeps the timer; on the real
        cloud it runs in this Python process, and a killed kernel cannot delete. ``budget``
        (dollars) deletes it once it has cost that much, with a warning at 80 % (see
        ``cloud.budgets``: the sandbox service watches; on the real cloud, this kernel).
        ``delete_when_idle`` (seconds or a ``timedelta``) deletes it once idle that long (see
        :mod:`gpucloud_nb.client.idle`: the sandbox service watches; on the real cloud, the
        JupyterLab extension while JupyterLab runs, else this kernel). A launch
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

    def forward(self, id: str, remote_port: int, *,
                wait: float = 60.0) -> contextlib.AbstractContextManager[str]:
        """Forward a free local port to ``remote_port`` on the instance; yields its local URL.

            >>> with cloud.instances.forward(instance.id, 8000) as url:  # doctest: +SKIP
            ...     ChatWidget(InferenceClient(url, secret))
        """
        return self._remote().forward(self._target(id, wait), remote_port)

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

    async def forward(self, id: str, remote_port: int, *,
                      wait: float = 60.0) -> contextlib.AbstractAsyncContextManager[str]:
        """The coroutine twin of :meth:`Instances.forward`: the instance is read (and waited for)
        when awaited, the port forwarded inside the ``async with``.

            >>> async with await acloud.instances.forward(instance.id, 8000) as url:  # doctest: +SKIP
            ...     print(await AsyncInferenceClient(url, secret).models())
        """
        return self._remote().forward_async(await self._target(id, wait), remote_port)

    async def ssh(self, id: str, *, wait: float = 0.0) -> tuple[Remote, InstanceDetails]:
        """The coroutine twin of :meth:`Instances.ssh`."""
        return self._remote(), await self._target(id, wait)
