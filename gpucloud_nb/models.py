"""Typed records for every resource of the GPU cloud interface.

Records are parsed from the JSON the cloud sends. Attribute names are the snake_case of the spec's
camelCase fields (``hourlyPrice`` → ``hourly_price``); unknown extra fields are kept in ``raw`` and
never break parsing; missing fields fall back to an empty value rather than failing.

    >>> offer = InstanceOffer.from_json(payload)
    >>> offer.gpu_name, offer.hourly_price, offer.available_regions
    ('H100 SXM5', 2.49, ('us-east-1',))

Choices where the spec says "not shown":

- ``deletedAt`` is a required date-time string even on live instances. The sandbox sends the Unix
  epoch there; both the epoch and an empty or null value parse to ``deleted_at=None``.
- ``region`` (an object), the items of ``volumes`` and ``sshKey`` have no documented structure:
  they are kept as sent. ``Instance.region_id`` reads the usual keys (``id``, ``region``, ``name``).
- Records are frozen, except :class:`Instance` and :class:`InstanceDetails`: panels re-read them
  every few seconds, and a frozen dataclass's ``__init__`` costs about ten times a plain one's.
  Assigning to one changes only that snapshot, never the cloud.
- ``pricePerGbPerHour`` is a decimal string: ``price_per_gb_per_hour`` is its float value and
  ``price_per_gb_per_hour_text`` the text as sent.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "INSTANCE_STATUSES",
    "Availability",
    "CloudProvider",
    "Configuration",
    "Instance",
    "InstanceDetails",
    "InstanceOffer",
    "PortForward",
    "Volume",
    "VolumeOffer",
    "VolumeProvider",
    "parse_datetime",
]

INSTANCE_STATUSES = ("pending", "active", "error", "deleted", "deleting")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes"}
    return bool(value)


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _strings(value: Any) -> Iterator[str]:
    """Every string inside ``value``, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def parse_datetime(value: Any) -> datetime | None:
    """Parse an ISO 8601 date-time; ``None`` for missing, unparsable or the epoch sentinel.

        >>> parse_datetime("2026-11-22T11:42:10.123Z")
        datetime.datetime(2026, 11, 22, 11, 42, 10, 123000, tzinfo=datetime.timezone.utc)
    """
    if not isinstance(value, str) or not value:
        return None
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> datetime | None:
    """Timestamps repeat from one poll to the next, so parsing is cached."""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return None if parsed <= EPOCH else parsed


@dataclass(frozen=True, slots=True)
class CloudProvider:
    """The provider of an instance offer (``cloud`` in the spec)."""

    id: str
    name: str

    @classmethod
    def from_json(cls, data: Any) -> CloudProvider:
        data = _dict(data)
        return cls(id=_str(data.get("_id")), name=_str(data.get("name")))


@dataclass(frozen=True, slots=True)
class Configuration:
    """The hardware of an offer; ``os`` lists the images usable at instance creation."""

    ram_gb: float
    storage_gb: float
    vcpu: float
    vram_gb: float
    os: tuple[str, ...]
    interconnect: str

    @classmethod
    def from_json(cls, data: Any) -> Configuration:
        data = _dict(data)
        return cls(
            ram_gb=_float(data.get("ramGB")),
            storage_gb=_float(data.get("storageGB")),
            vcpu=_float(data.get("vCpu")),
            vram_gb=_float(data.get("vRamGB")),
            os=tuple(_str(name) for name in _list(data.get("os"))),
            interconnect=_str(data.get("interconnect")),
        )


@dataclass(frozen=True, slots=True)
class Availability:
    """Whether an offer can be launched in one region."""

    region: str
    name: str
    country_code: str
    available: bool

    @classmethod
    def from_json(cls, data: Any) -> Availability:
        data = _dict(data)
        return cls(
            region=_str(data.get("region")),
            name=_str(data.get("name")),
            country_code=_str(data.get("countryCode")),
            available=_bool(data.get("available")),
        )


