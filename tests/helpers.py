"""Helpers the tests share (one copy each).

``python tests/helpers.py PORT`` serves a :class:`FakeService` on ``127.0.0.1:PORT`` in the
foreground, as its own process (the pid it claims), printing each request as a JSON line: the
impostor of the service tests, run as another user where the tests can.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import httpx

from gpucloud_nb import GPUCloud

if TYPE_CHECKING:
    from gpucloud_nb import AsyncGPUCloud
    from gpucloud_nb.gateway import Gateway
    from gpucloud_nb.models import Instance, InstanceDetails, InstanceOffer
    from gpucloud_nb.sandbox import Sandbox

OTHER_UID = 65534  # nobody: the "other local user" of the two-user tests

#: The run's isolation (the root conftest.py sets them): its sandbox home, its personal gateways'
#: root, its mark and its folder. Not settings a user has: an environment without them starts
#: services in the user's own home, which the run then reports as left behind.
RUN_ISOLATION = ("GPUCLOUD_SANDBOX_HOME", "GPUCLOUD_GATEWAY_HOME", "GPUCLOUD_NB_TEST_RUN",
                 "GPUCLOUD_NB_TEST_HOMES")


def without_settings(**env: str) -> dict[str, str]:
    """This process's environment for a subprocess, without the user's ``GPUCLOUD_*`` settings
    (the run's :data:`RUN_ISOLATION` kept), then ``env``.

        subprocess.run(command, env=without_settings(GPUCLOUD_API_KEY=key))
    """
    kept = {k: v for k, v in os.environ.items()
            if not k.startswith("GPUCLOUD_") or k in RUN_ISOLATION}
    return {**kept, **env}


def vm_offer(cloud: GPUCloud, image: str | None = None) -> InstanceOffer:
    """The cheapest available vm offer, of those with the os ``image`` if one is given.

        offer = vm_offer(cloud, "ubuntu-22.04-vllm")
    """
    return next(o for o in cloud.instances.offers(deployment_type="vm", available=True,
                                                  sort="price")
                if o.configuration.os and (image is None or image in o.configuration.os))


def launch(cloud: GPUCloud, name: str = "job", *, image: str | None = None,
           offer: InstanceOffer | None = None, **extra: Any) -> Instance:
    """Create a vm instance from ``offer`` (else :func:`vm_offer`), in its first region, with
    ``image`` (else the offer's first os); ``extra`` goes to ``instances.create``.

        instance = launch(cloud, "timed", delete_after=0.4)
    """
    offer = offer or vm_offer(cloud, image)
    return cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": image or offer.configuration.os[0]},
        **extra)


def launch_active(cloud: GPUCloud, name: str = "job", **options: Any) -> InstanceDetails:
    """:func:`launch`, then wait (up to 30 s) until the instance is active; its details.

        details = launch_active(cloud, "ssh-test", ssh_key=public)
    """
    return cloud.instances.wait_until_active(launch(cloud, name, **options).id, timeout=30)


SPIN_LOOP = "sh -c 'while :; do :; done'"
#: Ways to start :data:`SPIN_LOOP` so that it leaves the SSH session; each prints the loop's pid.
DETACHED = {
    "setsid": f"setsid {SPIN_LOOP} >/dev/null 2>&1 </dev/null & echo $!",
    "nohup": f"nohup {SPIN_LOOP} >/dev/null 2>&1 </dev/null & echo $!",
    "double fork": f"( setsid {SPIN_LOOP} >/dev/null 2>&1 </dev/null & echo $! )",
    "tmux": f"tmux new-session -d {SPIN_LOOP!r} && tmux list-panes -F '#{{pane_pid}}'",
}


@contextlib.contextmanager
def detached_job(cloud: GPUCloud, instance_id: str, how: str) -> Iterator[int]:
    """A busy loop started on the instance the :data:`DETACHED` way ``how``; its pid. Whatever
    the test finds, the loop does not outlive the block (killed if it still runs).

        with detached_job(cloud, instance.id, "tmux") as pid:
            ...
    """
    import signal

    import psutil

    pid = int(cloud.instances.run(instance_id, DETACHED[how]).stdout.split()[-1])
    try:
        yield pid
    finally:
        with contextlib.suppress(psutil.Error, OSError):
            if psutil.Process(pid).environ().get("GPUCLOUD_INSTANCE_ID"):  # still the loop
                os.kill(pid, signal.SIGKILL)


def ended(pid: int) -> bool:
    """True when process ``pid`` is gone (or a zombie nobody reaped yet)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def alaunch(cloud: AsyncGPUCloud, name: str = "job", **extra: Any) -> Instance:
    """The coroutine twin of :func:`launch` (the cheapest available vm offer, its first os).

        instance = await alaunch(cloud, "async-timed", delete_after=0.3)
    """
    offer = next(o for o in await cloud.instances.offers(deployment_type="vm", available=True,
                                                        sort="price") if o.configuration.os)
    return await cloud.instances.create(
        name=name, cloud_provider=offer.cloud.id, instance_id=offer.instance_id,
        region=offer.available_regions[0], vm={"os": offer.configuration.os[0]}, **extra)


def wait_for(condition: Callable[[], object], timeout: float = 30.0, *,
             what: Callable[[], str] = lambda: "") -> None:
    """Poll ``condition`` until it is true; fail after ``timeout`` seconds, saying ``what()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = what()
            raise AssertionError("condition not met in time" + (f"; {detail}" if detail else ""))
        time.sleep(0.01)


def as_other_user(command: Sequence[str]) -> list[str]:
    """``command`` run as uid/gid :data:`OTHER_UID` (setpriv); skips the test where it cannot."""
    import pytest

    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running a process as another user needs root and setpriv")
    return ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
            *command]


class FakeService:
    """A loopback HTTP server posing as a sandbox service; it records every request it gets.

    It answers ``/sandbox/service`` with ``pid``, ``/sandbox/status`` with ``status`` and
    ``/sandbox/challenge`` with the right proof when given the home's challenge ``secret`` (as
    the true service would), else with a guess. ``requests`` holds ``(path, headers)`` pairs.

        with FakeService(pid=os.getpid()) as fake:
            ...
        assert all(key not in str(headers) for _, headers in fake.requests)
    """

    def __init__(self, port: int = 0, *, pid: int, secret: bytes | None = None,
                 status: Any = None, on_request: Callable[[str, dict[str, str]], None] | None = None
                 ) -> None:
        self.pid, self.secret, self.status = pid, secret, status
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.on_request = on_request
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.answer(self)

            do_PUT = do_POST = do_DELETE = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        headers = dict(handler.headers.items())
        self.requests.append((handler.path, headers))
        if self.on_request is not None:
            self.on_request(handler.path, headers)
        where = urlsplit(handler.path)
        body: Any = {}
        if where.path == "/sandbox/challenge":
            nonce = parse_qs(where.query).get("nonce", [""])[0]
            if self.secret is not None:
                from gpucloud_nb.sandbox.service import challenge_proof

                body = {"proof": challenge_proof(self.secret, nonce, self.pid, self.port)}
            else:
                body = {"proof": "0" * 64}
        elif where.path == "/sandbox/service":
            body = {"pid": self.pid, "startedAt": "2026-11-25T00:00:00.000Z"}
        elif where.path == "/sandbox/status":
            body = self.status
        data = json.dumps(body).encode()
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def __enter__(self) -> FakeService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    def report(path: str, headers: dict[str, str]) -> None:
        print(json.dumps([path, headers]), flush=True)

    with FakeService(int(sys.argv[1]), pid=os.getpid(), on_request=report) as impostor:
        print(f"listening {impostor.port}", flush=True)
        threading.Event().wait()


@contextlib.contextmanager
def deaf_to(instance_id: str) -> Iterator[httpx.MockTransport]:
    """The sandbox over real HTTP, except that the delete of ``instance_id`` is answered 204 and
    never performed: a cloud that takes a delete and goes on billing (the sandbox cannot be made
    to do that)."""
    with httpx.Client(timeout=10) as real:
        def forward(request: httpx.Request) -> httpx.Response:
            if request.method == "DELETE" and request.url.path.endswith(f"/{instance_id}"):
                return httpx.Response(204)
            answer = real.send(real.build_request(request.method, request.url,
                                                  headers=request.headers,
                                                  content=request.read()))
            return httpx.Response(answer.status_code, content=answer.content, headers={
                "content-type": answer.headers.get("content-type", "application/json")})

        yield httpx.MockTransport(forward)


@contextlib.contextmanager
def open_kernel(kernel_name: str, poll_every: float = 0.5) -> Iterator[Any]:
    """A Jupyter kernel of ``kernel_name`` (a ``gpucloud-…`` kernelspec), started as JupyterLab
    starts it and polled as its restarter polls it (``poll()``, every ``poll_every`` seconds,
    from a thread); yields its blocking client; shut down after.

        with open_kernel(install_kernel(cloud, instance.id)) as kernel:
            kernel.execute_interactive("x = 1", timeout=30)
    """
    from jupyter_client.manager import KernelManager

    manager = KernelManager(kernel_name=kernel_name)
    manager.start_kernel()
    client = manager.client()
    client.start_channels()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(poll_every):
            with contextlib.suppress(Exception):
                manager.is_alive()

    poller = threading.Thread(target=poll, name="kernel-poller", daemon=True)
    try:
        client.wait_for_ready(timeout=90)
        poller.start()
        yield client
    finally:
        stop.set()
        if poller.is_alive():
            poller.join(30)
        client.stop_channels()
        with contextlib.suppress(Exception):
            manager.shutdown_kernel(now=True)


@contextlib.contextmanager
def echo_port() -> Iterator[int]:
    """A TCP echo server on this machine's loopback: on the sandbox, a port of the instance."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@contextlib.contextmanager
def connected(url: str) -> Iterator[socket.socket]:
    """A connection through a forward, proven to reach the far end (an echo)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        yield conn


# -- the gateway's tests (fixtures `upstream`, `gateway_factory` in conftest.py) ----------------

UPSTREAM_KEY = "upstream-key-0123456789-do-not-leak"
ADA, BOB, TEACHER = "gk-ada-0000000000000001", "gk-bob-0000000000000002", "gk-teach-00000000000003"
#: The keys file of a personal gateway (as keyless ``connect()`` starts one): ``ADA`` alone.
PERSONAL = f"{ADA} - Ada\n"
SPEC_FIELDS = {"statusCode", "timestamp", "path", "message"}


def gateway_cloud(gateway: Gateway, key: str) -> GPUCloud:
    """A client of ``gateway`` with ``key``, which retries nothing."""
    return GPUCloud(api_key=key, base_url=gateway.url, max_retries=0, timeout=30.0)


def direct(upstream: Sandbox) -> httpx.Client:
    return httpx.Client(base_url=upstream.management_url, headers={"x-api-key": UPSTREAM_KEY},
                        timeout=30.0)


def as_key(gateway: Gateway, key: str) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, headers={"x-api-key": key}, timeout=60.0)


def create_body(offer: Any, name: str) -> dict[str, Any]:
    return {"name": name, "cloudProvider": offer.cloud.id, "instanceId": offer.instance_id,
            "region": offer.available_regions[0], "vm": {"os": offer.configuration.os[0]}}


def add_history(store: Any, accounts: Sequence[str], n: int, *, end: int, price: float = 1.0,
                prefix: str = "old") -> None:
    """``n`` final records spread over ``accounts`` in the gateway's ``store``, each created
    through the store as a create's record is (a reservation answered, then the upstream's
    record read back deleted): instances an hour long ending by ``end`` (Unix ms), one in ten
    in ``error``, one in ten a volume deleted through the gateway, one in ten an inference
    instance with a closed span. Deterministic, so two stores given the same get the same.
    """
    hour = 3_600_000
    for k in range(n):
        account, id = accounts[k % len(accounts)], f"{prefix}-{k}"
        created = end - hour - (k % 240) * hour // 4
        kind = ("volume", "endpoint", "instance")[k % 10] if k % 10 < 2 else "instance"
        rid = store.reserve(account, id, price, created)
        store.add_owned(id, kind, account, id, price, created, rid=rid)
        if kind == "volume":
            store.end_volume(id, created + hour)
        elif kind == "endpoint":
            store.bill_at(id, account, price, created)
            store.bill_at(id, account, 0.0, created + hour)
            store.update_owned(id, price=price, created_ms=created, status="deleted",
                               deleted_ms=created + hour, final=True)
        else:
            error = k % 10 == 2
            store.update_owned(id, price=price, created_ms=created,
                               status="error" if error else "deleted",
                               deleted_ms=None if error else created + hour, final=True)


def rows_in_the_file_alone(path: Path, table: str) -> int:
    """Rows of ``table`` in the database file itself, without what its WAL holds (0 when even
    the table is only in the WAL)."""
    alone = path.with_name("alone.sqlite3")
    shutil.copyfile(path, alone)
    try:
        with contextlib.closing(sqlite3.connect(alone)) as db:
            if db.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone() is None:
                return 0
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        for leftover in alone.parent.glob("alone.sqlite3*"):
            leftover.unlink()
