"""What a sandbox is told: :class:`SandboxConfig`, and the public default key and secret.

    >>> config = SandboxConfig(launch_seconds=1.0)
    >>> config.host, config.port, config.api_key
    ('127.0.0.1', 0, 'sandbox-key')

The default key and secret are public, documented values for keyless use, not secrets; a ``host``
beyond loopback is refused with either. Importing this module loads no web framework.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpucloud_nb._secrets import mask, mask_url

if TYPE_CHECKING:
    from gpucloud_nb.sandbox.faults import Faults

__all__ = ["DEFAULT_API_KEY", "DEFAULT_INFERENCE_SECRET", "SandboxConfig", "is_loopback"]

DEFAULT_API_KEY = "sandbox-key"
DEFAULT_INFERENCE_SECRET = "sandbox-secret"


@dataclass(frozen=True)
class SandboxConfig:
    """Everything a sandbox needs to know; ``repr`` masks the key and the secret.

    ``state`` is a SQLite file that keeps every resource across restarts (``None``: memory).
    ``launch_seconds`` is how long an instance stays pending, ``delete_seconds`` how long it stays
    deleting; ``latency`` seconds are added to every management request. ``offers`` and
    ``volume_offers`` replace the default catalogue (see
    :func:`gpucloud_nb.sandbox.catalogue.synthetic_offers`). The ``inference_*``,
    ``stream_tokens_per_second`` and ``upstream`` fields configure the inference endpoint.
    ``faults`` injects errors, 429s, slowness, dropped creates and unknown fields into the
    management API (see :mod:`gpucloud_nb.sandbox.faults`). ``home`` is the directory for the
    files the sandbox keeps besides its state (instance and volume directories, SSH keys, logs;
    see :mod:`gpucloud_nb.sandbox.home`); ``None`` means none is kept. ``allow_url_fetch`` lets
    the inference endpoint download ``http(s)`` image URLs (public addresses only); off, they are
    refused with a sentence saying to send a ``data:`` URL. ``keys`` are more management keys,
    each its own account, as the real cloud has several customers (tests of isolation use them),
    with its own inference secret (:meth:`inference_secret_for`) and rate-limit bucket. With
    ``keys``, instances refuse SSH unless ``shared_shell`` accepts that every account's shells run
    as this one OS user (see :mod:`gpucloud_nb.sandbox.ssh`). A class (a key per student, budgets,
    the teacher's view) is a gateway in front of the sandbox (``gpucloud-nb gateway --keys
    FILE``), not the sandbox's. ``bill_factor`` is how many hours are billed per real hour (1;
    more rehearses budgets quickly). A ``host`` beyond loopback is refused with the
    public default key or secret.
    """

    host: str = "127.0.0.1"
    port: int = 0
    api_key: str = DEFAULT_API_KEY
    inference_secret: str = DEFAULT_INFERENCE_SECRET
    state: str | os.PathLike[str] | None = None
    launch_seconds: float = 3.0
    delete_seconds: float = 1.0
    latency: float = 0.0
    inference_rate_limit: float | None = None
    stream_tokens_per_second: float = 50.0
    upstream: str | None = None
    offers: Sequence[Mapping[str, Any]] | None = field(default=None, compare=False)
    volume_offers: Sequence[Mapping[str, Any]] | None = field(default=None, compare=False)
    faults: Faults | None = None
    home: str | os.PathLike[str] | None = None
    allow_url_fetch: bool = False
    keys: tuple[str, ...] = ()
    shared_shell: bool = False
    bill_factor: float = 1.0
    #: How long a request to an inference instance scaled to zero waits for its container.
    cold_start_seconds: float = 3.0

    def __post_init__(self) -> None:
        if not isinstance(self.api_key, str) or not self.api_key:
            raise ValueError("api_key must be a non-empty string.")
        if not isinstance(self.inference_secret, str) or not self.inference_secret:
            raise ValueError("inference_secret must be a non-empty string.")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be between 0 and 65535.")
        for name in ("launch_seconds", "delete_seconds", "latency", "cold_start_seconds"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be a number of seconds, zero or more.")
        if self.inference_rate_limit is not None and not self.inference_rate_limit > 0:
            raise ValueError("inference_rate_limit must be a positive number of requests/second.")
        if not self.stream_tokens_per_second > 0:
            raise ValueError("stream_tokens_per_second must be positive.")
        if not all(isinstance(key, str) and key for key in self.keys):
            raise ValueError("keys must be non-empty strings.")
        if not self.bill_factor > 0 or self.bill_factor == float("inf"):
            raise ValueError("bill_factor must be a positive number of billed hours per hour.")
        if not is_loopback(self.host) and (
                DEFAULT_API_KEY in self.account_keys
                or self.inference_secret == DEFAULT_INFERENCE_SECRET):
            raise ValueError(
                f"Refusing to serve on {self.host}, beyond loopback, with the public default key "
                "or secret: set GPUCLOUD_SANDBOX_API_KEY (or --api-key-file) and "
                "GPUCLOUD_SANDBOX_INFERENCE_SECRET (or --inference-secret-file).")
        if self.upstream is not None:
            from gpucloud_nb.sandbox.inference.upstream import upstream_base

            upstream_base(self.upstream)  # a bad URL is one line now, its password masked

    @property
    def account_keys(self) -> tuple[str, ...]:
        """Every key that is an account: ``api_key``, then ``keys``."""
        return (self.api_key, *self.keys)

    def inference_secret_for(self, api_key: str) -> str:
        """The inference secret of the account of ``api_key``.

        The first account's is ``inference_secret``; each other account's (``keys``) is derived
        from it and the account's key, so it is stable across restarts and differs per account.

            >>> config = SandboxConfig(api_key="teacher", keys=("student-a", "student-b"))
            >>> config.inference_secret_for("teacher") == config.inference_secret
            True
            >>> len({config.inference_secret_for(k) for k in ("teacher", "student-a", "student-b")})
            3
        """
        if api_key == self.api_key:
            return self.inference_secret
        digest = hmac.new(self.inference_secret.encode(), f"gpucloud-nb account {api_key}".encode(),
                          hashlib.sha256).hexdigest()
        return f"sandbox-{digest[:32]}"

    def __repr__(self) -> str:
        custom = " offers=custom" if self.offers is not None else ""
        if self.faults is not None:
            custom += f" faults={str(self.faults)!r}"
        return (
            f"SandboxConfig(host={self.host!r}, port={self.port}, api_key={mask(self.api_key)!r}, "
            f"inference_secret={mask(self.inference_secret)!r}, state={self.state!r}, "
            f"launch_seconds={self.launch_seconds}, delete_seconds={self.delete_seconds}, "
            f"latency={self.latency}, upstream={mask_url(self.upstream or '') or None!r}{custom})"
        )


def is_loopback(host: str) -> bool:
    """True when ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1); no DNS."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
