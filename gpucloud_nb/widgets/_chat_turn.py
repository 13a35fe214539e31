"""A chat request in flight (:class:`ChatTurn`) and the one event loop chat widgets share.

A turn is a handle a notebook can wait on, ``await``, or stop; the loop runs in a daemon
thread while any chat widget is open, so a blocking cell never stalls a reply.

Streaming without freezing the kernel. ``send()`` schedules the request as an asyncio
task and returns a :class:`ChatTurn` at once. In a kernel that task runs on the kernel's own
running loop (``asyncio.get_running_loop()``), between cell executions and widget messages,
so the notebook stays usable and the Stop button is heard; ``await chat.send(...)`` waits
for the reply in a cell (``turn.wait()`` would block that loop, so it refuses there, and a
cell that blocks, such as ``time.sleep``, pauses the stream until it ends). With no running
loop (plain Python, pytest) the task runs on one shared daemon thread's loop instead and
``turn.wait(timeout)`` blocks the caller only. Requests of one panel run one after another
(a message sent while a reply streams waits for it). Replies stream through
:class:`~gpucloud_nb.client.inference.AsyncInferenceClient`; the secret stays inside the
client and is never put in a widget trait.

    >>> turn = ChatTurn.refused("Type a message first.")
    >>> turn.status, turn.error
    ('refused', 'Type a message first.')
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Callable, Generator
from typing import Any, ClassVar

__all__ = ["ChatTurn", "LoopThread", "running_loop"]


class LoopThread:
    """One asyncio loop in a daemon thread, for when ``send()`` is called with no running loop.

    It lives while any chat widget does: the last one to close (or be garbage-collected) stops
    it, and so does Python's exit.
    """

    # Reentrant: a chat widget collected while get() starts the thread runs release() (its
    # weakref finalizer) inside get(), on this thread; a plain Lock deadlocked there.
    _lock = threading.RLock()
    _instance: LoopThread | None = None
    _users: ClassVar[weakref.WeakSet[Any]] = weakref.WeakSet()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gpucloud-chat-loop",
                                       daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = cls()
            return cls._instance.loop

    @classmethod
    def use(cls, user: Any) -> None:
        """Count ``user`` (a chat widget) until :meth:`release` or its garbage collection."""
        with cls._lock:
            cls._users.add(user)
        weakref.finalize(user, cls.release, None)

    @classmethod
    def release(cls, user: Any) -> None:
        """Forget ``user``; stop the loop when no chat widget is left."""
        with cls._lock:
            if user is not None:
                cls._users.discard(user)
            if len(cls._users) or cls._instance is None:
                return
            instance, cls._instance = cls._instance, None
        instance.shutdown()

    def shutdown(self) -> None:
        """Stop the loop and wait (briefly) for its thread to end."""
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not threading.current_thread():
            self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


    @classmethod
    def stop_all(cls) -> None:
        """Stop the loop whoever still uses it (at interpreter exit)."""
        with cls._lock:
            instance, cls._instance = cls._instance, None
        if instance is not None:
            instance.shutdown()


atexit.register(LoopThread.stop_all)


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ChatTurn:
    """One request of a :class:`ChatWidget` (a message and its reply, or a transcription).

    ``send()`` returns at once with this handle while the reply streams in the background:

    - in a notebook (a running asyncio loop): ``await chat.send("Hi")``, or just let it stream;
    - in plain Python or pytest (no running loop): ``chat.send("Hi").wait(timeout=30)``.

    ``status`` is ``queued``, ``running``, ``done``, ``stopped``, ``error`` or ``refused``
    (checked and refused before anything was sent). ``text`` is the reply (or the transcript),
    ``error`` the one-sentence message shown in the panel, ``None`` if all went well.
    ``wait()`` and ``await`` return the turn itself; neither raises for a failed request.
    """

    def __init__(self, kind: str = "chat", loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.kind = kind
        self.status = "queued"
        self._text = ""
        self._live: Callable[[], str] | None = None  # the stream's text while it streams
        self.error: str | None = None
        self.future: concurrent.futures.Future[ChatTurn] = concurrent.futures.Future()
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None
        self._stop_requested = False
        self._cancelled = False

    @classmethod
    def refused(cls, sentence: str, kind: str = "chat") -> ChatTurn:
        turn = cls(kind)
        turn.finish("refused", error=sentence)
        return turn

    @property
    def text(self) -> str:
        """The reply so far (or the transcript)."""
        live = self._live
        return live() if live is not None else self._text

    @text.setter
    def text(self, value: str) -> None:
        self._text, self._live = value, None

    @property
    def stopped(self) -> bool:
        """True when Stop ended this turn (what had arrived is kept)."""
        return self.status == "stopped"

    def done(self) -> bool:
        """True once the turn has finished, whatever the outcome."""
        return self.future.done()

    def wait(self, timeout: float | None = None) -> ChatTurn:
        """Block until the turn finishes (not on the loop it runs on: ``await`` it there)."""
        if not self.done() and self._loop is not None and running_loop() is self._loop:
            raise RuntimeError("This reply streams on the running event loop, so waiting for it "
                               "here would block it: use `await chat.send(...)` instead.")
        try:
            return self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"The {self.kind} turn did not finish within {timeout} s.") from None

    def __await__(self) -> Generator[Any, None, ChatTurn]:
        return asyncio.wrap_future(self.future).__await__()

    def stop(self) -> None:
        """End the turn: close the stream, keep what arrived. Safe from any thread, twice too."""
        self._stop_requested = True
        if self._loop is not None and not self.done():
            with contextlib.suppress(RuntimeError):  # loop closed: nothing runs any more
                self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done() and not self._cancelled:
            self._cancelled = True
            self._task.cancel()

    @property
    def stop_requested(self) -> bool:
        """True once :meth:`stop` was called, even before the turn started running."""
        return self._stop_requested

    def run_as(self, task: asyncio.Task[Any] | None) -> None:
        """Record the task that runs this turn, so :meth:`stop` can cancel it."""
        self._task = task

    def follow(self, text: Callable[[], str]) -> None:
        """Read :attr:`text` from ``text`` while the reply streams (joined when read)."""
        self._live = text

    def finish(self, status: str, error: str | None = None) -> None:
        """Settle the turn as ``status`` (with the sentence shown, if it failed)."""
        self.status = status
        if error is not None:
            self.error = error
        if not self.future.done():
            self.future.set_result(self)

    def __repr__(self) -> str:
        extra = f" error={self.error!r}" if self.error else ""
        return f"<ChatTurn {self.kind} {self.status} text={self.text[:40]!r}{extra}>"
