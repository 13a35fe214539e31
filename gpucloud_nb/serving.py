"""Serve an ASGI app with uvicorn: in a daemon thread, or in the foreground until SIGTERM.

    >>> served = Served.start(app, "127.0.0.1", 0, "the sandbox")  # doctest: +SKIP
    >>> served.port, served.stop()  # doctest: +SKIP

The one serve path of the sandbox (:mod:`gpucloud_nb.sandbox.server`) and the class gateway
(:mod:`gpucloud_nb.gateway.server`): the socket is bound (and listening) before uvicorn starts,
connections are kept alive :data:`KEEP_ALIVE_SECONDS`, the app's lifespan runs its background
tasks, and the app's state store (``app.state.store``) is closed once the server stops, whether
it served or not. In the foreground, the access log is written by a thread of its own, so a slow
or unread stdout never holds up an answer. Importing this module is cheap: uvicorn loads on
start.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

__all__ = ["KEEP_ALIVE_SECONDS", "Served", "bind", "close_app", "serve", "url_host"]

KEEP_ALIVE_SECONDS = 75
"""Longer than any client keeps an idle connection (httpx: 5 s), so a sidebar polling every 5 s
never sends on a connection the server is closing (uvicorn's default is 5 s)."""
_START_TIMEOUT = 15.0


def url_host(host: str) -> str:
    """The host part of a URL that reaches a server bound to ``host`` from this machine.

        >>> url_host("0.0.0.0"), url_host("::1")
        ('127.0.0.1', '[::1]')
    """
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port); :class:`OSError` if taken."""
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


def close_app(app: Any) -> None:
    """Close the app's state store, if it has one."""
    store = getattr(getattr(app, "state", None), "store", None)
    if store is not None:
        store.close()


class _Corked:
    """A transport whose writes within one turn of the event loop leave as one ``send``.

    uvicorn writes an answer's status line and headers, then its body, each at once: two
    syscalls, two TCP segments (``TCP_NODELAY``) and two wake-ups of the client, for every
    answer. Held until the end of the turn, they go out together; a streamed answer's chunks
    still leave as they come (each turn flushes). Everything but writing is the transport's own.
    """

    __slots__ = ("_pending", "_transport")

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _protocol(corked: bool) -> type:
    """uvicorn's protocol on ``httptools`` (its C parser), answering a request it cannot parse
    in the spec's error body, and with ``corked`` writing through :class:`_Corked`.

    uvicorn answers what its parser rejects (a method it does not know, bytes that are not
    HTTP, a path that is not ASCII) with a plain-text 400 of its own; a client of the cloud's
    interface reads the spec's ``{statusCode, timestamp, path, message}`` on every error.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class Protocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(_Corked(transport) if corked else transport)  # type: ignore[arg-type]

        def send_400_response(self, msg: str) -> None:
            from gpucloud_nb.sandbox.http import spec_error

            path = self.url.split(b"?", 1)[0].decode("ascii", "replace") or "/"
            answer = spec_error(400, "The request is not valid HTTP: check its method, path "
                                     "and headers.", path)
            head = [b"HTTP/1.1 400 Bad Request\r\n",
                    *(b"%s: %s\r\n" % pair for pair in self.server_state.default_headers),
                    *(b"%s: %s\r\n" % pair for pair in answer.raw_headers),
                    b"connection: close\r\n\r\n"]
            self.transport.write(b"".join(head) + answer.body)
            self.transport.close()

    return Protocol


def _server(app: Any, host: str, sock: socket.socket, *, corked: bool = False,
            **options: Any) -> uvicorn.Server:
    import uvicorn

    return uvicorn.Server(uvicorn.Config(
        app, host=host, port=sock.getsockname()[1],
        lifespan="on",  # the app's background tasks (timers, SSH servers) run in its lifespan
        http=_protocol(corked),
        timeout_graceful_shutdown=2, timeout_keep_alive=KEEP_ALIVE_SECONDS, **options))


class Served:
    """An app served by uvicorn in a daemon thread (:meth:`start`), until :meth:`stop`."""

    def __init__(self, app: Any, server: uvicorn.Server, thread: threading.Thread,
                 sock: socket.socket) -> None:
        self.app, self.server, self.thread, self.socket = app, server, thread, sock
        self.port: int = sock.getsockname()[1]

    @classmethod
    def start(cls, app: Any, host: str, port: int, what: str, *, corked: bool = False) -> Served:
        """Serve ``app`` on ``host:port`` in a thread; return once connections are accepted.
        :class:`RuntimeError` ("``what`` did not start") if it does not within 15 s.
        ``corked``: each answer leaves in one write (see :class:`_Corked`)."""
        try:
            sock = bind(host, port)
        except BaseException:
            close_app(app)
            raise
        server = _server(app, host, sock, corked=corked, log_config=None, log_level="warning",
                         access_log=False)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                  name=f"gpucloud-nb {what}", daemon=True)
        thread.start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                thread.join(5)
                sock.close()
                close_app(app)
                raise RuntimeError(f"The {what} did not start.")
            time.sleep(0.005)
        return cls(app, server, thread, sock)

    def stop(self) -> None:
        """Stop serving (forcing it after 5 s), close the socket and the app's store."""
        self.server.should_exit = True
        self.thread.join(5)
        if self.thread.is_alive():
            self.server.force_exit = True
            self.thread.join(5)
        self.socket.close()
        close_app(self.app)


