"""Benchmark: what the chat widget sends to the browser while a long reply streams.

A fake OpenAI-compatible server (:class:`FakeChatServer`: Starlette served by uvicorn on a free
loopback port, real HTTP and server-sent events) streams a 4,000-token Markdown reply (headings,
paragraphs, lists, code blocks; deterministic seed) at 500 tokens per second to a
:class:`~gpucloud_nb.widgets.chat.ChatWidget` with no kernel attached. Every comm message the
widgets publish (``comm_open``, ``comm_msg``, ``comm_close``) is caught at the comm layer
(``comm.DummyComm.publish_msg``) and its JSON size counted, buffers included.

Figures (one line each: name, ours, baseline, ratio, target; rows carry a sixth element, the
unit, for ``python -m benchmarks``):

- updates/s: ``value`` updates of the reply's HTML widgets per second of streaming, against
  one update per token (what writing every token to the widget would do). Target ≤ 12 a second.
- bytes: every comm byte published for the streaming reply's widgets (its message box, sub-boxes
  and block widgets: openings, updates, closings, message framing included), against the final
  reply's length in characters. Target: ratio ≤ 3×.
- panel: every comm byte the whole panel published while the reply streamed (the user's
  message, the status line, the Stop button too), same length; no target (it includes fixed
  costs that weigh on a short reply).
- values: only the ``value`` strings sent to the reply's widgets, against the same length.
  Target: ratio ≤ 3×.
- naive: our bytes against one HTML widget per message re-rendered whole 10 times a second
  (its update messages alone); no target, for scale.
- the same figures for a worst case: the reply is one 4,000-word paragraph.
- flush cost: what one update of the streaming reply costs the kernel (the appends since the
  last flush, then the flush: freeze, render, sanitise, set the widget), for a reply that is one
  paragraph with a stray ``*`` early (which used to stop every cut), fed in ~40-character tokens
  with a flush every 400 characters (4,000 chars/s at 10 updates/s; no server, no sleeping):
  the mean of 25 flushes when the reply reaches its full length (1.6 MB) against the same
  near 10 kB. Target: ratio ≤ 2× (flat: the open tail is capped).
- render time per MB of the whole 1.6 MB reply against that of its first 16 kB. Target ≤ 2×.
- stop: seconds from ``stop()`` to the turn's end, after 1 MB of such a reply has streamed
  from :class:`FakeChatServer` at 40,000 tokens/s. Target ≤ 1 s.

Run standalone with ``python -m benchmarks.bench_chat`` (about 40 s: each reply streams ~8 s).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["CommRecorder", "FakeChatServer", "flush_costs", "markdown_reply", "run", "stop_seconds",
           "stray_star_reply", "stream_reply"]

QUICK = {"tokens": 400, "worst_case": False, "render_chars": 160_000, "stop_after": 100_000}

Row = tuple[str, float, float, float, str, str]
Message = tuple[float, str, str, dict[str, Any], int]

_TEXT = ("the model reads each token and the widget shows it as soon as a block is complete "
         "while the kernel stays free for other cells so a student can keep working during a "
         "long answer about GPUs memory bandwidth tensor cores batch size latency throughput "
         "and the price per hour of an instance")
_WORDS = _TEXT.split()


def markdown_reply(tokens: int = 4000, seed: int = 0, *, one_paragraph: bool = False) -> list[str]:
    """A deterministic Markdown reply split into word tokens (``" word"``), like a chat stream."""
    rng = random.Random(seed)
    pieces: list[str] = []

    def words(n: int) -> str:
        text = " ".join(rng.choice(_WORDS) for _ in range(n))
        return text[0].upper() + text[1:] + "."

    if one_paragraph:
        sentences = []
        while sum(len(s.split()) for s in sentences) < tokens:
            sentences.append(words(rng.randint(8, 20)))
        pieces.append(" ".join(sentences))
    else:
        while sum(len(p.split()) for p in pieces) < tokens:
            kind = rng.random()
            if kind < 0.1:
                pieces.append("## " + words(rng.randint(2, 5)).rstrip("."))
            elif kind < 0.55:
                pieces.append(" ".join(words(rng.randint(8, 20)) for _ in range(rng.randint(2, 6))))
            elif kind < 0.8:
                pieces.append("\n".join("- " + words(rng.randint(5, 15))
                                        for _ in range(rng.randint(3, 6))))
            else:
                lines = [f"x_{i} = compute({i}, batch={rng.randint(1, 64)})  # step {i}"
                         for i in range(rng.randint(4, 12))]
                pieces.append("```python\n" + "\n".join(lines) + "\n```")
    text = "\n\n".join(pieces)
    # tokens: a run of whitespace then a run of non-whitespace, as the sandbox streams them
    return re.findall(r"\s*\S+", text)[:tokens]


class FakeChatServer:
    """A tiny OpenAI-compatible server that streams ``tokens`` at ``tokens_per_second``.

    ``GET /v1/models`` lists ``fake-chat-1``; ``POST /v1/chat/completions`` streams the tokens
    (or returns them whole without ``"stream": true``); ``requests`` counts chat requests,
    ``bodies`` keeps their JSON bodies and ``ports`` the client's port of each. ``status`` other
    than 200 answers every chat request with that status and an OpenAI-style error body.
    ``cut_off=True`` ends each stream after the tokens, without the ``finish_reason`` chunk and
    ``[DONE]`` (as a proxy that cuts it would).
    ``fail_with`` is an error message: sent as the error body's message when ``status`` is not
    200, else as an ``{"error": ...}`` event after the tokens (an engine failing mid-stream).

        >>> with FakeChatServer(["Hello", " world"]) as server:
        ...     InferenceClient(server.url, "any-secret").chat("Hi").text
        'Hello world'
    """

    MODEL = "fake-chat-1"

    def __init__(self, tokens: Sequence[str] = ("Hello",), tokens_per_second: float = 0.0, *,
                 status: int = 200, secret: str = "fake-secret", cut_off: bool = False,
                 fail_with: str | None = None) -> None:
        self.tokens = list(tokens)
        self.cut_off = cut_off
        self.fail_with = fail_with
        self.tokens_per_second = tokens_per_second
        self.status = status
        self.secret = secret
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []
        self.ports: list[int] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def _app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        def error(status: int, message: str) -> JSONResponse:
            return JSONResponse({"error": {"message": message, "type": "fake", "code": None}},
                                status_code=status)

        async def models(request: Request) -> Any:
            if request.headers.get("x-api-key") != self.secret:
                return error(401, "Invalid API secret.")
            return JSONResponse({"object": "list", "data": [{"id": self.MODEL, "object": "model"}]})

        async def chat(request: Request) -> Any:
            self.requests += 1
            body = await request.json()
            self.bodies.append(body)
            self.ports.append(request.client.port if request.client else 0)
            if request.headers.get("x-api-key") != self.secret:
                return error(401, "Invalid API secret.")
            if self.status != 200:
                return error(self.status, self.fail_with or f"Fake failure {self.status}.")
            head = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": self.MODEL}
            if not body.get("stream"):
                return JSONResponse({"id": "chatcmpl-fake", "object": "chat.completion",
                                     "model": self.MODEL, "choices": [{
                                         "index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant",
                                                     "content": "".join(self.tokens)}}]})

            async def events() -> Any:
                def event(delta: dict[str, Any], reason: str | None = None) -> bytes:
                    data = {**head, "choices": [{"index": 0, "delta": delta,
                                                 "finish_reason": reason}]}
                    return f"data: {json.dumps(data)}\n\n".encode()

                yield event({"role": "assistant", "content": ""})
                start = time.monotonic()
                for index, token in enumerate(self.tokens):
                    if self.tokens_per_second:
                        delay = start + (index + 1) / self.tokens_per_second - time.monotonic()
                        await asyncio.sleep(max(0.0, delay))
                    yield event({"content": token})
                if self.fail_with:
                    failure = {"error": {"message": self.fail_with, "type": "fake", "code": None}}
                    yield f"data: {json.dumps(failure)}\n\n".encode()
                elif not self.cut_off:
                    yield event({}, "stop")
                    yield b"data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/models", models),
                                 Route("/v1/chat/completions", chat, methods=["POST"])])

    def start(self) -> FakeChatServer:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="fake-chat-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("The fake chat server did not start.")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CommRecorder:
    """Every comm message widgets publish: ``(time, msg_type, comm_id, data, bytes)``."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()

    def record(self, comm: Any, msg_type: str, data: Any, buffers: Any) -> None:
        size = len(json.dumps(data or {}, default=str))
        size += sum(len(memoryview(b).cast("B")) for b in (buffers or []))
        with self._lock:
            self.messages.append((time.monotonic(), msg_type, comm.comm_id, data or {}, size))

    def since(self, start: float, end: float = float("inf")) -> list[Message]:
        with self._lock:
            return [m for m in self.messages if start <= m[0] <= end]

    def value_updates(self, comm_ids: set[str], start: float = 0.0,
                      end: float = float("inf")) -> list[Message]:
        return [m for m in self.since(start, end) if m[1] == "comm_msg" and m[2] in comm_ids
                and "value" in (m[3].get("state") or {})]


