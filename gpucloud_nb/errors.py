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
    ├── ConnectionFailedError        no answer: unreachable, dropped, or unreadable
    ├── WaitTimeoutError (TimeoutError)  a wait ran out of time
    └── InstanceFailedError          an instance being waited on failed or went away

Every HTTP failure carries the fields of the spec's error body (``statusCode``, ``message``,
``path``, ``timestamp``) as ``status_code``, ``message``, ``path`` and ``timestamp``. ``str(error)``
is one plain sentence, fit to show in a notebook; it never contains an API key or secret.

    >>> try:  # doctest: +SKIP
    ...     cloud.volumes.get("vol-123")
    ... except NotFoundError as error:
    ...     print(error)
    Volume vol-123 not found.
"""

from __future__ import annotations

__all__ = [
    "APIError",
    "AuthenticationError",
    "BadRequestError",
    "ConnectionFailedError",
    "FileTooLargeError",
    "GPUCloudError",
    "InstanceFailedError",
    "InvalidInputError",
    "NotFoundError",
    "RateLimitError",
    "RedirectError",
    "ServerError",
    "UnsupportedFileTypeError",
    "WaitTimeoutError",
]


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
    sent one; a body that is not JSON still gives a readable ``message``.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        path: str | None = None,
        timestamp: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.path = path
        self.timestamp = timestamp
        self.retry_after = retry_after

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


class ConnectionFailedError(GPUCloudError):
    """No answer from the server: it could not be reached, or the connection dropped."""


class WaitTimeoutError(GPUCloudError, TimeoutError):
    """A wait ran out of time, such as ``wait_until_active``."""


class InstanceFailedError(GPUCloudError):
    """An instance being waited on reached ``error``, ``deleting`` or ``deleted``."""
