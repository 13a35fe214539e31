"""The wire records of the GPU cloud interface: one msgspec schema for client, frames and widgets.

Every resource the cloud sends is a :class:`msgspec.Struct` here, and nowhere else. Attribute names
are the snake_case of the spec's camelCase fields (``hourlyPrice`` → ``hourly_price``); the
spec's own name is each field's wire name, so a JSON body decodes straight into records
(:func:`decode_list`). How they are read, tolerant of drift, is :mod:`gpucloud_nb.decoding`; the
one create request is :mod:`gpucloud_nb.create_request`. Both are re-exported here, where users
import them.

    >>> offer = InstanceOffer.from_json(payload)  # doctest: +SKIP
    >>> offer.gpu_name, offer.hourly_price, offer.available_regions  # doctest: +SKIP
    ('H100 SXM5', 2.49, ('us-east-1',))

Choices where the spec says "not shown":

- ``deletedAt`` is a required date-time string even on live instances. The sandbox sends the Unix
  epoch there; both the epoch and an empty or null value parse to ``deleted_at=None``. A date-time
  without a zone is read as UTC.
- ``region`` (an object), the items of ``volumes`` and ``sshKey`` have no documented structure:
  they are kept as sent. ``Instance.region_id`` reads the usual keys (``id``, ``region``, ``name``).
- Records are frozen, except :class:`Instance` and :class:`InstanceDetails`, which panels re-read
  every few seconds; assigning to one changes only that snapshot, never the cloud.
- ``pricePerGbPerHour`` is a decimal string: ``price_per_gb_per_hour_text`` is the text as sent
  and ``price_per_gb_per_hour`` its float value.
- ``cloudProvider`` may be an object or a bare id string; both give a :class:`VolumeProvider`.
- ``autoDeleteAt`` is the sandbox's own field (the time its auto-delete timer fires); the real
  cloud does not send it, so ``auto_delete_at`` is ``None`` there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, ClassVar

import msgspec

from gpucloud_nb.create_request import CreateInstance, DockerContainer, VirtualMachine
from gpucloud_nb.decoding import (
    NAN,
    Record,
    decode_list,
    fix_datetimes,
    loose_list,
    loose_port,
    loose_str,
    parse_datetime,
    strings_in,
    to_float,
    to_int,
)
from gpucloud_nb.inference_records import (
    INFERENCE_STATUSES,
    AutoScalingConfiguration,
    DeployStatus,
    InferenceContainer,
    InferenceGpu,
    InferenceHardware,
    InferenceInstance,
    InferenceInstanceDetails,
    InferenceModel,
    InferenceRegion,
    RegionCapacity,
    Scale,
    ScaleTriggers,
    SSHKey,
)

__all__ = [
    "INFERENCE_STATUSES",
    "INSTANCE_STATUSES",
    "AutoScalingConfiguration",
    "Availability",
    "CloudProvider",
    "Configuration",
    "CreateInstance",
    "DeployStatus",
    "DockerContainer",
    "InferenceContainer",
    "InferenceGpu",
    "InferenceHardware",
    "InferenceInstance",
    "InferenceInstanceDetails",
    "InferenceModel",
    "InferenceRegion",
    "Instance",
    "InstanceDetails",
    "InstanceOffer",
    "PortForward",
    "Record",
    "RegionCapacity",
    "SSHKey",
    "Scale",
    "ScaleTriggers",
    "VirtualMachine",
    "Volume",
    "VolumeOffer",
    "VolumeProvider",
    "decode_list",
    "parse_datetime",
    "to_float",
    "to_int",
]

INSTANCE_STATUSES = ("pending", "active", "error", "deleted", "deleting")


# --------------------------------------------------------------------------- the schema


class _Frozen(Record, msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """A record that never changes once read."""


class _Mutable(Record, msgspec.Struct, kw_only=True, rename="camel", gc=False):
    """A record panels re-read every few seconds (see the module docstring)."""


class CloudProvider(_Frozen, frozen=True):
    """The provider of an instance offer (``cloud`` in the spec)."""

    id: str = msgspec.field(default="", name="_id")
    name: str = ""


class Configuration(_Frozen, frozen=True):
    """The hardware of an offer; ``os`` lists the images usable at instance creation."""

    ram_gb: float = msgspec.field(default=NAN, name="ramGB")
    storage_gb: float = msgspec.field(default=NAN, name="storageGB")
    vcpu: float = msgspec.field(default=NAN, name="vCpu")
    vram_gb: float = msgspec.field(default=NAN, name="vRamGB")
    os: tuple[str, ...] = ()
    interconnect: str = ""


class Availability(_Frozen, frozen=True):
    """Whether an offer can be launched in one region."""

    region: str = ""
    name: str = ""
    country_code: str = ""
    available: bool = False


class InstanceOffer(_Frozen, frozen=True):
    """A rentable GPU instance configuration from ``GET /gpu-cloud/instances/offers``."""

    gpu_name: str = ""
    gpu_count: int = 0
    nvlink: bool = False
    deployment_type: str = ""
    instance_id: str = ""
    cloud_init_available: bool = False
    cloud: CloudProvider = msgspec.field(default_factory=CloudProvider)
    configuration: Configuration = msgspec.field(default_factory=Configuration)
    hourly_price: float = NAN
    availability: tuple[Availability, ...] = ()

    @property
    def available_regions(self) -> tuple[str, ...]:
        """Regions where this offer can be launched now."""
        return tuple(a.region for a in self.availability if a.available)

    @property
    def is_available(self) -> bool:
        """True when the offer can be launched in at least one region."""
        return any(a.available for a in self.availability)

    def __repr__(self) -> str:
        return (f"InstanceOffer(instance_id={self.instance_id!r}, gpu='{self.gpu_name} ×{self.gpu_count}', "
                f"deployment_type={self.deployment_type!r}, hourly_price={self.hourly_price:g}, "
                f"provider={self.cloud.id!r}, available_regions={self.available_regions!r})")


class PortForward(msgspec.Struct, frozen=True, eq=False, rename="camel", gc=False):
    """One item of an instance's ``portForwards``: a port of the instance and where it is reached.

    The spec says only "array of string". Strings are read as ``"INTERNAL:EXTERNAL"`` (``"8000:
    32768"``: the instance's port 8000 is reached on port 32768 of its address); the real cloud
    also sends objects ``{internalPort, externalPort}``. Anything else keeps its text, with
    ``None`` ports. ``str()`` gives ``"8000:32768"``; two forwards are equal when their ports are.

        >>> PortForward.from_json({"internalPort": 8000, "externalPort": 32768})
        PortForward(internal_port=8000, external_port=32768)
    """

    internal_port: int | None = None
    external_port: int | None = None
    text: str = ""

    @classmethod
    def from_json(cls, data: Any) -> PortForward:
        """Read one item of ``portForwards``: an object or an ``"INTERNAL:EXTERNAL"`` string."""
        if isinstance(data, Mapping):
            internal, external = loose_port(data.get("internalPort")), loose_port(data.get("externalPort"))
            return cls(internal, external, f"{internal or '?'}:{external or '?'}")
        text = loose_str(data)
        head, sep, tail = text.partition(":")
        if sep:
            return cls(loose_port(head), loose_port(tail), text)
        return cls(loose_port(text), None, text)

    def __str__(self) -> str:
        if self.internal_port is not None and self.external_port is not None:
            return f"{self.internal_port}:{self.external_port}"
        return self.text

    def __repr__(self) -> str:
        return f"PortForward(internal_port={self.internal_port!r}, external_port={self.external_port!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PortForward):
            return NotImplemented
        return (self.internal_port, self.external_port) == (other.internal_port, other.external_port)

    def __hash__(self) -> int:
        return hash((self.internal_port, self.external_port))


class _InstanceBase(_Mutable):
    """Fields and conveniences shared by :class:`Instance` and :class:`InstanceDetails`."""

    _datetime_fields: ClassVar[tuple[str, ...]] = (
        "created_at", "deleted_at", "updated_at", "auto_delete_at")

    def __post_init__(self) -> None:
        fix_datetimes(self, self._datetime_fields)

    id: str = msgspec.field(default="", name="_id")
    name: str = ""
    provider: str = ""
    status: str = ""
    region: Any = msgspec.field(default_factory=dict)
    volumes: list[Any] = msgspec.field(default_factory=list)
    gpu_count: int = 0
    gpu_model: str = ""
    ram: float = NAN
    storage: float = NAN
    vram_per_gpu: float = NAN
    vcpus: float = NAN
    interconnect: str = ""
    nvlink: bool = False
    os: str = ""
    ip: str = ""
    ssh_user: str = ""
    ssh_port: int = 0
    docker_image: str = ""
    docker_command: str = ""
    hourly_price: float = NAN
    created_at: datetime | None = None
    deleted_at: datetime | None = None
    updated_at: datetime | None = None
    auto_delete_at: datetime | None = None

    @property
    def region_id(self) -> str:
        """The region as a plain string, read from the region object's usual keys."""
        region = self.region
        if isinstance(region, str):
            return region
        if isinstance(region, Mapping):
            for key in ("id", "region", "name", "_id"):
                if region.get(key):
                    return str(region[key])
        return ""

    def holds_volume(self, volume_id: str) -> bool:
        """True when ``volume_id`` is attached (the items of ``volumes`` have no documented shape,
        so every string inside them is searched)."""
        return volume_id in set(strings_in(self.volumes))

    def data_fate(self, volumes: Iterable[Volume] = ()) -> str:
        """What happens to this instance's data on delete, naming the volumes that keep it.

            >>> instance.data_fate(cloud.volumes.list())  # doctest: +SKIP
            'volume my data (66f0…) keeps its data'
        """
        kept = [f"{v.name} ({v.id})" if v.name else v.id for v in volumes
                if self.holds_volume(v.id)]
        if not kept and self.volumes:  # attached volumes the caller did not list
            kept = [next(strings_in(item), "?") for item in self.volumes]
        if not kept:
            return "it has no volume, so its data is lost"
        if len(kept) == 1:
            return f"volume {kept[0]} keeps its data"
        return f"volumes {', '.join(kept)} keep their data"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, "
                f"status={self.status!r}, gpu='{self.gpu_model} ×{self.gpu_count}', "
                f"region={self.region_id!r}, hourly_price={self.hourly_price:g}, ip={self.ip!r})")


