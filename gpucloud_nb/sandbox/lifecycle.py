"""Instance life cycle and response bodies, derived from stored records at read time.

No timer moves an instance along: its status follows from the times stored when it was created
and when its deletion was accepted, compared with the time of the request.

    >>> status_of(record, now_ms)  # doctest: +SKIP
    Status(name='active', updated_ms=1764000003000, deleted_ms=None)
    >>> instance_json(record, now_ms)["status"], details_json(record, now_ms)["isPending"]  # doctest: +SKIP
    ('active', False)

The life cycle (the spec says "Transitions: not shown"):

- ``pending`` (``isPending`` true) from creation until ``launch_seconds`` later, then ``active``;
  or ``error`` instead when the instance's name ends with ``-sandbox-fail`` (the documented way to
  rehearse a failed launch).
- DELETE moves any live status to ``deleting``; ``delete_seconds`` later it is ``deleted`` and
  ``deletedAt`` is set. A deleted instance still answers GET and still appears in the list.
- ``updatedAt`` is the time of the last transition. ``deletedAt`` is always a date-time: the Unix
  epoch ``1970-01-01T00:00:00.000Z`` until the instance is deleted.
- ``ip``, ``sshPort`` and ``portForwards`` are set while ``active`` or ``deleting``; otherwise
  ``""``, ``0`` and ``[]``. The address is ``127.0.0.1``: each vm, baremetal or container
  instance has its own SSH server on loopback (see :mod:`gpucloud_nb.sandbox.ssh`) on the port
  stored in its ``doc["sshPort"]`` when it was created. VMs and bare metal use user ``ubuntu``,
  containers ``root``; ``portForwards`` pairs the instance's 22 with that port.
- ``region`` is ``{"id", "name", "countryCode"}``; ``volumes`` holds ``[volumeId, "/mnt/<name>"]``
  pairs; ``sshKey`` is ``{}`` or ``{"_id", "name"}``; ``ram`` and ``storage`` are in GB and
  ``vramPerGpu`` in GB per GPU.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from gpucloud_nb.sandbox.store import InstanceRecord, InstanceTimes, VolumeRecord

__all__ = [
    "EPOCH_TEXT",
    "FAIL_SUFFIX",
    "Status",
    "details_json",
    "instance_json",
    "iso",
    "status_at",
    "status_of",
    "volume_json",
]

FAIL_SUFFIX = "-sandbox-fail"
EPOCH_TEXT = "1970-01-01T00:00:00.000Z"


class Status(NamedTuple):
    """The status of an instance at some time, when it began, and when it was deleted."""

    name: str
    updated_ms: int
    deleted_ms: int | None


def iso(ms: int) -> str:
    """Unix milliseconds as ISO 8601 UTC with milliseconds: ``2026-11-22T11:42:10.123Z``."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def status_of(record: InstanceRecord, now_ms: int) -> Status:
    """The status of ``record`` at ``now_ms``."""
    return status_at(record.times, now_ms)


def status_at(times: InstanceTimes, now_ms: int) -> Status:
    """The status at ``now_ms`` of an instance with these life-cycle times."""
    if times.delete_ms is not None:
        gone = times.gone_ms if times.gone_ms is not None else times.delete_ms
        if now_ms >= gone:
            return Status("deleted", gone, gone)
        return Status("deleting", times.delete_ms, None)
    if now_ms >= times.ready_ms:
        return Status("error" if times.fails else "active", times.ready_ms, None)
    return Status("pending", times.created_ms, None)


def _address(record: InstanceRecord) -> str:
    return "127.0.0.1"  # the instance's SSH server listens on loopback only


def _ssh_port(record: InstanceRecord) -> int:
    return int(record.doc.get("sshPort") or 0)


def _common(record: InstanceRecord, status: Status) -> dict[str, Any]:
    doc = record.doc
    reachable = status.name in ("active", "deleting")
    return {
        "_id": record.id,
        "name": doc["name"],
        "provider": doc["provider"],
        "status": status.name,
        "region": doc["region"],
        "volumes": doc["volumes"],
        "gpuCount": doc["gpuCount"],
        "gpuModel": doc["gpuModel"],
        "ram": doc["ram"],
        "storage": doc["storage"],
        "vramPerGpu": doc["vramPerGpu"],
        "vcpus": doc["vcpus"],
        "interconnect": doc["interconnect"],
        "nvlink": doc["nvlink"],
        "os": doc["os"],
        "ip": _address(record) if reachable else "",
        "sshUser": doc["sshUser"],
        "sshPort": _ssh_port(record) if reachable else 0,
        "dockerImage": doc["dockerImage"],
        "dockerCommand": doc["dockerCommand"],
        "hourlyPrice": doc["hourlyPrice"],
        "deletedAt": EPOCH_TEXT if status.deleted_ms is None else iso(status.deleted_ms),
        "createdAt": iso(record.created_ms),
    }


def instance_json(record: InstanceRecord, now_ms: int) -> dict[str, Any]:
    """The spec's Instance (create response and list element) at ``now_ms``."""
    status = status_of(record, now_ms)
    body = _common(record, status)
    body["updatedAt"] = iso(status.updated_ms)
    return body


def details_json(record: InstanceRecord, now_ms: int) -> dict[str, Any]:
    """The spec's InstanceDetails (get-by-id response) at ``now_ms``."""
    status = status_of(record, now_ms)
    body = _common(record, status)
    reachable = status.name in ("active", "deleting")
    body["isPending"] = status.name == "pending"
    body["sshKey"] = record.doc["sshKey"]
    body["portForwards"] = [f"22:{_ssh_port(record)}"] if reachable else []
    return body


def volume_json(record: VolumeRecord) -> dict[str, Any]:
    """The spec's Volume; volumes never change, so ``updatedAt`` equals ``createdAt``."""
    created = iso(record.created_ms)
    return {
        "_id": record.id,
        "user": record.user,
        "name": record.doc["name"],
        "sizeInGb": record.doc["sizeInGb"],
        "region": record.doc["region"],
        "createdAt": created,
        "updatedAt": created,
        "cloudProvider": record.doc["cloudProvider"],
    }


def spend(record: InstanceRecord, now: int, factor: float = 1.0) -> float:
    """Dollars ``record`` has cost at ``now`` (Unix ms): price × hours active or deleting × factor.

        >>> from gpucloud_nb.sandbox.store import InstanceRecord
        >>> record = InstanceRecord(1, "i", "u", "vm", None, 0, 1000, False, None, None,
        ...                         {"hourlyPrice": 2.0})
        >>> spend(record, 1000 + 1_800_000)   # half an hour active at $2/h
        1.0
    """
    if record.fails:
        return 0.0
    status = status_of(record, now)
    if status.name == "pending":
        return 0.0
    start = record.ready_ms if record.delete_ms is None else min(record.ready_ms, record.delete_ms)
    end = now if status.deleted_ms is None else status.deleted_ms
    return max(end - start, 0) / 3_600_000 * float(record.doc.get("hourlyPrice") or 0.0) * factor
