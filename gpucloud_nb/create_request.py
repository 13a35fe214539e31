"""The one create request: what ``POST /gpu-cloud/instances`` is sent, built once.

The launch form, the magics and the client (``client/create.py``) all build a
:class:`CreateInstance`; ``cloud.instances.create_from(request)`` sends it. Values are kept as
given: the rules (:mod:`gpucloud_nb.rules`) check them before anything is sent.

    >>> CreateInstance(name="a", cloud_provider="p1", instance_id="x", region="r").body()
    {'name': 'a', 'cloudProvider': 'p1', 'instanceId': 'x', 'region': 'r'}

Choices where the spec says "not shown":

- :class:`CreateInstance` is the spec's body plus the create-time options the client handles
  itself (``delete_after``, ``budget``, ``delete_when_idle``), which :meth:`CreateInstance.body`
  never sends.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

__all__ = ["CreateInstance", "DockerContainer", "VirtualMachine"]


class _Request(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """A request record: what the client sends; values are kept as given (the rules check them)."""

    #: fields the client acts on itself; :meth:`body` leaves them out.
    _client_only: ClassVar[frozenset[str]] = frozenset()

    def body(self) -> dict[str, Any]:
        """The wire JSON: the spec's field names, fields left as ``None`` omitted.

            >>> VirtualMachine(os="ubuntu-22.04").body()
            {'os': 'ubuntu-22.04'}
        """
        out: dict[str, Any] = {}
        for name, wire in zip(self.__struct_fields__, self.__struct_encode_fields__, strict=True):
            value = getattr(self, name)
            if value is None or name in self._client_only:
                continue
            out[wire] = value.body() if isinstance(value, _Request) else value
        return out


class VirtualMachine(_Request, frozen=True):
    """``vm`` of a create request: the OS image and an optional base64 cloud-init script."""

    os: str
    base64_cloud_init_script: str | None = None


class DockerContainer(_Request, frozen=True):
    """``dockerContainer`` of a create request: the image to run."""

    image: str


class CreateInstance(_Request, frozen=True):
    """One create request, built once and used by the launch form, the magics and the client.

    The spec's CreateInstance fields, plus a field for each create-time option the client
    handles itself (``delete_after``: seconds until the client, or the sandbox, deletes it;
    ``budget``: dollars it may cost before it is deleted; ``delete_when_idle``: seconds idle
    before it is deleted); those are never sent as such (a client that talks to a class gateway
    adds ``deleteWhenIdle`` to the body for it: :mod:`gpucloud_nb.gateway.idle_routes`).
    ``cloud.instances.create_from(request)`` sends it.

        >>> request = CreateInstance(name="a", cloud_provider="p1", instance_id="x", region="r",
        ...                          vm=VirtualMachine(os="ubuntu"), delete_after=3600.0,
        ...                          budget=5.0)
        >>> request.body()
        {'name': 'a', 'cloudProvider': 'p1', 'instanceId': 'x', 'region': 'r', 'vm': {'os': 'ubuntu'}}
    """

    _client_only: ClassVar[frozenset[str]] = frozenset({"delete_after", "budget", "delete_when_idle"})

    name: str
    cloud_provider: str
    instance_id: str
    region: str
    volume_id: str | None = None
    vm: VirtualMachine | None = None
    docker_container: DockerContainer | None = None
    ssh_key_id: str | None = None
    ssh_key: str | None = None
    delete_after: float | None = None
    budget: float | None = None
    delete_when_idle: float | None = None
