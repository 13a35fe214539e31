"""JupyterHub for the tests: a stand-in for its ``/user`` API, and a real hub with the gateway.

:class:`StandInHub` answers ``GET /hub/api/user`` (and ``/services/{name}``) as JupyterHub does,
the same model (``kind``, ``name``, ``admin``, ``groups``, ``scopes``; 403 for a token it does not
know), fast and stoppable at will (fixtures ``hub`` and ``hub_gateway`` in conftest.py).

:class:`RealHub` is a real JupyterHub in a temporary folder, with the gateway as its managed
service.

Loopback only, ports picked free: the hub (``jupyterhub`` from PyPI, the test extra) and its
proxy (``configurable-http-proxy`` from npm; ``scripts/test`` installs it into
``.venv/node/``), a SharedPasswordAuthenticator (one password for the students, a longer one for the admin),
``SimpleLocalProcessSpawner`` with homes in the folder, users ``ada`` (group ``physics``) and
``bob`` (group ``chemistry``), the admin
``grace``, a ``tester`` service whose token makes the users' tokens and starts their servers, and
``gpucloud-nb gateway --jupyterhub`` as the managed service ``gpucloud`` in front of an upstream
(the sandbox playing the real cloud). The config is the one ``docs/jupyterhub.md`` documents.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.helpers import wait_for

__all__ = ["ADA_TOKEN", "ADMIN_PASSWORD", "ADMIN_TOKEN", "BOB_TOKEN", "NO_ACCESS_TOKEN", "PASSWORD",
           "SERVICE", "SERVICE_TOKEN", "RealHub", "StandInHub", "proxy_command"]

PASSWORD = "hub-test-password"
#: The admin's password (JupyterHub wants at least 32 characters for it).
ADMIN_PASSWORD = "hub-test-admin-password-of-32-chars-or-more"
REPO = Path(__file__).resolve().parents[1]
SERVICE = "gpucloud"


ACCESS = f"access:services!service={SERVICE}"
ADA_TOKEN, BOB_TOKEN, ADMIN_TOKEN = "hub-ada-" + "a" * 24, "hub-bob-" + "b" * 24, "hub-adm-" + "c" * 24
NO_ACCESS_TOKEN, SERVICE_TOKEN = "hub-noaccess-" + "d" * 20, "hub-service-" + "e" * 20


class StandInHub:
    """``GET /hub/api/user`` as JupyterHub answers it; ``stop()`` makes the hub unreachable."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {
            ADA_TOKEN: {"name": "ada", "admin": False, "groups": ["physics"],
                        "scopes": [ACCESS, f"read:services!service={SERVICE}"]},
            BOB_TOKEN: {"name": "bob", "admin": False, "groups": ["chemistry"],
                        "scopes": [ACCESS]},
            ADMIN_TOKEN: {"name": "grace", "admin": True, "groups": [], "scopes": [ACCESS]},
            NO_ACCESS_TOKEN: {"name": "eve", "admin": False, "groups": [], "scopes": []},
        }
        self.services: dict[str, dict[str, Any]] = {}  # GET /hub/api/services/{name}
        self.asked: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                token = self.headers.get("Authorization", "").removeprefix("token ")
                hub.asked.append(self.path)
                user = hub.users.get(token)
                found: dict[str, Any] | None = None
                if user and self.path == "/hub/api/user":
                    found = {"kind": "user", **user}
                elif user and self.path.startswith("/hub/api/services/"):
                    name = self.path.removeprefix("/hub/api/services/")
                    if f"read:services!service={name}" in user["scopes"]:
                        found = hub.services.get(name)
                body = json.dumps(found or {"status": 403, "message": "Forbidden"})
                self.send_response(200 if found else 403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.api_url = f"http://127.0.0.1:{self.server.server_address[1]}/hub/api"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def proxy_command() -> str | None:
    """The ``configurable-http-proxy`` to run: on ``PATH``, or the one scripts/test installed."""
    local = REPO / ".venv" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    return shutil.which("configurable-http-proxy") or (str(local) if local.exists() else None)


def require_hub() -> str:
    """The proxy's command; the test skips without it (fails with ``CI=true``)."""
    command = proxy_command()
    if command is None:
        reason = ("configurable-http-proxy is missing (./scripts/test installs it with npm into "
                  ".venv/node); the JupyterHub tests need it")
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return command


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


CONFIG = '''
import os
import sys
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {proxy_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.db_url = "sqlite:///{folder}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = {password!r}
c.SharedPasswordAuthenticator.admin_password = {admin_password!r}
c.Authenticator.allowed_users = {{"ada", "bob", "grace"}}
c.Authenticator.admin_users = {{"grace"}}
c.JupyterHub.load_groups = {{"physics": {{"users": ["ada"]}}, "chemistry": {{"users": ["bob"]}}}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = "{folder}/home/{{username}}"
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.args = ["--allow-root"] if os.getuid() == 0 else []  # CI runs as root
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# --- the gateway as a service: what docs/jupyterhub.md says ---
c.JupyterHub.services = [
    {{
        "name": "gpucloud",
        "url": "http://127.0.0.1:{gateway_port}",
        "command": [sys.executable, "-m", "gpucloud_nb", "gateway", "--jupyterhub",
                    "--budgets", "{folder}/budgets.toml", "--upstream", {upstream!r},
                    "--home", "{folder}/gateway"],
        "environment": {{"GPUCLOUD_UPSTREAM_API_KEY": {upstream_key!r}}},
        "display": False,
    }},
    {{"name": "tester", "api_token": {tester_token!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "user",
     "scopes": ["self", "access:services!service=gpucloud", "read:services!service=gpucloud"]}},
    {{"name": "server",
     "scopes": ["users:activity!user", "access:servers!server",
                "access:services!service=gpucloud", "read:services!service=gpucloud"]}},
    {{"name": "tester", "services": ["tester"],
     "scopes": ["admin:users", "admin:servers", "tokens", "read:groups"]}},
]
'''


class RealHub:
    """A JupyterHub process and what it started; :meth:`stop` ends them all, by pid."""

    def __init__(self, folder: Path, upstream_url: str, upstream_key: str, budgets: str) -> None:
        self.folder = folder
        self.proxy_port, self.hub_port = free_port(), free_port()
        self.gateway_port = free_port()
        self.tester_token = secrets.token_hex(24)
        (folder / "budgets.toml").write_text(budgets, encoding="utf-8")
        (folder / "home").mkdir()
        (folder / "jupyterhub_config.py").write_text(CONFIG.format(
            proxy_port=self.proxy_port, hub_port=self.hub_port, proxy_api_port=free_port(),
            proxy=require_hub(), folder=folder, password=PASSWORD, admin_password=ADMIN_PASSWORD,
            gateway_port=self.gateway_port,
            singleuser=str(Path(sys.executable).with_name("jupyterhub-singleuser")),
            upstream=upstream_url, upstream_key=upstream_key, tester_token=self.tester_token),
            encoding="utf-8")
        self.log = folder / "jupyterhub.log"
        self.children: set[tuple[int, float]] = set()  # (pid, start time): never another's
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(("GPUCLOUD_", "JUPYTERHUB_"))}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(folder / "jupyterhub_config.py")],
                cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_for(self._up, timeout=120, what=self.log_tail)
        wait_for(self._gateway_up, timeout=120, what=self.log_tail)
        self._note_children()

    @property
    def url(self) -> str:
        """The proxy's (public) URL, e.g. ``http://127.0.0.1:8000``."""
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def api_url(self) -> str:
        """The hub's own REST API (what ``JUPYTERHUB_API_URL`` is in users' servers)."""
        return f"http://127.0.0.1:{self.hub_port}/hub/api"

    @property
    def gateway_url(self) -> str:
        """The gateway service through the hub's proxy."""
        return f"{self.url}/services/{SERVICE}"

    @property
    def service_url(self) -> str:
        """The gateway service's own address (no proxy)."""
        return f"http://127.0.0.1:{self.gateway_port}"

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def _up(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"jupyterhub exited: {self.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.api_url}/", timeout=5).status_code == 200
        return False

    def _gateway_up(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.gateway_url}/gateway/me", timeout=5).status_code == 403
        return False

    def _note_children(self) -> None:
        with contextlib.suppress(psutil.Error):
            self.children |= {(child.pid, child.create_time()) for child in
                              psutil.Process(self.process.pid).children(recursive=True)}

    def api(self) -> httpx.Client:
        """The hub's REST API as the ``tester`` service (an admin of users and servers)."""
        return httpx.Client(base_url=self.api_url, timeout=60,
                            headers={"Authorization": f"token {self.tester_token}"})

    def token_for(self, user: str) -> str:
        """A new hub API token of ``user`` (as a user's server has one)."""
        with self.api() as api:
            answer = api.post(f"/users/{user}/tokens", json={"note": "test"})
            answer.raise_for_status()
            return str(answer.json()["token"])

    def start_server(self, user: str) -> None:
        """Start ``user``'s single-user server and wait until the hub says it is ready."""
        with self.api() as api:
            answer = api.post(f"/users/{user}/server")
            assert answer.status_code in (201, 202), answer.text

            def ready() -> bool:
                model: dict[str, Any] = api.get(f"/users/{user}").json()
                server = (model.get("servers") or {}).get("", {})
                if not server.get("ready"):
                    time.sleep(0.25)  # a loaded machine: ask the hub a few times a second
                return bool(server.get("ready"))

            wait_for(ready, timeout=180, what=self.log_tail)
        self._note_children()

    def kill_hub(self) -> None:
        """``kill -9`` the hub alone (no cleanup): its proxy and the gateway go on running."""
        self._note_children()
        self.process.kill()
        self.process.wait(30)

    def stop(self) -> None:
        """End the hub and every process it started (by pid)."""
        self._note_children()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for pid, started in self.children:
            with contextlib.suppress(psutil.Error):
                child = psutil.Process(pid)
                if child.create_time() == started:
                    child.terminate()
                    child.wait(10)
