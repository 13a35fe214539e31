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
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from gpucloud_nb import serving
from gpucloud_nb._secrets import mask
from gpucloud_nb.errors import ConnectionFailedError
from gpucloud_nb.sandbox import processes, service
from gpucloud_nb.sandbox.config import SandboxConfig
from gpucloud_nb.serving import KEEP_ALIVE_SECONDS, url_host

__all__ = ["KEEP_ALIVE_SECONDS", "Sandbox", "SandboxConfig", "serve", "serve_home", "url_host"]


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
        self._served: serving.Served | None = None
        self._port: int | None = None  # kept after stop(): the URL it had

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
        home: Path = self.app.state.ssh.home
        return home

    @property
    def app(self) -> Any:
        """The Starlette app being served (its ``state``: the store, the SSH servers)."""
        if self._served is None:
            raise RuntimeError("The sandbox is not started; call start() first.")
        return self._served.app

    @property
    def running(self) -> bool:
        """True while the server thread is serving."""
        return self._served is not None and self._served.thread.is_alive()

    def start(self) -> Sandbox:
        """Start serving in a daemon thread; return once connections are accepted."""
        if self.running:
            return self
        from gpucloud_nb.sandbox.app import create_app

        self._served = serving.Served.start(create_app(self.config), self.config.host,
                                            self.config.port, "sandbox server")
        self._port = self._served.port
        return self

    def stop(self) -> None:
        """Stop serving and close the state database. Safe to call twice."""
        served, self._served = self._served, None
        if served is not None:
            served.stop()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.management_url if self._port is not None else "not started"
        return (f"Sandbox({where}, api_key={mask(self.api_key)!r}, "
                f"inference_secret={mask(self.inference_secret)!r}, running={self.running})")


def serve(config: SandboxConfig,
          ready: Callable[[str, str], None] | None = None,
          *, log_level: str = "info") -> None:
    """Serve in the calling (main) thread until Ctrl-C or SIGTERM, then return.

    ``ready(management_url, inference_url)`` is called once the port is bound and listening,
    before serving starts. Raises :class:`OSError` when the address cannot be bound.
    """
    from gpucloud_nb.sandbox.app import create_app

    def on_ready(base: str) -> None:
        if ready is not None:
            ready(base, f"{base}/inference")

    serving.serve(create_app(config), config.host, config.port, on_ready, log_level=log_level)


def serve_home(config: SandboxConfig, home: Path,
               ready: Callable[[str, str], None] | None = None) -> None:
    """Serve ``config`` in the foreground as the service of ``home``, until SIGTERM or Ctrl-C.

    Holds ``service.lock`` while serving (refusing with :class:`ConnectionFailedError` when
    another service has it), reuses the remembered port when ``config.port`` is 0 and that port
    is free, writes the runtime file once listening and removes it on the way out (the home's
    files are :mod:`gpucloud_nb.sandbox.service`'s).
    """
    lock = processes.service_lock(home)
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
