"""A stand-in for a kernel whose instance is lost: every cell is answered with one sentence.

When the provisioner finds the instance under a running kernel lost (deleted from outside, in an
error state, or unreachable for a set time), the kernel and its variables are gone, but the
notebook still holds a connection to it. The provisioner then closes its forwards and starts a
:class:`StandIn` at the same five ``ipc`` socket paths with the same session key: JupyterLab,
nbclient or a plain ``KernelManager`` (ZeroMQ reconnects by itself) keep "the kernel", and its
next execution fails with the sentence (and its exact ``%gpucloud restore`` line) as the cell's
only output, never a traceback:

    >>> standin = StandIn("/tmp/gpucloud-kernel-x/kernel", b"key", "Instance box is lost.")  # doctest: +SKIP
    >>> standin.start()  # doctest: +SKIP

Choices (the issue leaves them open):

- **Why a stand-in, and not a dead kernel.** A kernel reported dead is restarted by JupyterLab
  ("restarting", then the start fails on the lost instance, in the server's log only) and is a
  ``DeadKernelError`` under nbclient; a plain ``KernelManager`` polls nobody, and its cell waits
  forever. A stand-in that answers works the same under all three, and the sentence reaches the
  cell. It runs in a thread of the process that started the kernel (no second process to find
  or stop): ZeroMQ sockets in a poll loop, answering the requests Jupyter clients send (kernel
  info, execute, complete, inspect, history, comm info, is-complete, interrupt, shutdown; any
  other request gets an error reply) with ``busy``/``idle`` around each, as a kernel does.
  Until a client's IOPub subscription has reached it (or for 5 s), requests wait: what is
  published before that is lost, and a client would wait for its cell's output forever.
- **Silent executions** (widgets, tools) get the error reply without output on IOPub.
- **Shutdown.** A ``shutdown_request`` (or the provisioner's terminate or kill) stops it; the
  kernel then counts as exited (``0``).
"""

from __future__ import annotations

import contextlib
import os
import platform
import threading
import time
from typing import Any

__all__ = ["StandIn"]

#: The error name the cell shows.
ENAME = "InstanceLost"
_CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
#: How long requests wait for a subscriber on IOPub after the stand-in starts.
_SUBSCRIBE_SECONDS = 5.0