class Instance(_InstanceBase):
    """A GPU instance as returned by create and list."""


class InstanceDetails(_InstanceBase):
    """One instance in full, from ``GET /gpu-cloud/instances/{id}``."""

    is_pending: bool = False
    ssh_key: dict[str, Any] = msgspec.field(default_factory=dict)
    port_forwards: tuple[PortForward, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> InstanceDetails:
        """Parse the details; ``portForwards`` items may be strings or objects (see PortForward)."""
        forwards = data.get("portForwards") if isinstance(data, Mapping) else None
        if not forwards:
            return super().from_json(data)
        parsed = super().from_json({k: v for k, v in data.items() if k != "portForwards"})
        parsed.port_forwards = tuple(PortForward.from_json(item) for item in loose_list(forwards))
        return parsed


class VolumeProvider(_Frozen, frozen=True):
    """The provider of a volume or volume offer (``cloudProvider`` in the spec)."""

    id: str = msgspec.field(default="", name="_id")
    display_name: str = ""

    @classmethod
    def from_json(cls, data: Any) -> VolumeProvider:
        """Read a provider object, or a bare id string (then the id is its name too)."""
        if isinstance(data, str):
            return cls(id=data, display_name=data)
        return super().from_json(data)


class VolumeOffer(_Frozen, frozen=True):
    """A persistent-storage configuration from ``GET /gpu-cloud/volumes/offers``."""

    cloud_provider: VolumeProvider = msgspec.field(default_factory=VolumeProvider)
    min_size_in_gb: float = NAN
    price_per_gb_per_hour_text: str = msgspec.field(default="", name="pricePerGbPerHour")
    regions: tuple[str, ...] = ()

    @property
    def price_per_gb_per_hour(self) -> float:
        """The price per GB and hour as a number (NaN when the text is not one)."""
        return to_float(self.price_per_gb_per_hour_text or None)


class Volume(_Frozen, frozen=True):
    """A persistent volume; it keeps data beyond the life of an instance."""

    _datetime_fields: ClassVar[tuple[str, ...]] = ("created_at", "updated_at")

    def __post_init__(self) -> None:
        fix_datetimes(self, self._datetime_fields)

    id: str = msgspec.field(default="", name="_id")
    user: str = ""
    name: str = ""
    size_in_gb: float = NAN
    region: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    cloud_provider: VolumeProvider | None = None

    def __repr__(self) -> str:
        provider = self.cloud_provider.id if self.cloud_provider else None
        return (f"Volume(id={self.id!r}, name={self.name!r}, size_in_gb={self.size_in_gb:g}, "
                f"region={self.region!r}, provider={provider!r})")
