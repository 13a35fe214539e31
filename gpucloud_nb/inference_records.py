"""The wire records of the cloud's inference instances and SSH-key book (the appendix).

Defined here once and re-exported by :mod:`gpucloud_nb.models`, where users import them; read
tolerantly like every record (:mod:`gpucloud_nb.decoding`).

    >>> InferenceInstance.from_json({"_id": "ii1", "name": "chat", "status": "ACTIVE"}).is_active
    True

Choices where the appendix gives no type or rule:

- ``features`` (of models and instances) may be a list of names (``["chat", "image"]``) or an
  object of flags (``{"chat": true, "image": false}``); :attr:`InferenceModel.feature_names`
  reads both as a tuple of names.
- A hardware's price: the catalogue's ``hardwares`` shows none. ``hourlyPrice`` (or
  ``pricePerHour``) is read when sent, per container-hour; the sandbox sends ``hourlyPrice``.
  Without one, ``hourly_price`` is NaN and the price shows once the instance exists (its own
  ``hourlyPrice``, per container-hour).
- The trigger values are numbers: thresholds in percent for ``cpu``, ``gpuUtilization``,
  ``gpuMemory`` and ``memory``, and requests in flight per container for ``http``. An absent
  trigger is ``None``.
- ``cooldownPeriod`` is in seconds.
- A stopped instance is ``DISABLED``; one being started again is ``PENDING`` until its
  containers deploy. An instance scaled to zero stays ``ACTIVE`` with no containers ready.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

import msgspec

from gpucloud_nb.decoding import NAN, Record, fix_datetimes

__all__ = [
    "FAILED_STATUSES",
    "INFERENCE_STATUSES",
    "AutoScalingConfiguration",
    "DeployStatus",
    "InferenceContainer",
    "InferenceGpu",
    "InferenceHardware",
    "InferenceInstance",
    "InferenceInstanceDetails",
    "InferenceModel",
    "InferenceRegion",
    "RegionCapacity",
    "SSHKey",
    "Scale",
    "ScaleTriggers",
]

#: The appendix's statuses of an inference instance.
INFERENCE_STATUSES = ("NEW", "DEPLOYING", "PARTIALLYDEPLOYED", "ACTIVE", "PENDING", "DISABLED",
                      "ERROR", "FAILED", "DELETING", "DELETED")
#: Statuses from which an instance will not become active by waiting.
FAILED_STATUSES = ("ERROR", "FAILED", "DELETING", "DELETED", "DISABLED")


class _Frozen(Record, msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """A record that never changes once read."""


def _feature_names(features: Any) -> tuple[str, ...]:
    if isinstance(features, Mapping):
        return tuple(str(name) for name, on in features.items() if on)
    if isinstance(features, list | tuple):
        return tuple(str(name) for name in features if isinstance(name, str | int))
    if isinstance(features, str) and features:
        return (features,)
    return ()


class SSHKey(_Frozen, frozen=True):
    """One key of the account's SSH-key book (``GET /gpu-cloud/ssh-keys``)."""

    _datetime_fields: ClassVar[tuple[str, ...]] = ("created_at", "updated_at")

    def __post_init__(self) -> None:
        fix_datetimes(self, self._datetime_fields)

    id: str = msgspec.field(default="", name="_id")
    user: str = ""
    name: str = ""
    public_key: str = ""
    is_default: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def matches(self, public_key: str) -> bool:
        """True when ``public_key`` is this key (type and base64 body; the comment aside).

            >>> SSHKey(public_key="ssh-ed25519 AAAA me@a").matches("ssh-ed25519 AAAA you@b")
            True
        """
        return self.public_key.split()[:2] == public_key.split()[:2] != []

    def __repr__(self) -> str:
        kind = (self.public_key.split() or ["?"])[0]
        default = ", default" if self.is_default else ""
        return f"SSHKey(id={self.id!r}, name={self.name!r}, {kind}{default})"


class InferenceModel(_Frozen, frozen=True):
    """A model of the inference catalogue (``GET /ai-inference/models``)."""

    id: str = ""
    name: str = ""
    port: int = 0
    default_hardware_id: str = ""
    features: Any = None

    @property
    def feature_names(self) -> tuple[str, ...]:
        """``features`` as names, whether sent as a list or as flags (see the module docs)."""
        return _feature_names(self.features)


