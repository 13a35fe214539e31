"""Run the sandbox cloud over real HTTP: in a background thread, or in the foreground for the CLI.

    >>> from gpucloud_nb.sandbox import Sandbox
    >>> with Sandbox(launch_seconds=1.0) as sandbox:  # doctest: +SKIP
    ...     httpx.get(f"{sandbox.management_url}/gpu-cloud/volumes",
    ...               headers={"x-api-key": sandbox.api_key}).status_code
    200

``Sandbox`` serves on a free loopback port by default (``port=0``). ``management_url`` is the
spec's ``{base_url}`` (clients append ``/gpu-cloud/...``); ``inference_url`` is the base of the
inference endpoint, before ``/v1``. The default key and secret are public, documented values for
keyless use, not secrets. Importing this module is cheap: Starlette and uvicorn load on start.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, cast

from gpucloud_nb._secrets import mask, mask_url

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

    from gpucloud_nb.sandbox.faults import Faults

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_INFERENCE_SECRET",
    "Sandbox",
    "SandboxConfig",
    "is_loopback",
    "serve",
    "url_host",
]

DEFAULT_API_KEY = "sandbox-key"
DEFAULT_INFERENCE_SECRET = "sandbox-secret"
_START_TIMEOUT = 15.0


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
    each its own account (``--keys FILE``) with its own inference secret
    (:meth:`inference_secret_for`) and rate-limit bucket. With ``keys``, instances refuse SSH
    unless ``shared_shell`` (``--shared-shell``) accepts that every account's shells run as this
    one OS user (see :mod:`gpucloud_nb.sandbox.ssh`). A ``host`` beyond loopback is refused with
    the public default key or secret.
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

    def __post_init__(self) -> None:
        if not isinstance(self.api_key, str) or not self.api_key:
            raise ValueError("api_key must be a non-empty string.")
        if not isinstance(self.inference_secret, str) or not self.inference_secret:
            raise ValueError("inference_secret must be a non-empty string.")
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be between 0 and 65535.")
        for name in ("launch_seconds", "delete_seconds", "latency"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be a number of seconds, zero or more.")
        if self.inference_rate_limit is not None and not self.inference_rate_limit > 0:
            raise ValueError("inference_rate_limit must be a positive number of requests/second.")
        if not self.stream_tokens_per_second > 0:
            raise ValueError("stream_tokens_per_second must be positive.")
        if not all(isinstance(key, str) and key for key in self.keys):
            raise ValueError("keys must be non-empty strings.")
        if not is_loopback(self.host) and (
                DEFAULT_API_KEY in (self.api_key, *self.keys)
                or self.inference_secret == DEFAULT_INFERENCE_SECRET):
            raise ValueError(
                f"Refusing to serve on {self.host}, beyond loopback, with the public default key "
                "or secret: give --api-key or --keys, and --inference-secret.")
        if self.upstream is not None:
            from gpucloud_nb.sandbox.inference.upstream import upstream_base

            upstream_base(self.upstream)  # a bad URL is one line now, its password masked

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
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """The host part of a URL that reaches a server bound to ``host`` from this machine."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP lets asyncio set TCP_NODELAY on accepted connections (else +40 ms each).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # accept into the backlog at once; uvicorn serves it when it starts
    except BaseException:
        sock.close()
        raise
    return sock


def _server(config: SandboxConfig, sock: socket.socket, **options: Any) -> uvicorn.Server:
    import uvicorn

    from gpucloud_nb.sandbox.app import create_app

    app = create_app(config)
    uvicorn_config = uvicorn.Config(
        app,
        host=config.host,
        port=sock.getsockname()[1],
        lifespan="on",  # the app's background tasks (timers, SSH servers) run in its lifespan
        timeout_graceful_shutdown=2,
        **options,
    )
    return uvicorn.Server(uvicorn_config)


def _close_app(server: uvicorn.Server) -> None:
    app = server.config.app
    store = getattr(getattr(app, "state", None), "store", None)
    if store is not None:
        store.close()


