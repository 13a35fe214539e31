"""Servers for the benchmarks, each in its own subprocess so it never shares a GIL with the load.

A real cloud is another machine; a server thread in the benchmark's own process would make the
client pay for the server's CPU time too. ``ServerProcess("sandbox")`` serves the sandbox (key
:data:`KEY`, instances pending for 10 minutes; ``ServerProcess("sandbox", "counted")`` also
counts the instance lists it is sent, ``GET /bench/lists``); ``ServerProcess("hello")`` a bare
Starlette app answering ``GET /hello``; ``ServerProcess("offers", "10000", "3")`` one answering
``GET /gpu-cloud/instances/offers`` with :func:`benchmarks._offers.make_offers` of those
sizes, as one ready body. All are served the same way: uvicorn on a loopback socket, no access
log. ``ServerProcess("distant", PORT, MS)`` is no server but a TCP relay to ``127.0.0.1:PORT``
that delivers every byte ``MS`` milliseconds late each way: a server a network away (a cloud's
API in another building or region), where the loopback sandbox answers in a millisecond or two.

    >>> server = ServerProcess("sandbox")
    >>> httpx.get(server.url + "/gpu-cloud/instances", headers={"x-api-key": KEY})
    >>> server.close()
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["KEY", "ManagementProcess", "ServerProcess", "cpu_seconds", "percentile", "serve_app",
           "write_keys"]

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-sandbox-key-0123456789"


def _serve(kind: str, *args: str) -> None:
    """Subprocess side: serve ``kind`` (see above), print its URL, run until stdin ends."""
    if kind == "distant":
        import asyncio

        asyncio.run(_distant(int(args[0]), float(args[1]) / 1000))
        return
    if kind == "sandbox" and args == ("counted",):
        from gpucloud_nb.sandbox.app import create_app
        from gpucloud_nb.sandbox.config import SandboxConfig

        serve_app(_CountedLists(create_app(SandboxConfig(api_key=KEY, launch_seconds=600))),
                  "url ")
        return
    if kind == "sandbox":
        from gpucloud_nb.sandbox import Sandbox

        server: Any = Sandbox(api_key=KEY, launch_seconds=600).start()
        print(f"url {server.management_url}", flush=True)
        sys.stdin.read()
        server.stop()
        return

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route


    if kind == "offers":
        import json

        from benchmarks._offers import make_offers

        body = json.dumps(make_offers(*map(int, args))).encode()
        path = "/gpu-cloud/instances/offers"
    else:
        body, path = b'"hello"', "/hello"

    async def answer(request: Request) -> Response:
        return Response(body, media_type="application/json")

    serve_app(Starlette(routes=[Route(path, answer)]), "url ")


async def _distant(port: int, delay: float) -> None:
    """Relay connections to ``127.0.0.1:port``, each chunk delivered ``delay`` s after it came
    (in order, without holding up the chunks behind it: a link's latency, not its bandwidth),
    until stdin ends."""
    import asyncio

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                sink.write(data)
                await sink.drain()
            sink.close()

        delivering = asyncio.create_task(deliver())
        try:
            while data := await source.read(65536):
                queue.put_nowait((loop.time() + delay, data))
        finally:
            queue.put_nowait((loop.time() + delay, b""))
            await delivering

    writers: set[asyncio.StreamWriter] = set()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        writers.update((writer, up_writer))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer),
                             return_exceptions=True)
        writers.difference_update((writer, up_writer))

    loop = asyncio.get_running_loop()
    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print(f"url http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()
    for writer in list(writers):  # the relays end as their connections do, not cancelled
        writer.close()
    deadline = loop.time() + 5
    while writers and loop.time() < deadline:
        await asyncio.sleep(0.01)


class _CountedLists:
    """The sandbox's app, counting the instance lists it is sent: ``GET /bench/lists`` answers
    how many so far (``ServerProcess("sandbox", "counted")``)."""

    def __init__(self, app: Any) -> None:
        self.app, self.lists = app, 0

    def __getattr__(self, name: str) -> Any:  # ``state`` (its store, closed at the end)
        if name == "app":
            raise AttributeError(name)
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            if scope["path"] == "/gpu-cloud/instances":
                self.lists += 1
            elif scope["path"] == "/bench/lists":
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": str(self.lists).encode()})
                return
        await self.app(scope, receive, send)


def serve_app(app: Any, prefix: str) -> None:
    """Serve ``app`` on a free loopback port, print ``prefix`` and its URL, run until stdin ends."""
    from gpucloud_nb.serving import Served

    served = Served.start(app, "127.0.0.1", 0, "benchmark server")
    print(f"{prefix}http://127.0.0.1:{served.port}", flush=True)
    sys.stdin.read()
    served.stop()


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (nearest rank); NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(round(q / 100 * (len(ordered) - 1)), len(ordered) - 1)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux ``/proc``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def write_keys(path: Path, keys: list[str], budget: float) -> Path:
    """A class keys file: one student per key, each with ``budget`` dollars."""
    path.write_text("".join(f"{key} {budget:g} student {n}\n" for n, key in enumerate(keys)),
                    encoding="utf-8")
    return path


class ManagementProcess:
    """A ``gpucloud-nb`` server subprocess that prints ``management: URL`` first (the sandbox,
    the gateway); its other output is drained, and :meth:`close` ends it."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True, env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("management: "):
            self.close()
            raise RuntimeError(f"{' '.join(argv[2:4])} did not start: {line!r}")
        self.url = line.split(": ", 1)[1].strip()
        # uvicorn may log a line per request: read them all, or a full pipe (~64 kB, some 600
        # requests) blocks the server and it stops answering.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


class ServerProcess:
    """A server subprocess; ``url`` waits until it serves."""

    def __init__(self, kind: str, *args: str) -> None:
        self.kind = kind
        self._url = ""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._servers", "--serve", kind, *args], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    @property
    def url(self) -> str:
        if not self._url:
            assert self.process.stdout is not None
            line = self.process.stdout.readline()
            if not line.startswith("url "):
                raise RuntimeError(f"the {self.kind} server did not start")
            self._url = line.split()[1]
        return self._url

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "--serve":
    _serve(*sys.argv[2:])
