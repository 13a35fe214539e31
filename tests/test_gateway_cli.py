"""``gpucloud-nb gateway`` as its own process: the keys file, its output and log, kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucloud_nb import GPUCloud
from gpucloud_nb.gateway.keys import parse_keys
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import vm_offer, wait_for

UPSTREAM_KEY = "upstream-key-0123456789-never-shown"
ADA, TEACHER = "gk-ada-0000000000000001", "gk-teach-00000000000003"


class Running:
    """A gateway process, its base URL and its output files."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, out: Path, err: Path) -> None:
        self.process, self.url, self.out, self.err = process, url, out, err


@pytest.fixture
def gateway_process(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """``start(upstream, *args)``: ``gpucloud-nb gateway`` in front of ``upstream``; killed at end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(upstream: Any, *args: str, keys: str = f"{ADA} 100 Ada\n{TEACHER} teacher T\n",
              home: Path | None = None) -> Running:
        keys_file = tmp_path / "class.keys"
        keys_file.write_text(keys, encoding="utf-8")
        run = len(started)
        out, err = tmp_path / f"out{run}.txt", tmp_path / f"err{run}.txt"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "gpucloud_nb", "gateway", "--keys", str(keys_file),
                 "--upstream", getattr(upstream, "url", None) or upstream.management_url, "--port", "0",
                 "--home", str(home or tmp_path / "home"), *args],
                stdout=stdout, stderr=stderr,
                env={**os.environ, "GPUCLOUD_UPSTREAM_API_KEY": UPSTREAM_KEY})
        started.append(process)

        def url() -> str:
            lines = out.read_text().splitlines()
            return lines[0].removeprefix("management: ") if lines else ""

        wait_for(lambda: url() or process.poll() is not None, timeout=60,
                 what=lambda: err.read_text())
        assert out.read_text().startswith("management: http://127.0.0.1:")
        return Running(process, url(), out, err)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.fixture
def upstream(sandbox_factory: Callable[..., Sandbox]) -> Sandbox:
    return sandbox_factory(api_key=UPSTREAM_KEY)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucloud_nb", "gateway", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def create_body(offer: Any, name: str) -> dict[str, Any]:
    return {"name": name, "cloudProvider": offer.cloud.id, "instanceId": offer.instance_id,
            "region": offer.available_regions[0], "vm": {"os": offer.configuration.os[0]}}


@pytest.mark.parametrize(("text", "line"), [
    ("# class\n\ngk-ada-0000000000000001 20 Ada\ngk-bob-0000000000000002 twenty Bob\n", 4),
    ("gk-ada-0000000000000001 20\n", 1),
    ("gk-ada-0000000000000001 - Ada\nshort - Bob\n", 2),
    ("gk-ada-0000000000000001 - Ada\ngk-ada-0000000000000001 - Ada again\n", 2),
    ("gk-ada-0000000000000001 20/month Ada\n", 1),
])
def test_a_malformed_keys_file_is_one_sentence_and_nothing_serves(
        tmp_path: Path, text: str, line: int) -> None:
    keys = tmp_path / "class.keys"
    keys.write_text(text, encoding="utf-8")
    done = run_cli("--keys", str(keys), "--upstream", "http://127.0.0.1:9", "--port", "0",
                   "--home", str(tmp_path / "home"), env={"GPUCLOUD_UPSTREAM_API_KEY": "k" * 20})
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"Line {line} of the keys file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bom_and_comments_are_tolerated() -> None:
    people = parse_keys("\ufeff# teacher first\n\ngk-teach-00000000000003 teacher T\n"
                        "gk-ada-0000000000000001 20/week Ada Lovelace\n")
    assert [(p.name, p.teacher, p.budget, p.period) for p in people] == [
        ("T", True, None, ""), ("Ada Lovelace", False, 20.0, "week")]


def test_a_keys_or_budgets_file_that_cannot_be_read_is_one_sentence(tmp_path: Path) -> None:
    """The keys file and a hub's budgets file are read by one function, with one sentence each."""
    from gpucloud_nb.gateway.hub_budgets import read_budgets
    from gpucloud_nb.gateway.keys import KeysFileError, read_keys

    binary, missing = tmp_path / "latin1.txt", tmp_path / "missing.txt"
    binary.write_bytes("gk-ada-0000000000000001 20 Zoë\n".encode("latin-1"))
    for read, what in ((read_keys, "keys file"), (read_budgets, "budgets file")):
        with pytest.raises(KeysFileError) as refused:
            read(str(binary))
        assert str(refused.value) == f"The {what} {binary} is not UTF-8 text."
        with pytest.raises(KeysFileError) as refused:
            read(str(missing))
        assert str(refused.value) == (f"Cannot read the {what} {missing}: No such file or "
                                      "directory.")


def test_the_upstream_key_comes_only_from_the_environment(tmp_path: Path) -> None:
    keys = tmp_path / "class.keys"
    keys.write_text(f"{ADA} - Ada\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "GPUCLOUD_UPSTREAM_API_KEY"}
    done = subprocess.run([sys.executable, "-m", "gpucloud_nb", "gateway", "--keys", str(keys),
                           "--upstream", "http://127.0.0.1:9", "--home", str(tmp_path / "h")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "GPUCLOUD_UPSTREAM_API_KEY" in done.stderr
    assert "--api-key" not in run_cli("--help").stdout


def test_keys_new_prints_a_fresh_line_the_gateway_reads(tmp_path: Path) -> None:
    lines = [run_cli("keys", "new", "Ada", "Lovelace", "--budget", "20").stdout for _ in range(2)]
    people = parse_keys("".join(lines))
    assert [(p.name, p.budget) for p in people] == [("Ada Lovelace", 20.0)] * 2
    assert lines[0] != lines[1]
    refused = run_cli("keys", "new", "Ada", "--budget", "lots")
    assert refused.returncode == 2 and "is not a budget" in refused.stderr


def test_the_upstream_key_is_in_no_output_log_or_database(
        upstream: Sandbox, gateway_process: Callable[..., Running], tmp_path: Path) -> None:
    gateway = gateway_process(upstream)
    with httpx.Client(base_url=gateway.url, headers={"x-api-key": ADA}, timeout=30) as ada, \
            GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url) as real:
        body = create_body(vm_offer(real), "logged")
        id = ada.post("/gpu-cloud/instances", json=body).json()["_id"]
        ada.get(f"/gpu-cloud/instances/{id}")
        ada.post("/gpu-cloud/instances", json={**body, "region": "nowhere"})
        ada.delete(f"/gpu-cloud/instances/{id}")
        ada.get("/gateway/me")
    gateway.process.send_signal(signal.SIGTERM)
    assert gateway.process.wait(30) == 0
    files = [gateway.out, gateway.err,
             *(path for path in (tmp_path / "home").rglob("*") if path.is_file())]
    assert any(path.name.startswith("gateway.sqlite3") for path in files)
    for path in files:
        data = path.read_bytes()
        assert UPSTREAM_KEY.encode() not in data, path
        assert ADA.encode() not in data, path  # only hashes of the students' keys are kept
    assert "GET /gpu-cloud/instances/" in gateway.out.read_text() + gateway.err.read_text()


class SlowAnswers:
    """A TCP relay on 127.0.0.1 to ``port`` that passes requests at once and answers ``delay`` s late.

    In front of the sandbox it is a cloud that has made an instance but not yet said so.
    """

    def __init__(self, port: int, delay: float) -> None:
        self.port, self.delay = port, delay
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.Server | None = None
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self._relay, "127.0.0.1", 0))
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(10)
        assert self.server is not None
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                       delay: float) -> None:
            try:
                while data := await source.read(65536):
                    await asyncio.sleep(delay)
                    sink.write(data)
                    await sink.drain()
            finally:
                sink.close()

        await asyncio.gather(pump(reader, up_writer, 0.0), pump(up_reader, writer, self.delay),
                             return_exceptions=True)

    async def _shutdown(self) -> None:
        assert self.server is not None
        self.server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_kill_9_mid_create_then_restart_launches_once(
        upstream: Sandbox, gateway_process: Callable[..., Running], tmp_path: Path) -> None:
    home = tmp_path / "home"
    relay = SlowAnswers(upstream.port, delay=2.0)
    gateway = gateway_process(relay, home=home)
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url, timeout=30) as real:
        body = create_body(vm_offer(real), "survivor")
    real_list = httpx.Client(base_url=upstream.management_url, timeout=60,
                             headers={"x-api-key": UPSTREAM_KEY})

    def named() -> list[str]:
        return [item["_id"] for item in real_list.get("/gpu-cloud/instances").json()
                if item["name"] == "survivor"]

    def create() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the gateway is killed under it
            httpx.post(f"{gateway.url}/gpu-cloud/instances", json=body,
                       headers={"x-api-key": ADA}, timeout=60)

    sender = threading.Thread(target=create)
    sender.start()
    wait_for(lambda: len(named()) == 1, timeout=60)  # made upstream, its answer held by the relay
    with sqlite3.connect(home / "gateway.sqlite3") as db:
        assert db.execute("SELECT state FROM reservations").fetchall() == [("admitted",)]
    gateway.process.kill()
    gateway.process.wait(10)
    sender.join(60)
    relay.close()
    again = gateway_process(upstream, home=home)
    with httpx.Client(base_url=again.url, headers={"x-api-key": ADA}, timeout=60) as ada, \
            httpx.Client(base_url=again.url, headers={"x-api-key": TEACHER}, timeout=60) as teacher:
        wait_for(lambda: [i["_id"] for i in ada.get("/gpu-cloud/instances").json()] == named(),
                 timeout=60)
        wait_for(lambda: ada.get("/gateway/me").json()["spend"] > 0, timeout=60)
        reasons = [e["reason"] for e in teacher.get("/gateway/audit").json()["entries"]]
        assert any(reason.startswith("reconciled") for reason in reasons)
    assert len(named()) == 1  # never launched twice
    real_list.close()