@dataclass(frozen=True, slots=True)
class InstanceOffer:
    """A rentable GPU instance configuration from ``GET /gpu-cloud/instances/offers``."""

    gpu_name: str
    gpu_count: int
    nvlink: bool
    deployment_type: str
    instance_id: str
    cloud_init_available: bool
    cloud: CloudProvider
    configuration: Configuration
    hourly_price: float
    availability: tuple[Availability, ...]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> InstanceOffer:
        data = _dict(data)
        return cls(
            gpu_name=_str(data.get("gpuName")),
            gpu_count=_int(data.get("gpuCount")),
            nvlink=_bool(data.get("nvlink")),
            deployment_type=_str(data.get("deploymentType")),
            instance_id=_str(data.get("instanceId")),
            cloud_init_available=_bool(data.get("cloudInitAvailable")),
            cloud=CloudProvider.from_json(data.get("cloud")),
            configuration=Configuration.from_json(data.get("configuration")),
            hourly_price=_float(data.get("hourlyPrice")),
            availability=tuple(Availability.from_json(a) for a in _list(data.get("availability"))),
            raw=data,
        )

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


def _instance_common(data: dict[str, Any]) -> tuple[Any, ...]:
    """The fields of :class:`_InstanceBase`, in declaration order.

    Positional, because ``cls(**fields)`` with two dozen keywords costs more than the rest of the
    parsing together, and ``instances.list()`` parses every instance on every poll (the reason
    the instance records are not frozen either); ``tests/test_models.py`` checks every field
    lands where it belongs.
    """
    get = data.get
    region = get("region")
    return (
        _str(get("_id")), _str(get("name")), _str(get("provider")), _str(get("status")),
        {} if region is None else region, _list(get("volumes")),
        _int(get("gpuCount")), _str(get("gpuModel")),
        _float(get("ram")), _float(get("storage")), _float(get("vramPerGpu")), _float(get("vcpus")),
        _str(get("interconnect")), _bool(get("nvlink")), _str(get("os")), _str(get("ip")),
        _str(get("sshUser")), _int(get("sshPort")),
        _str(get("dockerImage")), _str(get("dockerCommand")), _float(get("hourlyPrice")),
        parse_datetime(get("createdAt")), parse_datetime(get("deletedAt")),
        parse_datetime(get("updatedAt")),
    )


@dataclass(slots=True, repr=False)
class _InstanceBase:
    """Fields and conveniences shared by :class:`Instance` and :class:`InstanceDetails`."""

    id: str
    name: str
    provider: str
    status: str
    region: Any
    volumes: list[Any]
    gpu_count: int
    gpu_model: str
    ram: float
    storage: float
    vram_per_gpu: float
    vcpus: float
    interconnect: str
    nvlink: bool
    os: str
    ip: str
    ssh_user: str
    ssh_port: int
    docker_image: str
    docker_command: str
    hourly_price: float
    created_at: datetime | None
    deleted_at: datetime | None
    updated_at: datetime | None

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
        return volume_id in set(_strings(self.volumes))

    def data_fate(self, volumes: Iterable[Volume] = ()) -> str:
        """What happens to this instance's data on delete, naming the volumes that keep it.

            >>> instance.data_fate(cloud.volumes.list())
            'volume my data (66f0…) keeps its data'
        """
        kept = [f"{v.name} ({v.id})" if v.name else v.id for v in volumes
                if self.holds_volume(v.id)]
        if not kept and self.volumes:  # attached volumes the caller did not list
            kept = [next(_strings(item), "?") for item in self.volumes]
        if not kept:
            return "it has no volume, so its data is lost"
        if len(kept) == 1:
            return f"volume {kept[0]} keeps its data"
        return f"volumes {', '.join(kept)} keep their data"

    @property
    def ssh_command(self) -> str | None:
        """``ssh -p PORT user@ip`` once the instance has an address, else ``None``."""
        if not self.ip:
            return None
        user = f"{self.ssh_user}@" if self.ssh_user else ""
        port = f"-p {self.ssh_port} " if self.ssh_port and self.ssh_port != 22 else ""
        return f"ssh {port}{user}{self.ip}"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, "
                f"status={self.status!r}, gpu='{self.gpu_model} ×{self.gpu_count}', "
                f"region={self.region_id!r}, hourly_price={self.hourly_price:g}, ip={self.ip!r})")


@dataclass(slots=True, repr=False)
class Instance(_InstanceBase):
    """A GPU instance as returned by create and list."""

    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Instance:
        data = _dict(data)
        return cls(*_instance_common(data), data)