@contextmanager
def recording() -> Iterator[CommRecorder]:
    """Catch every comm message published by widgets made without a kernel."""
    import comm

    recorder = CommRecorder()
    original = comm.DummyComm.publish_msg

    def publish(self: Any, msg_type: str, data: Any = None, metadata: Any = None,
                buffers: Any = None, **keys: Any) -> None:
        recorder.record(self, msg_type, data, buffers)
        return original(self, msg_type, data, metadata, buffers, **keys)

    comm.DummyComm.publish_msg = publish  # type: ignore[method-assign]
    try:
        yield recorder
    finally:
        comm.DummyComm.publish_msg = original  # type: ignore[method-assign]


def _last_reply(chat: Any) -> Any:
    return [w for w in chat.message_widgets if "gpucloud-chat-message-assistant" in w._dom_classes][-1]


def reply_widget_ids(chat: Any) -> set[str]:
    """Comm ids of the HTML widgets of the chat's last assistant message."""
    import ipywidgets as widgets

    from gpucloud_nb.widgets._layout import iter_widgets

    return {w.model_id for w in iter_widgets(_last_reply(chat)) if isinstance(w, widgets.HTML)}


def reply_tree_ids(chat: Any) -> set[str]:
    """Comm ids of every widget of the last assistant message (its box, sub-boxes and blocks),
    without the layout and style models it shares with the panel's other messages."""
    import ipywidgets as widgets

    from gpucloud_nb.widgets._layout import iter_widgets

    return {w.model_id for w in iter_widgets(_last_reply(chat))
            if not isinstance(w, widgets.Layout | widgets.Style)}


