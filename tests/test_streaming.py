"""Streamed chat replies over real HTTP: after ``[DONE]`` the connection goes back to the pool.

A small TCP relay in front of the sandbox's inference endpoint counts the connections the
client opens; streams read to their end must leave one connection for the next request, in the
sync client as in the async one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from gpucloud_nb import AsyncInferenceClient, InferenceClient
from gpucloud_nb.sandbox import Sandbox

PROMPT = "Please tell me about the okapi"


class CountingRelay:
    """Relays loopback TCP connections to ``target`` and counts how many were opened."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            far = socket.create_connection(self.target)
            for source, sink in ((near, far), (far, near)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closing = True
        self._listener.close()


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    with Sandbox(stream_tokens_per_second=5000) as sandbox:
        yield sandbox


@pytest.fixture
def relayed(box: Sandbox) -> Iterator[tuple[str, CountingRelay]]:
    parts = urlsplit(box.inference_url)
    relay = CountingRelay((parts.hostname or "127.0.0.1", parts.port or 80))
    try:
        yield urlunsplit(parts._replace(netloc=f"127.0.0.1:{relay.port}")), relay
    finally:
        relay.close()


def test_sync_streams_read_to_done_reuse_one_connection(box: Sandbox,
                                                        relayed: tuple[str, CountingRelay]) -> None:
    url, relay = relayed
    with InferenceClient(url, box.inference_secret) as chat:
        texts = []
        for _ in range(3):
            with chat.chat(PROMPT, stream=True) as stream:
                texts.append(stream.read())
            assert stream.complete
        assert chat.chat(PROMPT).text == texts[0]
    assert "okapi" in texts[0].lower() and len(set(texts)) == 1
    assert relay.accepted == 1, f"{relay.accepted} connections for four requests"


def test_async_streams_read_to_done_reuse_one_connection(box: Sandbox,
                                                         relayed: tuple[str, CountingRelay]) -> None:
    url, relay = relayed

    async def main() -> list[str]:
        async with AsyncInferenceClient(url, box.inference_secret) as chat:
            texts = []
            for _ in range(3):
                stream = await chat.chat(PROMPT, stream=True)
                async with stream:
                    texts.append(await stream.read())
            return texts

    texts = asyncio.run(main())
    assert "okapi" in texts[0].lower() and len(set(texts)) == 1
    assert relay.accepted == 1, f"{relay.accepted} connections for three requests"
