"""A class gateway: the cloud's own interface in front of an upstream cloud, with the money rules.

    $ gpucloud-nb gateway --keys class.keys --upstream "$CLOUD" --port 8790

Each person has a key of their own (:mod:`~gpucloud_nb.gateway.keys`); the gateway forwards
what they ask with the upstream's key (:mod:`~gpucloud_nb.gateway.upstream`,
:mod:`~gpucloud_nb.gateway.cloud_routes`), shows each key only what it created, holds budgets at
launch (:mod:`~gpucloud_nb.gateway.money`), meters and enforces them from the upstream's records
(:mod:`~gpucloud_nb.gateway.meter`), keeps its state in SQLite
(:mod:`~gpucloud_nb.gateway.store`), keeps ``delete_after`` timers
(:mod:`~gpucloud_nb.gateway.timers`) and gives the teacher a view
(:mod:`~gpucloud_nb.gateway.gateway_routes`). Importing this package loads no web framework.
"""

from gpucloud_nb.gateway.config import GatewayConfig
from gpucloud_nb.gateway.server import Gateway

__all__ = ["Gateway", "GatewayConfig"]
