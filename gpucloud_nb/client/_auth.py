"""The ``x-api-key`` header, and where keys and base URLs come from."""

from __future__ import annotations

import os
from collections.abc import Generator

import httpx

from gpucloud_nb._secrets import Secret, mask_url
from gpucloud_nb.errors import InvalidInputError

__all__ = ["ApiKeyAuth", "settings"]


class ApiKeyAuth(httpx.Auth):
    """Adds ``x-api-key`` to each request, so the key never sits in the client's headers.

        >>> httpx.Client(auth=ApiKeyAuth(Secret("sk-...")))  # doctest: +SKIP
    """

    def __init__(self, key: Secret) -> None:
        self._key = key

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["x-api-key"] = self._key.reveal()
        yield request


def settings(api_key: str | None, base_url: str | None) -> tuple[Secret, str]:
    """Resolve the management key and base URL from arguments or the environment.

    A user name and password in the URL (``http://user:pass@host``) are not sent (the key
    authenticates); reprs and messages show the URL as ``http://***@host``.

        >>> settings(None, None)     # GPUCLOUD_API_KEY and GPUCLOUD_BASE_URL  # doctest: +SKIP
    """
    key = api_key or os.environ.get("GPUCLOUD_API_KEY")
    url = base_url or os.environ.get("GPUCLOUD_BASE_URL")
    if not key:
        raise InvalidInputError(
            "No API key: pass api_key= or set GPUCLOUD_API_KEY, or call connect() for the "
            "keyless sandbox."
        )
    if not url:
        raise InvalidInputError("No base URL: pass base_url= or set GPUCLOUD_BASE_URL.")
    if not url.startswith(("http://", "https://")):
        raise InvalidInputError(
            f"The base URL must start with http:// or https://, not {mask_url(url)!r}.")
    return Secret(key), url.rstrip("/")
