"""Image URLs in chat requests: refused unless --allow-url-fetch, and never to private addresses.

No test here contacts anything but loopback: refusals happen before any connection, and a
listening loopback socket proves that nothing connected to it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import pytest

from gpucloud_nb.sandbox import Sandbox


def _chat(sandbox: Sandbox, url: str) -> httpx.Response:
    body = {"model": "sandbox-vision-1", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url}}]}]}
    return httpx.post(f"{sandbox.inference_url}/v1/chat/completions", json=body,
                      headers={"x-api-key": sandbox.inference_secret}, timeout=30)


@pytest.fixture
def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(5)
    sock.setblocking(False)
    yield sock
    sock.close()


def _nobody_connected(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return True
    return False


def test_url_fetch_is_off_by_default(sandbox: Sandbox, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    answer = _chat(sandbox, f"http://127.0.0.1:{port}/cat.png")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_image_url" and "--allow-url-fetch" in error["message"]
    assert _nobody_connected(listener)


@pytest.mark.parametrize("where", ["http://127.0.0.1:{port}/cat.png",
                                   "http://localhost:{port}/cat.png",
                                   "http://[::1]:{port}/cat.png",
                                   "http://10.0.0.1/cat.png", "http://192.168.0.1/cat.png",
                                   "http://169.254.169.254/latest/meta-data/",
                                   "http://[fd00::1]/x.png", "http://0.0.0.0:{port}/x.png",
                                   "http://[::ffff:127.0.0.1]:{port}/x.png"])
def test_private_addresses_are_never_fetched(sandbox_factory: Callable[..., Sandbox],
                                             listener: socket.socket, where: str) -> None:
    sandbox = sandbox_factory(allow_url_fetch=True)
    port = listener.getsockname()[1]
    url = where.format(port=port)
    answer = _chat(sandbox, url)
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert message.endswith("could not be fetched.")
    assert "HTTP" not in message and "Error" not in message
    assert _nobody_connected(listener)
