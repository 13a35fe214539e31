"""What a gateway is told: :class:`GatewayConfig` (its ``repr`` masks the upstream's key).

    >>> config = GatewayConfig(people=(), upstream_url="http://127.0.0.1:8765", upstream_key="k" * 20)
    >>> "k" * 20 in repr(config)
    False

``home`` is the directory of the state file (``None``: memory, for tests that need no restart).
``reserve_hours`` is the admission window (1 hour), ``poll`` the metering interval in seconds (1),
``creates_per_minute`` how many creates one key may send in any minute (60) before 429.
``hub`` and ``hub_budgets``: a JupyterHub's gateway (:mod:`gpucloud_nb.gateway.hub`), whose
people are the hub's users rather than a keys file's.
``personal``: the user's own gateway (:mod:`~gpucloud_nb.gateway.personal`): its one person owns
the whole upstream account, and it answers the home's challenge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpucloud_nb._secrets import mask
from gpucloud_nb.gateway.hub import HubSettings
from gpucloud_nb.gateway.hub_budgets import HubBudgets
from gpucloud_nb.gateway.keys import Person

__all__ = ["UPSTREAM_KEY_VARIABLE", "GatewayConfig"]

UPSTREAM_KEY_VARIABLE = "GPUCLOUD_UPSTREAM_API_KEY"


@dataclass(frozen=True)
class GatewayConfig:
    """Everything a gateway needs to know."""

    people: tuple[Person, ...]
    upstream_url: str
    upstream_key: str = field(repr=False)
    host: str = "127.0.0.1"
    port: int = 0
    home: Path | None = None
    reserve_hours: float = 1.0
    poll: float = 1.0
    creates_per_minute: int = 60
    #: A JupyterHub to ask who each token is (``--jupyterhub``), instead of ``people``.
    hub: HubSettings | None = None
    hub_budgets: HubBudgets | None = None
    personal: bool = False

    def __repr__(self) -> str:
        return (f"GatewayConfig(upstream_url={self.upstream_url!r}, "
                f"upstream_key={mask(self.upstream_key)!r}, people={len(self.people)}, "
                f"host={self.host!r}, port={self.port}, home={self.home!r}, "
                f"reserve_hours={self.reserve_hours}, personal={self.personal})")