def stream_reply(tokens: Sequence[str], tokens_per_second: float,
                 on_start: Callable[[Any], None] | None = None) -> dict[str, float]:
    """Stream one reply into a fresh ChatWidget and measure what was sent to the front end."""
    from gpucloud_nb.client.inference import InferenceClient
    from gpucloud_nb.widgets._markdown import render_markdown
    from gpucloud_nb.widgets.chat import ChatWidget

    with FakeChatServer(tokens, tokens_per_second) as server, recording() as recorder:
        chat = ChatWidget(InferenceClient(server.url, server.secret))
        if on_start is not None:
            on_start(chat)
        start = time.monotonic()
        turn = chat.send("Explain GPUs at length.").wait(timeout=120)
        end = time.monotonic()
        text = turn.text
        ids = reply_widget_ids(chat)
        updates = recorder.value_updates(ids, start, end)
        messages = recorder.since(start, end)
        first = min((m[0] for m in messages if m[2] in ids), default=start)
        seconds = max(end - first, 1e-9)
        panel = sum(m[4] for m in messages)
        tree = reply_tree_ids(chat)
        sent = sum(m[4] for m in messages if m[2] in tree)
        value_bytes = sum(len(m[3]["state"]["value"]) for m in messages
                          if m[2] in ids and "value" in (m[3].get("state") or {}))
        # baseline: one HTML widget per message, re-rendered whole 10 times a second
        baseline = 0
        prefix_sizes = _prefix_sizes(tokens, round(seconds * 10))
        for size_text in prefix_sizes:
            baseline += len(json.dumps({"method": "update", "state": {"value": render_markdown(size_text)},
                                        "buffer_paths": []}))
        chat.close()
    return {"seconds": seconds, "updates": len(updates), "updates_per_second": len(updates) / seconds,
            "tokens_per_second_seen": len(tokens) / seconds, "bytes": sent, "panel_bytes": panel,
            "value_bytes": value_bytes, "text_chars": len(text), "baseline_bytes": baseline,
            "widgets": len(ids), "status": turn.status == "done"}


