"""The management API: instance offers, instances and volumes, sync and async.

    >>> cloud = GPUCloud()                      # GPUCLOUD_API_KEY and GPUCLOUD_BASE_URL
    >>> offer = cloud.instances.offers(gpu_type="H100", available=True, sort="price")[0]
    >>> instance = cloud.instances.create(
    ...     name="train-1", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
    ...     region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
    >>> cloud.instances.wait_until_active(instance.id).ssh_command
    'ssh -p 40122 ubuntu@127.0.0.1'

Choices where the spec says "not shown", documented here once:

- A create is never blindly retried. When its outcome is unknown (a timeout, a dropped
  connection, a 5xx), the client lists the resources and adopts one with the same name created
  since the request began (minus two minutes of clock slack); only when there is none does it
  try again. A connection that was never made and a 429 are retried as usual.
- The offers catalogue used to check a create is cached for ``offers_ttl`` seconds (60).
- ``GPUCLOUD_BASE_URL`` has no default: the spec names none, so it must be given.
- Redirects are not followed: any 3xx raises :class:`~gpucloud_nb.errors.RedirectError` naming
  the ``Location`` (user:password masked), so a 301 is never taken for a done delete.
- ``max_hourly_cost`` fails closed: a pending or active instance, or the offer, whose
  ``hourlyPrice`` is missing, not finite or negative refuses the launch (see ``costcap``).
- Two providers may sell offers with the same ``instanceId``: an offer is named by the pair
  (provider ``_id``, ``instanceId``) everywhere.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import httpx

from gpucloud_nb import rules
from gpucloud_nb._secrets import Secret, mask, mask_url, scrub, without_userinfo
from gpucloud_nb.client import costcap
from gpucloud_nb.client._auth import ApiKeyAuth, settings
from gpucloud_nb.client._ops import (
    AsyncDriver,
    Call,
    Op,
    OutcomeUnknown,
    RetryPolicy,
    Sleep,
    SyncDriver,
    run_async,
    run_sync,
    send,
)
from gpucloud_nb.client.autodelete import AutoDelete, ServiceAutoDelete, seconds
from gpucloud_nb.client.billing import Ledger
from gpucloud_nb.client.remote import Remote, RunResult, default_public_key, reachable
from gpucloud_nb.errors import (
    ConnectionFailedError,
    GPUCloudError,
    InstanceFailedError,
    InvalidInputError,
    WaitTimeoutError,
)
from gpucloud_nb.models import (
    Instance,
    InstanceDetails,
    InstanceOffer,
    Volume,
    VolumeOffer,
    parse_datetime,
)

if TYPE_CHECKING:
    import pandas

__all__ = ["AsyncGPUCloud", "GPUCloud", "ProgressCallback"]

DEPLOYMENT_TYPES = ("vm", "container", "baremetal")
CREATE_LOOKUP_SLACK = timedelta(minutes=2)
ProgressCallback = Callable[[InstanceDetails, float], Any]
D = TypeVar("D", SyncDriver, AsyncDriver)


class _Core(Generic[D]):
    """Settings and state shared by the resources of one client."""

    def __init__(self, driver: D, key: Secret, policy: RetryPolicy,
                 max_hourly_cost: float | None, offers_ttl: float) -> None:
        self.driver = driver
        self.key = key
        self.policy = policy
        self.max_hourly_cost = max_hourly_cost
        self.offers_ttl = offers_ttl
        self.created_instance_ids: list[str] = []
        self.ledger = Ledger()
        self.auto_delete: AutoDelete | ServiceAutoDelete = AutoDelete(self._delete_now)
        self.delete_now: Callable[[str], None] | None = None
        self.sandbox: Any = None
        self.remote: Remote | None = None
        self._catalogues: dict[str, tuple[float, list[dict[str, Any]]]] = {}

    def send(self, call: Call) -> Op[Any]:
        return send(call, self.policy, secrets=(self.key.reveal(),))

    def _delete_now(self, instance_id: str) -> None:
        if self.delete_now is None:
            raise ConnectionFailedError("This client cannot delete from a timer.")
        self.delete_now(instance_id)

    def catalogue(self, path: str) -> Op[list[dict[str, Any]]]:
        """The offers at ``path``, fetched at most once per ``offers_ttl`` seconds."""
        now = time.monotonic()
        cached = self._catalogues.get(path)
        if cached and now - cached[0] < self.offers_ttl:
            return cached[1]
        offers = _json_list((yield from self.send(Call("GET", path))))
        self._catalogues[path] = (now, offers)
        return offers

    def create_once(self, path: str, body: dict[str, Any], what: str,
                    made: str) -> Op[dict[str, Any]]:
        """POST a create; when its outcome is unknown, adopt what it made before trying again."""
        name = body["name"]
        started = _now()
        attempt = 0
        while True:
            try:
                return (yield from self.send(Call("POST", path, json=body, idempotent=False)))
            except OutcomeUnknown as lost:
                yield Sleep(self.policy.delay(attempt))
                try:
                    found = yield from self.find_created(path, name, started)
                except GPUCloudError as error:
                    raise ConnectionFailedError(
                        f"Creating {what} '{name}': the answer was lost ({lost.message}) and "
                        f"checking whether it was {made} failed too ({error.message}); look at "
                        f"the list of {what}s before trying again."
                    ) from None
                if found is not None:
                    return found
                if attempt >= self.policy.max_retries:
                    raise ConnectionFailedError(
                        f"Creating {what} '{name}' failed ({lost.message}) and no {what} of that "
                        f"name exists, so nothing was {made}; try again."
                    ) from None
                attempt += 1

    def find_created(self, path: str, name: str, started: datetime) -> Op[dict[str, Any] | None]:
        """Look for what a create with an unknown outcome may have made."""
        data = yield from self.send(Call("GET", path))
        since = started - CREATE_LOOKUP_SLACK
        found = [
            item for item in _json_list(data)
            if item.get("name") == name
            and item.get("status") not in ("deleted", "deleting")
            and (parse_datetime(item.get("createdAt")) or since) >= since
        ]
        found.sort(key=lambda item: str(item.get("createdAt", "")))
        return found[-1] if found else None


def _json_list(data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise ConnectionFailedError("The server answered with something other than a list.")
    return [item for item in data if isinstance(item, dict)]


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _offer_params(
    region: str | None, num_gpus: int | str | None, gpu_type: str | None,
    available: bool | None, sort: str | None, deployment_type: str | None,
) -> dict[str, str]:
    if sort is not None and sort != "price":
        raise InvalidInputError(f"sort must be 'price' (the only order the cloud offers), not {sort!r}.")
    if deployment_type is not None and deployment_type not in DEPLOYMENT_TYPES:
        raise InvalidInputError(
            f"deployment_type must be one of vm, container, baremetal, not {deployment_type!r}."
        )
    params = {
        "region": region,
        "numGpus": None if num_gpus is None else str(num_gpus),
        "gpuType": gpu_type,
        "available": None if available is None else _flag(available),
        "sort": sort,
        "deploymentType": deployment_type,
    }
    return {key: value for key, value in params.items() if value is not None}


def _read_cloud_init(script: str | os.PathLike[str]) -> str:
    looks_like_path = "\n" not in str(script) and len(str(script)) < 4096
    if not (isinstance(script, os.PathLike) or (looks_like_path and Path(script).is_file())):
        return str(script)
    path = Path(script)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"The cloud-init file {path} could not be read ({exc.strerror}).") from None


def _vm_body(vm: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(vm, str):
        return {"os": vm}
    if not isinstance(vm, Mapping):
        raise InvalidInputError("vm must be a dict like {'os': 'ubuntu-22.04'}.")
    body: dict[str, Any] = {"os": vm.get("os")}
    encoded = vm.get("base64CloudInitScript", vm.get("base64_cloud_init_script"))
    script = vm.get("cloud_init", vm.get("cloudInit"))
    if script is not None and encoded is not None:
        raise InvalidInputError("Give the cloud-init script once: as cloud_init or as base64CloudInitScript.")
    if script is not None:
        text = _read_cloud_init(script)
        encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
    if encoded is not None:
        body["base64CloudInitScript"] = encoded
    return body


def _container_body(container: Mapping[str, Any] | str) -> dict[str, Any]:
    if isinstance(container, str):
        return {"image": container}
    if not isinstance(container, Mapping):
        raise InvalidInputError("docker_container must be an image name or a dict like {'image': ...}.")
    return {"image": container.get("image")}


def _instance_body(
    name: str, cloud_provider: str, instance_id: str, region: str,
    volume_id: str | None, vm: Mapping[str, Any] | str | None,
    docker_container: Mapping[str, Any] | str | None,
    ssh_key_id: str | None, ssh_key: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name, "cloudProvider": cloud_provider, "instanceId": instance_id, "region": region,
    }
    optional = {"volumeId": volume_id, "sshKeyId": ssh_key_id, "sshKey": ssh_key}
    body.update({key: value for key, value in optional.items() if value is not None})
    if vm is not None:
        body["vm"] = _vm_body(vm)
    if docker_container is not None:
        body["dockerContainer"] = _container_body(docker_container)
    return body


def _now() -> datetime:
    return datetime.now(timezone.utc)


class _Resource(Generic[D]):
    def __init__(self, core: _Core[D]) -> None:
        self._core = core
        self._driver = core.driver


class _InstancesOps(_Resource[D]):
    def offers(
        self, region: str | None = None, num_gpus: int | str | None = None,
        gpu_type: str | None = None, available: bool | None = None,
        sort: str | None = None, deployment_type: str | None = None,
    ) -> Op[builtins.list[InstanceOffer]]:
        """List instance offers, filtered by the cloud; ``sort="price"`` orders by hourly price.

            >>> cloud.instances.offers(gpu_type="H100", num_gpus=8, available=True)
        """
        params = _offer_params(region, num_gpus, gpu_type, available, sort, deployment_type)
        data = yield from self._core.send(Call("GET", "/gpu-cloud/instances/offers", params=params))
        return [InstanceOffer.from_json(item) for item in _json_list(data)]

    def offers_frame(
        self, region: str | None = None, num_gpus: int | str | None = None,
        gpu_type: str | None = None, available: bool | None = None,
        sort: str | None = None, deployment_type: str | None = None,
    ) -> Op[pandas.DataFrame]:
        """The offers as a DataFrame, one row per offer and region, available first, then cheapest.

            >>> cloud.instances.offers_frame(gpu_type="H100").head()
        """
        params = _offer_params(region, num_gpus, gpu_type, available, sort, deployment_type)
        body = yield from self._core.send(
            Call("GET", "/gpu-cloud/instances/offers", params=params, decode=False))
        from gpucloud_nb import frames

        try:
            return frames.offers_frame(body or b"[]")
        except ValueError as error:  # not JSON, or not a JSON array
            reason = str(error).removeprefix("The ").rstrip(".")
            raise ConnectionFailedError(
                f"The server's answer to GET /gpu-cloud/instances/offers was unreadable: {reason}."
            ) from None

    def create(
        self, *, name: str, cloud_provider: str, instance_id: str, region: str,
        volume_id: str | None = None, vm: Mapping[str, Any] | str | None = None,
        docker_container: Mapping[str, Any] | str | None = None,
        ssh_key_id: str | None = None, ssh_key: str | None = None,
        delete_after: float | timedelta | None = None,
    ) -> Op[Instance]:
        """Launch an instance from an offer, checked against the offer before anything is sent.

        ``vm`` is ``{"os": ..., "cloud_init": text or path}`` for vm and baremetal offers (the
        script is base64-encoded for you); ``docker_container`` is ``{"image": ...}`` or the
        image name, for container offers. ``ssh_key`` (OpenSSH public-key text) or ``ssh_key_id``
        lets you log in; on the real cloud, with neither, the client's own key is sent
        (``~/.ssh/id_ed25519.pub``, else one it generates; see :mod:`gpucloud_nb.client.remote`).
        ``delete_after`` (seconds or a ``timedelta``) deletes the instance when the time is up
        (see ``cloud.auto_delete``): on the sandbox the service keeps the timer; on the real
        cloud it runs in this Python process, and a killed kernel cannot delete.

            >>> cloud.instances.create(name="demo", cloud_provider="p1", instance_id="h100-1x",
            ...                        region="us-east-1", vm={"os": "ubuntu-22.04"})
        """
        delay = None if delete_after is None else seconds(delete_after)
        if ssh_key is None and ssh_key_id is None and self._core.sandbox is None:
            ssh_key = default_public_key()  # so that run/upload/forward can log in
        body = _instance_body(name, cloud_provider, instance_id, region, volume_id, vm,
                              docker_container, ssh_key_id, ssh_key)
        offers = yield from self._core.catalogue("/gpu-cloud/instances/offers")
        problem = rules.instance_create_problem(body, offers)
        if problem:
            raise InvalidInputError(problem)
        yield from self._check_cost_cap(rules.find_offer(offers, instance_id, cloud_provider) or {})

        data = yield from self._core.create_once("/gpu-cloud/instances", body, "instance", "launched")
        instance = Instance.from_json(data)
        self._core.created_instance_ids.append(instance.id)
        if delay is not None:
            self._core.auto_delete.schedule(instance.id, delay)
        return instance

    def _check_cost_cap(self, offer: Mapping[str, Any]) -> Op[None]:
        """Refuse a launch over ``max_hourly_cost``, or whose cost cannot be summed (see costcap)."""
        cap = self._core.max_hourly_cost
        if cap is None:
            return
        data = yield from self._core.send(Call("GET", "/gpu-cloud/instances"))
        problem = costcap.cap_problem(cap, _json_list(data), offer)
        if problem:
            raise InvalidInputError(problem)

    def list(self, deployment_type: str | None = None) -> Op[builtins.list[Instance]]:
        """List the instances, optionally of one deployment type.

            >>> [i.status for i in cloud.instances.list()]
        """
        params = (None if deployment_type is None
                  else _offer_params(None, None, None, None, None, deployment_type))
        data = yield from self._core.send(Call("GET", "/gpu-cloud/instances", params=params))
        instances = [Instance.from_json(item) for item in _json_list(data)]
        for instance in instances:
            self._core.ledger.observe(instance)
        return instances

    def get(self, id: str) -> Op[InstanceDetails]:
        """Read one instance in full.

            >>> cloud.instances.get(instance.id).status
            'active'
        """
        data = yield from self._core.send(
            Call("GET", f"/gpu-cloud/instances/{_path_id(id)}", what=f"Instance {id}")
        )
        details = InstanceDetails.from_json(data)
        self._core.ledger.observe(details)
        return details

    def delete(self, id: str) -> Op[None]:
        """Delete an instance; its data is lost unless it sits on a volume.

        Its auto-delete timer, if any, is cancelled.

            >>> cloud.instances.delete(instance.id)
        """
        yield from self._core.send(
            Call("DELETE", f"/gpu-cloud/instances/{_path_id(id)}", what=f"Instance {id}")
        )
        self._core.auto_delete.cancel(id)
        if self._core.remote is not None:
            self._core.remote.forget(id)

    def wait_until_active(
        self, id: str, timeout: float = 900.0, *, on_progress: ProgressCallback | None = None,
        poll_interval: float = 0.5, max_poll_interval: float = 10.0,
    ) -> Op[InstanceDetails]:
        """Poll until the instance is ``active``, with backoff, and return its details.

        ``on_progress(details, elapsed_seconds)`` is called after every poll. Raises
        :class:`InstanceFailedError` on ``error``, ``deleting`` or ``deleted``, and
        :class:`WaitTimeoutError` after ``timeout`` seconds (the instance may still come up).

            >>> cloud.instances.wait_until_active(instance.id, on_progress=print)
        """
        start = time.monotonic()
        interval = poll_interval
        while True:
            details = yield from _InstancesOps.get(self, id)
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


    def spend(self) -> Op[pandas.DataFrame]:
        """Spend so far: one row per instance (hourly price × hours billed) and the total.

        Billing runs while an instance is active or deleting (see ``client.billing``); the total
        is in ``frame.attrs["total"]``.

            >>> cloud.spend().attrs["total"]
            1.84
        """
        data = yield from self._core.send(Call("GET", "/gpu-cloud/instances"))
        now = _now()
        deadlines = self._core.auto_delete.deadlines()
        rows = []
        for instance in (Instance.from_json(item) for item in _json_list(data)):
            bill = self._core.ledger.bill(instance, now)
            rows.append({
                "_id": instance.id, "name": instance.name, "status": instance.status,
                "hourlyPrice": 0.0 if math.isnan(instance.hourly_price) else instance.hourly_price,
                "billedFrom": bill.start, "billedUntil": bill.end, "hoursBilled": bill.hours,
                "spend": bill.spend, "estimated": bill.estimated,
                "autoDeleteAt": deadlines.get(instance.id),
            })
        from gpucloud_nb import frames

        return frames.spend_frame(rows)


class _VolumesOps(_Resource[D]):
    def offers(self) -> Op[builtins.list[VolumeOffer]]:
        """List volume offers: provider, minimum size, price per GB-hour and regions.

            >>> cloud.volumes.offers()[0].min_size_in_gb
        """
        data = yield from self._core.send(Call("GET", "/gpu-cloud/volumes/offers"))
        return [VolumeOffer.from_json(item) for item in _json_list(data)]

    def create(self, *, name: str, cloud_provider: str, region: str, size_in_gb: float) -> Op[Volume]:
        """Create a persistent volume, checked against its provider's offer before sending.

            >>> cloud.volumes.create(name="data", cloud_provider="p1", region="us-east-1",
            ...                      size_in_gb=100)
        """
        body = {"cloudProvider": cloud_provider, "region": region, "name": name,
                "sizeInGb": size_in_gb}
        offers = yield from self._core.catalogue("/gpu-cloud/volumes/offers")
        problem = rules.volume_create_problem(body, offers)
        if problem:
            raise InvalidInputError(problem)
        data = yield from self._core.create_once("/gpu-cloud/volumes", body, "volume", "created")
        return Volume.from_json(data)

    def list(self) -> Op[builtins.list[Volume]]:
        """List the volumes.

            >>> [v.name for v in cloud.volumes.list()]
        """
        data = yield from self._core.send(Call("GET", "/gpu-cloud/volumes"))
        return [Volume.from_json(item) for item in _json_list(data)]

    def get(self, id: str) -> Op[Volume]:
        """Read one volume.

            >>> cloud.volumes.get(volume.id).size_in_gb
        """
        data = yield from self._core.send(
            Call("GET", f"/gpu-cloud/volumes/{_path_id(id)}", what=f"Volume {id}")
        )
        return Volume.from_json(data)

    def delete(self, id: str) -> Op[None]:
        """Delete a volume and the data on it.

            >>> cloud.volumes.delete(volume.id)
        """
        yield from self._core.send(
            Call("DELETE", f"/gpu-cloud/volumes/{_path_id(id)}", what=f"Volume {id}")
        )


def _path_id(id: str) -> str:
    """``id`` as one path segment, or InvalidInputError before anything is sent."""
    if not isinstance(id, str) or not id.strip() or id in (".", ".."):
        raise InvalidInputError(f"{id!r} is not a valid id: give the id of an instance or volume.")
    odd = sorted({c for c in id if c in "/?#"})
    if odd:
        shown = ", ".join(repr(c) for c in odd)
        raise InvalidInputError(f"{id!r} is not a valid id: an id cannot hold {shown}.")
    return id


class Instances(_InstancesOps[SyncDriver]):
    """``cloud.instances``: offers, create, list, get, delete and wait for instances; use them
    over SSH with ``run``, ``upload``, ``download`` and ``forward`` (see
    :mod:`gpucloud_nb.client.remote`)."""

    offers = run_sync(_InstancesOps.offers)
    offers_frame = run_sync(_InstancesOps.offers_frame)
    create = run_sync(_InstancesOps.create)
    list = run_sync(_InstancesOps.list)
    get = run_sync(_InstancesOps.get)
    delete = run_sync(_InstancesOps.delete)
    wait_until_active = run_sync(_InstancesOps.wait_until_active)
    spend = run_sync(_InstancesOps.spend)

    def _remote(self) -> Remote:
        core = self._core
        if core.remote is None:
            core.remote = Remote(self.get, lambda id, t: self.wait_until_active(id, timeout=t),
                                 lambda: core.sandbox)
        return core.remote

    def _target(self, id: str, wait: float) -> InstanceDetails:
        return self._remote().target(_path_id(id), wait)

    def run(self, id: str, command: str, *, timeout: float | None = None,
            on_output: Callable[[str], None] | None = None, wait: float = 60.0) -> RunResult:
        """Run the shell ``command`` on the instance over SSH and return its output and status.

        ``on_output(line)`` gets each line of stdout and stderr as it arrives. A pending
        instance is waited for up to ``wait`` seconds. Ctrl-C stops the remote command; exit
        status 127 (command not found) raises :class:`~gpucloud_nb.client.remote.RemoteCommandError`.

            >>> cloud.instances.run(instance.id, "nvidia-smi", on_output=print).exit_status
            0
        """
        return self._remote().run(self._target(id, wait), command, timeout=timeout,
                                  on_output=on_output)

    def upload(self, id: str, local: str | os.PathLike[str], remote: str, *,
               progress: Callable[[int, int], None] | None = None, wait: float = 60.0) -> None:
        """Copy the local file ``local`` to ``remote`` on the instance (SFTP; relative paths
        start in the instance's home). ``progress(done_bytes, total_bytes)`` follows large files.

            >>> cloud.instances.upload(instance.id, "train.py", "train.py")
        """
        target = self._target(id, wait)
        self._remote().call(self._remote().upload_async(target, local, remote, progress))

    def download(self, id: str, remote: str, local: str | os.PathLike[str], *,
                 progress: Callable[[int, int], None] | None = None, wait: float = 60.0) -> None:
        """Copy ``remote`` on the instance to the local file ``local`` (SFTP).

            >>> cloud.instances.download(instance.id, "results.csv", "results.csv")
        """
        target = self._target(id, wait)
        self._remote().call(self._remote().download_async(target, remote, local, progress))

    def forward(self, id: str, remote_port: int, *,
                wait: float = 60.0) -> contextlib.AbstractContextManager[str]:
        """Forward a free local port to ``remote_port`` on the instance; yields its local URL.

            >>> with cloud.instances.forward(instance.id, 8000) as url:
            ...     ChatWidget(InferenceClient(url, secret))
        """
        return self._remote().forward(self._target(id, wait), remote_port)


class AsyncInstances(_InstancesOps[AsyncDriver]):
    """``cloud.instances`` of :class:`AsyncGPUCloud`: the same methods as coroutines."""

    offers = run_async(_InstancesOps.offers)
    offers_frame = run_async(_InstancesOps.offers_frame)
    create = run_async(_InstancesOps.create)
    list = run_async(_InstancesOps.list)
    get = run_async(_InstancesOps.get)
    delete = run_async(_InstancesOps.delete)
    wait_until_active = run_async(_InstancesOps.wait_until_active)
    spend = run_async(_InstancesOps.spend)

    def _remote(self) -> Remote:
        core = self._core
        if core.remote is None:
            def no_sync(*args: Any) -> Any:
                raise RuntimeError("The async client fetches details itself.")

            core.remote = Remote(no_sync, no_sync, lambda: core.sandbox)
        return core.remote

    async def _target(self, id: str, wait: float) -> InstanceDetails:
        details = await self.get(_path_id(id))
        if details.status == "pending" and wait > 0:
            details = await self.wait_until_active(id, timeout=wait)
        return reachable(details)

    async def run(self, id: str, command: str, *, timeout: float | None = None,
                  on_output: Callable[[str], None] | None = None,
                  wait: float = 60.0) -> RunResult:
        """The coroutine twin of :meth:`Instances.run` (``on_output`` runs on the SSH loop)."""
        remote = self._remote()
        target = await self._target(id, wait)
        return remote.checked(target, command, await asyncio.wrap_future(remote.submit(
            remote.run_async(target, command, timeout=timeout, on_output=on_output))))

    async def upload(self, id: str, local: str | os.PathLike[str], remote: str, *,
                     progress: Callable[[int, int], None] | None = None,
                     wait: float = 60.0) -> None:
        """The coroutine twin of :meth:`Instances.upload`."""
        target = await self._target(id, wait)
        await asyncio.wrap_future(self._remote().submit(
            self._remote().upload_async(target, local, remote, progress)))

    async def download(self, id: str, remote: str, local: str | os.PathLike[str], *,
                       progress: Callable[[int, int], None] | None = None,
                       wait: float = 60.0) -> None:
        """The coroutine twin of :meth:`Instances.download`."""
        target = await self._target(id, wait)
        await asyncio.wrap_future(self._remote().submit(
            self._remote().download_async(target, remote, local, progress)))


class Volumes(_VolumesOps[SyncDriver]):
    """``cloud.volumes``: offers, create, list, get and delete persistent volumes."""

    offers = run_sync(_VolumesOps.offers)
    create = run_sync(_VolumesOps.create)
    list = run_sync(_VolumesOps.list)
    get = run_sync(_VolumesOps.get)
    delete = run_sync(_VolumesOps.delete)


class AsyncVolumes(_VolumesOps[AsyncDriver]):
    """``cloud.volumes`` of :class:`AsyncGPUCloud`: the same methods as coroutines."""

    offers = run_async(_VolumesOps.offers)
    create = run_async(_VolumesOps.create)
    list = run_async(_VolumesOps.list)
    get = run_async(_VolumesOps.get)
    delete = run_async(_VolumesOps.delete)


class _CloudBase:
    base_url: str
    _core: _Core[Any]

    @property
    def sandbox(self) -> Any:
        """The sandbox this client talks to (``connect()`` sets it), or ``None`` for the cloud.

        Setting it also moves auto-delete timers where they outlive the kernel: into the sandbox
        service (:class:`ServiceAutoDelete`); ``None`` brings them back into this process.
        """
        return self._core.sandbox

    @sandbox.setter
    def sandbox(self, box: Any) -> None:
        core = self._core
        core.sandbox = box
        if (box is not None) != isinstance(core.auto_delete, ServiceAutoDelete):
            core.auto_delete = (ServiceAutoDelete(self._service_send) if box is not None
                                else AutoDelete(core._delete_now))

    def _sync_core(self) -> _Core[Any]:
        return self._core

    def _service_send(self, method: str, path: str, body: dict[str, str] | None) -> Any:
        """One request to a sandbox-only endpoint, blocking (timers are set from sync code)."""
        core = self._sync_core()
        return core.driver.run(core.send(Call(method, path, json=body)))

    @property
    def api_key_hint(self) -> str:
        """The API key, masked: at most its first 3 and last 4 characters."""
        return mask(self._core.key.reveal())

    def scrub(self, text: str) -> str:
        """``text`` with every secret this client holds masked (its key; the sandbox's secret).

            >>> cloud.scrub(f"echoed {key}")
            'echoed sk-…a1b2'
        """
        held = [self._core.key.reveal()]
        held += [getattr(self.sandbox, name, None) for name in ("api_key", "inference_secret")]
        # Long secrets first, so that one contained in another is still masked whole.
        return scrub(text, *sorted((s for s in held if isinstance(s, str)), key=len, reverse=True))

    @property
    def max_hourly_cost(self) -> float | None:
        """The cap on the summed hourly price of pending and active instances, if any."""
        return self._core.max_hourly_cost

    @property
    def created_instance_ids(self) -> Sequence[str]:
        """Ids of the instances this client launched, oldest first."""
        return tuple(self._core.created_instance_ids)

    @property
    def auto_delete(self) -> AutoDelete | ServiceAutoDelete:
        """This client's auto-delete timers: ``schedule(id, s)``, ``remaining(id)``,
        ``extend(id, s)``, ``cancel(id)``, ``deadlines()``; ``where`` says who keeps them."""
        return self._core.auto_delete

    @property
    def is_sandbox(self) -> bool:
        """True when this client talks to the local sandbox rather than the real cloud."""
        return self.sandbox is not None

    def sandbox_inference(self) -> Any:
        """An :class:`InferenceClient` for the sandbox's built-in model endpoint.

        Only the sandbox has one endpoint for all; on the real cloud each inference instance has
        its own URL and secret (on its page in the web console): use ``InferenceClient(url, secret)``.

            >>> chat = connect().sandbox_inference()
            >>> chat.chat("Hello!").choices[0].message.content
        """
        if self.sandbox is None:
            raise InvalidInputError(
                "Only the sandbox has a built-in inference endpoint; for the real cloud use "
                "InferenceClient(endpoint_url, secret) with the instance's URL and secret."
            )
        from gpucloud_nb.client.inference import InferenceClient

        return InferenceClient(self.sandbox.inference_url, self.sandbox.inference_secret)

    def __repr__(self) -> str:
        where = "sandbox" if self.sandbox is not None else "cloud"
        return (f"<{type(self).__name__} {where} base_url={mask_url(self.base_url)!r} "
                f"api_key={self.api_key_hint!r}>")


def _delete_with_own_client(cloud: _CloudBase, instance_id: str) -> None:
    """A timer that fires after close() deletes through a short-lived client of its own."""
    with GPUCloud(api_key=cloud._core.key.reveal(), base_url=cloud.base_url) as own:
        own.instances.delete(instance_id)


class GPUCloud(_CloudBase):
    """A client for the GPU cloud's management API.

    The key and base URL fall back to ``GPUCLOUD_API_KEY`` and ``GPUCLOUD_BASE_URL``. Reads and
    deletes are retried ``max_retries`` times; creates never blindly (see the module docs).

        >>> cloud = GPUCloud(max_hourly_cost=10)
        >>> cloud.instances.offers_frame(available=True).head()
    """

    def __init__(
        self, api_key: str | None = None, base_url: str | None = None, *,
        timeout: float = 30.0, max_retries: int = 3, max_hourly_cost: float | None = None,
        offers_ttl: float = 60.0, transport: httpx.BaseTransport | None = None,
    ) -> None:
        key, self.base_url = settings(api_key, base_url)
        self._http = httpx.Client(base_url=without_userinfo(self.base_url), auth=ApiKeyAuth(key),
                                  timeout=timeout, transport=transport)
        self._core = _Core(SyncDriver(self._http), key, RetryPolicy(max_retries=max_retries),
                           max_hourly_cost, offers_ttl)
        self.instances = Instances(self._core)
        self.volumes = Volumes(self._core)
        self._core.delete_now = self.instances.delete

    def spend(self) -> pandas.DataFrame:
        """Spend so far per instance, with the total in ``.attrs["total"]``.

            >>> cloud.spend()[["name", "status", "hoursBilled", "spend"]]
        """
        return self.instances.spend()

    def close(self) -> None:
        """Close the HTTP and SSH connections; auto-delete timers keep working on their own."""
        self._core.delete_now = lambda instance_id: _delete_with_own_client(self, instance_id)
        self._http.close()
        if self._core.remote is not None:
            self._core.remote.close()

    def __enter__(self) -> GPUCloud:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncGPUCloud(_CloudBase):
    """The asyncio twin of :class:`GPUCloud`: the same resources, methods as coroutines.

        >>> async with AsyncGPUCloud() as cloud:
        ...     offers = await cloud.instances.offers(available=True)
    """

    def __init__(
        self, api_key: str | None = None, base_url: str | None = None, *,
        timeout: float = 30.0, max_retries: int = 3, max_hourly_cost: float | None = None,
        offers_ttl: float = 60.0, transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 100,
    ) -> None:
        key, self.base_url = settings(api_key, base_url)
        limits = httpx.Limits(max_connections=max_connections)
        self._http = httpx.AsyncClient(base_url=without_userinfo(self.base_url),
                                       auth=ApiKeyAuth(key), timeout=timeout,
                                       transport=transport, limits=limits)
        self._core = _Core(AsyncDriver(self._http), key, RetryPolicy(max_retries=max_retries),
                           max_hourly_cost, offers_ttl)
        self.instances = AsyncInstances(self._core)
        self.volumes = AsyncVolumes(self._core)
        self._core.delete_now = self._delete_from_timer
        self._twin: GPUCloud | None = None
        self._closed = False

    def _delete_from_timer(self, instance_id: str) -> None:
        """Timers run in threads, away from the event loop: they delete with a sync twin."""
        if self._closed:
            _delete_with_own_client(self, instance_id)
            return
        if self._twin is None:
            self._twin = GPUCloud(api_key=self._core.key.reveal(), base_url=self.base_url)
        self._twin.instances.delete(instance_id)

    def _sync_core(self) -> _Core[Any]:
        if self._twin is None:
            self._twin = GPUCloud(api_key=self._core.key.reveal(), base_url=self.base_url)
        return self._twin._core

    async def spend(self) -> pandas.DataFrame:
        """Spend so far per instance, with the total in ``.attrs["total"]``."""
        return await self.instances.spend()

    async def aclose(self) -> None:
        """Close the HTTP and SSH connections, the timers' sync twin's too; timers keep working."""
        self._closed = True
        await self._http.aclose()
        if self._twin is not None:
            self._twin.close()
            self._twin = None
        if self._core.remote is not None:
            await asyncio.to_thread(self._core.remote.close)

    async def __aenter__(self) -> AsyncGPUCloud:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
