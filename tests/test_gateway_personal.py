"""``connect()`` with a key talks through the user's personal gateway, found or started in the
background; ``GPUCLOUD_GATEWAY=off`` talks to the cloud directly and says nothing watches money.

Over real HTTP: the "real cloud" is a sandbox reached only through the spec's paths with its key
(as in tests/test_gateway.py); the gateway is a process of its own, as a user's would be.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import FakeService

from gpucloud_nb import GPUCloud, connect
from gpucloud_nb._connect import DIRECT_SENTENCE
from gpucloud_nb.errors import AuthenticationError
from gpucloud_nb.gateway import Gateway, GatewayConfig, personal
from gpucloud_nb.gateway.keys import parse_keys
from gpucloud_nb.sandbox import Sandbox, service
from gpucloud_nb.sandbox.home import checked_home
from tests.helpers import launch, wait_for

UPSTREAM_KEY = "upstream-key-0123456789-do-not-leak"
STUDENT = "gk-student-0000000000000001"
GONE = ("deleting", "deleted")


@pytest.fixture
def upstream(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    """The sandbox as the real cloud: only its spec paths and its key are used."""
    return sandbox_factory(api_key=UPSTREAM_KEY)


@pytest.fixture
def real_cloud(upstream: Sandbox, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``GPUCLOUD_API_KEY``/``GPUCLOUD_BASE_URL`` name ``upstream``; personal gateways live
    under a root of this test's own (yielded) and are stopped at teardown."""
    root = tmp_path / "gateways"
    monkeypatch.setenv("GPUCLOUD_API_KEY", UPSTREAM_KEY)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", upstream.management_url)
    monkeypatch.setenv("GPUCLOUD_GATEWAY_HOME", str(root))
    monkeypatch.delenv("GPUCLOUD_GATEWAY", raising=False)
    yield root
    for home in personal.homes():
        personal.stop(home)


def direct(upstream: Sandbox) -> httpx.Client:
    return httpx.Client(base_url=upstream.management_url, headers={"x-api-key": UPSTREAM_KEY},
                        timeout=30.0)


