"""The sandbox as a network service: Host header, nesting depth and body limits, over real HTTP."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Callable

import httpx
import pytest

from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.sandbox.guards import allowed_hosts, json_depth_problem


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "192.168.1.5", ""])
def test_foreign_host_header_is_421_with_the_spec_body(sandbox: Sandbox, host: str) -> None:
    answer = httpx.get(f"{sandbox.management_url}/gpu-cloud/volumes",
                       headers={"x-api-key": sandbox.api_key, "host": host})
    assert answer.status_code == 421
    body = answer.json()
    assert body["statusCode"] == 421 and body["path"] == "/gpu-cloud/volumes"
    assert "Host header" in body["message"]


def test_foreign_host_on_inference_gets_an_openai_error(sandbox: Sandbox) -> None:
    answer = httpx.get(f"{sandbox.inference_url}/v1/models",
                       headers={"x-api-key": sandbox.inference_secret, "host": "rebind.example"})
    assert answer.status_code == 421
    assert answer.json()["error"]["code"] == "misdirected_request"


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]"])
def test_loopback_names_are_served(sandbox: Sandbox, name: str) -> None:
    answer = httpx.get(f"{sandbox.management_url}/gpu-cloud/volumes",
                       headers={"x-api-key": sandbox.api_key, "host": f"{name}:{sandbox.port}"})
    assert answer.status_code == 200


def test_allowed_hosts_include_the_bound_host() -> None:
    assert "myhost" in allowed_hosts("myhost")
    assert "[::1]" in allowed_hosts("::1")
    assert "evil.example" not in allowed_hosts("127.0.0.1")
    assert allowed_hosts("0.0.0.0") is None and allowed_hosts("::") is None


def test_a_class_server_on_every_address_answers_by_the_teachers_name(sandbox_factory) -> None:
    """Students reach a --host 0.0.0.0 server by the name they know; the key still guards it."""
    box = sandbox_factory(host="0.0.0.0", api_key="class-key-0123456789",
                          inference_secret="class-secret-0123456789")
    url = f"http://127.0.0.1:{box.port}/gpu-cloud/volumes"  # only loopback traffic in tests
    named = httpx.get(url, headers={"x-api-key": "class-key-0123456789",
                                    "host": f"teacher-laptop.local:{box.port}"})
    assert named.status_code == 200
    assert httpx.get(url, headers={"host": "teacher-laptop.local"}).status_code == 403


def test_deep_json_is_400_on_management(sandbox_api: httpx.Client) -> None:
    body = {"name": "x", "instanceId": "y", "region": "z", "extra": _nested(900)}
    answer = sandbox_api.post("/gpu-cloud/instances", content=json.dumps(body))
    assert answer.status_code == 400
    assert "levels deep" in answer.json()["message"]


def test_deep_json_is_400_on_chat(sandbox: Sandbox) -> None:
    body = {"model": "sandbox-vision-1", "messages": [{"role": "user", "content": "hi"}],
            "metadata": _nested(900)}
    answer = httpx.post(f"{sandbox.inference_url}/v1/chat/completions",
                        content=json.dumps(body),
                        headers={"x-api-key": sandbox.inference_secret}, timeout=30)
    assert answer.status_code == 400, answer.text
    assert "levels deep" in answer.json()["error"]["message"]


def test_json_depth_problem_counts_levels() -> None:
    assert json_depth_problem(_nested(3), limit=3) is None
    assert json_depth_problem(_nested(4), limit=3) is not None
    assert json_depth_problem([[[]]] * 1000, limit=3) is None


def _chunked_upload(sandbox: Sandbox, path: str, headers: dict[str, str],
                    total: int, prefix: bytes = b"") -> tuple[bytes, int]:
    """Send up to ``total`` bytes chunked; stop as soon as the server answers.

    Returns the start of the answer and how many body bytes were sent before it came.
    """
    chunk = b"\0" * (256 * 1024)
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", sandbox.port), timeout=30) as sock:
        head = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{sandbox.port}",
                "Transfer-Encoding: chunked", *(f"{k}: {v}" for k, v in headers.items())]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        if prefix:
            sock.sendall(b"%x\r\n" % len(prefix) + prefix + b"\r\n")
        sock.setblocking(False)
        while sent < total:
            readable, writable, _ = select.select([sock], [sock], [], 10)
            if readable:
                break
            if writable:
                try:
                    sent += max(0, sock.send(frame) - 8)
                except BlockingIOError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
        sock.setblocking(True)
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    return answer, sent


TOTAL = 210 * 1_000_000


def test_chunked_management_body_is_refused_early(sandbox: Sandbox) -> None:
    answer, sent = _chunked_upload(sandbox, "/gpu-cloud/volumes",
                                   {"x-api-key": sandbox.api_key}, TOTAL)
    assert answer.startswith(b"HTTP/1.1 413")
    assert sent < 20 * 1_000_000


def test_chunked_transcription_upload_is_refused_early(sandbox: Sandbox) -> None:
    headers = {"x-api-key": sandbox.inference_secret,
               "Content-Type": "multipart/form-data; boundary=XyZ"}
    prefix = (b'--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\nsandbox-speech-1'
              b'\r\n--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
              b"Content-Type: audio/wav\r\n\r\n")
    answer, sent = _chunked_upload(sandbox, "/inference/v1/audio/transcriptions", headers,
                                   TOTAL, prefix)
    assert answer.startswith(b"HTTP/1.1 413")
    assert sent < 60 * 1_000_000


def test_chunked_chat_body_is_refused_early(sandbox_factory: Callable[..., Sandbox]) -> None:
    sandbox = sandbox_factory()
    answer, sent = _chunked_upload(sandbox, "/inference/v1/chat/completions",
                                   {"x-api-key": sandbox.inference_secret}, TOTAL)
    assert answer.startswith(b"HTTP/1.1 413")
    assert sent < 100 * 1_000_000
