"""The chat panel's one async client: the one given, else one it opens and closes itself.

Replies stream through an :class:`~gpucloud_nb.client.inference.AsyncInferenceClient`. When
the panel is given none, it opens one from its client at the first request (the async twin
shares the client's Secret object: the secret never sits in a widget) and keeps its
connections for the next ones. Those connections belong to the event loop the client first
ran on: a request on another loop opens a new one and closes the old one on its own loop.
:meth:`PanelClient.close` closes the one it opened, never one it was given.

    >>> slot = PanelClient(client, None)  # doctest: +SKIP
    >>> async with slot.open() as async_client: ...  # doctest: +SKIP
    >>> slot.close()  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from gpucloud_nb.client.inference import AsyncInferenceClient, InferenceClient
from gpucloud_nb.widgets._chat_turn import running_loop

__all__ = ["PanelClient", "close_on_its_loop"]


class PanelClient:
    """The async client of one chat panel (see the module docstring)."""

    def __init__(self, client: InferenceClient, given: AsyncInferenceClient | None) -> None:
        self._client = client
        self._given = given
        self._opened: tuple[AsyncInferenceClient, asyncio.AbstractEventLoop] | None = None
        self._lock = threading.RLock()

    def open(self) -> contextlib.AbstractAsyncContextManager[AsyncInferenceClient]:
        """The client for a request on the running loop (the one given, else the one opened on
        this loop)."""
        if self._given is not None:
            return contextlib.nullcontext(self._given)
        loop = asyncio.get_running_loop()
        with self._lock:
            stale = self._opened if self._opened is not None and self._opened[1] is not loop else None
            if self._opened is None or stale is not None:
                # The async twin shares the client's Secret object: the secret never sits in a
                # widget. Its connections belong to the loop it first ran on.
                self._opened = (self._client.to_async(), loop)
            client = self._opened[0]
        if stale is not None:
            close_on_its_loop(*stale)
        return contextlib.nullcontext(client)

    def close(self) -> None:
        """Close the client this panel opened, if any, on its own loop."""
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            close_on_its_loop(*opened)


def close_on_its_loop(client: AsyncInferenceClient, loop: asyncio.AbstractEventLoop) -> None:
    """Close ``client`` on the loop its connections belong to (waited for from another thread)."""
    if loop.is_closed() or not loop.is_running():
        return  # its loop is gone, and its connections with it
    if running_loop() is loop:
        task = loop.create_task(client.aclose())
        _closing.add(task)
        task.add_done_callback(_closing.discard)
        return
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=30)


_closing: set[asyncio.Task[None]] = set()  # closes under way on a running loop, kept alive
