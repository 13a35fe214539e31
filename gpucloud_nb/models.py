"""The wire records of the GPU cloud interface: one msgspec schema for client, frames and widgets.

Every resource the cloud sends is a :class:`msgspec.Struct` here, and nowhere else. Attribute names
are the snake_case of the spec's camelCase fields (``hourlyPrice`` → ``hourly_price``); the
spec's own name is each field's wire name, so a JSON body decodes straight into records with no
dict made on the way (:func:`decode_list`). Decoding is tolerant, as the cloud drifts: unknown
fields are skipped, numbers and flags sent as text are read, and a null, missing or wrongly typed
value becomes the field's empty value (``""``, NaN, ``0``, ``False``, ``None``, ``()``) rather
than failing. Only a body that is not JSON, or a list where an object belongs, is refused.

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
- :class:`CreateInstance` is the one create request: the spec's body plus the create-time options
  the client handles itself (``delete_after``, ``budget``), which :meth:`CreateInstance.body`
  never sends.
- ``autoDeleteAt`` is the sandbox's own field (the time its auto-delete timer fires); the real
  cloud does not send it, so ``auto_delete_at`` is ``None`` there.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, ClassVar, TypeVar

import msgspec
import msgspec.inspect as mi

__all__ = [
    "INSTANCE_STATUSES",
    "Availability",
    "CloudProvider",
    "Configuration",
    "CreateInstance",
    "DockerContainer",
    "Instance",
    "InstanceDetails",
    "InstanceOffer",
    "PortForward",
    "Record",
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
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
NAN = math.nan

R = TypeVar("R", bound="Record")


# --------------------------------------------------------------------------- loose values


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def to_float(value: Any) -> float:
    """A number read loosely: ``"2.49"`` → 2.49; ``None`` or ``"n/a"`` → NaN."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN


def to_int(value: Any) -> int:
    """A whole number read loosely: ``"4"`` or ``4.0`` → 4; ``None``, NaN or ``"n/a"`` → 0."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
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
    if isinstance(value, datetime):
        return _utc_or_none(value)
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
    return _utc_or_none(parsed)


def _utc_or_none(value: datetime) -> datetime | None:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return None if value <= EPOCH else value


def _port(value: Any) -> int | None:
    number = to_int(value)
    return number if 0 < number < 65536 else None


# --------------------------------------------------------------------------- the schema


class Record:
    """Base of every wire record: decoded from the spec's JSON, tolerant of drift.

        >>> Volume.from_json({"_id": "vol-1", "sizeInGb": "100"}).size_in_gb
        100.0
    """

    __slots__ = ()

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """Parse one record from its wire JSON (a mapping); anything else gives an empty record.

            >>> InstanceOffer.from_json({"instanceId": "h100-1x", "hourlyPrice": "2.49"}).hourly_price
            2.49
        """
        try:
            return msgspec.convert(data, cls, strict=False)
        except msgspec.ValidationError:
            return _loose(cls, data)


class _Frozen(Record, msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """A record that never changes once read."""


class _Mutable(Record, msgspec.Struct, kw_only=True, rename="camel", gc=False):
    """A record panels re-read every few seconds (see the module docstring)."""


def _fix_datetimes(record: msgspec.Struct, names: tuple[str, ...]) -> None:
    """After decoding: the epoch sentinel becomes ``None`` and a naive date-time UTC."""
    for name in names:
        value = getattr(record, name)
        if value is not None and (value.tzinfo is None or value <= EPOCH):
            msgspec.structs.force_setattr(record, name, _utc_or_none(value))


def _loose(cls: type[R], data: Any) -> R:
    """Build ``cls`` from ``data`` field by field, reading each value as its type allows."""
    info = _struct_info(cls)
    data = _dict(data)
    values = {}
    for field in info.fields:
        if field.encode_name in data:
            values[field.name] = _read(field.type, data[field.encode_name])
    return cls(**values)


_INFO: dict[type[Record], mi.StructType] = {}


def _struct_info(cls: type[Record]) -> mi.StructType:
    info = _INFO.get(cls)
    if info is None:
        found = mi.type_info(cls)
        assert isinstance(found, mi.StructType)
        info = _INFO[cls] = found
    return info


def _record_class(kind: mi.StructType) -> type[Record]:
    assert issubclass(kind.cls, Record)
    return kind.cls


def _read(kind: mi.Type, value: Any) -> Any:
    """``value`` read as ``kind`` the loose way (see the module docstring)."""
    if isinstance(kind, mi.StrType):
        return _str(value)
    if isinstance(kind, mi.FloatType):
        return to_float(value)
    if isinstance(kind, mi.IntType):
        return to_int(value)
    if isinstance(kind, mi.BoolType):
        return _bool(value)
    if isinstance(kind, mi.StructType):
        return _record_class(kind).from_json(value)
    if isinstance(kind, mi.VarTupleType | mi.ListType):
        items = [_read(kind.item_type, item) for item in _list(value)]
        return tuple(items) if isinstance(kind, mi.VarTupleType) else items
    if isinstance(kind, mi.DictType):
        return _dict(value)
    if isinstance(kind, mi.UnionType):
        return _read_union(kind, value)
    return value  # Any: kept as sent


def _read_union(kind: mi.UnionType, value: Any) -> Any:
    if value is None:
        return None
    for option in kind.types:
        if isinstance(option, mi.DateTimeType):
            return parse_datetime(value)
        if isinstance(option, mi.StructType):
            return _record_class(option).from_json(value)
    return value


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
        _fix_datetimes(self, self._datetime_fields)

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
        return volume_id in set(_strings(self.volumes))

    def data_fate(self, volumes: Iterable[Volume] = ()) -> str:
        """What happens to this instance's data on delete, naming the volumes that keep it.

            >>> instance.data_fate(cloud.volumes.list())  # doctest: +SKIP
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
        parsed.port_forwards = tuple(PortForward.from_json(item) for item in _list(forwards))
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
        _fix_datetimes(self, self._datetime_fields)

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


