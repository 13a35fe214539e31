"""What every sandbox endpoint answers with: JSON bodies, one :class:`Problem`, request bodies.

    >>> problem = Problem(404, "Instance i-1 not found.")
    >>> problem.spec_response("/gpu-cloud/instances/i-1").status_code
    404
    >>> json.loads(problem.openai_response().body)["error"]["type"]
    'invalid_request_error'

A :class:`Problem` is one error: a status and one sentence (plus, for the inference endpoint,
OpenAI's ``type``, ``code`` and ``param``, and any headers). Whoever answers it picks the body:
the management API and the sandbox-only endpoints the spec's ``{statusCode, timestamp, path,
message}`` (:meth:`Problem.spec_response`), the inference endpoint OpenAI's ``{"error":
{"message", "type", "param", "code"}}`` (:meth:`Problem.openai_response`). JSON is compact UTF-8
and never ``NaN`` or ``Infinity``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gpucloud_nb.sandbox.guards import json_object
from gpucloud_nb.sandbox.lifecycle import iso

__all__ = ["MAX_BODY_BYTES", "Handler", "Problem", "dumps", "json_response", "now_ms",
           "read_json_object", "spec_error"]

MAX_BODY_BYTES = 1_000_000
"""The largest management request body (1 MB)."""

Handler = Callable[[Request], Awaitable[Response]]
"""An endpoint: a request in, a response out."""


def now_ms() -> int:
    """The time now, in milliseconds since the epoch (as stored and compared)."""
    return time.time_ns() // 1_000_000


def dumps(data: Any) -> bytes:
    """``data`` as compact UTF-8 JSON; ``NaN`` and ``Infinity`` raise :class:`ValueError`.

        >>> dumps({"name": "café", "gpus": [1, 2]})
        b'{"name":"caf\\xc3\\xa9","gpus":[1,2]}'
    """
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def json_response(data: Any, status: int = 200,
                  headers: Mapping[str, str] | None = None) -> Response:
    """``data`` as an ``application/json`` response."""
    return Response(dumps(data), status_code=status, media_type="application/json",
                    headers=headers)


def spec_error(status: int, message: str, path: str,
               headers: Mapping[str, str] | None = None) -> Response:
    """The spec's error body ``{statusCode, timestamp, path, message}``."""
    body = {"statusCode": status, "timestamp": iso(now_ms()), "path": path, "message": message}
    return json_response(body, status, headers)


class Problem(Exception):
    """An error answer: a status and one sentence; the app that answers picks the body's shape.

    ``type``, ``code`` and ``param`` appear only in OpenAI's shape; ``headers`` go with either.

        >>> Problem(429, "Slow down.", code="rate_limit_exceeded", headers={"Retry-After": "1"}).code
        'rate_limit_exceeded'
    """

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.code, self.param, self.headers = code, param, dict(headers or {})

    def spec_response(self, path: str) -> Response:
        """The answer in the spec's shape (the management API, ``/sandbox/...``)."""
        return spec_error(self.status, self.message, path, self.headers)

    def openai_response(self) -> Response:
        """The answer in OpenAI's shape (the inference endpoint)."""
        body = {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}
        return json_response(body, self.status, self.headers)


# -- request bodies ---------------------------------------------------------------------------


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _valid_text(value: Any) -> bool:
    """True when every string (and key) in a parsed JSON value is encodable as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, or a 400/413 :class:`Problem`; no content type needed.

    Numbers must be finite, text valid Unicode, the body at most :data:`MAX_BODY_BYTES`.
    """
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise Problem(413, "The request body is larger than 1 MB.")
            chunks.append(chunk)
    except ClientDisconnect:
        raise Problem(400, "The request body was not received completely.") from None
    raw = b"".join(chunks)
    if not raw.strip():
        raise Problem(400, "The request body must be a JSON object.")
    try:
        body = json_object(raw, parse_float=_finite_float, parse_constant=_no_constant)
    except ValueError as problem:
        raise Problem(400, str(problem)) from None
    if not _valid_text(body):
        raise Problem(400, "The request body contains text that is not valid Unicode.")
    return body