def test_two_keys_same_named_creates_are_never_in_flight_together_so_never_crosswise(
        upstream: Sandbox, gateway_process: Callable[..., Running], tmp_path: Path) -> None:
    bob = "gk-bob-0000000000000002"
    home = tmp_path / "home"
    relay = SlowAnswers(upstream.port, delay=8.0)
    keys = f"{ADA} 100 Ada\n{bob} 100 Bob\n{TEACHER} teacher T\n"
    gateway = gateway_process(relay, home=home, keys=keys)
    with GPUCloud(api_key=UPSTREAM_KEY, base_url=upstream.management_url, timeout=30) as real:
        body = create_body(vm_offer(real), "job")
    real_list = httpx.Client(base_url=upstream.management_url, timeout=60,
                             headers={"x-api-key": UPSTREAM_KEY})

    def named() -> list[str]:
        return [item["_id"] for item in real_list.get("/gpu-cloud/instances").json()
                if item["name"] == "job"]

    def create(key: str) -> None:
        with contextlib.suppress(httpx.HTTPError):  # the gateway is killed under it
            httpx.post(f"{gateway.url}/gpu-cloud/instances", json=body,
                       headers={"x-api-key": key}, timeout=60)

    senders = [threading.Thread(target=create, args=(ADA,))]
    senders[0].start()
    wait_for(lambda: len(named()) == 1, timeout=60)  # Ada's made upstream, its answer held
    senders.append(threading.Thread(target=create, args=(bob,)))
    senders[1].start()
    for _ in range(15):  # Bob's never reaches the upstream while Ada's is in flight
        assert len(named()) == 1
        time.sleep(0.2)
    gateway.process.kill()
    gateway.process.wait(10)
    for sender in senders:
        sender.join(60)
    relay.close()
    again = gateway_process(upstream, home=home, keys=keys)
    with httpx.Client(base_url=again.url, headers={"x-api-key": ADA}, timeout=60) as ada, \
            httpx.Client(base_url=again.url, headers={"x-api-key": bob}, timeout=60) as bobs:
        wait_for(lambda: [i["_id"] for i in ada.get("/gpu-cloud/instances").json()] == named(),
                 timeout=60)
        assert bobs.get("/gpu-cloud/instances").json() == []
    assert len(named()) == 1
    real_list.close()


