"""The server extension over real HTTP: a ``jupyter server`` subprocess in real-cloud mode.

The server's environment points ``GPUCLOUD_API_KEY``/``GPUCLOUD_BASE_URL`` at a sandbox this
module starts, whose list requests are counted on the sandbox side by an ASGI middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import launch, launch_active, without_settings

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.client import clusters
from gpucloud_nb.gateway import personal
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.kernel.spec import installed
from gpucloud_nb.lab.poller import Poller
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox import app as sandbox_app

API_KEY = "sk-labtest-0123456789abcdefKEYKEY"
SECRET = "inf-labtest-fedcba9876543210SECRETS"
TOKEN = "lab-server-test-token-5f1c2d"
CAP = 0.5
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ListCounter:
    """ASGI middleware: the times of every ``GET /gpu-cloud/instances`` the sandbox answers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state = app.state  # the sandbox closes app.state.store on stop
        self.times: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope["type"] == "http" and scope["method"] == "GET"
                and scope["path"].rstrip("/") == "/gpu-cloud/instances"):
            self.times.append(time.monotonic())
        await self.app(scope, receive, send)


@contextlib.contextmanager
def counting_sandbox() -> Iterator[tuple[Sandbox, ListCounter]]:
    """A sandbox whose list requests are counted, stopped on exit."""
    real = sandbox_app.create_app
    counters: list[ListCounter] = []

    def counting_app(config: Any) -> ListCounter:
        counters.append(ListCounter(real(config)))
        return counters[-1]

    sandbox_app.create_app = counting_app
    try:
        box = Sandbox(api_key=API_KEY, inference_secret=SECRET, launch_seconds=0.5,
                      delete_seconds=0.5).start()
    finally:
        sandbox_app.create_app = real
    try:
        yield box, counters[0]
    finally:
        box.stop()


@pytest.fixture(scope="module")
def counted_sandbox() -> Iterator[tuple[Sandbox, ListCounter]]:
    with counting_sandbox() as counted:
        yield counted