def test_connect_with_a_key_goes_through_a_personal_gateway(
        upstream: Sandbox, real_cloud: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cloud = connect()
    try:
        said = capsys.readouterr().out
        assert "through your personal gateway" in said and UPSTREAM_KEY not in said
        assert cloud.base_url != upstream.management_url and not cloud.is_sandbox
        status = cloud.gateway_status()  # only a gateway answers GET /gateway/me
        assert status is not None and status.budget is None
        made = launch(cloud, "through-personal", delete_after=600)
        assert cloud.auto_delete.where == "gateway"
        with direct(upstream) as real:  # it reached the real cloud, under the user's key
            assert [i["_id"] for i in real.get("/gpu-cloud/instances").json()] == [made.id]
        assert UPSTREAM_KEY not in repr(cloud) and cloud.key_hint != personal.home_for(
            upstream.management_url, UPSTREAM_KEY).name
        with httpx.Client(base_url=cloud.base_url, headers={"x-api-key": UPSTREAM_KEY}) as raw:
            assert raw.get("/gpu-cloud/instances").status_code == 403  # the client's key only
    finally:
        cloud.close()


def test_the_personal_gateway_keeps_the_cloud_key_out_of_its_command_line_and_home(
        upstream: Sandbox, real_cloud: Path) -> None:
    cloud = connect(quiet=True)
    cloud.close()
    home = personal.home_for(upstream.management_url, UPSTREAM_KEY)
    runtime = personal.find(home)
    assert runtime is not None and runtime.management_url == cloud.base_url
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in (service.RUNTIME_FILE, service.SETTINGS_FILE):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
    process = psutil.Process(runtime.pid)
    assert UPSTREAM_KEY not in " ".join(process.cmdline())
    assert process.environ().get("GPUCLOUD_UPSTREAM_API_KEY") == UPSTREAM_KEY
    assert "GPUCLOUD_API_KEY" not in process.environ()
    for path in home.rglob("*"):
        if path.is_file():
            assert UPSTREAM_KEY.encode() not in path.read_bytes(), path
    assert UPSTREAM_KEY not in repr(runtime) and runtime.api_key not in repr(runtime)


SECOND = """
import json
from gpucloud_nb import GPUCloud, connect
cloud = connect(quiet=True)
print(json.dumps({"url": cloud.base_url, "me": cloud.gateway_status().name}))
"""


def test_a_second_process_finds_the_same_gateway(upstream: Sandbox, real_cloud: Path) -> None:
    first = connect(quiet=True)
    first.close()
    pid = personal.find(personal.home_for(upstream.management_url, UPSTREAM_KEY)).pid  # type: ignore[union-attr]
    done = subprocess.run([sys.executable, "-c", SECOND], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["url"] == first.base_url
    assert [home.name for home in personal.homes()] == [
        personal.home_for(upstream.management_url, UPSTREAM_KEY).name]
    assert personal.find(personal.homes()[0]).pid == pid  # type: ignore[union-attr]


def test_another_key_or_cloud_gets_a_gateway_of_its_own(
        upstream: Sandbox, real_cloud: Path, sandbox_factory: Callable[..., Sandbox],
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = connect(quiet=True)
    first.close()
    other = sandbox_factory(api_key="another-upstream-key-0123456789")
    monkeypatch.setenv("GPUCLOUD_API_KEY", "another-upstream-key-0123456789")
    monkeypatch.setenv("GPUCLOUD_BASE_URL", other.management_url)
    with connect(quiet=True) as second:
        assert second.base_url != first.base_url and len(personal.homes()) == 2
        launch(second, "on-the-other")
    with httpx.Client(base_url=other.management_url,
                      headers={"x-api-key": "another-upstream-key-0123456789"}) as real:
        assert [i["name"] for i in real.get("/gpu-cloud/instances").json()] == ["on-the-other"]


def test_a_stale_runtime_file_gets_no_key_and_is_replaced(
        upstream: Sandbox, real_cloud: Path) -> None:
    home = checked_home(personal.home_for(upstream.management_url, UPSTREAM_KEY))
    key = personal.local_key(home)
    with FakeService(pid=os.getpid()) as fake:  # answers the challenge with a guess
        personal.write_runtime(home, personal.GatewayRuntime(
            fake.url, os.getpid(), key, upstream.management_url, 0.0, str(home)))
        cloud = connect(quiet=True)
        cloud.close()
    assert cloud.base_url != fake.url
    assert all(key not in str(headers) and UPSTREAM_KEY not in str(headers)
               for _, headers in fake.requests)


def test_gateway_off_talks_to_the_cloud_directly_and_says_no_gateway_watches_money(
        upstream: Sandbox, real_cloud: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPUCLOUD_GATEWAY", "off")
    with connect() as cloud:
        assert cloud.base_url == upstream.management_url
        assert cloud.gateway_status() is None
    assert DIRECT_SENTENCE in capsys.readouterr().out
    assert "no gateway watches money" in DIRECT_SENTENCE
    assert personal.homes() == []  # no gateway was started


def test_the_gateway_keeps_delete_after_with_no_client(upstream: Sandbox, real_cloud: Path) -> None:
    with connect(quiet=True) as cloud:
        made = launch(cloud, "timed", delete_after=2)
        kept = launch(cloud, "kept")

    def status(id: str) -> str:
        with direct(upstream) as real:
            return str(real.get(f"/gpu-cloud/instances/{id}").json()["status"])

    wait_for(lambda: status(made.id) in GONE, timeout=60)
    assert status(kept.id) in ("pending", "active")


def test_instances_made_elsewhere_are_seen_and_can_be_timed(
        upstream: Sandbox, real_cloud: Path) -> None:
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as console_side:
        console = launch(console_side, "console").id  # made before the gateway, elsewhere
    with connect(quiet=True) as cloud:
        assert [i.id for i in cloud.instances.list()] == [console]
        cloud.auto_delete.schedule(console, 600)
        assert cloud.auto_delete.remaining(console) is not None


def test_status_and_stop_of_personal_gateways(upstream: Sandbox, real_cloud: Path) -> None:
    command = [sys.executable, "-m", "gpucloud_nb", "gateway"]
    env = dict(os.environ)
    done = subprocess.run([*command, "status"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 3 and "No personal gateway is running" in done.stdout
    cloud = connect(quiet=True)
    cloud.close()
    done = subprocess.run([*command, "status"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0 and cloud.base_url in done.stdout
    assert UPSTREAM_KEY not in done.stdout
    done = subprocess.run([*command, "stop"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0 and "Stopped the personal gateway" in done.stdout
    assert personal.find(personal.homes()[0]) is None
    with connect(quiet=True) as again:  # started again, same home, same state
        assert again.gateway_status() is not None


def test_a_class_gateway_as_the_base_url_gets_no_personal_gateway(
        upstream: Sandbox, real_cloud: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = GatewayConfig(people=tuple(parse_keys(f"{STUDENT} 20 Ada\n")),
                           upstream_url=upstream.management_url, upstream_key=UPSTREAM_KEY)
    with Gateway(config) as class_gateway:
        monkeypatch.setenv("GPUCLOUD_API_KEY", STUDENT)
        monkeypatch.setenv("GPUCLOUD_BASE_URL", class_gateway.url)
        with connect(quiet=True) as cloud:
            assert cloud.base_url == class_gateway.url  # the class's gateway keeps the rules
            status = cloud.gateway_status()
            assert status is not None and status.budget == 20.0
    assert personal.homes() == []


def test_a_key_the_cloud_refuses_is_one_sentence_through_the_gateway(
        upstream: Sandbox, real_cloud: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLOUD_API_KEY", "sk-wrong-0123456789abcdef")
    with connect(quiet=True) as cloud, pytest.raises(AuthenticationError) as refused:
        cloud.instances.list()
    monkeypatch.setenv("GPUCLOUD_GATEWAY", "off")
    with connect(quiet=True) as direct_cloud, pytest.raises(AuthenticationError) as directly:
        direct_cloud.instances.list()
    assert str(refused.value) == str(directly.value)  # a 403, as from the cloud itself
    assert refused.value.status_code == 403
