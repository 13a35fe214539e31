"""Shared fixtures: sandboxes served over real HTTP on free loopback ports.

    def test_something(sandbox, sandbox_api):
        assert sandbox_api.get("/gpu-cloud/volumes").json() == []

    def test_other(sandbox_factory, tmp_path):
        durable = sandbox_factory(state=tmp_path / "state.db", latency=0.05)

Fixtures use quick life cycles (``launch_seconds=0.3``, ``delete_seconds=0.2``) unless a test
passes other values to ``sandbox_factory``. Every sandbox is stopped when its test ends, except
``shared_sandbox``: one for the whole run, for tests that only read the catalogue or use what they
create by its id (never the account as a whole: lists, counts, spend, the cost cap).

The temporary sandbox home of the whole run, and the check that no sandbox service outlives it,
are in the repository's root ``conftest.py`` (so ``pytest notebooks/...`` has them too).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway import Gateway, GatewayConfig
from gpucloud_nb.gateway.hub import HubSettings
from gpucloud_nb.gateway.hub_budgets import parse_budgets
from gpucloud_nb.gateway.keys import parse_keys
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, BOB, PERSONAL, TEACHER, UPSTREAM_KEY
from tests.hub_helpers import SERVICE, SERVICE_TOKEN, StandInHub

FAST_LIFE_CYCLE = {"launch_seconds": 0.3, "delete_seconds": 0.2}


@pytest.fixture(autouse=True)
def _private_config_dir(tmp_path_factory: pytest.TempPathFactory,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys a client generates for the real cloud go to a temporary config dir, not the user's,
    and the change stamps of the run's sandboxes to a temporary cache dir."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(autouse=True)
def _personal_gateways_stopped() -> Iterator[None]:
    """A personal gateway a test's ``connect()`` started (under the run's
    ``GPUCLOUD_GATEWAY_HOME``) stops when the test ends, as its upstream usually does; one in
    front of a sandbox service that still runs (the run's shared one) ends with that service
    (``--upstream-pid``), so the next test's keyless ``connect()`` finds it warm."""
    yield
    from gpucloud_nb.gateway import personal
    from gpucloud_nb.sandbox import processes

    for home in personal.homes():
        runtime = personal.read_runtime(home)
        if runtime is not None and processes.pid_alive(runtime.upstream_pid):
            continue
        personal.stop(home)


@pytest.fixture
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user home without ~/.ssh keys and no agent or GPUCLOUD_SSH_KEY: the client offers
    only the key pair it makes itself (and must not write the real ~/.ssh)."""
    home = tmp_path / "user-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("GPUCLOUD_SSH_KEY", raising=False)
    return home


@pytest.fixture
def dask_home(own_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """:func:`own_home`, and this interpreter's ``python3`` first on the PATH that instance
    commands inherit (the Dask scheduler and workers a cluster runs on sandbox instances)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return own_home


@pytest.fixture
def sandbox_factory() -> Iterator[Callable[..., Sandbox]]:
    """Start a sandbox with custom options (``SandboxConfig`` fields); stopped at teardown."""
    started: list[Sandbox] = []

    def start(**options: Any) -> Sandbox:
        for name, value in FAST_LIFE_CYCLE.items():
            options.setdefault(name, value)
        sandbox = Sandbox(**options).start()
        started.append(sandbox)
        return sandbox

    yield start
    for sandbox in reversed(started):
        sandbox.stop()


@pytest.fixture(scope="session")
def shared_sandbox() -> Iterator[Sandbox]:
    """One sandbox for the whole run (see the module docs for the tests that may use it)."""
    with Sandbox(**FAST_LIFE_CYCLE) as sandbox:
        yield sandbox


@pytest.fixture
def shared_cloud(shared_sandbox: Sandbox) -> Iterator[GPUCloud]:
    """A client of this test's own, of ``shared_sandbox``."""
    with GPUCloud(api_key=shared_sandbox.api_key, base_url=shared_sandbox.management_url) as client:
        yield client


@pytest.fixture
def sandbox(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    """A running in-memory sandbox with the default keys and a quick life cycle."""
    return sandbox_factory()


@pytest.fixture
def management_client_factory() -> Iterator[Callable[..., httpx.Client]]:
    """Open an httpx client for a sandbox's management API; closed at teardown.

    ``factory(sandbox)`` sends the sandbox's key; ``factory(sandbox, api_key="other")`` another.
    """
    opened: list[httpx.Client] = []

    def open_client(sandbox: Sandbox, api_key: str | None = None) -> httpx.Client:
        client = httpx.Client(
            base_url=sandbox.management_url,
            headers={"x-api-key": sandbox.api_key if api_key is None else api_key},
            timeout=10.0,
        )
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


@pytest.fixture
def sandbox_api(sandbox: Sandbox,
                management_client_factory: Callable[..., httpx.Client]) -> httpx.Client:
    """An httpx client for the ``sandbox`` fixture's management API, with its key set."""
    return management_client_factory(sandbox)


@pytest.fixture
def cloud(sandbox: Sandbox) -> Iterator[GPUCloud]:
    """A management client for this test's sandbox."""
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as client:
        yield client


@pytest.fixture
def box_gateway(sandbox: Sandbox, gateway_factory: Callable[..., Gateway]) -> Gateway:
    """The ``sandbox`` fixture's personal gateway, as keyless ``connect()`` starts one: its key
    upstream, ``ADA`` its one person's; it keeps timers, idle deletes and budgets."""
    return gateway_factory(PERSONAL, upstream=sandbox)


@pytest.fixture
def box(sandbox: Sandbox, box_gateway: Gateway) -> Iterator[GPUCloud]:
    """A client of ``sandbox`` as keyless ``connect()`` makes it: through ``box_gateway`` (the
    sandbox keeps no money rule), knowing the sandbox (SSH keys go to its own route). A test
    file may define a ``box`` of its own."""
    cloud = GPUCloud(api_key=ADA, base_url=box_gateway.url)
    cloud.sandbox = sandbox
    yield cloud
    cloud.close()


@pytest.fixture
def observer(sandbox: Sandbox) -> Iterator[GPUCloud]:
    """A second client, to check what really happened on the sandbox."""
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as client:
        yield client


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the browser tests last: they are the slowest, and they start Playwright."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


PROVISIONERS = "jupyter_client.kernel_provisioners"


@pytest.fixture(scope="session")
def kernel_provisioner_entry_point(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path | None]:
    """The provisioner's entry point as pyproject.toml declares it, also for a checkout whose
    editable install predates it.

    ``pip install -e .`` registers it (CI); an older install does not, so the same lines are read
    from pyproject.toml and put on ``sys.path`` as a dist-info of their own; the fixture's value
    is then that folder (for a subprocess's ``PYTHONPATH``), else ``None``.
    """
    if any(ep.name == "gpucloud-provisioner" for ep in entry_points(group=PROVISIONERS)):
        yield None
        return
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    section = text.split(f'[project.entry-points."{PROVISIONERS}"]', 1)[1].split("\n[", 1)[0]
    lines = [line.replace('"', "").replace(" = ", "=") for line in section.strip().splitlines()
             if "=" in line]
    folder = tmp_path_factory.mktemp("entry-point")
    info = folder / "gpucloud_nb_provisioner_entry-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpucloud-nb-provisioner-entry\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(f"[{PROVISIONERS}]\n" + "\n".join(lines) + "\n")
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


@pytest.fixture
def upstream(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    """The sandbox as the real cloud: only its spec paths and its key are used."""
    return sandbox_factory(api_key=UPSTREAM_KEY)


@pytest.fixture
def gateway_factory(request: pytest.FixtureRequest,
                    sandbox_factory: Callable[..., Sandbox]) -> Iterator[Callable[..., Gateway]]:
    """``factory(keys_text, upstream=None, **config)``: a gateway in front of ``upstream`` (the
    ``upstream`` fixture unless given), with its key; stopped at teardown, before the sandboxes.

        gateway_factory(PERSONAL, upstream=sandbox)  # as keyless connect() starts one
    """
    started: list[Gateway] = []

    def start(keys: str = f"{ADA} - Ada\n{BOB} - Bob\n{TEACHER} teacher Grace\n", *,
              upstream: Sandbox | None = None, **options: Any) -> Gateway:
        if upstream is None:
            upstream = request.getfixturevalue("upstream")  # started only when needed
        options.setdefault("poll", 0.2)
        config = GatewayConfig(people=tuple(parse_keys(keys)), upstream_url=upstream.management_url,
                               upstream_key=upstream.api_key, **options)
        gateway = Gateway(config).start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


@pytest.fixture
def through_gateway(gateway_factory: Callable[..., Gateway]) -> Iterator[GPUCloud]:
    """A client of a gateway in front of ``upstream``, as ``connect()`` makes one for a key: the
    gateway keeps its timers, budgets and idle deletes (nothing in this process does)."""
    with GPUCloud(api_key=ADA, base_url=gateway_factory().url) as client:
        yield client


# -- a hub's gateway (tests/hub_helpers.py's stand-in hub) --------------------------------------


@pytest.fixture
def hub() -> Iterator[StandInHub]:
    """A stand-in for a JupyterHub's REST API (``/user``, ``/services/{name}``); stopped at end."""
    stand_in = StandInHub()
    yield stand_in
    stand_in.stop()


@pytest.fixture
def hub_gateway(upstream: Sandbox, hub: StandInHub,
                tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    """``factory(budgets_toml, **config)``: a hub's gateway in front of ``upstream``."""
    started: list[Gateway] = []

    def start(budgets: str = "default = 50\n", **options: Any) -> Gateway:
        options.setdefault("poll", 0.2)
        options.setdefault("home", tmp_path)
        settings = HubSettings(api_url=hub.api_url, token=SERVICE_TOKEN, service_name=SERVICE,
                               prefix=f"/services/{SERVICE}/")
        config = GatewayConfig(people=(), upstream_url=upstream.management_url,
                               upstream_key=UPSTREAM_KEY, hub=settings,
                               hub_budgets=parse_budgets(budgets), **options)
        gateway = Gateway(config).start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()
