"""Use a GPU rental cloud from a notebook.

    >>> from gpucloud_nb import connect
    >>> cloud = connect()  # the sandbox, unless GPUCLOUD_API_KEY is set  # doctest: +SKIP
    >>> cloud.instances.offers_frame(available=True).head()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from gpucloud_nb._connect import connect
from gpucloud_nb._notebook import can_prompt, install_error_display
from gpucloud_nb.client import AsyncGPUCloud, AsyncInferenceClient, GPUCloud, InferenceClient
from gpucloud_nb.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConnectionFailedError,
    FileTooLargeError,
    GPUCloudError,
    InstanceFailedError,
    InvalidInputError,
    KernelStartError,
    KeysRefusedError,
    NotFoundError,
    OutcomeUnknownError,
    RateLimitError,
    RedirectError,
    RemoteCommandError,
    RemoteTimeoutError,
    RequestInfo,
    ServerError,
    UnreadableResponseError,
    UnsupportedFileTypeError,
    WaitStopped,
    WaitTimeoutError,
)

__version__ = "0.1.0"

__all__ = [
    "APIError",
    "AsyncGPUCloud",
    "AsyncInferenceClient",
    "AuthenticationError",
    "BadRequestError",
    "ConnectionFailedError",
    "FileTooLargeError",
    "GPUCloud",
    "GPUCloudError",
    "InferenceClient",
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
    "__version__",
    "can_prompt",
    "connect",
    "load_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext gpucloud_nb``: register the ``%gpucloud`` magics and show this package's
    errors as one sentence (see :mod:`gpucloud_nb._notebook`)."""
    from gpucloud_nb.magics import load_ipython_extension as load

    install_error_display(ipython)
    load(ipython)
