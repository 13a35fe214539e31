"""Streamed chat replies: server-sent events read into :class:`ChatChunk` records, sync and async.

A stream is never retried; one cut off before its ``finish_reason`` or ``[DONE]`` raises at its
end rather than passing a truncated reply off as whole, and every error text is scrubbed of the
secret. After ``[DONE]`` both streams read on to the body's end (at most :data:`DRAIN_SECONDS`),
so the connection goes back to the client's pool for the next request instead of being dropped.

    >>> with chat.chat("Count to ten", stream=True) as stream:  # doctest: +SKIP
    ...     print(stream.read())
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import TracebackType

import httpx
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse, connect_sse

from gpucloud_nb._secrets import scrub
from gpucloud_nb.client._ops import _describe, error_from_response
from gpucloud_nb.client.inference_types import (
    CHAT_PATH,
    ChatChunk,
    ChatCompletion,
    ChatRequest,
    Usage,
    mapping_or_empty,
)
from gpucloud_nb.errors import APIError, ConnectionFailedError, ServerError, UnreadableResponseError

__all__ = ["DRAIN_SECONDS", "AsyncChatStream", "ChatStream"]


_DONE = object()
#: How long a stream reads on, after ``[DONE]``, for the body's end that frees its connection.
DRAIN_SECONDS = 5.0


class _StreamBase:
    """What the sync and async streams share: opening checks, event parsing, accumulated text."""

    def __init__(self, request: ChatRequest, secrets: tuple[str, ...],
                 explain: Callable[[APIError, str], APIError]) -> None:
        self.model = request.model
        self._parts: list[str] = []          # the deltas, appended as they come
        self._joined: tuple[int, str] = (0, "")  # how many parts ``text`` last joined, and it
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.id = ""
        self.closed = False
        self.complete = False  # a finish_reason or [DONE] came: the reply was not cut off
        self._secrets = secrets
        self._explain = explain

    @property
    def text(self) -> str:
        """The reply's text so far (joined when read, so a long reply streams in linear time)."""
        count, joined = self._joined
        end = len(self._parts)
        if end > count:
            joined += "".join(self._parts[count:end])
            self._joined = (end, joined)
        return joined

    def _error(self, response: httpx.Response) -> APIError:
        error = error_from_response(response, flavor="inference", secrets=self._secrets)
        return self._explain(error, self.model)

    def _events_from_json(self, response: httpx.Response) -> Iterator[ChatChunk]:
        """An endpoint that answered a stream request with one JSON completion: one chunk."""
        try:
            completion = ChatCompletion.from_json(response.json())
        except ValueError:
            raise ServerError("The endpoint answered the stream request with neither events nor "
                              "JSON.", status_code=response.status_code, path=CHAT_PATH) from None
        return iter([ChatChunk(delta=completion.text, role="assistant",
                               finish_reason=completion.finish_reason or "stop",
                               usage=completion.usage, id=completion.id, model=completion.model,
                               raw=completion.raw)])

    @staticmethod
    def _is_event_stream(response: httpx.Response) -> bool:
        return "text/event-stream" in response.headers.get("content-type", "")

    @staticmethod
    def _cut_off() -> ConnectionFailedError:
        return ConnectionFailedError("The reply was cut off before it finished: the stream ended "
                                     "without a finish_reason or [DONE].")

    def _transport_error(self, exc: httpx.TransportError, started: bool) -> ConnectionFailedError:
        when = "while streaming the reply" if started else f"(POST {CHAT_PATH})"
        return ConnectionFailedError(f"The server {_describe(exc)} {when}.")

    def _parse(self, event: ServerSentEvent | ChatChunk) -> ChatChunk | object | None:
        """A chunk, ``_DONE`` at ``[DONE]``, or ``None`` for an event to skip."""
        if isinstance(event, ChatChunk):
            return self._take(event)
        data = event.data.strip()
        if not data:
            return None
        if data == "[DONE]":
            self.complete = True
            return _DONE
        try:
            payload = json.loads(data)
        except ValueError:
            raise UnreadableResponseError("The endpoint streamed an event that is not JSON.") \
                from None
        if not isinstance(payload, Mapping):
            return None
        if "error" in payload or event.event == "error":
            detail = mapping_or_empty(payload.get("error")).get("message") or payload.get("message") or ""
            text = f"The endpoint failed while streaming: {detail}" if detail else \
                "The endpoint failed while streaming."
            raise ServerError(scrub(text.rstrip(".") + ".", *self._secrets), status_code=500,
                              path=CHAT_PATH)
        return self._take(ChatChunk.from_json(payload))

    def _take(self, chunk: ChatChunk) -> ChatChunk:
        """Count ``chunk`` into the reply so far."""
        if chunk.delta:
            self._parts.append(chunk.delta)
        self.id = self.id or chunk.id
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
            self.complete = True
        if chunk.usage is not None:
            self.usage = chunk.usage
        return chunk

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} model={self.model!r} {state} text={self.text[:40]!r}>"