class InferenceGpu(_Frozen, frozen=True):
    """The GPUs of one inference hardware."""

    model: str = ""
    count: int = 0
    memory: float = NAN


class InferenceHardware(_Frozen, frozen=True):
    """A hardware of the inference catalogue (``GET /ai-inference/hardwares``)."""

    id: str = ""
    name: str = ""
    cpu: float = NAN
    ram: float = NAN
    gpu: InferenceGpu = msgspec.field(default_factory=InferenceGpu)
    hourly_price: float = NAN
    price_per_hour: float = NAN

    @property
    def price(self) -> float:
        """Dollars per container-hour where the catalogue gives them, else NaN."""
        return self.price_per_hour if math.isnan(self.hourly_price) else self.hourly_price


class RegionCapacity(_Frozen, frozen=True):
    """How many more containers of one hardware a region can take."""

    hardware_id: str = ""
    capacity: int = 0


class InferenceRegion(_Frozen, frozen=True):
    """A region of the inference catalogue (``GET /ai-inference/regions``)."""

    id: str = ""
    name: str = ""
    country_code: str = ""
    state: str = ""
    capacities: tuple[RegionCapacity, ...] = ()

    def capacity_for(self, hardware_id: str) -> int:
        """Containers of ``hardware_id`` this region can take (0 when it lists none)."""
        return sum(c.capacity for c in self.capacities if c.hardware_id == hardware_id)


class ScaleTriggers(_Frozen, frozen=True):
    """Thresholds that add containers (see the module docs for units)."""

    cpu: float | None = None
    gpu_utilization: float | None = None
    gpu_memory: float | None = None
    memory: float | None = None
    http: float | None = None


class Scale(_Frozen, frozen=True):
    """The scaling of one region: ``min`` to ``max`` containers, ``cooldown_period`` seconds."""

    min: int = 0
    max: int = 0
    cooldown_period: float = NAN
    triggers: ScaleTriggers = msgspec.field(default_factory=ScaleTriggers)


class AutoScalingConfiguration(_Frozen, frozen=True):
    """One region of an instance and its scaling."""

    region_id: str = ""
    scale: Scale = msgspec.field(default_factory=Scale)


class DeployStatus(_Frozen, frozen=True):
    """How many of a region's containers are ready."""

    total: int = 0
    ready: int = 0


class InferenceContainer(_Frozen, frozen=True):
    """The containers of one region of an instance (``containers`` of its details)."""

    region_id: str = ""
    scale: Scale = msgspec.field(default_factory=Scale)
    deploy_status: DeployStatus = msgspec.field(default_factory=DeployStatus)
    error_message: str = ""


class InferenceInstance(_Frozen, frozen=True):
    """A deployed model (``GET /ai-inference/instances``); ``address`` is its endpoint's base."""

    id: str = msgspec.field(default="", name="_id")
    name: str = ""
    status: str = ""
    hourly_price: float = NAN
    features: Any = None
    address: str = ""

    @property
    def feature_names(self) -> tuple[str, ...]:
        """``features`` as names (``('chat', 'image')``)."""
        return _feature_names(self.features)

    @property
    def is_active(self) -> bool:
        """True when the instance is ``ACTIVE`` (it may still have scaled to zero)."""
        return self.status.upper() == "ACTIVE"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, "
                f"status={self.status!r}, hourly_price={self.hourly_price:g}, "
                f"address={self.address!r})")


class InferenceInstanceDetails(InferenceInstance, frozen=True):
    """One inference instance in full (``GET /ai-inference/instances/{id}``)."""

    containers: tuple[InferenceContainer, ...] = ()
    pod_lifetime: Any = None
    hardware_name: str = ""
    envs: dict[str, Any] = msgspec.field(default_factory=dict)
    model_id: str = ""

    @property
    def ready(self) -> int:
        """Containers ready, over every region."""
        return sum(c.deploy_status.ready for c in self.containers)

    @property
    def total(self) -> int:
        """Containers wanted, over every region."""
        return sum(c.deploy_status.total for c in self.containers)

    @property
    def scaled_to_zero(self) -> bool:
        """True when it is active with no container ready: the next request waits for one."""
        return self.is_active and self.ready == 0

    @property
    def max_containers(self) -> int:
        """The most containers its scaling allows, over every region."""
        return sum(max(c.scale.max, 0) for c in self.containers)

