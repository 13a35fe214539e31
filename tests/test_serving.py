"""``gpucloud_nb.serving``: a foreground server's access log never holds up its answers; a corked
server (the gateway's) sends each answer in one write."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from gpucloud_nb import serving
from gpucloud_nb.sandbox import Sandbox
from tests.helpers import ADA, UPSTREAM_KEY


def test_a_stdout_nobody_reads_does_not_stop_the_server(upstream: Sandbox,
                                                         tmp_path: Path) -> None:
    # Each answer logs a line of ~4 kB: a pipe (64 kB) nobody reads is full after ~16 of them,
    # and a server writing its access log on its event loop stops answering there.
    keys = tmp_path / "class.keys"
    keys.write_text(f"{ADA} - Ada\n", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "gpucloud_nb", "gateway", "--keys", str(keys), "--upstream",
         upstream.management_url, "--port", "0", "--home", str(tmp_path / "home")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "GPUCLOUD_UPSTREAM_API_KEY": UPSTREAM_KEY})
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip().removeprefix("management: ")
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, headers={"x-api-key": ADA}, timeout=60) as ada:
            for n in range(60):
                answer = ada.get("/gateway/me", params={"pad": "x" * 4000, "n": n})
                assert answer.status_code == 200, answer.text
    finally:
        process.kill()
        process.wait(30)


class _Recording(asyncio.Transport):
    """The socket side of a connection, kept as the list of what each write sent."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8790)}.get(
            name, default)

    def get_write_buffer_size(self) -> int:
        return 0


def _writes_of_one_answer(corked: bool) -> list[bytes]:
    """The writes uvicorn made for one GET answered by a plain Starlette app."""
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    from uvicorn.server import ServerState

    async def hello(request: Any) -> Response:
        return Response(b'{"hello":"world"}', media_type="application/json")

    app = Starlette(routes=[Route("/hello", hello)])
    sock = serving.bind("127.0.0.1", 0)
    try:
        config = serving._server(app, "127.0.0.1", sock, corked=corked, log_config=None,
                                 access_log=False).config
    finally:
        sock.close()
    config.load()

    async def answer() -> list[bytes]:
        transport = _Recording()
        protocol = config.http_protocol_class(config=config, server_state=ServerState(),
                                              app_state={})
        protocol.connection_made(transport)
        protocol.data_received(b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        deadline = time.monotonic() + 30
        while b"world" not in b"".join(transport.writes) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # any write still to come
        protocol.connection_lost(None)
        return transport.writes

    return asyncio.run(answer())


def test_a_corked_server_sends_an_answer_in_one_write() -> None:
    # uvicorn writes the status line and headers, then the body: two sends, two TCP segments
    # and two wake-ups of the client per answer; the gateway's server sends one.
    corked = _writes_of_one_answer(corked=True)
    assert len(corked) == 1, corked
    assert corked[0].startswith(b"HTTP/1.1 200 ") and corked[0].endswith(b'{"hello":"world"}')
    plain = [data for data in _writes_of_one_answer(corked=False) if data]
    assert len(plain) == 2  # what it saves: uvicorn's own way


class _Counting(io.StringIO):
    flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def test_the_access_log_writes_its_lines_in_batches_in_order() -> None:
    # One write and flush per batch, not per request: a line a request woke the writer thread
    # and flushed the stream each time, taking the interpreter lock from the serving loop.
    logger = logging.getLogger("uvicorn.access")
    stream = _Counting()
    handler = logging.StreamHandler(stream)
    saved = list(logger.handlers)
    for old in saved:
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    stop = serving._access_log_in_a_thread()
    try:
        for n in range(200):
            logger.info("line %d", n)
        deadline = time.monotonic() + 30
        while stream.getvalue().count("\n") < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop()
        logger.removeHandler(handler)
        for old in saved:
            logger.addHandler(old)
    assert stream.getvalue().splitlines() == [f"line {n}" for n in range(200)]
    assert stream.flushes < 50


def _raw_answer(port: int, payload: bytes) -> bytes:
    """What a server on ``port`` answers ``payload``, read until it closes the connection."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(payload)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


UNPARSEABLE = [
    b"GARBAGE\r\n\r\n",
    b"FOO /gpu-cloud/instances HTTP/1.1\r\nHost: x\r\n\r\n",  # a method the parser does not know
    b"GET /gpu-cloud/instances/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",  # a path that is not ASCII
    b"GET /gpu-cloud/volumes HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n",
]


def test_a_request_the_parser_rejects_gets_the_spec_error_body_from_sandbox_and_gateway(
        sandbox: Sandbox, gateway_factory: Any) -> None:
    # uvicorn answers what its parser rejects with a plain-text 400 of its own; a client of the
    # cloud's interface reads {statusCode, timestamp, path, message} on every error.
    import json
    import re

    gateway = gateway_factory()
    for port in (sandbox.port, int(gateway.url.rsplit(":", 1)[1])):
        for payload in UNPARSEABLE:
            answer = _raw_answer(port, payload)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 "), (port, payload, answer[:300])
            assert b"content-type: application/json" in head.lower(), (payload, head)
            error = json.loads(body)
            assert set(error) == {"statusCode", "timestamp", "path", "message"}, error
            assert error["statusCode"] == 400 and error["path"].startswith("/"), error
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT[0-9:.]+Z", error["timestamp"]), error
        # and the server goes on answering
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            assert client.get("/gpu-cloud/instances").status_code == 403