@dataclass(slots=True, repr=False)
class InstanceDetails(_InstanceBase):
    """One instance in full, from ``GET /gpu-cloud/instances/{id}``."""

    is_pending: bool
    ssh_key: dict[str, Any]
    port_forwards: tuple[PortForward, ...]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> InstanceDetails:
        data = _dict(data)
        return cls(*_instance_common(data), _bool(data.get("isPending")), _dict(data.get("sshKey")),
                   tuple(PortForward.from_json(p) for p in _list(data.get("portForwards"))), data)


@dataclass(frozen=True, slots=True)
class PortForward:
    """One item of an instance's ``portForwards``: a port of the instance and where it is reached.

    The spec says only "array of string". Strings are read as ``"INTERNAL:EXTERNAL"`` (``"8000:
    32768"``: the instance's port 8000 is reached on port 32768 of its address); the real cloud
    also sends objects ``{internalPort, externalPort}``. Anything else keeps its text, with
    ``None`` ports. ``str()`` gives ``"8000:32768"``.

        >>> PortForward.from_json({"internalPort": 8000, "externalPort": 32768})
        PortForward(internal_port=8000, external_port=32768)
    """

    internal_port: int | None
    external_port: int | None
    text: str = field(default="", repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> PortForward:
        if isinstance(data, Mapping):
            internal, external = _port(data.get("internalPort")), _port(data.get("externalPort"))
            return cls(internal, external, f"{internal or '?'}:{external or '?'}")
        text = _str(data)
        head, sep, tail = text.partition(":")
        if sep:
            return cls(_port(head), _port(tail), text)
        return cls(_port(text), None, text)

    def __str__(self) -> str:
        if self.internal_port is not None and self.external_port is not None:
            return f"{self.internal_port}:{self.external_port}"
        return self.text


def _port(value: Any) -> int | None:
    number = _int(value)
    return number if 0 < number < 65536 else None


@dataclass(frozen=True, slots=True)
class VolumeProvider:
    """The provider of a volume or volume offer (``cloudProvider`` in the spec)."""

    id: str
    display_name: str

    @classmethod
    def from_json(cls, data: Any) -> VolumeProvider:
        if isinstance(data, str):
            return cls(id=data, display_name=data)
        data = _dict(data)
        return cls(id=_str(data.get("_id")), display_name=_str(data.get("displayName")))


@dataclass(frozen=True, slots=True)
class VolumeOffer:
    """A persistent-storage configuration from ``GET /gpu-cloud/volumes/offers``."""

    cloud_provider: VolumeProvider
    min_size_in_gb: float
    price_per_gb_per_hour: float
    price_per_gb_per_hour_text: str
    regions: tuple[str, ...]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> VolumeOffer:
        data = _dict(data)
        price = data.get("pricePerGbPerHour")
        return cls(
            cloud_provider=VolumeProvider.from_json(data.get("cloudProvider")),
            min_size_in_gb=_float(data.get("minSizeInGb")),
            price_per_gb_per_hour=_float(price),
            price_per_gb_per_hour_text=_str(price),
            regions=tuple(_str(r) for r in _list(data.get("regions"))),
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class Volume:
    """A persistent volume; it keeps data beyond the life of an instance."""

    id: str
    user: str
    name: str
    size_in_gb: float
    region: str
    created_at: datetime | None
    updated_at: datetime | None
    cloud_provider: VolumeProvider | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> Volume:
        data = _dict(data)
        provider = data.get("cloudProvider")
        return cls(
            id=_str(data.get("_id")),
            user=_str(data.get("user")),
            name=_str(data.get("name")),
            size_in_gb=_float(data.get("sizeInGb")),
            region=_str(data.get("region")),
            created_at=parse_datetime(data.get("createdAt")),
            updated_at=parse_datetime(data.get("updatedAt")),
            cloud_provider=None if provider is None else VolumeProvider.from_json(provider),
            raw=data,
        )

    def __repr__(self) -> str:
        provider = self.cloud_provider.id if self.cloud_provider else None
        return (f"Volume(id={self.id!r}, name={self.name!r}, size_in_gb={self.size_in_gb:g}, "
                f"region={self.region!r}, provider={provider!r})")