@contextlib.contextmanager
def jupyter_server(home: Path, **environment: str) -> Iterator[str]:
    """``jupyter server`` with a token on a free loopback port, tmp HOME, cache and Jupyter dirs;
    its URL.

    The poller talks to the "real cloud" directly (``GPUCLOUD_GATEWAY=off``: what it sends is
    counted there) unless ``GPUCLOUD_GATEWAY`` is given; a personal gateway it starts lives
    under ``home`` and is stopped with the server.
    """
    env = {k: v for k, v in without_settings().items() if not k.startswith("JUPYTER")}
    env["XDG_CACHE_HOME"] = str(home / "cache")  # where the change stamps are (client/changes.py)
    env["GPUCLOUD_GATEWAY"] = "off"
    env["GPUCLOUD_GATEWAY_HOME"] = str(home / "gateways")
    for name in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        (home / name).mkdir()
        env[name] = str(home / name)
    env.update(environment, JUPYTER_PLATFORM_DIRS="1")
    port = free_port()
    log = (home / "server.log").open("wb")
    process = subprocess.Popen(
        [str(BIN / "jupyter"), "server", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", "--ServerApp.allow_root=True",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={home}"],
        env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (home / "server.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/status", params={"token": TOKEN}, timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, (home / "server.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.close()
        for gateway_home in (home / "gateways").glob("*/"):
            personal.stop(gateway_home)
    written = (home / "server.log").read_text(errors="replace")
    assert "Traceback" not in written
    # Only loopback: jupyter-ai-litellm's import of LiteLLM must not try GitHub for its prices.
    assert "githubusercontent" not in written and "model cost map" not in written


@pytest.fixture(scope="module")
def server(counted_sandbox: tuple[Sandbox, ListCounter],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server in real-cloud mode: its environment names the counted sandbox and a cap."""
    box, _ = counted_sandbox
    with jupyter_server(tmp_path_factory.mktemp("lab-server"), GPUCLOUD_API_KEY=API_KEY,
                        GPUCLOUD_BASE_URL=box.management_url,
                        GPUCLOUD_MAX_HOURLY_COST=str(CAP)) as url:
        yield url


@pytest.fixture(scope="module")
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, headers={"Authorization": f"token {TOKEN}"},
                      timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def cloud(counted_sandbox: tuple[Sandbox, ListCounter]) -> Iterator[GPUCloud]:
    box, _ = counted_sandbox
    with GPUCloud(api_key=API_KEY, base_url=box.management_url) as client:
        yield client


def wait_for(api: httpx.Client, predicate: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        snapshot = api.get("/gpucloud/instances").json()
        if predicate(snapshot):
            return snapshot
        assert time.monotonic() < deadline, snapshot
        api.post("/gpucloud/refresh")
        time.sleep(0.5)


def row_of(snapshot: dict[str, Any], instance_id: str) -> dict[str, Any] | None:
    return next((r for r in snapshot["instances"] if r["id"] == instance_id), None)


def assert_no_secret(text: str) -> None:
    for secret in (API_KEY, SECRET, API_KEY[-12:], SECRET[-12:]):
        assert secret not in text


# -- install -------------------------------------------------------------------------------

def test_jupyter_lists_both_extensions_enabled() -> None:
    def listing(*args: str) -> str:
        done = subprocess.run([str(BIN / "jupyter"), *args], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "NO_COLOR": "1"})
        return done.stdout + done.stderr

    lab = [line for line in listing("labextension", "list").splitlines() if "gpucloud-nb" in line]
    assert lab and "enabled" in lab[0] and "OK" in lab[0], lab
    server = listing("server", "extension", "list")
    assert any("gpucloud_nb.lab" in line and "enabled" in line for line in server.splitlines()), server
    assert any("gpucloud_nb.lab" in line and "OK" in line for line in server.splitlines()), server


def test_without_a_key_the_server_uses_the_sandbox_like_a_kernel(
        tmp_path: Path, sandbox_home: Path) -> None:
    with jupyter_server(tmp_path, GPUCLOUD_SANDBOX_HOME=str(sandbox_home)) as url:
        headers = {"Authorization": f"token {TOKEN}"}
        info = httpx.get(f"{url}/gpucloud/info", headers=headers, timeout=60).json()
        snapshot = httpx.get(f"{url}/gpucloud/instances", headers=headers, timeout=60).json()
    assert info["sandbox"] is True and info["url"].startswith("http://127.0.0.1:")
    assert info["cap"] is None
    assert snapshot["sandbox"] is True and snapshot["error"] is None


def test_a_cloud_that_refuses_or_is_down_is_one_sentence_without_the_key(
        tmp_path: Path, counted_sandbox: tuple[Sandbox, ListCounter]) -> None:
    wrong_key = "sk-wrong-key-for-the-lab-test-99"
    headers = {"Authorization": f"token {TOKEN}"}
    closed = f"http://127.0.0.1:{free_port()}"
    for base_url, home in ((counted_sandbox[0].management_url, tmp_path / "refused"),
                           (closed, tmp_path / "down")):
        home.mkdir()
        with jupyter_server(home, GPUCLOUD_API_KEY=wrong_key, GPUCLOUD_BASE_URL=base_url) as url:
            response = httpx.get(f"{url}/gpucloud/instances", headers=headers, timeout=120)
        assert response.status_code == 200
        snapshot = response.json()
        error = snapshot["error"]
        assert error and "Traceback" not in error and error.count("\n") == 0, error
        assert snapshot["instances"] == []
        assert wrong_key not in response.text and wrong_key[-12:] not in response.text


# -- auth ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/gpucloud/instances"), ("GET", "/gpucloud/info"), ("GET", "/gpucloud/instances/x"),
    ("DELETE", "/gpucloud/instances/x"), ("POST", "/gpucloud/refresh"),
    ("POST", "/gpucloud/instances/x/keep"),
])
def test_routes_refuse_without_the_token(server: str, method: str, path: str) -> None:
    response = httpx.request(method, server + path, timeout=10)
    assert response.status_code == 403
    wrong = httpx.request(method, server + path, headers={"Authorization": "token wrong"}, timeout=10)
    assert wrong.status_code == 403
    assert_no_secret(response.text + wrong.text)


def test_a_delete_with_the_login_cookie_but_without_xsrf_is_refused(
        server: str, api: httpx.Client, cloud: GPUCloud) -> None:
    instance_id = launch(cloud, "xsrf-target").id
    with httpx.Client(base_url=server, timeout=30) as browser:
        browser.get("/login")  # sets the _xsrf cookie
        xsrf = browser.cookies["_xsrf"]
        login = browser.post("/login", data={"password": TOKEN, "_xsrf": xsrf})
        assert login.status_code in (200, 302), login.text
        assert browser.get("/gpucloud/instances").status_code == 200  # the cookie is a login

        refused = browser.delete(f"/gpucloud/instances/{instance_id}")
        assert refused.status_code == 403
        assert cloud.instances.get(instance_id).status in ("pending", "active")

        accepted = browser.delete(f"/gpucloud/instances/{instance_id}", headers={"X-XSRFToken": xsrf})
        assert accepted.status_code == 204, accepted.text
        assert cloud.instances.get(instance_id).status in ("deleting", "deleted")
        assert_no_secret(refused.text + accepted.text)


# -- what the routes answer ----------------------------------------------------------------

def test_info_names_the_real_cloud_and_its_cap(api: httpx.Client,
                                                counted_sandbox: tuple[Sandbox, ListCounter]) -> None:
    info = api.get("/gpucloud/info")
    assert info.status_code == 200
    assert info.json() == {"sandbox": False, "url": counted_sandbox[0].management_url, "cap": CAP,
                           "error": None}


def test_instances_come_with_spend_and_the_delete_reaches_the_cloud(
        api: httpx.Client, cloud: GPUCloud) -> None:
    instance_id = launch(cloud, "priced").id
    snapshot = wait_for(api, lambda s: (row_of(s, instance_id) or {}).get("status") == "active")
    wait_for(api, lambda s: row_of(s, instance_id)["spend"] > 0)
    row = row_of(snapshot, instance_id)
    assert row["name"] == "priced" and row["gpuCount"] >= 1 and row["gpuModel"]
    shown = wait_for(api, lambda s: (row_of(s, instance_id) or {}).get("sshCommand"))
    command = row_of(shown, instance_id)["sshCommand"]  # the server's own client's command
    words = shlex.split(command)
    assert words[0] == "ssh" and f"HostKeyAlias={instance_id}" in words
    known = Path(next(w for w in words if w.startswith("UserKnownHostsFile=")).split("=", 1)[1])
    assert any(line.startswith(f"{instance_id} ssh-") for line in known.read_text().splitlines())
    assert snapshot["sandbox"] is False and snapshot["cap"] == CAP
    totals = snapshot["totals"]
    assert totals["running"] == sum(1 for r in snapshot["instances"] if r["status"] == "active")
    assert totals["hourly"] == pytest.approx(sum(
        r["hourlyPrice"] for r in snapshot["instances"] if r["status"] in ("active", "deleting")))
    assert totals["capReached"] is (totals["committed"] >= CAP)

    fate = api.get(f"/gpucloud/instances/{instance_id}")
    assert fate.status_code == 200 and "data" in fate.json()["fate"]
    assert api.delete(f"/gpucloud/instances/{instance_id}").status_code == 204
    assert cloud.instances.get(instance_id).status in ("deleting", "deleted")
    assert row_of(api.get("/gpucloud/instances").json(), instance_id)["status"] in ("deleting", "deleted")
    wait_for(api, lambda s: row_of(s, instance_id) is None)  # deleted rows leave the list


def test_the_settings_editor_knows_the_intervals_and_warning_hours(api: httpx.Client) -> None:
    schema = api.get("/lab/api/settings/gpucloud-nb:plugin").json()["schema"]
    defaults = {name: spec["default"] for name, spec in schema["properties"].items()}
    assert defaults == {"busyInterval": 5, "idleInterval": 30, "warnAfterHours": 4}


def test_an_unknown_instance_is_a_404_with_one_sentence(api: httpx.Client) -> None:
    response = api.delete("/gpucloud/instances/no-such-instance")
    assert response.status_code == 404
    message = response.json()["message"]
    assert "no-such-instance" in message and "Traceback" not in message
    for bad in ('"soon"', "true", "[5]", "NaN", "Infinity"):
        refused = api.put("/gpucloud/settings", content=f'{{"idleInterval": {bad}}}')
        assert refused.status_code == 400, refused.text
        assert refused.json()["message"] == "idleInterval must be a number of seconds."
    assert api.put("/gpucloud/settings", content=b"[1, 2]").status_code == 400


def test_keep_without_an_idle_limit_is_a_404_with_one_sentence(api: httpx.Client,
                                                               cloud: GPUCloud) -> None:
    instance_id = launch(cloud, "keep-no-limit").id
    response = api.post(f"/gpucloud/instances/{instance_id}/keep")
    assert response.status_code == 404
    assert response.json()["message"] == (f"Instance {instance_id} has no idle delete to keep: "
                                          "nothing watches money without a gateway.")
    cloud.instances.delete(instance_id)


def test_reading_the_instances_never_changes_the_intervals(api: httpx.Client) -> None:
    assert api.put("/gpucloud/settings", json={"busyInterval": 2, "idleInterval": 7}).json() == {
        "busyInterval": 2, "idleInterval": 7}
    api.get("/gpucloud/instances", params={"fast": 60, "slow": 600})  # an old tab's query: ignored
    assert api.put("/gpucloud/settings", json={}).json() == {"busyInterval": 2, "idleInterval": 7}
    assert api.get("/gpucloud/instances").json()["nextPollSeconds"] in (2, 7)
    assert api.put("/gpucloud/settings", json={"busyInterval": 5, "idleInterval": 30}).json() == {
        "busyInterval": 5, "idleInterval": 30}


def test_no_key_or_secret_in_any_response(api: httpx.Client, cloud: GPUCloud) -> None:
    instance_id = launch(cloud, "secretive").id
    answers = [api.get("/gpucloud/instances"), api.get("/gpucloud/info"),
               api.get(f"/gpucloud/instances/{instance_id}"), api.post("/gpucloud/refresh"),
               api.delete(f"/gpucloud/instances/{instance_id}"),
               api.get("/gpucloud/instances/missing"), api.delete("/gpucloud/instances/missing")]
    for response in answers:
        assert_no_secret(response.text)
        assert_no_secret(str(response.headers))


# -- one poller ----------------------------------------------------------------------------

@pytest.mark.slow
def test_three_tabs_for_30_s_cost_at_most_one_list_per_interval(
        api: httpx.Client, cloud: GPUCloud, counted_sandbox: tuple[Sandbox, ListCounter]) -> None:
    _, counter = counted_sandbox
    instance_id = launch(cloud, "busy").id  # keeps the poller on its 5 s interval
    wait_for(api, lambda s: row_of(s, instance_id) is not None)
    fast = 5.0
    stop = time.monotonic() + 30
    reads: list[int] = []
    start = time.monotonic()

    def tab() -> None:
        with httpx.Client(base_url=str(api.base_url), headers=dict(api.headers), timeout=30) as own:
            while time.monotonic() < stop:
                response = own.get("/gpucloud/instances")
                assert response.status_code == 200
                assert row_of(response.json(), instance_id) is not None
                reads.append(1)
                time.sleep(0.25)

    api.put("/gpucloud/settings", json={"busyInterval": fast, "idleInterval": 30})
    tabs = [threading.Thread(target=tab) for _ in range(3)]
    for thread in tabs:
        thread.start()
    for thread in tabs:
        thread.join()
    lists = [t for t in counter.times if t >= start]
    elapsed = time.monotonic() - start
    print(f"3 tabs, {elapsed:.1f} s: {len(reads)} reads of /gpucloud/instances, "
          f"{len(lists)} list requests on the sandbox")
    assert len(reads) > 100  # the tabs really polled, far more often than the cloud was asked
    assert 3 <= len(lists) <= elapsed / fast + 1
    gaps = [b - a for a, b in itertools.pairwise(lists)]
    assert min(gaps) >= fast - 0.5, gaps
    api.delete(f"/gpucloud/instances/{instance_id}")


@pytest.mark.slow
def test_with_nothing_busy_the_poller_waits_the_idle_interval(
        api: httpx.Client, cloud: GPUCloud, counted_sandbox: tuple[Sandbox, ListCounter]) -> None:
    _, counter = counted_sandbox
    for instance in cloud.instances.list():
        if instance.status in ("pending", "active"):
            cloud.instances.delete(instance.id)
    busy = ("pending", "active", "deleting")
    wait_for(api, lambda s: not any(r["status"] in busy for r in s["instances"]), timeout=30)
    fast, slow = 1.0, 4.0
    # wait_for's refresh nudges bring one poll forward; let it happen before counting.
    api.put("/gpucloud/settings", json={"busyInterval": fast, "idleInterval": slow})
    settle = time.monotonic() + 10
    while api.get("/gpucloud/instances").json()["nextPollSeconds"] != slow:
        assert time.monotonic() < settle
        time.sleep(0.2)
    start = time.monotonic()
    while time.monotonic() < start + 9:
        snapshot = api.get("/gpucloud/instances").json()
        assert snapshot["nextPollSeconds"] == slow
        time.sleep(0.2)
    lists = [t for t in counter.times if t >= start]
    print(f"idle, 9 s at slow={slow:g} s: {len(lists)} list requests")
    assert 1 <= len(lists) <= 9 / slow + 1
    assert all(b - a >= slow - 0.5 for a, b in itertools.pairwise(lists))
    api.put("/gpucloud/settings", json={"busyInterval": 5, "idleInterval": 30})


# -- a cloud that never answers ------------------------------------------------------------

@contextlib.contextmanager
def silent_cloud() -> Iterator[str]:
    """A loopback server that accepts every connection and never answers a byte; its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


@pytest.mark.slow  # 20-35 s: the full run has it, the fast lane does not
def test_a_cloud_that_never_answers_never_slows_jupyters_own_routes(tmp_path: Path) -> None:
    headers = {"Authorization": f"token {TOKEN}"}
    with silent_cloud() as cloud_url, jupyter_server(tmp_path, GPUCLOUD_API_KEY=API_KEY,
                                                     GPUCLOUD_BASE_URL=cloud_url) as url:
        deletes: list[httpx.Response] = []

        def delete(number: int) -> None:
            deletes.append(httpx.delete(f"{url}/gpucloud/instances/hung-{number}", headers=headers,
                                        timeout=120))

        threads = [threading.Thread(target=delete, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # all eight are in flight, waiting on the silent cloud
        start = time.monotonic()
        kernelspecs = httpx.get(f"{url}/api/kernelspecs", headers=headers, timeout=120)
        elapsed = time.monotonic() - start
        snapshot = httpx.get(f"{url}/gpucloud/instances", headers=headers, timeout=120).json()
        for thread in threads:
            thread.join()
    print(f"/api/kernelspecs answered in {elapsed:.2f} s with 8 DELETEs hung on the cloud")
    assert kernelspecs.status_code == 200 and "kernelspecs" in kernelspecs.json()
    assert elapsed < 5, elapsed
    assert snapshot["instances"] == []
    error = snapshot["error"]
    print(f"the sidebar says: {error}")
    assert error and error.count(".") >= 1 and "\n" not in error and "Traceback" not in error, error
    assert_no_secret(error)
    assert len(deletes) == 8 and all(r.status_code == 502 for r in deletes), deletes
    for response in deletes:
        message = response.json()["message"]
        assert "\n" not in message and "Traceback" not in message, message
        assert_no_secret(response.text)


# -- a change made elsewhere on this machine -----------------------------------------------

SCRIPT = """
import sys, time
from gpucloud_nb import GPUCloud
with GPUCloud(api_key=sys.argv[1], base_url=sys.argv[2]) as cloud:
    if sys.argv[3] == "create":
        offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
        made = cloud.instances.create(
            name="from-a-script", cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
            region=offer.available_regions[0], vm={"os": offer.configuration.os[0]})
        print(made.id, time.time())
    else:
        cloud.instances.delete(sys.argv[3])
        print(sys.argv[3], time.time())
"""


@pytest.mark.slow  # 20-35 s: the full run has it, the fast lane does not
def test_a_create_or_delete_from_another_process_shows_within_2_s_at_no_extra_cost(
        tmp_path: Path) -> None:
    home = tmp_path / "server"
    home.mkdir()
    with counting_sandbox() as (box, counter), \
            jupyter_server(home, GPUCLOUD_API_KEY=API_KEY, GPUCLOUD_BASE_URL=box.management_url) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"token {TOKEN}"}, timeout=30) as api:
        fast = 5.0
        settle = time.monotonic() + 15
        while api.get("/gpucloud/instances").json()["nextPollSeconds"] != 30:  # idle: nothing runs
            assert time.monotonic() < settle
            time.sleep(0.2)
        environment = {**os.environ, "XDG_CACHE_HOME": str(home / "cache")}  # the same user

        def script(action: str) -> tuple[str, float]:
            done = subprocess.run([sys.executable, "-c", SCRIPT, API_KEY, box.management_url, action],
                                  capture_output=True, text=True, timeout=120, env=environment)
            assert done.returncode == 0, done.stderr[-2000:]
            instance_id, at = done.stdout.split()
            return instance_id, float(at)

        def seen_after(at: float, predicate: Any) -> float:
            while True:
                if predicate(api.get("/gpucloud/instances").json()):
                    return time.time() - at
                assert time.time() - at < 10
                time.sleep(0.05)

        start = time.monotonic()
        instance_id, created = script("create")
        shown = seen_after(created, lambda s: row_of(s, instance_id) is not None)
        _, deleted = script(instance_id)
        gone = seen_after(deleted, lambda s: (row_of(s, instance_id) or {}).get("status") != "active")
        window = 20.0
        time.sleep(max(0.0, start + window - time.monotonic()))
        lists = [t for t in counter.times if start <= t <= start + window]
    print(f"a script's create showed in {shown:.2f} s, its delete in {gone:.2f} s; "
          f"{len(lists)} list requests in {window:g} s")
    # About 0.5 s on a quiet machine (printed above); 2.2 s was seen with two full runs at once
    # on 2 cores. Either way well inside the idle poll (30 s) that would show it otherwise.
    assert shown < 6 and gone < 6
    # Without the stamp a create turns the poller busy: one list per busy interval, the first at
    # the idle poll. The stamp only brings lists forward, so a window holds no more than that.
    assert 2 <= len(lists) <= window / fast + 1
    assert all(b - a >= 1.0 - 0.2 for a, b in itertools.pairwise(lists))



@pytest.mark.slow  # about 15 s
def test_a_delete_from_a_notebook_leaves_the_sidebar_when_it_is_done_not_a_poll_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #35: the stamp shows the delete at once ("deleting"), and the poller then follows it
    until it is done, instead of showing "deleting" and its $/h until the next busy poll (here
    30 s, so a lag cannot pass for the follow)."""
    home = tmp_path / "server"
    home.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))  # the same user: the same stamps
    box = Sandbox(api_key=API_KEY, launch_seconds=0.5, delete_seconds=3).start()  # seen deleting
    try:
        with jupyter_server(home, GPUCLOUD_API_KEY=API_KEY, GPUCLOUD_BASE_URL=box.management_url) as url, \
                httpx.Client(base_url=url, headers={"Authorization": f"token {TOKEN}"}, timeout=30) as api, \
                GPUCloud(api_key=API_KEY, base_url=box.management_url) as notebook:
            api.put("/gpucloud/settings", json={"busyInterval": 30, "idleInterval": 30})
            instance = launch(notebook, "deleted-from-a-notebook")
            notebook.instances.wait_until_active(instance.id, timeout=30)
            wait_for(api, lambda s: row_of(s, instance.id) is not None)
            notebook.instances.delete(instance.id)
            deleted = time.monotonic()
            wait_for(api, lambda s: (row_of(s, instance.id) or {}).get("status") != "active", 5)
            while row_of(api.get("/gpucloud/instances").json(), instance.id) is not None:
                assert time.monotonic() - deleted < 15, "the sidebar waited for its next poll"
                time.sleep(0.1)
            print(f"a notebook's delete left the sidebar in {time.monotonic() - deleted:.1f} s")
    finally:
        box.stop()


def test_notebook_on_this_instance_installs_its_kernelspec(api: httpx.Client,
                                                           cloud: GPUCloud) -> None:
    instance_id = launch(cloud, "lab kernel box").id
    cloud.instances.wait_until_active(instance_id, timeout=30)
    details = cloud.instances.get(instance_id)
    answer = api.post(f"/gpucloud/instances/{instance_id}/kernel")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "name": "gpucloud-lab-kernel-box",
        "displayName": f"Python 3 on lab kernel box · {details.gpu_model} × {details.gpu_count}"}
    missing = api.post("/gpucloud/instances/no-such-instance/kernel")
    assert missing.status_code == 404
    assert missing.json()["message"] == ("Instance no-such-instance not found: no instance has "
                                         "that id or name.")
    assert_no_secret(answer.text + missing.text)


def test_an_instance_a_cluster_noted_carries_its_cluster_for_the_sidebar(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "server"
    home.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))  # the server's user, as a kernel
    with counting_sandbox() as (box, _), \
            jupyter_server(home, GPUCLOUD_API_KEY=API_KEY, GPUCLOUD_BASE_URL=box.management_url) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"token {TOKEN}"}, timeout=30) as api, \
            GPUCloud(api_key=API_KEY, base_url=box.management_url) as cloud:
        member, other = launch(cloud, "trio-0").id, launch(cloud, "loner").id
        clusters.note(cloud.base_url, member, "trio")  # what GPUCloudCluster does for each instance
        shown = wait_for(api, lambda s: row_of(s, member) and row_of(s, other))
        assert row_of(shown, member)["cluster"] == "trio"
        assert row_of(shown, other)["cluster"] is None
        cloud.instances.delete(member)  # not by the cluster: the Lab's Delete all, or outside
        wait_for(api, lambda s: not row_of(s, member))
        assert member not in clusters.members(cloud.base_url)  # the note does not pile up


def test_the_poller_removes_its_own_stale_kernelspecs_only(
        sandbox_factory: Callable[..., Sandbox], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec of another key (or sandbox home) names an instance this key cannot see: kept."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    mine, other = sandbox_factory(), sandbox_factory(api_key="sk-another-account-0123456789")
    with GPUCloud(api_key=other.api_key, base_url=other.management_url) as theirs, \
            GPUCloud(api_key=mine.api_key, base_url=mine.management_url) as cloud:
        kept = install_kernel(theirs, launch_active(theirs, "theirs").id)
        deleted = launch_active(cloud, "mine")
        install_kernel(cloud, deleted.id)
        cloud.instances.delete(deleted.id)

    async def one_poll() -> None:
        poller = Poller(lambda: AsyncGPUCloud(api_key=mine.api_key, base_url=mine.management_url))
        try:
            await poller.snapshot()
        finally:
            await poller.stop()

    asyncio.run(one_poll())
    assert set(installed()) == {kept}


def test_through_a_gateway_the_snapshot_carries_the_keys_budget(
        tmp_path: Path, upstream: Any, gateway_factory: Any) -> None:
    from tests.test_client_gateway import ADA, spent_budget

    gateway = spent_budget(upstream, gateway_factory)
    with jupyter_server(tmp_path, GPUCLOUD_API_KEY=ADA, GPUCLOUD_BASE_URL=gateway.url) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"token {TOKEN}"},
                         timeout=60) as lab:
        snapshot = wait_for(lab, lambda s: s.get("gateway") is not None, timeout=60)
        shown = snapshot["gateway"]
        assert (shown["name"], shown["left"], shown["warning"]) == ("Ada", 0, True)
        assert shown["sentence"].startswith("Your budget of $")
        assert shown["sentence"].endswith("UTC; deleted: spender.")
        assert ADA not in lab.get("/gpucloud/instances").text


@contextlib.contextmanager
def lab_through_the_personal_gateway(home: Path, upstream: Any) -> Iterator[httpx.Client]:
    """A Jupyter server whose poller goes through the personal gateway that ``connect()`` starts
    for the upstream's key (its home under ``home``), and a client of its ``/gpucloud/`` routes."""
    from tests.test_gateway import UPSTREAM_KEY

    with jupyter_server(home, GPUCLOUD_API_KEY=UPSTREAM_KEY, GPUCLOUD_GATEWAY="on",
                        GPUCLOUD_BASE_URL=upstream.management_url) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"token {TOKEN}"},
                         timeout=60) as lab:
        yield lab


def test_the_sidebar_goes_through_the_personal_gateway_as_connect_does(
        tmp_path: Path, upstream: Any) -> None:
    from tests.test_gateway import UPSTREAM_KEY

    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as console:
        made = launch(console, "made-elsewhere").id
    with lab_through_the_personal_gateway(tmp_path, upstream) as lab:
        snapshot = wait_for(lab, lambda s: row_of(s, made) is not None, timeout=60)
        runtime = personal.find(next((tmp_path / "gateways").glob("*/")))
        assert runtime is not None and snapshot["url"] == runtime.management_url
        assert snapshot["url"] != upstream.management_url
        assert UPSTREAM_KEY not in lab.get("/gpucloud/instances").text


def test_through_the_personal_gateway_the_poller_reads_the_gateways_idle_clocks(
        tmp_path: Path, upstream: Any) -> None:
    """#36: through a personal gateway every poll failed ("The real cloud's idle clocks need its
    limits file"): the poller took the gateway for the bare cloud, whose idle clocks it keeps
    itself. The gateway keeps them: the row shows its clock, by the gateway, and Keep reaches it."""
    from tests.test_gateway import UPSTREAM_KEY

    with lab_through_the_personal_gateway(tmp_path, upstream) as lab:
        first = wait_for(lab, lambda s: s.get("polledAt") is not None, timeout=60)
        assert first["error"] is None, first["error"]
        runtime = personal.find(next((tmp_path / "gateways").glob("*/")))
        assert runtime is not None
        # A kernel's connect() talks through the same gateway, with its local key.
        with GPUCloud(api_key=runtime.api_key, base_url=runtime.management_url) as kernel:
            made = launch(kernel, "idle-watched", delete_when_idle=600).id
        snapshot = wait_for(lab, lambda s: (row_of(s, made) or {}).get("idle") is not None,
                            timeout=60)
        assert snapshot["error"] is None, snapshot["error"]
        idle = row_of(snapshot, made)["idle"]
        assert (idle["limitSeconds"], idle["by"]) == (600, "the gateway")
        assert lab.post(f"/gpucloud/instances/{made}/keep").status_code == 204
        assert UPSTREAM_KEY not in lab.get("/gpucloud/instances").text


def test_when_the_personal_gateway_stops_the_poller_starts_it_again_and_recovers(
        tmp_path: Path, upstream: Any) -> None:
    """#36: the poller built its client once: after ``gpucloud-nb gateway stop`` (or a crash)
    every poll was a connection error for good. A list that gets no answer drops the client; the
    next poll finds or starts the personal gateway again and the rows come back."""
    from datetime import datetime, timezone

    from tests.test_gateway import UPSTREAM_KEY

    with lab_through_the_personal_gateway(tmp_path, upstream) as lab:
        first = wait_for(lab, lambda s: s.get("polledAt") is not None, timeout=60)
        assert first["error"] is None, first["error"]
        home = next((tmp_path / "gateways").glob("*/"))
        runtime = personal.find(home)
        assert runtime is not None
        with GPUCloud(api_key=runtime.api_key, base_url=runtime.management_url) as kernel:
            made = launch(kernel, "survives-a-restart").id
        wait_for(lab, lambda s: row_of(s, made) is not None, timeout=60)

        assert personal.stop(home) == runtime.pid
        stopped = datetime.now(timezone.utc)

        def recovered(snapshot: dict[str, Any]) -> bool:
            polled = datetime.fromisoformat(snapshot["polledAt"].replace("Z", "+00:00"))
            return (polled > stopped and snapshot["error"] is None
                    and row_of(snapshot, made) is not None)

        snapshot = wait_for(lab, recovered, timeout=120)
        again = personal.find(home)
        assert again is not None and again.pid != runtime.pid
        assert snapshot["url"] == again.management_url
        assert UPSTREAM_KEY not in lab.get("/gpucloud/instances").text
