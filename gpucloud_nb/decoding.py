"""Reading the cloud's JSON into records, tolerant of drift: values, one record, a whole body.

The records themselves are :mod:`gpucloud_nb.models`; this is how they are read. A JSON body
decodes straight into records with no dict made on the way (:func:`decode_list`). Decoding is
tolerant, as the cloud drifts: unknown fields are skipped, numbers and flags sent as text are
read, and a null, missing or wrongly typed value becomes the field's empty value (``""``, NaN,
``0``, ``False``, ``None``, ``()``) rather than failing. Only a body that is not JSON, or a list
where an object belongs, is refused.

    >>> to_float("2.49"), to_int("4"), to_float("n/a")
    (2.49, 4, nan)
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

__all__ = [
    "NAN",
    "Record",
    "convert_list",
    "decode_fields",
    "decode_list",
    "decode_list_deferring",
    "fix_datetimes",
    "loose_list",
    "loose_port",
    "loose_str",
    "parse_datetime",
    "strings_in",
    "to_float",
    "to_int",
]

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
NAN = math.nan

R = TypeVar("R", bound="Record")

# --------------------------------------------------------------------------- loose values


def loose_str(value: Any) -> str:
    """Text read loosely: ``None`` → ``""``, anything else its ``str()``."""
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


def loose_list(value: Any) -> list[Any]:
    """A list or tuple as a list; anything else ``[]``."""
    return list(value) if isinstance(value, list | tuple) else []


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside ``value``, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


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


def loose_port(value: Any) -> int | None:
    """A TCP port read loosely: ``"8000"`` → 8000; ``None`` when not within 1–65535."""
    number = to_int(value)
    return number if 0 < number < 65536 else None


# --------------------------------------------------------------------------- one record


class Record:
    """Base of every wire record: decoded from the spec's JSON, tolerant of drift.

        >>> from gpucloud_nb.models import Volume
        >>> Volume.from_json({"_id": "vol-1", "sizeInGb": "100"}).size_in_gb
        100.0
    """

    __slots__ = ()

    @classmethod
    def from_json(cls: type[R], data: Any) -> R:
        """Parse one record from its wire JSON (a mapping); anything else gives an empty record.

            >>> from gpucloud_nb.models import InstanceOffer
            >>> InstanceOffer.from_json({"instanceId": "h100-1x", "hourlyPrice": "2.49"}).hourly_price
            2.49
        """
        try:
            return msgspec.convert(data, cls, strict=False)
        except msgspec.ValidationError:
            return _loose(cls, data)


def fix_datetimes(record: msgspec.Struct, names: tuple[str, ...]) -> None:
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
        return loose_str(value)
    if isinstance(kind, mi.FloatType):
        return to_float(value)
    if isinstance(kind, mi.IntType):
        return to_int(value)
    if isinstance(kind, mi.BoolType):
        return _bool(value)
    if isinstance(kind, mi.StructType):
        return _record_class(kind).from_json(value)
    if isinstance(kind, mi.VarTupleType | mi.ListType):
        items = [_read(kind.item_type, item) for item in loose_list(value)]
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

        >>> from gpucloud_nb.models import InstanceOffer
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

        >>> from gpucloud_nb.models import Volume
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


# --------------------------------------------------------------------------- deferred fields


_DEFERRING: dict[tuple[type[Record], tuple[str, ...]], msgspec.json.Decoder[Any]] = {}
_FIELD_DECODERS: dict[tuple[type[Record], str], tuple[msgspec.json.Decoder[Any], bytes]] = {}


def decode_list_deferring(cls: type[Record], body: bytes | bytearray | memoryview | str,
                          names: tuple[str, ...]) -> list[Any] | None:
    """Decode a JSON array body into rows of ``cls`` whose fields ``names`` are left as their JSON
    text (a :class:`msgspec.Raw`; an empty one for a missing field), for :func:`decode_fields`.

    A wire record whose nested values repeat (an offer's ``availability`` list) is then decoded
    once per distinct text rather than once per record. ``None`` when the body is not JSON or
    the schema does not fit it: the caller reads it with :func:`decode_list` instead, which
    says what is wrong or reads it loosely.

        >>> from gpucloud_nb.models import InstanceOffer
        >>> rows = decode_list_deferring(InstanceOffer, b'[{"instanceId": "a", "cloud": {}}]',
        ...                              ("cloud",))
        >>> rows[0].instance_id, bytes(rows[0].cloud)
        ('a', b'{}')
    """
    decoder = _DEFERRING.get((cls, names))
    if decoder is None:
        info = msgspec.structs.fields(cls)  # type: ignore[arg-type]
        fields: list[Any] = [
            (f.name, msgspec.Raw, msgspec.Raw(b"")) if f.name in names
            else (f.name, f.type, msgspec.field(default=f.default)
                  if f.default is not msgspec.NODEFAULT
                  else msgspec.field(default_factory=f.default_factory))
            for f in info
        ]
        row = msgspec.defstruct(f"{cls.__name__}Row", fields, kw_only=True, frozen=True,
                                gc=False, rename={f.name: f.encode_name for f in info})
        decoder = _DEFERRING[(cls, names)] = msgspec.json.Decoder(list[row], strict=False)  # type: ignore[valid-type]
    try:
        rows: list[Any] = decoder.decode(bytes(body) if isinstance(body, memoryview) else body)
    except msgspec.DecodeError:  # ValidationError included
        return None
    return rows


def decode_fields(cls: type[Record], name: str, texts: Iterable[bytes]) -> list[Any]:
    """Field ``name`` of ``cls`` from each of ``texts``, JSON texts as
    :func:`decode_list_deferring` left them (an empty one: the field was missing), in one
    decoder call. Raises :class:`msgspec.ValidationError` when one does not fit the field's type.

        >>> from gpucloud_nb.models import InstanceOffer
        >>> [len(a) for a in decode_fields(InstanceOffer, "availability", [b'[{}]', b''])]
        [1, 0]
    """
    found = _FIELD_DECODERS.get((cls, name))
    if found is None:
        field = next(f for f in msgspec.structs.fields(cls) if f.name == name)  # type: ignore[arg-type]
        default = (field.default if field.default is not msgspec.NODEFAULT
                   else field.default_factory())
        # A missing field reads as the text of its default: ``{}`` for a record, else its JSON.
        missing = b"{}" if isinstance(default, msgspec.Struct) else msgspec.json.encode(default)
        decoder = msgspec.json.Decoder(list[field.type], strict=False)  # type: ignore[name-defined]
        assert decoder.decode(b"[" + missing + b"]") == [default]
        found = _FIELD_DECODERS[(cls, name)] = (decoder, missing)
    decoder, missing = found
    return decoder.decode(b"[" + b",".join(text or missing for text in texts) + b"]")
