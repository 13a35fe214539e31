"""Operations written once, run by a sync or an async driver.

An operation is a generator that yields :class:`Call` (one HTTP request) and :class:`Sleep`
steps and returns its result. The driver performs each step — with ``httpx.Client`` and
``time.sleep``, or ``httpx.AsyncClient`` and ``asyncio.sleep`` — and sends back the
``httpx.Response`` or throws the transport error into the generator. Retries, error mapping, the
no-double-create rule and polling are therefore written once for both clients.

    >>> def get_volume(id):
    ...     data = yield from send(Call("GET", f"/gpu-cloud/volumes/{id}"), policy)
    ...     return Volume.from_json(data)
    >>> SyncDriver(httpx.Client(...)).run(get_volume("vol-1"))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import httpx

from gpucloud_nb import errors
from gpucloud_nb._secrets import mask_url, scrub

__all__ = [
    "AsyncDriver",
    "Call",
    "Op",
    "RetryPolicy",
    "Sleep",
    "SyncDriver",
    "error_from_response",
    "send",
]

T = TypeVar("T")

Flavor = Literal["management", "inference"]


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request; ``what`` names the resource for 404 sentences ("Volume vol-1").

    A successful answer is its parsed JSON, or with ``decode=False`` its body as bytes (for a
    reader that decodes it faster itself).
    """

    method: str
    path: str
    params: Mapping[str, str] | None = None
    json: Any = None
    data: Mapping[str, str] | None = None
    files: Mapping[str, Any] | None = None
    idempotent: bool = True
    what: str | None = None
    decode: bool = True


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause the operation for ``seconds``."""

    seconds: float


Op = Generator[Call | Sleep, Any, T]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How reads and deletes are retried on 429, 5xx and connection errors.

    Backoff is capped exponential with full jitter: attempt ``n`` waits a random time up to
    ``min(max_backoff, backoff * 2**n)``. A ``Retry-After`` header is honoured, up to
    ``max_retry_after`` seconds.

        >>> GPUCloud(max_retries=5)   # builds RetryPolicy(max_retries=5)  # doctest: +SKIP
    """

    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return self.rng.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms`` (OpenAI style) or ``Retry-After``."""
    try:
        return max(0.0, float(response.headers["retry-after-ms"]) / 1000)
    except (KeyError, ValueError):
        pass
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    if text and text[-1] not in ".!?":
        text += "."
    return text[:1].upper() + text[1:]


def _redirect_message(response: httpx.Response, flavor: Flavor) -> str:
    """One sentence for a 3xx: where it points, and the base URL to use instead when it shows.

    Redirects are not followed: the location is named so the user can fix the base URL.
    """
    status = response.status_code
    base = "endpoint URL" if flavor == "inference" else "base URL"
    location = response.headers.get("location", "").strip()
    if not location:
        return f"The server answered {status} (a redirect) without a Location; check the {base}."
    try:
        request_url = response.request.url
    except RuntimeError:  # a response built without a request
        request_url = None
    if request_url is not None:
        with contextlib.suppress(httpx.InvalidURL, ValueError):
            location = str(request_url.join(location))
        path = request_url.path
        target = location.split("?", 1)[0].split("#", 1)[0]
        if path and path != "/" and target.endswith(path) and len(target) > len(path):
            new_base = mask_url(target[: -len(path)])
            return f"The {base} redirects to {new_base}; use that."
    return f"The server redirects ({status}) to {mask_url(location)}; check the {base}."


def _scrubbed(value: Any, secrets: tuple[str | None, ...]) -> Any:
    """``value`` (parsed JSON or text) with every secret in its strings masked."""
    if isinstance(value, str):
        return scrub(value, *secrets)
    if isinstance(value, list):
        return [_scrubbed(item, secrets) for item in value]
    if isinstance(value, dict):
        return {scrub(str(key), *secrets): _scrubbed(item, secrets) for key, item in value.items()}
    return value


def request_info(response: httpx.Response, secrets: tuple[str | None, ...] = ()
                 ) -> errors.RequestInfo | None:
    """The method and URL ``response`` answered (secrets and user:password masked), if known."""
    try:
        request = response.request
    except RuntimeError:  # a response built without a request
        return None
    return errors.RequestInfo(request.method, scrub(str(request.url), *secrets))


_UPLOAD_TOO_LARGE = ("too large", "too big", "exceeds")
_UPLOAD_BAD_TYPE = ("unsupported", "not supported", "invalid file type", "invalid format")


FINAL_CODES = frozenset({"endpoint_stopped", "endpoint_failed"})
"""OpenAI error codes (``{"error": {"code": ...}}``) of an inference endpoint that will not answer
however often it is asked (stopped, or failed to deploy): raised at once, never retried, its
message the server's one sentence."""


