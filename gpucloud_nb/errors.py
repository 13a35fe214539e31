"""One exception hierarchy for every failure a user can meet.

    GPUCloudError                    base of everything below; str() is one plain sentence
    ├── InvalidInputError (ValueError)   refused before sending: nothing reached the cloud
    ├── APIError                     the server answered with an error status
    │   ├── BadRequestError          another 4xx, such as a 400 validation failure
    │   │   ├── FileTooLargeError        an upload refused as too large
    │   │   └── UnsupportedFileTypeError an upload refused for its file type
    │   ├── AuthenticationError      403 (management) or 401 (inference): the key or secret
    │   ├── NotFoundError            404: no such instance, volume or model
    │   ├── RateLimitError           429, with retry_after
    │   ├── RedirectError            3xx: never followed; the message names the Location
    │   └── ServerError              5xx
    ├── UnreadableResponseError      a success whose body is not what the spec says (not JSON…)
    ├── ConnectionFailedError        no answer: unreachable or dropped
    │   ├── OutcomeUnknownError      a create may or may not have reached the server
    │   └── KeysRefusedError         an instance refused every SSH key the client offered
    ├── RemoteCommandError           a command on an instance could not run (not found, refused)
    │   └── RemoteTimeoutError (TimeoutError)  it ran past its timeout and was stopped
    ├── KernelStartError             a notebook kernel could not start on an instance
    ├── WaitTimeoutError (TimeoutError)  a wait ran out of time
    ├── WaitStopped                  the user stopped waiting (the cloud keeps going)
    └── InstanceFailedError          an instance being waited on failed or went away

Every HTTP failure carries the fields of the spec's error body (``statusCode``, ``message``,
``path``, ``timestamp``) as ``status_code``, ``message``, ``path`` and ``timestamp``, the body
itself as ``body`` (parsed JSON, else text; secrets masked) and the request as ``request``
(method and URL, never the key header), so an error can be debugged without a proxy, as with
httpx's ``HTTPStatusError.response`` or openai's ``.body``. ``str(error)`` is one plain sentence,
fit to show in a notebook; it never contains an API key or secret.

    >>> try:  # doctest: +SKIP
    ...     cloud.volumes.get("vol-123")
    ... except NotFoundError as error:
    ...     print(error)
    Volume vol-123 not found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "APIError",
    "AuthenticationError",
    "BadRequestError",
    "ConnectionFailedError",
    "FileTooLargeError",
    "GPUCloudError",
    "InstanceFailedError",
    "InvalidInputError",
    "KernelStartError",
    "KeysRefusedError",
    "NotFoundError",
    "OutcomeUnknownError",
    "RateLimitError",
    "RedirectError",
    "RemoteCommandError",
    "RemoteTimeoutError",
    "RequestInfo",
    "ServerError",
    "UnreadableResponseError",
    "UnsupportedFileTypeError",
    "WaitStopped",
    "WaitTimeoutError",
]


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """The request an :class:`APIError` answered: its method and URL, and nothing else (no
    headers, so never the key; a user:password in the URL is masked).

        >>> error.request  # doctest: +SKIP
        RequestInfo(method='GET', url='http://127.0.0.1:8000/gpu-cloud/volumes/vol-123')
    """

    method: str
    url: str


class GPUCloudError(Exception):
    """Base class of every error raised by gpucloud_nb."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInputError(GPUCloudError, ValueError):
    """Refused before sending: the request would break a rule of the spec or of the chosen offer.

        >>> cloud.volumes.create(  # doctest: +SKIP
        ...     name="data", cloud_provider="p1", region="eu", size_in_gb=1)
        InvalidInputError: A volume from p1 must be at least 50 GB; 1 GB was asked for.
    """


