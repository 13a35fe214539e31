"""``connect()`` in a hub's single-user server: the gateway service found with no setting."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucloud_nb import connect
from gpucloud_nb.client.hub import HubGateway, find_hub_gateway
from gpucloud_nb.gateway import Gateway
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import launch
from tests.test_gateway_hub import ADA_TOKEN, BOB_TOKEN, SERVICE, StandInHub, hub, hub_gateway
from tests.test_gateway_hub import upstream as upstream

__all__ = ["hub", "hub_gateway", "upstream"]


def server_env(hub: StandInHub, token: str = ADA_TOKEN, **more: str) -> dict[str, str]:
    """What JupyterHub puts in a user's single-user server's environment (what we read of it)."""
    return {"JUPYTERHUB_API_TOKEN": token, "JUPYTERHUB_API_URL": hub.api_url,
            "JUPYTERHUB_SERVICE_PREFIX": "/user/ada/", "JUPYTERHUB_BASE_URL": "/", **more}


def test_connect_talks_to_the_hubs_gateway_with_the_hub_token(
        hub: StandInHub, hub_gateway: Callable[..., Gateway], upstream: Sandbox,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    gateway = hub_gateway("default = 25\n")
    hub.services[SERVICE] = {"name": SERVICE, "url": gateway.url,
                             "prefix": f"/services/{SERVICE}/"}
    for name in ("GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL", "GPUCLOUD_HUB_SERVICE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in server_env(hub).items():
        monkeypatch.setenv(name, value)
    with connect() as cloud:
        assert cloud.base_url == f"{gateway.url}/services/{SERVICE}"
        made = launch(cloud, "from-the-hub")
        assert [i.id for i in cloud.instances.list()] == [made.id]
        status = cloud.gateway_status()
        assert status is not None and status.budget == 25.0
    out = capsys.readouterr().out
    assert "this JupyterHub's GPU gateway (service gpucloud)" in out and ADA_TOKEN not in out
    with connect(sandbox=True, quiet=True) as box:  # asked for the sandbox: no hub
        assert box.sandbox is not None


def test_where_the_service_is_found(hub: StandInHub) -> None:
    hub.services[SERVICE] = {"name": SERVICE, "url": "http://127.0.0.1:10101",
                             "prefix": f"/services/{SERVICE}/"}
    found = find_hub_gateway(server_env(hub))
    assert found == HubGateway(url=f"http://127.0.0.1:10101/services/{SERVICE}",
                               token=ADA_TOKEN, service=SERVICE)
    assert ADA_TOKEN not in repr(found)
    # Bob's token may not read the service's model: the hub's public URL, through its proxy.
    public = server_env(hub, BOB_TOKEN, JUPYTERHUB_PUBLIC_URL="https://hub.example/user/bob/",
                        JUPYTERHUB_BASE_URL="/jh/")
    assert find_hub_gateway(public) == HubGateway("https://hub.example/jh/services/gpucloud",
                                                  BOB_TOKEN, SERVICE)
    assert find_hub_gateway(server_env(hub, BOB_TOKEN)) is None  # nowhere to be found
    assert find_hub_gateway({**server_env(hub), "GPUCLOUD_HUB_SERVICE": "other"}) is None
    assert find_hub_gateway({**server_env(hub), "GPUCLOUD_API_KEY": "k" * 20}) is None
    assert find_hub_gateway({**server_env(hub), "GPUCLOUD_BASE_URL": "http://127.0.0.1:1"}) is None
    no_server = server_env(hub)
    del no_server["JUPYTERHUB_SERVICE_PREFIX"]  # the hub's own services have no server prefix
    assert find_hub_gateway(no_server) is None


def test_a_hub_that_does_not_answer_finds_nothing(hub: StandInHub) -> None:
    env = server_env(hub)
    hub.stop()
    assert find_hub_gateway(env) is None
