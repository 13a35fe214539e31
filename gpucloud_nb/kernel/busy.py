"""A kernel on an instance counts as use while it executes code, whoever started it.

    >>> watch = BusyWatch(provisioner.connection_info, provisioner.in_use)  # doctest: +SKIP
    >>> watch.stop()  # with the kernel  # doctest: +SKIP

The JupyterLab extension reports the instances whose kernel is busy (:mod:`gpucloud_nb.lab.idle`),
but nbclient, ``jupyter execute`` or a plain ``KernelManager`` have no such poller. So the
provisioner itself listens: one daemon thread subscribes to the kernel's IOPub (through the same
local Unix socket Jupyter uses) and reads its ``status`` messages. From a ``busy`` whose parent is
an ``execute_request`` until the matching ``idle``, the instance is in use: ``in_use()`` gives a
context (the client's :meth:`Remote.in_use <gpucloud_nb.client.remote.Remote.in_use>`) entered
then and left at ``idle``, so the client's use reporter tells the gateway at once, every 10 s
while the cell runs, and once when it ends (:mod:`gpucloud_nb.client.use_report`).

Choices: only ``execute_request`` counts (``kernel_info``, completions and comm messages also
flash ``busy``, and an idle kernel is not use); messages are checked with the session's key, so
nothing another process could send counts; a kernel that stops answering or a socket that breaks
ends the busy period (the next ``busy`` starts a new one). Under JupyterLab the poller reports the
same kernel too; the gateway takes the latest ``until``, so the two never add up.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BusyWatch"]

#: How often the thread looks at its stop flag while no message comes (seconds).
_TICK = 0.5


class BusyWatch:
    """Watch the kernel at ``info`` (its local connection info) and hold ``in_use()`` while it
    executes a cell; :meth:`stop` ends it (and a busy period with it)."""

    def __init__(self, info: dict[str, Any],
                 in_use: Callable[[], contextlib.AbstractContextManager[object]]) -> None:
        self._info = dict(info)
        self._in_use = in_use
        self._stopped = threading.Event()
        self.busy = False
        self._thread = threading.Thread(target=self._run, name="gpucloud-nb-kernel-busy",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and end any busy period; waits for the thread (at most a tick)."""
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5 * _TICK)

    def _address(self) -> str:
        info = self._info
        if info.get("transport") == "ipc":
            return f"ipc://{info['ip']}-{info['iopub_port']}"
        return f"tcp://{info['ip']}:{info['iopub_port']}"

    def _run(self) -> None:
        import zmq
        from jupyter_client.session import Session

        key = self._info.get("key") or b""
        session = Session(key=key if isinstance(key, bytes) else str(key).encode(),
                          signature_scheme=str(self._info.get("signature_scheme")
                                               or "hmac-sha256"))
        context = zmq.Context()
        socket = context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        held: contextlib.ExitStack | None = None
        try:
            socket.connect(self._address())
            while not self._stopped.is_set():
                if not socket.poll(int(_TICK * 1000)):
                    continue
                state = _execution_state(session, socket.recv_multipart())
                if state == "busy" and held is None:
                    held = contextlib.ExitStack()
                    with contextlib.suppress(Exception):  # a client closing: nothing to tell
                        held.enter_context(self._in_use())
                    self.busy = True
                elif state == "idle" and held is not None:
                    held.close()
                    held, self.busy = None, False
        except zmq.ZMQError:
            pass  # the kernel's socket is gone: so is the busy period
        finally:
            if held is not None:
                held.close()
            self.busy = False
            socket.close()
            context.term()


def _execution_state(session: Any, frames: list[bytes]) -> str | None:
    """``busy`` or ``idle`` for an ``execute_request``'s status message, else ``None``."""
    try:
        _, parts = session.feed_identities(frames, copy=True)
        message = session.deserialize(parts, content=True, copy=True)
    except Exception:  # unsigned, malformed or not for us: not a status we trust
        return None
    if message.get("msg_type") != "status":
        return None
    if (message.get("parent_header") or {}).get("msg_type") != "execute_request":
        return None
    state = (message.get("content") or {}).get("execution_state")
    return state if state in ("busy", "idle") else None