class APIError(GPUCloudError):
    """The server answered with an error status.

    ``status_code``, ``path`` and ``timestamp`` come from the spec's error body when the server
    sent one; a body that is not JSON still gives a readable ``message``. ``body`` is the answer
    itself (parsed JSON, else its text; secrets masked) and ``request`` the method and URL asked.

        >>> try:  # doctest: +SKIP
        ...     cloud.volumes.get("vol-123")
        ... except APIError as error:
        ...     print(error.status_code, error.request.method, error.body["message"])
        404 GET Volume vol-123 not found
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        path: str | None = None,
        timestamp: str | None = None,
        retry_after: float | None = None,
        body: Any = None,
        request: RequestInfo | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.path = path
        self.timestamp = timestamp
        self.retry_after = retry_after
        self.body = body
        self.request = request

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status_code={self.status_code}, message={self.message!r})"


class BadRequestError(APIError):
    """A 4xx the other classes do not cover, such as a 400 validation failure."""


class RedirectError(APIError):
    """The server answered with a redirect (3xx): nothing was done, the URL is probably wrong.

    Redirects are never followed (a redirect could carry the key to another host); the message
    names the ``Location``, with any user:password in it masked.
    """


class AuthenticationError(APIError):
    """The key was refused: 403 on the management API, 401 on an inference endpoint."""


class NotFoundError(APIError):
    """404: the instance, volume or model does not exist."""


class RateLimitError(APIError):
    """429: too many requests; ``retry_after`` holds the server's hint in seconds, if any."""


class ServerError(APIError):
    """5xx: the server failed."""


class FileTooLargeError(BadRequestError):
    """The server refused an upload as too large."""


class UnsupportedFileTypeError(BadRequestError):
    """The server refused an upload's file type."""


class UnreadableResponseError(GPUCloudError):
    """The server answered with success, but its body is not what the spec says (not JSON, or
    not a list where one belongs); ``request`` is the method and URL asked, if known.

        >>> cloud.instances.offers()  # doctest: +SKIP
        UnreadableResponseError: The server's answer to GET /gpu-cloud/instances/offers was …
    """

    def __init__(self, message: str, *, request: RequestInfo | None = None) -> None:
        super().__init__(message)
        self.request = request


class ConnectionFailedError(GPUCloudError):
    """No answer from the server: it could not be reached, or the connection dropped."""


class OutcomeUnknownError(ConnectionFailedError):
    """A request that is not safe to repeat (a create) may or may not have reached the server.

    ``create`` handles it itself (it looks for what the request made before trying again); it
    reaches the user only from the sans-IO layer. ``last_status`` is the 5xx seen, if any.
    """

    def __init__(self, message: str, last_status: int | None = None) -> None:
        super().__init__(message)
        self.last_status = last_status


class KeysRefusedError(ConnectionFailedError):
    """The instance refused every SSH key the client offered (the sentence names them)."""


class RemoteCommandError(GPUCloudError):
    """A command on an instance could not run (not found, exit status 127) or was refused.

        >>> cloud.instances.run(instance.id, "no-such-tool")  # doctest: +SKIP
        RemoteCommandError: 'no-such-tool' was not found on instance ins-1 (exit status 127).
    """


class RemoteTimeoutError(RemoteCommandError, TimeoutError):
    """A remote command ran past its ``timeout``: it was stopped (SIGINT, then the channel closed)."""


class KernelStartError(GPUCloudError):
    """A notebook kernel could not start on an instance (no python3, no ipykernel, it exited).

        >>> KernelManager(kernel_name="gpucloud-train-1").start_kernel()  # doctest: +SKIP
        KernelStartError: Instance train-1 (ins-1) has no working python3, so it cannot run a …
    """


class WaitStopped(GPUCloudError):
    """The user stopped waiting for something that keeps going on the cloud (an instance launch)."""


class WaitTimeoutError(GPUCloudError, TimeoutError):
    """A wait ran out of time, such as ``wait_until_active``."""


class InstanceFailedError(GPUCloudError):
    """An instance being waited on reached ``error``, ``deleting`` or ``deleted``."""
