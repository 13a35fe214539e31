"""No request to the sandbox, however malformed, gets a 5xx; errors keep the spec's body."""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gpucloud_nb.sandbox import Sandbox

DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
CREATE_PATHS = ("/gpu-cloud/instances", "/gpu-cloud/volumes")

BAD_BODIES: list[bytes] = [
    b"", b"   ", b"{", b"}", b"[]", b"null", b'"text"', b"42", b"true", b"{'a': 1}",
    b'{"sizeInGb": 1e999}', b'{"sizeInGb": -1e999}', b'{"sizeInGb": NaN}',
    b'{"sizeInGb": Infinity}', b'{"sizeInGb": -Infinity}',
    b'{"sizeInGb": ' + b"9" * 5000 + b"}",
    b"[" * 100_000, b'{"a":' * 50_000,
    b'{"name": "\\ud800"}', b'{"\\udfff": 1}', b'{"name": ["\\udc00"]}',
    b"\xff\xfe\x00garbage", b'{"name": "caf\xe9"}', b"\x00\x00\x00",
    '{"name": "x"}'.encode("utf-16"), b"\xef\xbb\xbf{}",
    b"name=x&sizeInGb=1",
    b'{"name": "a"}{"name": "b"}',
]

BAD_OBJECTS: list[dict[str, Any]] = [
    {"name": {"$gt": ""}}, {"name": ["a"]}, {"name": None}, {"name": True},
    {"vm": []}, {"vm": {"os": 1}}, {"vm": {"os": None}}, {"dockerContainer": "img"},
    {"dockerContainer": {"image": ["x"]}}, {"volumeId": 123}, {"volumeId": ["x"]},
    {"volumeId": {"a": 1}}, {"instanceId": ["list"]}, {"instanceId": {"a": 1}},
    {"instanceId": 3}, {"cloudProvider": 1.5}, {"cloudProvider": ["x"]}, {"region": {"id": 1}},
    {"sizeInGb": [1]}, {"sizeInGb": {"$gt": 0}}, {"sizeInGb": -1e308}, {"sizeInGb": 1e308},
    {"sizeInGb": 10**20}, {"sizeInGb": -(10**20)}, {"sizeInGb": 5e-324}, {"sizeInGb": "50"},
    {"sshKey": 1}, {"sshKeyId": []}, {"vm": {"os": "ubuntu-22.04", "base64CloudInitScript": 1}},
    {"vm": {"os": "ubuntu-22.04", "base64CloudInitScript": "€€€"}},
    {"name": "x" * 100_000}, {"name": "数据-😀", "region": "🌍", "instanceId": "🚀",
                               "cloudProvider": "☁", "sizeInGb": 50},
    {"name": "nul\u0000byte", "cloudProvider": "\u0000", "region": "\u0000", "sizeInGb": 1},
    {str(i): i for i in range(5000)},
]

QUERIES: list[Any] = [
    {"numGpus": "1e5"}, {"numGpus": "٣"}, {"numGpus": "0x10"}, {"numGpus": " 8 "},
    {"numGpus": "9" * 5000}, {"numGpus": "-0"}, {"available": "TRUE"}, {"available": "1"},
    {"sort": "PRICE"}, {"sort": "-price"}, {"deploymentType": "VM"}, {"deploymentType": "\x00"},
    {"region": "\x00"}, {"gpuType": "%"}, {"gpuType": "😀" * 500}, {"gpuType": "'; DROP TABLE"},
    [("numGpus", "1"), ("numGpus", "x")], [("available", "true"), ("available", "maybe")],
    "numGpus=%ff%fe&region=%c3%28", "available&sort&numGpus", "=&==&&",
]

ODD_IDS = ["%ff%fe", "a" * 5000, "..%2F..%2Fetc%2Fpasswd", "%00", "😀", "null", "undefined",
           "%20", "1 OR 1=1", "offers", "'\"", "%E2%80%AE"]