class ChatStream(_StreamBase):
    """A streamed chat reply: iterate for :class:`ChatChunk` records; ``text`` accumulates.

    ``close()`` (or leaving the ``with`` block) stops reading and releases the connection; the
    client stays usable. An error status before the stream starts raises from ``chat()``; a
    stream cut off before its ``finish_reason`` or ``[DONE]`` raises
    :class:`~gpucloud_nb.errors.ConnectionFailedError` at its end (``text`` keeps what came,
    ``complete`` stays False).

        >>> with chat.chat("Count to ten", stream=True) as stream:  # doctest: +SKIP
        ...     for chunk in stream:
        ...         print(chunk.delta, end="", flush=True)
        >>> stream.text, stream.finish_reason  # doctest: +SKIP
    """

    def __init__(self, http: httpx.Client, request: ChatRequest, secrets: tuple[str, ...],
                 explain: Callable[[APIError, str], APIError]) -> None:
        super().__init__(request, secrets, explain)
        self._context = connect_sse(http, "POST", CHAT_PATH, json=request.body)
        try:
            source = self._context.__enter__()
        except httpx.TransportError as exc:
            raise self._transport_error(exc, started=False) from None
        try:
            response = source.response
            if response.status_code >= 300:  # a redirect is an error too
                response.read()
                raise self._error(response)
            if self._is_event_stream(response):
                self._events: Iterator[ServerSentEvent | ChatChunk] = source.iter_sse()
            else:
                response.read()
                self._events = self._events_from_json(response)
        except httpx.TransportError as exc:
            self._release()
            raise self._transport_error(exc, started=False) from None
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        self.closed = True
        close = getattr(self._events, "close", None) if hasattr(self, "_events") else None
        try:
            if close is not None:
                close()
        finally:
            self._context.__exit__(None, None, None)

    def close(self) -> None:
        """Stop reading the reply and release its connection. Safe to call twice."""
        if not self.closed:
            self._release()

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> ChatChunk:
        while not self.closed:
            try:
                event = next(self._events)
                chunk = self._parse(event)
            except StopIteration:
                self.close()
                if not self.complete:
                    raise self._cut_off() from None
                break
            except httpx.TransportError as exc:
                self.close()
                raise self._transport_error(exc, started=True) from None
            except BaseException:
                self.close()
                raise
            if chunk is _DONE:
                self._drain()
                break
            if isinstance(chunk, ChatChunk):
                return chunk
        self.close()
        raise StopIteration

    def _drain(self) -> None:
        """Read what follows ``[DONE]`` (the body's end), so the connection can be reused."""
        deadline = time.monotonic() + DRAIN_SECONDS
        with contextlib.suppress(Exception):  # not drained: the connection is dropped, as before
            for _ in self._events:
                if time.monotonic() > deadline:
                    break

    def read(self) -> str:
        """Read the rest of the reply and return the whole text."""
        for _ in self:
            pass
        return self.text

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class AsyncChatStream(_StreamBase):
    """The asyncio twin of :class:`ChatStream`: ``async for``, ``aclose()``, ``async with``.

        >>> async with await chat.chat("Count to ten", stream=True) as stream:  # doctest: +SKIP
        ...     async for chunk in stream:
        ...         print(chunk.delta, end="")
    """

    _events: AsyncIterator[ServerSentEvent] | Iterator[ChatChunk]
    _context: contextlib.AbstractAsyncContextManager[EventSource]

    @classmethod
    async def open(cls, http: httpx.AsyncClient, request: ChatRequest, secrets: tuple[str, ...],
                   explain: Callable[[APIError, str], APIError]) -> AsyncChatStream:
        """Send ``request`` and return the stream once its first bytes say it started."""
        self = cls(request, secrets, explain)
        self._context = aconnect_sse(http, "POST", CHAT_PATH, json=request.body)
        try:
            source = await self._context.__aenter__()
        except httpx.TransportError as exc:
            raise self._transport_error(exc, started=False) from None
        try:
            response = source.response
            if response.status_code >= 300:  # a redirect is an error too
                await response.aread()
                raise self._error(response)
            if self._is_event_stream(response):
                self._events = source.aiter_sse()
            else:
                await response.aread()
                self._events = self._events_from_json(response)
        except httpx.TransportError as exc:
            await self._release()
            raise self._transport_error(exc, started=False) from None
        except BaseException:
            await self._release()
            raise
        return self

    async def _release(self) -> None:
        self.closed = True
        events = getattr(self, "_events", None)
        try:
            if hasattr(events, "aclose"):
                await events.aclose()  # type: ignore[union-attr]
        finally:
            await self._context.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Stop reading the reply and release its connection. Safe to call twice."""
        if not self.closed:
            await self._release()

    def __aiter__(self) -> AsyncChatStream:
        return self

    async def __anext__(self) -> ChatChunk:
        while not self.closed:
            try:
                event: ServerSentEvent | ChatChunk
                if isinstance(self._events, Iterator):
                    event = next(self._events)
                else:
                    event = await self._events.__anext__()
                chunk = self._parse(event)
            except (StopIteration, StopAsyncIteration):
                await self.aclose()
                if not self.complete:
                    raise self._cut_off() from None
                break
            except httpx.TransportError as exc:
                await self.aclose()
                raise self._transport_error(exc, started=True) from None
            except BaseException:
                await self.aclose()
                raise
            if chunk is _DONE:
                await self._drain()
                break
            if isinstance(chunk, ChatChunk):
                return chunk
        await self.aclose()
        raise StopAsyncIteration

    async def _drain(self) -> None:
        """Read what follows ``[DONE]`` (the body's end), so the connection can be reused."""
        events = self._events
        if isinstance(events, Iterator):
            return

        async def to_the_end() -> None:
            async for _ in events:
                pass

        with contextlib.suppress(Exception):  # not drained: the connection is dropped, as before
            await asyncio.wait_for(to_the_end(), DRAIN_SECONDS)

    async def read(self) -> str:
        """Read the rest of the reply and return the whole text."""
        async for _ in self:
            pass
        return self.text

    async def __aenter__(self) -> AsyncChatStream:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()