def _final_code(body: Any) -> bool:
    inner = body.get("error") if isinstance(body, Mapping) else None
    return isinstance(inner, Mapping) and inner.get("code") in FINAL_CODES


def error_from_response(
    response: httpx.Response,
    *,
    flavor: Flavor = "management",
    what: str | None = None,
    secrets: tuple[str | None, ...] = (),
) -> errors.APIError:
    """Map an error response to the package's exception, with one readable sentence.

    The spec's error body ``{statusCode, timestamp, path, message}`` fills the fields; a body
    that is not JSON still gives a message from the status line.

        >>> error_from_response(httpx.Response(404, json={"message": "Not Found"}), what="Volume v1")
        NotFoundError(status_code=404, message='Volume v1 not found.')
    """
    status = response.status_code
    body: Any = None
    try:
        body = response.json()
    except ValueError:
        body = None
    server_message = ""
    path = timestamp = None
    if isinstance(body, Mapping):
        raw = body.get("message", body.get("error", body.get("detail")))
        if isinstance(raw, Mapping):  # OpenAI style: {"error": {"message": ...}}
            raw = raw.get("message")
        if isinstance(raw, list):
            raw = "; ".join(str(item) for item in raw)
        server_message = "" if raw is None else str(raw)
        path = body.get("path") if isinstance(body.get("path"), str) else None
        timestamp = body.get("timestamp") if isinstance(body.get("timestamp"), str) else None
    elif response.text.strip() and not response.text.lstrip().startswith("<"):
        server_message = response.text.strip()[:200]
    if path is None:
        try:
            path = response.request.url.path
        except RuntimeError:  # a response built without a request
            path = None
    retry_after = _retry_after(response)
    lowered = server_message.lower()

    if 300 <= status < 400:
        cls: type[errors.APIError] = errors.RedirectError
        message = _redirect_message(response, flavor)
    elif status in (401, 403):
        cls = errors.AuthenticationError
        if flavor == "inference":
            message = "The inference endpoint refused the secret (401); check the instance's secret."
        else:
            message = "The cloud refused the API key (403); check GPUCLOUD_API_KEY."
    elif status == 404:
        cls = errors.NotFoundError
        if what:
            message = f"{what} not found."
        else:
            message = _sentence(server_message) if server_message else "Not found (404)."
    elif status == 429:
        cls = errors.RateLimitError
        wait = f" Try again in {max(1, round(retry_after))} s." if retry_after is not None else ""
        message = "Too many requests (429)." + wait
    elif status >= 500:
        cls = errors.ServerError
        detail = f": {_sentence(server_message)}" if server_message else "."
        message = f"The server failed ({status}){detail}"
        if flavor == "inference" and server_message and _final_code(body):
            message = _sentence(server_message)  # "Inference instance chat is stopped; ..."
    else:
        cls = errors.BadRequestError
        if status == 413 or any(word in lowered for word in _UPLOAD_TOO_LARGE):
            cls = errors.FileTooLargeError
        elif status == 415 or any(word in lowered for word in _UPLOAD_BAD_TYPE):
            cls = errors.UnsupportedFileTypeError
        message = (_sentence(server_message) if server_message
                   else f"The request was refused ({status} {response.reason_phrase}).")
    if body is None and response.text:
        body = response.text
    return cls(
        scrub(message, *secrets),
        status_code=status,
        path=None if path is None else scrub(path, *secrets),
        timestamp=timestamp,
        retry_after=retry_after,
        body=_scrubbed(body, secrets),
        request=request_info(response, secrets),
    )


def _describe(exc: httpx.TransportError) -> str:
    kind = {
        httpx.ConnectError: "could not connect",
        httpx.ConnectTimeout: "timed out connecting",
        httpx.ReadTimeout: "timed out waiting for the answer",
        httpx.WriteTimeout: "timed out sending the request",
        httpx.PoolTimeout: "had no free connection in time",
        httpx.RemoteProtocolError: "dropped the connection",
        httpx.ReadError: "dropped the connection",
    }
    for cls, words in kind.items():
        if isinstance(exc, cls):
            return words
    return "failed to answer"