class _Stop(Exception):
    """Raised by SIGTERM so the foreground server unwinds like on Ctrl-C."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def serve(app: Any, host: str, port: int, ready: Callable[[str], None] | None = None, *,
          log_level: str = "info", access_log: bool = True, corked: bool = False) -> None:
    """Serve ``app`` in the calling thread until Ctrl-C or SIGTERM (in the main thread), then
    return; ``ready(base_url)`` once the port is bound and listening, before serving starts;
    ``access_log`` writes a line per request; ``corked``: each answer leaves in one write.

    Raises :class:`OSError` when the address cannot be bound (the app's store is closed then
    too).
    """
    previous = signal.getsignal(signal.SIGTERM)
    in_main = threading.current_thread() is threading.main_thread()
    sock = None
    stop_log: Callable[[], None] | None = None
    try:
        sock = bind(host, port)
        if in_main:
            signal.signal(signal.SIGTERM, _raise_stop)
        server = _server(app, host, sock, corked=corked, log_level=log_level,
                         access_log=access_log)
        stop_log = _access_log_in_a_thread()
        if ready is not None:
            ready(f"http://{url_host(host)}:{sock.getsockname()[1]}")
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        if sock is not None:
            sock.close()
        close_app(app)
        if stop_log is not None:
            stop_log()


ACCESS_LOG_BACKLOG = 10_000
"""Access lines waiting for a stdout nobody reads, past which new ones are dropped."""
ACCESS_LOG_EVERY = 0.1
"""Seconds between the access log's writes: the lines of each such moment go out together."""


def _access_log_in_a_thread() -> Callable[[], None]:
    """uvicorn's access lines written by a thread of their own; returns what stops it.

    A line a request is then an append on the event loop, never a write that waits for a slow
    terminal or a pipe (a full pipe nobody read used to stop the server answering at all, some
    600 requests in), nor a wake-up of the writer: it writes what has gathered every
    :data:`ACCESS_LOG_EVERY` seconds, one flush per handler (a loaded gateway answering 100
    requests a second wrote, flushed and woke its writer thread 100 times a second, each time
    taking the interpreter lock from the loop). Past :data:`ACCESS_LOG_BACKLOG` waiting lines,
    new ones are dropped.
    """
    import collections
    import logging

    logger = logging.getLogger("uvicorn.access")
    handlers = list(logger.handlers)
    if not handlers:
        return lambda: None
    lines: collections.deque[logging.LogRecord] = collections.deque()
    stopping = threading.Event()

    class Handoff(logging.Handler):
        def handle(self, record: logging.LogRecord) -> bool:  # no lock: deque.append is atomic
            if len(lines) < ACCESS_LOG_BACKLOG:
                lines.append(record)  # formatted by uvicorn's handler, in the thread
            return True

        def emit(self, record: logging.LogRecord) -> None:
            self.handle(record)

    def write_all() -> None:
        while lines:
            record = lines.popleft()
            for handler in handlers:
                if record.levelno < handler.level:
                    continue
                if type(handler) is logging.StreamHandler:  # the line now, one flush later
                    with contextlib.suppress(Exception):
                        handler.stream.write(handler.format(record) + handler.terminator)
                else:
                    handler.handle(record)
        for handler in handlers:
            with contextlib.suppress(Exception):
                handler.flush()

    def write() -> None:
        while not stopping.wait(ACCESS_LOG_EVERY):
            write_all()
        write_all()

    handoff = Handoff()
    for handler in handlers:
        logger.removeHandler(handler)
    logger.addHandler(handoff)
    thread = threading.Thread(target=write, name="access log", daemon=True)
    thread.start()

    def stop() -> None:
        logger.removeHandler(handoff)
        for handler in handlers:
            logger.addHandler(handler)
        stopping.set()
        thread.join(5)  # what is queued is written, unless nobody reads the stream

    return stop