def _prefix_sizes(tokens: Sequence[str], flushes: int) -> list[str]:
    """The reply as it stood at ``flushes`` evenly spaced moments (the last one: all of it)."""
    flushes = max(flushes, 1)
    out = []
    for k in range(1, flushes + 1):
        out.append("".join(tokens[: round(len(tokens) * k / flushes)]))
    return out


def stray_star_reply(chars: int) -> list[str]:
    """One paragraph of about ``chars`` characters with a stray ``*`` early, in ~40-char tokens."""
    tokens = [" A stray * star, then sentences."]
    length = len(tokens[0])
    while length < chars:
        tokens.append(f" Sentence number {len(tokens):07d} has a few words.")
        length += len(tokens[-1])
    return tokens


def flush_costs(chars: int, flush_every: int = 400) -> tuple[list[tuple[int, float]], float]:
    """Feed :func:`stray_star_reply` to a streaming reply's view, flushing every ``flush_every``
    characters: ``([(reply length, seconds of appends + flush)], total seconds)``."""
    import ipywidgets as widgets
    from ipywidgets.widgets.widget_string import HTMLStyle

    from gpucloud_nb.widgets._chat_reply import ReplyView

    view = ReplyView(widgets.Layout(), HTMLStyle(), widgets.Layout())
    costs: list[tuple[int, float]] = []
    length = since = 0
    clock = time.perf_counter
    started = mark = clock()
    for token in stray_star_reply(chars):
        view.append(token)
        length += len(token)
        since += len(token)
        if since >= flush_every:
            view.flush()
            now = clock()
            costs.append((length, now - mark))
            mark, since = now, 0
    view.finish()
    total = clock() - started
    for block in view.blocks:
        block.close()
    view.box.close()
    return costs, total


def _mean_near(costs: list[tuple[int, float]], length: int, count: int = 25) -> tuple[float, int]:
    """Mean cost of the ``count`` flushes ending at ``length`` characters, and where they end.

    A mean, not a median: the flushes that freeze a piece (a new widget) are counted too."""
    upto = [c for c in costs if c[0] <= length] or costs[:count]
    window = [c[1] for c in upto[-count:]]
    return sum(window) / len(window), upto[-1][0]


def stop_seconds(chars: int, tokens_per_second: float = 40_000) -> tuple[float, int]:
    """Seconds from ``stop()`` to the end of the turn once ``chars`` of a fast reply arrived."""
    from gpucloud_nb.client.inference import InferenceClient
    from gpucloud_nb.widgets.chat import ChatWidget

    with FakeChatServer(stray_star_reply(chars * 2), tokens_per_second) as server:
        chat = ChatWidget(InferenceClient(server.url, server.secret))
        try:
            turn = chat.send("Write at length.")
            deadline = time.monotonic() + 120
            while len(turn.text) < chars and not turn.done() and time.monotonic() < deadline:
                time.sleep(0.005)
            streamed = len(turn.text)
            start = time.perf_counter()
            chat.stop()
            turn.wait(120)
            return time.perf_counter() - start, streamed
        finally:
            chat.close()