# --------------------------------------------------------------------------- the create request


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
    before it is deleted); those are never sent.
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



# --------------------------------------------------------------------------- decoding bodies


_DECODERS: dict[type[Record], msgspec.json.Decoder[Any]] = {}


def _list_decoder(cls: type[R]) -> msgspec.json.Decoder[list[R]]:
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = msgspec.json.Decoder(list[cls], strict=False)  # type: ignore[valid-type]
    return decoder


def decode_list(cls: type[R], body: bytes | bytearray | memoryview | str, what: str) -> list[R]:
    """Decode a JSON array body straight into records, without a dict per item.

    A body the schema does not fit (a null or odd value somewhere) is read item by item with
    :meth:`Record.from_json`. A body that is not JSON, or not an array, raises :class:`ValueError`
    with one sentence naming ``what``.

        >>> decode_list(InstanceOffer, b'[{"instanceId": "h100-1x"}]', "offers")[0].instance_id
        'h100-1x'
    """
    text = bytes(body) if isinstance(body, memoryview) else body
    try:
        return _list_decoder(cls).decode(text)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError:
        raise ValueError(f"The {what} are not valid JSON.") from None
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError(f"The {what} are not a JSON array.")
    return [cls.from_json(item) for item in data]


def convert_list(cls: type[R], items: Iterable[Any]) -> list[R]:
    """Records from a list of records or of wire JSON objects (those are parsed, loosely).

        >>> convert_list(Volume, [{"_id": "vol-1"}])[0].id
        'vol-1'
    """
    items = items if isinstance(items, list) else list(items)
    if all(type(item) is cls for item in items):
        return items
    try:
        return msgspec.convert(items, list[cls], strict=False)  # type: ignore[valid-type]
    except msgspec.ValidationError:
        return [item if isinstance(item, cls) else cls.from_json(item) for item in items]
