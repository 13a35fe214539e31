"""``gpucloud-nb gateway --jupyterhub`` as its own process, with the environment a hub gives it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gpucloud_nb.sandbox import Sandbox
from tests.helpers import wait_for
from tests.test_gateway_cli import UPSTREAM_KEY, run_cli, upstream
from tests.test_gateway_hub import ADA_TOKEN, SERVICE_TOKEN, StandInHub, hub

__all__ = ["hub", "upstream"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hub_env(hub: StandInHub, port: int) -> dict[str, str]:
    return {"JUPYTERHUB_API_URL": hub.api_url, "JUPYTERHUB_API_TOKEN": SERVICE_TOKEN,
            "JUPYTERHUB_SERVICE_NAME": "gpucloud", "JUPYTERHUB_SERVICE_PREFIX": "/services/gpucloud/",
            "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
            "GPUCLOUD_UPSTREAM_API_KEY": UPSTREAM_KEY}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.terminate()
        process.wait(20)


def test_without_a_hub_it_says_so_in_one_sentence(tmp_path: Path) -> None:
    clean = {name: "" for name in os.environ if name.startswith("JUPYTERHUB_")}
    done = run_cli("--jupyterhub", "--upstream", "http://127.0.0.1:9", "--home", str(tmp_path),
                   env={**clean, "GPUCLOUD_UPSTREAM_API_KEY": UPSTREAM_KEY})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "gpucloud-nb gateway: error: --jupyterhub needs JUPYTERHUB_API_URL and "
        "JUPYTERHUB_API_TOKEN from the hub: run the gateway as a service in "
        "c.JupyterHub.services (docs/jupyterhub.md).")


def test_a_bad_budgets_file_or_a_keys_file_stops_it(tmp_path: Path, hub: StandInHub) -> None:
    bad = tmp_path / "budgets.toml"
    bad.write_text("[groups]\nphysics = 'plenty'\n", encoding="utf-8")
    env = hub_env(hub, free_port())
    done = run_cli("--jupyterhub", "--budgets", str(bad), "--upstream", "http://127.0.0.1:9",
                   "--home", str(tmp_path), env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == ("gpucloud-nb gateway: error: The budgets file's [groups] "
                                   "physics: 'plenty' is not a budget (dollars, '-', 'N/day' or "
                                   "'N/week').")
    keys = run_cli("--jupyterhub", "--keys", str(bad), "--home", str(tmp_path), env=env)
    assert keys.returncode == 2 and "not --keys" in keys.stderr
    assert ADA_TOKEN not in done.stderr + keys.stderr


def test_it_serves_where_the_hub_says(tmp_path: Path, hub: StandInHub, upstream: Sandbox,
                                      processes: list[subprocess.Popen[bytes]]) -> None:
    port = free_port()
    budgets = tmp_path / "budgets.toml"
    budgets.write_text("default = 5\n[groups]\nphysics = 12\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "gpucloud_nb", "gateway", "--jupyterhub", "--budgets",
             str(budgets), "--budget-default", "3", "--upstream", upstream.management_url,
             "--home", str(tmp_path / "home")],
            stdout=stdout, stderr=subprocess.DEVNULL,
            env={**os.environ, **hub_env(hub, port)}))
    read: Callable[[], str] = out.read_text
    wait_for(lambda: read() or processes[0].poll() is not None, timeout=60)
    assert read().splitlines()[0] == f"management: http://127.0.0.1:{port}"
    with httpx.Client(base_url=f"http://127.0.0.1:{port}/services/gpucloud",
                      headers={"x-api-key": ADA_TOKEN}, timeout=30) as ada:
        me = ada.get("/gateway/me").json()
        assert (me["name"], me["budget"]) == ("ada", 12.0)  # physics' budget over the default
    assert SERVICE_TOKEN not in read()