def render_rows(render_chars: int = 1_600_000, stop_after: int = 1_000_000) -> list[Row]:
    """The flush-cost, whole-render and Stop figures (see the module docstring)."""
    flush_costs(20_000)  # warm up (imports, first widgets), so the early figures are fair
    costs, total = flush_costs(render_chars)
    early, early_at = _mean_near(costs, 10_000)
    late, late_at = _mean_near(costs, render_chars)
    what = "one paragraph, stray * early, a flush per 400 chars"
    rows: list[Row] = [(f"chat flush cost at {late_at / 1e6:.2g} MB of reply vs at {early_at / 1e3:.2g} kB "
                        f"({what})", late, early, late / early, "<= 2x", "s")]
    first = sum(cost for length, cost in costs if length <= 16_000)
    first_chars = max((length for length, _ in costs if length <= 16_000), default=1)
    per_mb, first_per_mb = total / render_chars * 1e6, first / first_chars * 1e6
    rows.append((f"chat render time per MB: whole {render_chars / 1e6:.2g} MB reply vs its first "
                 f"{first_chars / 1e3:.2g} kB ({what})", per_mb, first_per_mb, per_mb / first_per_mb,
                 "<= 2x", "s"))
    seconds, streamed = stop_seconds(stop_after)
    rows.append((f"chat stop() to turn end after {streamed / 1e6:.2g} MB streamed at 40,000 tokens/s "
                 "vs 1 s", seconds, 1.0, seconds, "<= 1000 ms", "s"))
    return rows


def run(tokens: int = 4000, tokens_per_second: float = 500.0, *, worst_case: bool = True,
        render_chars: int = 1_600_000, stop_after: int = 1_000_000) -> list[Row]:
    """Stream the reply (and the worst case) and return rows (name, ours, baseline, ratio, target, unit)."""
    rows: list[Row] = render_rows(render_chars, stop_after)
    cases = [("markdown", markdown_reply(tokens))]
    if worst_case:
        cases.append(("one paragraph", markdown_reply(tokens, one_paragraph=True)))
    for label, reply in cases:
        f = stream_reply(reply, tokens_per_second)
        what = f"{len(reply):,} tokens at {tokens_per_second:g}/s, {label}"
        per_token = f["tokens_per_second_seen"]
        rows.append((f"chat updates/s vs one per token ({what})", f["updates_per_second"], per_token,
                     f["updates_per_second"] / per_token, "<= 12 per second", "/s"))
        chars = f["text_chars"]
        rows.append((f"chat bytes to front end for the reply vs its chars ({what}; {f['widgets']} blocks)",
                     f["bytes"], chars, f["bytes"] / chars, "<= 3x", "B"))
        rows.append((f"chat bytes of the whole panel during the reply vs reply chars ({what})",
                     f["panel_bytes"], chars, f["panel_bytes"] / chars, "", "B"))
        rows.append((f"chat HTML values sent vs reply chars ({what})", f["value_bytes"], chars,
                     f["value_bytes"] / chars, "<= 3x", "B"))
        rows.append((f"chat reply bytes vs one widget re-rendered 10/s ({what})", f["bytes"],
                     f["baseline_bytes"], f["bytes"] / f["baseline_bytes"], "", "B"))
    return rows


def main() -> None:
    """Print one line per figure: name, ours, baseline, ratio, target."""
    for name, ours, baseline, ratio, target, unit in run():
        print(f"{name}: ours {ours:,.2f} {unit}, baseline {baseline:,.2f} {unit}, "
              f"ratio {ratio:.3f}, target {target or '-'}")


if __name__ == "__main__":
    main()