def test_without_upstream_the_gateway_fronts_your_sandbox_service(tmp_path: Path) -> None:
    keys = tmp_path / "class.keys"
    keys.write_text(f"{ADA} 5 Ada\n", encoding="utf-8")
    sandbox_home = tmp_path / "sandbox-home"
    env = {k: v for k, v in os.environ.items() if k != "GPUCLOUD_UPSTREAM_API_KEY"}
    env["GPUCLOUD_SANDBOX_HOME"] = str(sandbox_home)
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpucloud_nb", "gateway", "--keys", str(keys), "--port", "0",
             "--home", str(tmp_path / "home")], stdout=stdout, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_for(lambda: out.read_text().startswith("management: ") or process.poll() is not None,
                 timeout=90)
        url = out.read_text().splitlines()[0].removeprefix("management: ")
        with httpx.Client(base_url=url, headers={"x-api-key": ADA}, timeout=60) as ada:
            assert len(ada.get("/gpu-cloud/instances/offers").json()) > 0
            assert ada.get("/gpu-cloud/instances").json() == []
            assert ada.get("/gateway/me").json()["left"] == 5
    finally:
        process.terminate()
        process.wait(30)
        subprocess.run([sys.executable, "-m", "gpucloud_nb", "sandbox", "stop", "--home",
                        str(sandbox_home)], capture_output=True, timeout=60, env=env)


@pytest.mark.parametrize(("host", "warns"), [
    ("127.0.0.1", False), ("127.8.9.1", False), ("::1", False), ("[::1]", False),
    ("localhost", False), ("LOCALHOST", False), ("0.0.0.0", True), ("::", True),
    ("192.0.2.10", True), ("gateway.example", True), ("", True),
])
def test_serving_beyond_loopback_warns_that_tls_belongs_in_front(host: str, warns: bool) -> None:
    from gpucloud_nb.gateway.cli import TLS_WARNING, tls_warning

    assert tls_warning(host) == (TLS_WARNING if warns else None)
    assert "TLS" in TLS_WARNING and "beyond loopback" in TLS_WARNING