@pytest.fixture(autouse=True)
def no_server_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail when the server logged an error (an exception inside the app) during a test."""
    caplog.set_level(logging.WARNING)
    yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


@pytest.fixture(scope="module")
def target() -> Iterator[Sandbox]:
    with Sandbox(launch_seconds=0.3, delete_seconds=0.2) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def api(target: Sandbox) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=target.management_url, timeout=20,
                      headers={"x-api-key": target.api_key}) as client:
        yield client


def assert_sane(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.request.url, response.text[:300])
    if response.status_code >= 400 and response.request.method != "HEAD":
        body = response.json()
        assert set(body) == {"statusCode", "timestamp", "path", "message"}
        assert body["statusCode"] == response.status_code
        assert isinstance(body["message"], str) and body["message"]
        assert DATE_TIME.fullmatch(body["timestamp"])


@pytest.mark.parametrize("path", CREATE_PATHS)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None,
                                          "application/x-www-form-urlencoded"])
def test_bad_bodies(api: httpx.Client, path: str, content_type: str | None) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    for body in BAD_BODIES:
        response = api.post(path, content=body, headers=headers)
        assert_sane(response)
        assert response.status_code == 400, (body[:40], response.text)


@pytest.mark.parametrize("path", CREATE_PATHS)
def test_bad_objects(api: httpx.Client, path: str) -> None:
    for body in BAD_OBJECTS:
        response = api.post(path, content=json.dumps(body, ensure_ascii=False).encode(),
                            headers={"content-type": "application/json"})
        assert_sane(response)
        assert response.status_code == 400, (str(body)[:80], response.text)


def test_oversized_and_odd_content(api: httpx.Client) -> None:
    huge = b'{"name": "' + b"x" * 2_000_000 + b'"}'
    response = api.post("/gpu-cloud/volumes", content=huge)
    assert_sane(response)
    assert response.status_code == 413
    multipart = api.post("/gpu-cloud/instances", files={"file": ("a.json", b"{}")})
    assert_sane(multipart)
    form = api.post("/gpu-cloud/volumes", data={"name": "x", "sizeInGb": "50"})
    assert_sane(form)
    assert form.status_code == 400


def test_odd_queries(api: httpx.Client) -> None:
    for query in QUERIES:
        if isinstance(query, str):
            response = api.get(f"/gpu-cloud/instances/offers?{query}")
        else:
            response = api.get("/gpu-cloud/instances/offers", params=query)
        assert_sane(response)
        listing = api.get("/gpu-cloud/instances", params=query if not isinstance(query, str)
                          else None)
        assert_sane(listing)


def test_odd_ids_and_methods(api: httpx.Client) -> None:
    for odd in ODD_IDS:
        for method in ("GET", "DELETE", "PUT", "PATCH", "POST", "OPTIONS", "HEAD"):
            for kind in ("instances", "volumes"):
                response = api.request(method, f"/gpu-cloud/{kind}/{odd}")
                assert_sane(response)
    for method in ("OPTIONS", "TRACE", "FOO", "HEAD", "PATCH"):
        for path in ("/gpu-cloud/instances", "/gpu-cloud/volumes/offers", "/nope", "/",
                     "/gpu-cloud/instances/", "//gpu-cloud//volumes"):
            assert_sane(api.request(method, path))


def test_odd_keys(target: Sandbox) -> None:
    keys: list[Any] = [b"\xff\xfe", "k" * 8000, "", target.api_key.upper(),
                       target.api_key + "x", "é".encode("latin-1"), "😀".encode()]
    with httpx.Client(base_url=target.management_url, timeout=10) as client:
        for key in keys:
            response = client.get("/gpu-cloud/volumes", headers={"x-api-key": key})
            assert_sane(response)
            assert response.status_code == 403


def _raw(target: Sandbox, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", target.port), timeout=5) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_raw_http_garbage(target: Sandbox, api: httpx.Client) -> None:
    key = target.api_key.encode()
    payloads = [
        b"GARBAGE\r\n\r\n",
        b"GET /gpu-cloud/volumes HTTP/1.1\r\nHost: x\r\nx-api-key: \xff\xfe\r\n\r\n",
        b"GET /gpu-cloud/volumes HTTP/1.1\r\nHost: x\r\nx-api-key:    \r\n\r\n",
        b"GET /gpu-cloud/volumes HTTP/1.1\r\nHost: x\r\nx-api-key: a\r\nx-api-key: b\r\n\r\n",
        b"POST /gpu-cloud/volumes HTTP/1.1\r\nHost: x\r\nx-api-key: " + key
        + b"\r\nContent-Length: 100\r\n\r\n{\"na",
        b"POST /gpu-cloud/volumes HTTP/1.1\r\nHost: x\r\nx-api-key: " + key
        + b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"GET /gpu-cloud/instances/%ZZ HTTP/1.1\r\nHost: x\r\nx-api-key: " + key + b"\r\n\r\n",
        b"GET /gpu-cloud/instances/\xff\xfe HTTP/1.1\r\nHost: x\r\nx-api-key: " + key
        + b"\r\n\r\n",
        b"GET /gpu-cloud/instances/offers?numGpus=\xff HTTP/1.1\r\nHost: x\r\nx-api-key: " + key
        + b"\r\n\r\n",
    ]
    for payload in payloads:
        answer = _raw(target, payload)
        if answer:
            status = int(answer.split(b" ", 2)[1])
            assert status < 500, (payload[:60], answer[:200])
    # The server is still fine.
    assert api.get("/gpu-cloud/volumes").status_code == 200