def _never_sent(exc: httpx.TransportError) -> bool:
    """True when the request certainly did not reach the server, so repeating it is safe."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


def send(
    call: Call,
    policy: RetryPolicy,
    *,
    flavor: Flavor = "management",
    secrets: tuple[str | None, ...] = (),
) -> Op[Any]:
    """Perform ``call`` with retries and return its decoded JSON body (``None`` for no body).

    Only a 2xx is a success: a 3xx raises :class:`~gpucloud_nb.errors.RedirectError` naming
    where it points (a redirect is not followed, and a 301 with no body is not a done delete).

    Idempotent calls retry on 429 (honouring ``Retry-After``), 5xx and connection errors, except
    an endpoint's answer that it is stopped or failed (:data:`FINAL_CODES`), raised at once. A call
    that is not idempotent (a create) retries only when the server surely did not act on it (a
    connection never made, a 429) and otherwise raises
    :class:`~gpucloud_nb.errors.OutcomeUnknownError`, so the caller can look for what the lost
    request may have made.
    """
    attempt = 0
    while True:
        try:
            response = yield call
        except httpx.TransportError as exc:
            reason = _describe(exc)
            if call.idempotent or _never_sent(exc):
                if attempt < policy.max_retries:
                    yield Sleep(policy.delay(attempt))
                    attempt += 1
                    continue
                raise errors.ConnectionFailedError(
                    f"The server {reason} ({call.method} {call.path}), "
                    f"after {attempt + 1} attempt{'s' if attempt else ''}."
                ) from None
            raise errors.OutcomeUnknownError(f"The server {reason} ({call.method} {call.path}).") from None

        if response.status_code < 300:
            if response.status_code == 204 or not response.content:
                return None
            if not call.decode:
                return response.content
            try:
                return response.json()
            except ValueError:
                raise errors.UnreadableResponseError(
                    f"The server sent a body that is not JSON ({call.method} {call.path}).",
                    request=request_info(response, secrets),
                ) from None

        error = error_from_response(response, flavor=flavor, what=call.what, secrets=secrets)
        if _final_code(error.body):
            raise error  # a stopped or failed endpoint: asking again changes nothing
        retryable = response.status_code == 429 or response.status_code >= 500
        if retryable and not call.idempotent and response.status_code != 429:
            raise errors.OutcomeUnknownError(error.message, last_status=response.status_code)
        if retryable and attempt < policy.max_retries:
            yield Sleep(policy.delay(attempt, error.retry_after))
            attempt += 1
            continue
        if retryable and attempt:
            error.message = f"{error.message} Gave up after {attempt + 1} attempts."
            error.args = (error.message,)
        raise error


class _Drive(Generic[T]):
    """One operation being driven: what it asks for next, and the answers fed back to it.

    The sync and async drivers differ only in how they sleep and send; stepping the generator,
    and turning a transport failure into the exception the operation sees, live here once.
    """

    __slots__ = ("_error", "_op", "_value", "result")

    def __init__(self, op: Op[T]) -> None:
        self._op = op
        self._value: Any = None
        self._error: BaseException | None = None

    def next(self) -> Call | Sleep | None:
        """The operation's next step, or ``None`` once it has returned (see :attr:`result`)."""
        try:
            step = self._op.send(self._value) if self._error is None else \
                self._op.throw(self._error)
        except StopIteration as stop:
            self.result: T = stop.value
            return None
        self._value, self._error = None, None
        return step

    def answer(self, value: Any) -> None:
        """What the last step gave (a response, or ``None`` after a sleep)."""
        self._value = value

    def fail(self, error: BaseException) -> None:
        """The last request failed in transport; the operation decides whether to retry."""
        self._error = error


def _request_args(call: Call) -> dict[str, Any]:
    return {"method": call.method, "url": call.path, "params": call.params or None,
            "json": call.json, "data": call.data, "files": call.files}


class SyncDriver:
    """Runs operations with an ``httpx.Client`` and ``time.sleep``."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def run(self, op: Op[T]) -> T:
        drive = _Drive(op)
        while (step := drive.next()) is not None:
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                continue
            try:
                drive.answer(self.http.request(**_request_args(step)))
            except httpx.TransportError as exc:
                drive.fail(exc)
        return drive.result


class AsyncDriver:
    """Runs operations with an ``httpx.AsyncClient`` and ``asyncio.sleep``."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def run(self, op: Op[T]) -> T:
        drive = _Drive(op)
        while (step := drive.next()) is not None:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                continue
            try:
                drive.answer(await self.http.request(**_request_args(step)))
            except httpx.TransportError as exc:
                drive.fail(exc)
        return drive.result