class StandIn:
    """Answer a notebook's requests at the five sockets ``<stem>-1`` … ``<stem>-5`` with
    ``sentence`` (see the module docstring)."""

    def __init__(self, stem: str, key: bytes, sentence: str,
                 signature_scheme: str = "hmac-sha256") -> None:
        self.stem, self.key, self.sentence = stem, key, sentence
        self.signature_scheme = signature_scheme
        self.exited = threading.Event()  # a shutdown was asked
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._count = 0

    def paths(self) -> list[str]:
        """The socket paths, in the order of the kernel's channels."""
        return [f"{self.stem}-{index + 1}" for index in range(len(_CHANNELS))]

    def start(self) -> None:
        """Bind the sockets and serve in a daemon thread; raises what the binding raised."""
        self._thread = threading.Thread(target=self._serve, name="gpucloud-standin", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Stop serving, close the sockets and remove their files."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for path in self.paths():
            with contextlib.suppress(OSError):
                os.unlink(path)

    @property
    def serving(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _serve(self) -> None:
        import zmq
        from jupyter_client.session import Session

        context = zmq.Context()
        kinds = {"shell": zmq.ROUTER, "iopub": zmq.XPUB, "stdin": zmq.ROUTER,
                 "control": zmq.ROUTER, "hb": zmq.REP}
        sockets: dict[str, Any] = {}
        try:
            for name, path in zip(_CHANNELS, self.paths(), strict=True):
                with contextlib.suppress(OSError):
                    os.unlink(path)
                socket = context.socket(kinds[name])
                socket.linger = 0
                socket.bind(f"ipc://{path}")
                os.chmod(path, 0o600)
                sockets[name] = socket
        except BaseException as error:  # said by start()
            self._error = error
            for socket in sockets.values():
                socket.close()
            context.term()
            self._ready.set()
            return
        self._ready.set()
        session = Session(key=self.key, signature_scheme=self.signature_scheme,
                          username="gpucloud")
        waiting, poller = zmq.Poller(), zmq.Poller()
        for name in ("iopub", "hb"):
            waiting.register(sockets[name], zmq.POLLIN)
        for name in ("iopub", "hb", "shell", "control", "stdin"):
            poller.register(sockets[name], zmq.POLLIN)
        deadline = time.monotonic() + _SUBSCRIBE_SECONDS
        subscribed = False
        try:
            while not self._stop.is_set():
                # Requests wait until a subscriber is back on IOPub (or a few seconds): what
                # is published before its subscription arrives is lost, and the cell with it.
                now_ready = subscribed or time.monotonic() > deadline
                for socket, _ in (poller if now_ready else waiting).poll(200 if now_ready else 20):
                    if socket is sockets["hb"]:
                        socket.send(socket.recv())
                        continue
                    if socket is sockets["iopub"]:
                        socket.recv()  # a subscription (XPUB passes each topic's first only)
                        subscribed = True
                        continue
                    with contextlib.suppress(Exception):  # a bad message is dropped, as ipykernel
                        idents, message = session.recv(socket, mode=zmq.NOBLOCK)
                        if message is not None and idents and socket is not sockets["stdin"]:
                            self._answer(session, socket, sockets["iopub"], idents, message)
        finally:
            for socket in sockets.values():
                socket.close()
            context.term()

    def _answer(self, session: Any, socket: Any, iopub: Any, idents: list[bytes],
                message: dict[str, Any]) -> None:
        kind = str(message["header"].get("msg_type", ""))
        if not kind.endswith("_request"):
            return  # comm messages and the like: nobody is there to hear them
        content = message.get("content") or {}
        parent = message["header"]

        def publish(msg_type: str, body: dict[str, Any]) -> None:
            session.send(iopub, msg_type, body, parent=parent,
                         ident=f"kernel.standin.{msg_type}".encode())

        publish("status", {"execution_state": "busy"})
        reply: dict[str, Any]
        if kind == "execute_request":
            if content.get("store_history", True) and not content.get("silent", False):
                self._count += 1
            error = {"ename": ENAME, "evalue": self.sentence, "traceback": [self.sentence]}
            if not content.get("silent", False):
                publish("execute_input", {"code": content.get("code", ""),
                                          "execution_count": self._count})
                publish("error", error)
            reply = {"status": "error", "execution_count": self._count, **error}
        elif kind == "kernel_info_request":
            reply = {"status": "ok", "protocol_version": "5.3",
                     "implementation": "gpucloud-standin", "implementation_version": "1",
                     "language_info": {"name": "python", "version": platform.python_version(),
                                       "mimetype": "text/x-python", "file_extension": ".py"},
                     "banner": self.sentence, "help_links": []}
        elif kind == "shutdown_request":
            reply = {"status": "ok", "restart": bool(content.get("restart", False))}
            self.exited.set()
            self._stop.set()
        elif kind == "complete_request":
            cursor = int(content.get("cursor_pos") or 0)
            reply = {"status": "ok", "matches": [], "cursor_start": cursor,
                     "cursor_end": cursor, "metadata": {}}
        elif kind == "inspect_request":
            reply = {"status": "ok", "found": False, "data": {}, "metadata": {}}
        elif kind == "history_request":
            reply = {"status": "ok", "history": []}
        elif kind == "comm_info_request":
            reply = {"status": "ok", "comms": {}}
        elif kind == "is_complete_request":
            reply = {"status": "complete"}
        elif kind == "interrupt_request":
            reply = {"status": "ok"}
        else:
            reply = {"status": "error", "ename": ENAME, "evalue": self.sentence, "traceback": []}
        session.send(socket, kind.replace("_request", "_reply"), reply, parent=parent,
                     ident=idents)
        publish("status", {"execution_state": "idle"})
