"""The management API: instance offers, instances and volumes, sync and async.

    >>> cloud = GPUCloud()                      # GPUCLOUD_API_KEY and GPUCLOUD_BASE_URL  # doctest: +SKIP
    >>> offer = cloud.instances.offers(gpu_type="H100", available=True, sort="price")[0]  # doctest: +SKIP
    >>> instance = cloud.instances.create(  # doctest: +SKIP
    ...     name="train-1", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
    ...     region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
    >>> cloud.instances.wait_until_active(instance.id).ip  # doctest: +SKIP
    '127.0.0.1'
    >>> cloud.instances.ssh_command(instance.id)  # the ssh command that works as printed  # doctest: +SKIP
    'ssh -o UserKnownHostsFile=... -o HostKeyAlias=... -p 40122 ubuntu@127.0.0.1'

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

import abc
import asyncio
import contextlib
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from gpucloud_nb._secrets import mask, mask_url, scrub, without_userinfo
from gpucloud_nb.client._auth import ApiKeyAuth, settings
from gpucloud_nb.client._core import Blocking, Core
from gpucloud_nb.client._ops import AsyncDriver, Call, RetryPolicy, SyncDriver
from gpucloud_nb.client.autodelete import ServiceAutoDelete, UnkeptAutoDelete
from gpucloud_nb.client.budgets import ServiceBudgets, UnkeptBudgets
from gpucloud_nb.client.gateway import GatewayStatus
from gpucloud_nb.client.idle import ServiceIdleDelete, UnkeptIdleDelete
from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient
from gpucloud_nb.client.inference_instances import AsyncInferenceInstances, InferenceInstances
from gpucloud_nb.client.instance_ops import DEPLOYMENT_TYPES, ProgressCallback
from gpucloud_nb.client.instances import AsyncInstances, Instances
from gpucloud_nb.client.key_book import AsyncSSHKeyBook, SSHKeyBook
from gpucloud_nb.client.sandbox_handle import SandboxHandle
from gpucloud_nb.client.ssh_keys import explicit_identity
from gpucloud_nb.client.teacher import ClassView
from gpucloud_nb.client.volumes import AsyncVolumes, Volumes
from gpucloud_nb.errors import GPUCloudError, InvalidInputError

if TYPE_CHECKING:
    import pandas


__all__ = ["DEPLOYMENT_TYPES", "AsyncGPUCloud", "AsyncInstances", "AsyncVolumes", "GPUCloud",
           "Instances", "ProgressCallback", "SandboxHandle", "SandboxInfo", "Volumes"]


@dataclass(frozen=True)
class SandboxInfo:
    """What a notebook may know of the sandbox a client talks to (``cloud.sandbox_info``).

        >>> connect().sandbox_info.launch_seconds  # doctest: +SKIP
        3.0
    """

    #: The management API's base URL (the spec's ``{base_url}``).
    url: str
    #: The base of the built-in inference endpoint, before ``/v1``.
    inference_url: str
    #: How long an instance stays ``pending`` before it is ``active``.
    launch_seconds: float
    #: The sandbox home: instance and volume directories, SSH keys.
    home: Path | None


class _CloudBase(abc.ABC):
    base_url: str
    _core: Core[Any]
    _closed = False
    _asked_gateway = False

    @property
    def sandbox(self) -> SandboxHandle | None:
        """The sandbox this client talks to (``connect()`` sets it), or ``None`` for the cloud.

        Timers, idle deletes and budgets are kept by a gateway in front of it (``connect()``'s),
        never by the sandbox: a client on the sandbox's own URL is like one on the cloud
        directly (they are refused before the POST). SSH keys are registered with the sandbox
        itself over HTTP (``POST /sandbox/ssh-keys``).
        """
        return self._core.sandbox

    @sandbox.setter
    def sandbox(self, box: SandboxHandle | None) -> None:
        self._core.sandbox = box

    def _recognise_quietly(self) -> None:
        """Ask once whether the cloud is a gateway, before its timers or budgets are read
        (unanswered, it is asked again at a create with ``delete_after`` or ``budget``)."""
        if self._core.gateway is None and not self._asked_gateway:
            self._asked_gateway = True
            with contextlib.suppress(GPUCloudError):
                self._blocking_core().driver.run(self._core.recognise_gateway())

    def _blocking(self) -> Blocking:
        """What this client does from its threads, away from any event loop (given to its core)."""
        return Blocking(send=self._service_send)

    @property
    def sandbox_info(self) -> SandboxInfo | None:
        """The sandbox's URLs, launch time and home, or ``None`` on the real cloud.

            >>> connect().sandbox_info.launch_seconds  # doctest: +SKIP
            3.0
        """
        box = self._core.sandbox
        if box is None:
            return None
        home = box.home
        return SandboxInfo(url=str(box.management_url), inference_url=str(box.inference_url),
                           launch_seconds=float(box.launch_seconds),
                           home=None if home is None else Path(home))

    @abc.abstractmethod
    def _blocking_core(self) -> Core[SyncDriver]:
        """A sync core for work done from timer threads, away from any event loop."""

    def _service_send(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        """One request to a sandbox-only endpoint, blocking (timers are set from sync code)."""
        core = self._blocking_core()
        return core.driver.run(core.send(Call(method, path, json=body)))

    @property
    def key_hint(self) -> str:
        """The API key, masked: at most its first 3 and last 4 characters.

            >>> GPUCloud(api_key="sk-0123456789abcdef", base_url="http://127.0.0.1:1").key_hint
            'sk-…cdef'
        """
        return mask(self._core.key.reveal())

    @property
    def account(self) -> str:
        """Which account this client speaks for, never its key: 16 hex digits of a digest of
        the cloud (the sandbox's home, else the base URL) and the key. Files this client leaves
        behind (kernelspecs) carry it, so that another key's client leaves them alone.

            >>> len(GPUCloud(api_key="sk-0123456789abcdef", base_url="http://127.0.0.1:1").account)
            16
        """
        box = self._core.sandbox
        home = None if box is None else box.home
        where = self.base_url if home is None else str(Path(home).resolve())
        text = f"{where}\n{self._core.key.reveal()}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def own_client(self) -> GPUCloud:
        """A new sync client with this one's key and base URL (close it when done).

        Timers, exit hooks and the async client's sync work use one, so the key never leaves
        the client object.
        """
        return GPUCloud(api_key=self._core.key.reveal(), base_url=self.base_url)

    def scrub(self, text: str) -> str:
        """``text`` with every secret this client holds masked (its key; the sandbox's secret).

            >>> cloud.scrub(f"echoed {key}")  # doctest: +SKIP
            'echoed sk-…a1b2'
        """
        box = self.sandbox
        held = [self._core.key.reveal()]
        if box is not None:
            held += [box.api_key, box.inference_secret]
        secrets = [s for s in held if isinstance(s, str)]
        # Long secrets first, so that one contained in another is still masked whole.
        return scrub(text, *sorted(secrets, key=len, reverse=True))

    @property
    def max_hourly_cost(self) -> float | None:
        """The cap on the summed hourly price of pending and active instances, if any."""
        return self._core.max_hourly_cost

    @property
    def created_instance_ids(self) -> Sequence[str]:
        """Ids of the instances this client launched, oldest first."""
        return tuple(self._core.created_instance_ids)

    @property
    def auto_delete(self) -> UnkeptAutoDelete | ServiceAutoDelete:
        """This client's auto-delete timers: ``schedule(id, s)``, ``remaining(id)``,
        ``extend(id, s)``, ``cancel(id)``, ``deadlines()``; ``where`` says who keeps them."""
        self._recognise_quietly()
        return self._core.auto_delete

    @property
    def budgets(self) -> UnkeptBudgets | ServiceBudgets:
        """Spend budgets: ``set(id, dollars)``, ``cancel(id)``, ``states()``; ``where`` says who
        watches (a gateway, or ``nobody`` on the cloud or the sandbox without a
        gateway; see :mod:`gpucloud_nb.client.budgets`).

            >>> cloud.budgets.set(instance.id, 5)  # doctest: +SKIP
        """
        self._recognise_quietly()
        return self._core.budgets

    @property
    def class_view(self) -> ClassView:
        """The teacher's view of a class gateway (``gpucloud-nb gateway --keys FILE``).

            >>> [row.name for row in teacher.class_view.accounts()]  # doctest: +SKIP
            ['Ada', 'Bob']
        """
        def fetch(path: str) -> bytes:
            core = self._blocking_core()
            return bytes(core.driver.run(core.send(Call("GET", path, decode=False))))

        return ClassView(self._service_send, fetch)

    @property
    def idle_delete(self) -> UnkeptIdleDelete | ServiceIdleDelete:
        """This client's idle deletes: ``watch(id, seconds)``, ``keep(id)``, ``cancel(id)``,
        ``states()``; ``where`` says who watches (a gateway, or ``nobody``
        on the cloud or the sandbox directly: see :mod:`gpucloud_nb.client.idle`)."""
        self._recognise_quietly()
        return self._core.idle_delete

    @property
    def is_sandbox(self) -> bool:
        """True when this client talks to the local sandbox rather than the real cloud."""
        return self.sandbox is not None

    def _sandbox_endpoint(self) -> SandboxHandle:
        """The sandbox, whose built-in inference endpoint ``sandbox_inference`` opens."""
        if self.sandbox is None:
            raise InvalidInputError(
                "Only the sandbox has a built-in inference endpoint; for the real cloud use "
                "InferenceClient(endpoint_url, secret) with the instance's URL and secret."
            )
        return self.sandbox

    def __repr__(self) -> str:
        where = "sandbox" if self.sandbox is not None else "cloud"
        return (f"<{type(self).__name__} {where} base_url={mask_url(self.base_url)!r} "
                f"api_key={self.key_hint!r}>")


class GPUCloud(_CloudBase):
    """A client for the GPU cloud's management API.

    The key and base URL fall back to ``GPUCLOUD_API_KEY`` and ``GPUCLOUD_BASE_URL``. Reads and
    deletes are retried ``max_retries`` times; creates never blindly (see the module docs).
    ``ssh_identity`` is the private key file ``run``/``upload``/``ssh_command`` log in with
    first (else ``GPUCLOUD_SSH_KEY``; see :mod:`gpucloud_nb.client.ssh_keys`).

        >>> cloud = GPUCloud(max_hourly_cost=10)  # doctest: +SKIP
        >>> cloud.instances.offers_frame(available=True).head()  # doctest: +SKIP
    """

    def __init__(
        self, api_key: str | None = None, base_url: str | None = None, *,
        timeout: float = 30.0, max_retries: int = 3, max_hourly_cost: float | None = None,
        offers_ttl: float = 60.0, transport: httpx.BaseTransport | None = None,
        ssh_identity: str | os.PathLike[str] | None = None,
    ) -> None:
        key, self.base_url = settings(api_key, base_url)
        self._http = httpx.Client(base_url=without_userinfo(self.base_url), auth=ApiKeyAuth(key),
                                  timeout=timeout, transport=transport)
        self._core = Core(SyncDriver(self._http), key, RetryPolicy(max_retries=max_retries),
                          max_hourly_cost, offers_ttl, self._blocking(),
                          ssh_identity=explicit_identity(ssh_identity) if ssh_identity else None)
        self.instances = Instances(self._core)
        self.volumes = Volumes(self._core)
        self.inference_instances = InferenceInstances(self._core)
        self.ssh_keys = SSHKeyBook(self._core)

    def spend(self, include_deleted: bool = False) -> pandas.DataFrame:
        """Spend so far per instance, with the total in ``.attrs["total"]``.

        Every instance has a row, deleted ones too; displayed, the table hides deleted ones
        unless ``include_deleted`` (the total row counts them; see :mod:`gpucloud_nb.tables`).

            >>> cloud.spend()[["name", "status", "hoursBilled", "spend"]]  # doctest: +SKIP
        """
        return self.instances.spend(include_deleted)

    def sandbox_inference(self) -> InferenceClient:
        """An :class:`InferenceClient` for the sandbox's built-in model endpoint.

        Only the sandbox has one endpoint for all; on the real cloud each inference instance has
        its own URL and secret (on its page in the web console): use ``InferenceClient(url, secret)``.

            >>> chat = connect().sandbox_inference()  # doctest: +SKIP
            >>> chat.chat("Hello!").choices[0].message.content  # doctest: +SKIP
        """
        box = self._sandbox_endpoint()
        return InferenceClient(box.inference_url, box.inference_secret)

    def gateway_status(self) -> GatewayStatus | None:
        """This key's budget as its class gateway keeps it (``name``, ``budget``, ``spend``,
        ``left``, ``warning``, what was deleted at 100 % and when), or ``None`` when the cloud
        is not a gateway; ``.sentence()`` is what to tell the student (see
        :mod:`gpucloud_nb.client.gateway`).

            >>> cloud.gateway_status().left  # doctest: +SKIP
            3.5
        """
        status: GatewayStatus | None = self._core.driver.run(self._core.recognise_gateway())
        return status

    def _blocking_core(self) -> Core[SyncDriver]:
        return self._core

    def close(self) -> None:
        """Close the HTTP and SSH connections; timers, budgets and idle deletes are kept by a
        gateway, not by this client, and go on."""
        self._closed = True
        self._core.use_reports.stop()  # its thread sends with self._http: stopped first
        self._http.close()
        if self._core.remote is not None:
            self._core.remote.close()

    def __enter__(self) -> GPUCloud:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncGPUCloud(_CloudBase):
    """The asyncio twin of :class:`GPUCloud`: the same resources, methods as coroutines.

        >>> async with AsyncGPUCloud() as cloud:  # doctest: +SKIP
        ...     offers = await cloud.instances.offers(available=True)
    """

    def __init__(
        self, api_key: str | None = None, base_url: str | None = None, *,
        timeout: float = 30.0, max_retries: int = 3, max_hourly_cost: float | None = None,
        offers_ttl: float = 60.0, transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 100, ssh_identity: str | os.PathLike[str] | None = None,
    ) -> None:
        key, self.base_url = settings(api_key, base_url)
        limits = httpx.Limits(max_connections=max_connections)
        self._http = httpx.AsyncClient(base_url=without_userinfo(self.base_url),
                                       auth=ApiKeyAuth(key), timeout=timeout,
                                       transport=transport, limits=limits)
        self._core = Core(AsyncDriver(self._http), key, RetryPolicy(max_retries=max_retries),
                          max_hourly_cost, offers_ttl, self._blocking(),
                          ssh_identity=explicit_identity(ssh_identity) if ssh_identity else None)
        self.instances = AsyncInstances(self._core)
        self.volumes = AsyncVolumes(self._core)
        self.inference_instances = AsyncInferenceInstances(self._core)
        self.ssh_keys = AsyncSSHKeyBook(self._core)
        self._timeout = timeout
        self._twin: Core[SyncDriver] | None = None

    def _blocking_core(self) -> Core[SyncDriver]:
        """Timers run in threads, away from the event loop: they use a sync twin."""
        if self._twin is None:
            http = httpx.Client(base_url=without_userinfo(self.base_url),
                                auth=ApiKeyAuth(self._core.key), timeout=self._timeout)
            self._twin = Core(SyncDriver(http), self._core.key, self._core.policy, None,
                              self._core.offers_ttl, self._core.blocking)
        return self._twin

    async def gateway_status(self) -> GatewayStatus | None:
        """This key's budget as its class gateway keeps it, or ``None`` when the cloud is not
        a gateway (see :meth:`GPUCloud.gateway_status`)."""
        status: GatewayStatus | None = await self._core.driver.run(
            self._core.recognise_gateway())
        return status

    async def spend(self, include_deleted: bool = False) -> pandas.DataFrame:
        """Spend so far per instance, with the total in ``.attrs["total"]``."""
        return await self.instances.spend(include_deleted)

    async def sandbox_inference(self) -> AsyncInferenceClient:
        """The coroutine twin of :meth:`GPUCloud.sandbox_inference`: an
        :class:`AsyncInferenceClient` for the sandbox's built-in model endpoint.

            >>> chat = await acloud.sandbox_inference()  # doctest: +SKIP
        """
        box = self._sandbox_endpoint()
        return AsyncInferenceClient(box.inference_url, box.inference_secret)

    async def aclose(self) -> None:
        """Close the HTTP and SSH connections, the sync twin's too; timers, budgets and idle
        deletes are kept by the gateway or the sandbox service and go on."""
        self._closed = True
        await asyncio.to_thread(self._core.use_reports.stop)  # before its client closes
        await self._http.aclose()
        if self._twin is not None:
            self._twin.driver.http.close()
            self._twin = None
        if self._core.remote is not None:
            await asyncio.to_thread(self._core.remote.close)

    async def __aenter__(self) -> AsyncGPUCloud:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
