"""The JupyterLab side of gpucloud-nb: a server extension behind the GPU-cloud sidebar.

Installed with the package (``pip install gpucloud-nb[lab]``) and enabled automatically through
``etc/jupyter/jupyter_server_config.d/gpucloud_nb.json``; ``jupyter server extension list``
shows it. Its routes live under ``/gpucloud/`` (:mod:`gpucloud_nb.lab.handlers`) and read one
shared poller (:mod:`gpucloud_nb.lab.poller`), started on the first request and stopped with
the server. The cloud is the one a kernel's ``connect()`` finds: a JupyterHub's gateway service
in a hub's server (:mod:`gpucloud_nb.client.hub`), the real cloud (through the user's personal
gateway) when the server's environment has ``GPUCLOUD_API_KEY`` and ``GPUCLOUD_BASE_URL``, else
the sandbox; the
extension reaches it with :class:`~gpucloud_nb.AsyncGPUCloud` and the poller's short timeouts.

    $ jupyter server extension list      # gpucloud_nb.lab enabled - OK
    $ jupyter lab --GPUCloudExtension.max_hourly_cost=5     # or GPUCLOUD_MAX_HOURLY_COST=5
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, default

__all__ = ["GPUCloudExtension"]


class GPUCloudExtension(ExtensionApp):
    """The server extension: the ``/gpucloud/`` routes and their one poller."""

    name = "gpucloud_nb.lab"
    load_other_extensions = True

    max_hourly_cost = Float(None, allow_none=True, config=True,
                            help="The cost cap ($/h) the status bar warns at; GPUCLOUD_MAX_HOURLY_COST.")

    @default("max_hourly_cost")
    def _cap_from_environment(self) -> float | None:
        raw = os.environ.get("GPUCLOUD_MAX_HOURLY_COST", "").strip()
        try:
            return float(raw) if raw else None
        except ValueError:
            self.log.warning("GPUCLOUD_MAX_HOURLY_COST=%r is not a number; no cap shown.", raw)
            return None

    def initialize_handlers(self) -> None:
        from gpucloud_nb.lab.handlers import handlers
        from gpucloud_nb.lab.poller import Poller

        self.poller = Poller(self._connect, cap=self.max_hourly_cost, busy=self._busy_instances)
        self.handlers.extend(handlers(self.poller))
        from gpucloud_nb.lab.jupyternaut import register_in_background

        register_in_background(self._connect)  # Jupyternaut's gpucloud/ENDPOINT, if installed
        from gpucloud_nb.lab import restore  # lost kernels and the sidebar's Restore button

        self.restores = restore.Restores(lambda: getattr(self.serverapp, "kernel_manager", None),
                                         lambda: getattr(self.serverapp, "session_manager", None))
        self.handlers.extend(restore.handlers(self.restores))

    def _connect(self) -> Any:
        """The async client for the cloud ``connect()`` would choose (runs in a thread)."""
        from gpucloud_nb import AsyncGPUCloud
        from gpucloud_nb._connect import cloud_settings, sandbox_settings
        from gpucloud_nb.client.hub import find_hub_gateway
        from gpucloud_nb.lab.poller import RETRIES, TIMEOUT

        cap = self.max_hourly_cost
        if (hub := find_hub_gateway()) is not None:  # a JupyterHub's gateway service
            return AsyncGPUCloud(api_key=hub.token, base_url=hub.url, timeout=TIMEOUT,
                                 max_retries=RETRIES, max_hourly_cost=cap)
        if os.environ.get("GPUCLOUD_API_KEY"):  # through the personal gateway, as connect()
            key, url, _ = cloud_settings()
            return AsyncGPUCloud(api_key=key, base_url=url, timeout=TIMEOUT, max_retries=RETRIES,
                                 max_hourly_cost=cap)
        box, key, url, _ = sandbox_settings()  # through its personal gateway, as connect()
        cloud = AsyncGPUCloud(api_key=key, base_url=url, timeout=TIMEOUT,
                              max_retries=RETRIES, max_hourly_cost=cap)
        cloud.sandbox = box
        return cloud

    def _busy_instances(self) -> set[str]:
        """The instances a kernel of this server is busy on: a busy kernel is activity.

        A kernel is ours when its kernelspec is ``gpucloud-…`` and its provisioner's config
        names the instance (see :mod:`gpucloud_nb.kernel`); never raises.
        """
        from gpucloud_nb.lab.idle import busy_instance_ids

        found = []
        try:
            manager = getattr(self.serverapp, "kernel_manager", None)
            if manager is None:
                return set()
            for kernel_id in list(manager.list_kernel_ids()):
                kernel = manager.get_kernel(kernel_id)
                if not str(getattr(kernel, "kernel_name", "")).startswith("gpucloud-"):
                    continue
                metadata = getattr(kernel.kernel_spec, "metadata", None) or {}
                config = (metadata.get("kernel_provisioner") or {}).get("config") or {}
                found.append((str(getattr(kernel, "execution_state", "")), dict(config)))
        except Exception:  # a kernel going away mid-read: ask again at the next poll
            self.log.debug("Could not read the kernels' states.", exc_info=True)
        return busy_instance_ids(found)

    async def stop_extension(self) -> None:
        await self.poller.stop()


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "gpucloud_nb.lab", "app": GPUCloudExtension}]
