"""Serve a gateway over HTTP: in a background thread (:class:`Gateway`), or in the foreground.

    >>> with Gateway(config) as gateway:  # doctest: +SKIP
    ...     httpx.get(f"{gateway.url}/gateway/me", headers={"x-api-key": student_key}).json()
    {'name': 'Ada', 'budget': 20.0, 'spend': 0.0, 'left': 20.0, ...}

Binding, the keep-alive time and the SIGTERM handling are the sandbox's
(:mod:`gpucloud_nb.serving`), and each answer leaves in one write (``corked``: the gateway is a
hop every request of a class pays for); the gateway's state file is closed after the server stops. Once it
listens, each delete the gateway makes itself (a timer, an idle limit, a budget, a teacher's stop)
touches the change stamp of the URL it serves at (:mod:`gpucloud_nb.client.changes`), as a
client's own delete does, so a sidebar on this machine shows it at once.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from gpucloud_nb import serving
from gpucloud_nb.gateway.config import GatewayConfig
from gpucloud_nb.serving import url_host

__all__ = ["Gateway", "serve", "serve_home"]


class _Stamp:
    """Touch the change stamp of the gateway's URL (known once it listens; nothing before)."""

    def __init__(self) -> None:
        self.url: str | None = None

    def __call__(self) -> None:
        from gpucloud_nb.client import changes

        if self.url is not None:
            changes.touch(self.url)


class Gateway:
    """A gateway served by uvicorn in a daemon thread; ``url`` is its ``{base_url}``."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self._served: serving.Served | None = None
        self._port: int | None = None  # kept after stop(): the URL it had

    @property
    def url(self) -> str:
        """The gateway's base URL, e.g. ``http://127.0.0.1:8790``."""
        if self._port is None:
            raise RuntimeError("The gateway is not started; call start() first.")
        return f"http://{url_host(self.config.host)}:{self._port}"

    def start(self) -> Gateway:
        """Serve in a daemon thread; return once connections are accepted."""
        from gpucloud_nb.gateway.app import create_app

        stamp = _Stamp()
        self._served = serving.Served.start(create_app(self.config, stamp), self.config.host,
                                            self.config.port, "gateway", corked=True)
        self._port = self._served.port
        stamp.url = self.url
        return self

    def stop(self) -> None:
        """Stop serving and close the state file. Safe to call twice."""
        served, self._served = self._served, None
        if served is not None:
            served.stop()

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Gateway({self.config!r})"


def serve(config: GatewayConfig, ready: Callable[[str], None] | None = None) -> None:
    """Serve in the main thread until Ctrl-C or SIGTERM; ``ready(url)`` once listening.

    Raises :class:`OSError` when the address cannot be bound.
    """
    from gpucloud_nb.gateway.app import create_app

    stamp = _Stamp()

    def listening(url: str) -> None:
        stamp.url = url
        if ready is not None:
            ready(url)

    serving.serve(create_app(config, stamp), config.host, config.port, listening, corked=True)


def serve_home(config: GatewayConfig, home: Path,
               ready: Callable[[str], None] | None = None, *, upstream_pid: int = 0) -> None:
    """Serve ``config`` in the foreground as the personal gateway of ``home`` (see
    :mod:`gpucloud_nb.gateway.personal`), until SIGTERM or Ctrl-C, or until the process
    ``upstream_pid`` (the sandbox service in front of which it stands) ends: its port may then
    be anyone's, and the sandbox's key is never sent to it.

    As the sandbox's :func:`~gpucloud_nb.sandbox.server.serve_home`: holds ``service.lock`` with
    its pid in it (a :class:`ConnectionFailedError` when another gateway has it), reuses the
    remembered port when free, writes the runtime file once listening and removes it on the way
    out.
    """
    from gpucloud_nb.errors import ConnectionFailedError
    from gpucloud_nb.gateway import personal
    from gpucloud_nb.sandbox import processes, service

    lock = processes.service_lock(home)
    if lock is None:
        raise ConnectionFailedError(f"A personal gateway already runs in {home}; "
                                    "`gpucloud-nb gateway stop` stops it.")
    try:
        lock.truncate(0)
        lock.write(str(os.getpid()).encode("ascii"))
        lock.flush()
    except OSError:
        lock.close()
        raise
    listening: list[bool] = []
    key = personal.local_key(home)

    def on_ready(url: str) -> None:
        listening.append(True)
        try:
            service.remember_port(home, int(url.rsplit(":", 1)[1]))
            personal.write_runtime(home, personal.GatewayRuntime(
                url, os.getpid(), key, config.upstream_url, time.time(), str(home),
                upstream_pid))
        except OSError as error:
            raise ConnectionFailedError(f"Cannot write the runtime file in {home}: "
                                        f"{error.strerror or error}.") from None
        if ready is not None:
            ready(url)

    if upstream_pid:
        threading.Thread(target=_end_with, args=(upstream_pid,), daemon=True,
                         name="gpucloud-upstream-watch").start()
    try:
        remembered = service.remembered_port(home) if config.port == 0 else 0
        try:
            serve(dataclasses.replace(config, port=remembered or config.port), on_ready)
        except OSError:
            if listening or not remembered:
                raise
            serve(config, on_ready)  # the remembered port is taken: any free one
    finally:
        personal.remove_runtime(home, os.getpid())
        lock.close()


def _end_with(pid: int) -> None:
    """SIGTERM this process (a clean stop) once ``pid`` has ended; checked every 50 ms."""
    from gpucloud_nb.sandbox import processes

    while processes.pid_alive(pid):
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)