class Sandbox:
    """The sandbox cloud served by uvicorn in a daemon thread.

    Keyword arguments build a :class:`SandboxConfig`; pass ``config=`` to reuse one. ``start()``
    returns once the server accepts connections; ``stop()`` shuts it down and closes its state.
    """

    def __init__(self, config: SandboxConfig | None = None, **options: Any) -> None:
        if config is None:
            config = SandboxConfig(**options)
        elif options:
            config = dataclasses.replace(config, **options)
        self.config = config
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._socket: socket.socket | None = None

    @property
    def api_key(self) -> str:
        """The management key that requests must send in ``x-api-key``."""
        return self.config.api_key

    @property
    def inference_secret(self) -> str:
        """The secret that inference requests must send in ``x-api-key``."""
        return self.config.inference_secret

    @property
    def launch_seconds(self) -> float:
        """How long a new instance stays ``pending`` before it is ``active``."""
        return self.config.launch_seconds

    @property
    def port(self) -> int:
        """The port the server listens on (known once started)."""
        if self._port is None:
            raise RuntimeError("The sandbox is not started; call start() first.")
        return self._port

    @property
    def management_url(self) -> str:
        """The spec's ``{base_url}``, e.g. ``http://127.0.0.1:8765``."""
        return f"http://{url_host(self.config.host)}:{self.port}"

    @property
    def inference_url(self) -> str:
        """The base of the inference endpoint, before ``/v1``."""
        return f"{self.management_url}/inference"

    @property
    def home(self) -> Path:
        """The directory of the sandbox's files: SSH host keys and registered client keys.

        A temporary directory (removed on ``stop()``) unless ``config.home`` names one. Instance
        homes and volumes live beside it, never in it (see :mod:`gpucloud_nb.sandbox.ssh`). The
        package's SSH client keeps its key pair and ``known_hosts`` in ``home / "client"``.
        """
        if self._server is None:
            raise RuntimeError("The sandbox is not started; call start() first.")
        app = cast("Starlette", self._server.config.app)
        return app.state.ssh.home

    @property
    def running(self) -> bool:
        """True while the server thread is serving."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Sandbox:
        """Start serving in a daemon thread; return once connections are accepted."""
        if self.running:
            return self
        sock = _bind(self.config.host, self.config.port)
        try:
            server = _server(self.config, sock, log_config=None, log_level="warning",
                             access_log=False)
        except BaseException:
            sock.close()
            raise
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                  name="gpucloud-nb-sandbox", daemon=True)
        thread.start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                thread.join(5)
                sock.close()
                _close_app(server)
                raise RuntimeError("The sandbox server did not start.")
            time.sleep(0.005)
        self._server, self._thread = server, thread
        self._port = sock.getsockname()[1]
        self._socket = sock
        return self

    def stop(self) -> None:
        """Stop serving and close the state database. Safe to call twice."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(5)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        if self._socket is not None:
            self._socket.close()
        _close_app(server)
        self._server = self._thread = self._socket = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.management_url if self._port is not None else "not started"
        return (f"Sandbox({where}, api_key={mask(self.api_key)!r}, "
                f"inference_secret={mask(self.inference_secret)!r}, running={self.running})")


class _Stop(Exception):
    """Raised by SIGTERM so the foreground server unwinds like on Ctrl-C."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def serve(config: SandboxConfig,
          ready: Callable[[str, str], None] | None = None,
          *, log_level: str = "info") -> None:
    """Serve in the calling (main) thread until Ctrl-C or SIGTERM, then return.

    ``ready(management_url, inference_url)`` is called once the port is bound and listening,
    before serving starts. Raises :class:`OSError` when the address cannot be bound.
    """
    sock = _bind(config.host, config.port)
    base = f"http://{url_host(config.host)}:{sock.getsockname()[1]}"
    previous = signal.getsignal(signal.SIGTERM)
    in_main = threading.current_thread() is threading.main_thread()
    server = None
    try:
        if in_main:
            signal.signal(signal.SIGTERM, _raise_stop)
        server = _server(config, sock, log_level=log_level)
        if ready is not None:
            ready(base, f"{base}/inference")
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        sock.close()
        if server is not None:
            _close_app(server)
