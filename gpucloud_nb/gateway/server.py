"""Serve a gateway over HTTP: in a background thread (:class:`Gateway`), or in the foreground.

    >>> with Gateway(config) as gateway:  # doctest: +SKIP
    ...     httpx.get(f"{gateway.url}/gateway/me", headers={"x-api-key": student_key}).json()
    {'name': 'Ada', 'budget': 20.0, 'spend': 0.0, 'left': 20.0, ...}

Binding, the keep-alive time and the SIGTERM handling are the sandbox's
(:mod:`gpucloud_nb.serving`); the gateway's state file is closed after the server stops.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from gpucloud_nb import serving
from gpucloud_nb.gateway.config import GatewayConfig
from gpucloud_nb.serving import url_host

__all__ = ["Gateway", "serve"]


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

        self._served = serving.Served.start(create_app(self.config), self.config.host,
                                            self.config.port, "gateway")
        self._port = self._served.port
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

    serving.serve(create_app(config), config.host, config.port, ready)
