"""A JupyterHub's gateway service, found from the environment the hub gives a user's server.

    >>> find_hub_gateway({}) is None  # not in a hub's single-user server
    True

In a single-user server JupyterHub sets ``JUPYTERHUB_API_TOKEN`` (this server's token),
``JUPYTERHUB_API_URL`` and ``JUPYTERHUB_SERVICE_PREFIX``. When those are there and neither
``GPUCLOUD_API_KEY`` nor ``GPUCLOUD_BASE_URL`` is, ``connect()`` looks for the hub's gateway
service (``gpucloud-nb gateway --jupyterhub``, named ``gpucloud`` unless
``GPUCLOUD_HUB_SERVICE`` names another) and talks to it with the hub token as its key: the
student sets nothing. Where the service is:

1. the hub's services API, ``GET {JUPYTERHUB_API_URL}/services/{name}`` with the token (it
   needs ``read:services!service={name}``, granted by the config in ``docs/jupyterhub.md``):
   the service's own ``url`` and its ``prefix``;
2. else ``JUPYTERHUB_PUBLIC_URL``'s origin (set when the hub has ``c.JupyterHub.public_url``)
   with ``JUPYTERHUB_BASE_URL`` and ``services/{name}``, through the hub's proxy.

Found neither way (no such service, or a hub that does not answer within 5 s), ``connect()``
goes on as it would outside a hub. The token is never printed: :class:`HubGateway`'s ``repr``
masks it.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

import httpx

from gpucloud_nb._secrets import mask
from gpucloud_nb.client.management import GPUCloud

__all__ = ["SERVICE_VARIABLE", "HubGateway", "connect_hub", "find_hub_gateway"]

SERVICE_VARIABLE = "GPUCLOUD_HUB_SERVICE"
_TIMEOUT = 5.0
_announced: set[str] = set()


@dataclass(frozen=True)
class HubGateway:
    """Where a hub's gateway service answers, and the hub token this server uses as its key."""

    url: str
    token: str = field(repr=False)
    service: str = "gpucloud"

    def __repr__(self) -> str:
        return f"HubGateway(url={self.url!r}, token={mask(self.token)!r}, service={self.service!r})"


def _from_services_api(api_url: str, token: str, service: str) -> str | None:
    try:
        with httpx.Client(timeout=_TIMEOUT, trust_env=False) as client:
            answer = client.get(f"{api_url.rstrip('/')}/services/{quote(service, safe='')}",
                                headers={"Authorization": f"token {token}"})
        data = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    url, prefix = data.get("url"), data.get("prefix")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    prefix = prefix if isinstance(prefix, str) else f"/services/{service}/"
    return url.rstrip("/") + "/" + prefix.strip("/")


def _from_public_url(env: Mapping[str, str], service: str) -> str | None:
    public = urlsplit(env.get("JUPYTERHUB_PUBLIC_URL", ""))
    if public.scheme not in ("http", "https") or not public.netloc:
        return None
    base = "/" + env.get("JUPYTERHUB_BASE_URL", "/").strip("/")
    return f"{public.scheme}://{public.netloc}{base.rstrip('/')}/services/{service}"


def find_hub_gateway(env: Mapping[str, str] | None = None) -> HubGateway | None:
    """The hub's gateway service for the single-user server of ``env`` (``os.environ``), or
    ``None``: not in a hub's server, ``GPUCLOUD_API_KEY``/``GPUCLOUD_BASE_URL`` set, or no such
    service found.
    """
    env = os.environ if env is None else env
    if env.get("GPUCLOUD_API_KEY") or env.get("GPUCLOUD_BASE_URL"):
        return None
    token, api_url = env.get("JUPYTERHUB_API_TOKEN", ""), env.get("JUPYTERHUB_API_URL", "")
    if not (token and api_url and env.get("JUPYTERHUB_SERVICE_PREFIX")):
        return None
    service = env.get(SERVICE_VARIABLE) or "gpucloud"
    url = _from_services_api(api_url, token, service) or _from_public_url(env, service)
    return None if url is None else HubGateway(url=url, token=token, service=service)


def connect_hub(sandbox: bool | None, *, max_hourly_cost: float | None,
                ssh_identity: str | os.PathLike[str] | None, quiet: bool,
                at_exit: Callable[[GPUCloud], None] | None) -> GPUCloud | None:
    """``connect()``'s client for a hub's gateway service, or ``None`` (then ``connect()`` goes on).

    ``sandbox=True`` never looks. ``at_exit`` is registered with :mod:`atexit` for the client.
    Announced on stdout once per process unless ``quiet``.
    """
    found = None if sandbox else find_hub_gateway()
    if found is None:
        return None
    cloud = GPUCloud(api_key=found.token, base_url=found.url, max_hourly_cost=max_hourly_cost,
                     ssh_identity=ssh_identity)
    if not quiet and found.url not in _announced:
        _announced.add(found.url)
        print(f"gpucloud-nb: this JupyterHub's GPU gateway (service {found.service}),\n  as your "
              f"hub user, at {found.url}", flush=True)
    if at_exit is not None:
        atexit.register(at_exit, cloud)
    return cloud
