"""Run the sandbox cloud over real HTTP: in a background thread, or in the foreground for the CLI.

    >>> from gpucloud_nb.sandbox import Sandbox
    >>> with Sandbox(launch_seconds=1.0) as sandbox:  # doctest: +SKIP
    ...     httpx.get(f"{sandbox.management_url}/gpu-cloud/volumes",
    ...               headers={"x-api-key": sandbox.api_key}).status_code
    200

``Sandbox`` serves on a free loopback port by default (``port=0``). ``management_url`` is the
spec's ``{base_url}`` (clients append ``/gpu-cloud/...``); ``inference_url`` is the base of the
inference endpoint, before ``/v1``. What a sandbox is told is a
:class:`~gpucloud_nb.sandbox.config.SandboxConfig`. Importing this module is cheap: Starlette and
uvicorn load on start.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, cast

from gpucloud_nb._secrets import mask
from gpucloud_nb.errors import ConnectionFailedError
from gpucloud_nb.sandbox import service
from gpucloud_nb.sandbox.config import SandboxConfig

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

__all__ = ["Sandbox", "SandboxConfig", "serve", "serve_home", "url_host"]

_START_TIMEOUT = 15.0


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


def serve_home(config: SandboxConfig, home: Path,
               ready: Callable[[str, str], None] | None = None) -> None:
    """Serve ``config`` in the foreground as the service of ``home``, until SIGTERM or Ctrl-C.

    Holds ``service.lock`` while serving (refusing with :class:`ConnectionFailedError` when
    another service has it), reuses the remembered port when ``config.port`` is 0 and that port
    is free, writes the runtime file once listening and removes it on the way out (the home's
    files are :mod:`gpucloud_nb.sandbox.service`'s).
    """
    lock = service.service_lock(home)
    if lock is None:
        running = service.read_runtime(home)
        where = f" (pid {running.pid}, {running.management_url})" if running else ""
        raise ConnectionFailedError(f"A sandbox service already runs in {home}{where}; "
                                    "`gpucloud-nb sandbox stop` stops it.")
    try:  # the pid file: how `stop` finds this service when its runtime file cannot be read
        lock.truncate(0)
        lock.write(str(os.getpid()).encode("ascii"))
        lock.flush()
    except OSError:
        lock.close()
        raise
    listening: list[bool] = []

    def on_ready(management: str, inference: str) -> None:
        listening.append(True)
        try:
            service.remember_port(home, int(management.rsplit(":", 1)[1]))
            runtime = service.Runtime(management, inference, os.getpid(), config.api_key,
                                      config.inference_secret, time.time(),
                                      float(config.launch_seconds), str(home))
            service.write_runtime(home, runtime)
        except OSError as error:
            raise ConnectionFailedError(f"Cannot write the runtime file in {home}: "
                                        f"{error.strerror or error}.") from None
        if ready is not None:
            ready(management, inference)

    try:
        remembered = service.remembered_port(home) if config.port == 0 else 0
        try:
            serve(dataclasses.replace(config, port=remembered or config.port), on_ready)
        except OSError:
            if listening or not remembered:
                raise
            serve(config, on_ready)  # the remembered port is taken: any free one
    finally:
        service.remove_runtime(home, os.getpid())
        lock.close()
