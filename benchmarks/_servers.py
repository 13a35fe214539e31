"""Servers for the benchmarks, each in its own subprocess so it never shares a GIL with the load.

A real cloud is another machine; a server thread in the benchmark's own process would make the
client pay for the server's CPU time too. ``ServerProcess("sandbox")`` serves the sandbox (key
:data:`KEY`, instances pending for 10 minutes); ``ServerProcess("hello")`` a bare
Starlette app answering ``GET /hello``; ``ServerProcess("offers", "10000", "3")`` one answering
``GET /gpu-cloud/instances/offers`` with :func:`benchmarks._offers.make_offers` of those
sizes, as one ready body. All are served the same way: uvicorn on a loopback socket, no access
log.

    >>> server = ServerProcess("sandbox")
    >>> httpx.get(server.url + "/gpu-cloud/instances", headers={"x-api-key": KEY})
    >>> server.close()
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["KEY", "ServerProcess"]

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-sandbox-key-0123456789"


def _serve(kind: str, *args: str) -> None:
    """Subprocess side: serve ``kind`` (see above), print its URL, run until stdin ends."""
    if kind == "sandbox":
        from gpucloud_nb.sandbox import Sandbox

        server: Any = Sandbox(api_key=KEY, launch_seconds=600).start()
        print(f"url {server.management_url}", flush=True)
        sys.stdin.read()
        server.stop()
        return

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from gpucloud_nb.sandbox.server import _bind

    if kind == "offers":
        import json

        from benchmarks._offers import make_offers

        body = json.dumps(make_offers(*map(int, args))).encode()
        path = "/gpu-cloud/instances/offers"
    else:
        body, path = b'"hello"', "/hello"

    async def answer(request: Request) -> Response:
        return Response(body, media_type="application/json")

    sock = _bind("127.0.0.1", 0)
    config = uvicorn.Config(Starlette(routes=[Route(path, answer)]), lifespan="off",
                            log_config=None, log_level="warning", access_log=False)
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.005)
    print(f"url http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    sys.stdin.read()
    uv.should_exit = True
    thread.join(5)


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
