"""SSH forwards serve this user only: another local user's connection is closed (Linux)."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import as_other_user, launch_active

from gpucloud_nb import GPUCloud
from gpucloud_nb.client import local_peer

pytestmark = pytest.mark.usefixtures("own_home")  # see tests/conftest.py

LINUX = Path("/proc/net/tcp").exists()


def test_the_owner_of_a_loopback_connection_is_found() -> None:
    if not LINUX:
        pytest.skip("the owners of sockets are read from /proc/net/tcp")
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        host, port = client.getsockname()
        assert local_peer.same_user(host, port)
        assert local_peer.owners("127.0.0.1", 1) == set()
        assert not local_peer.same_user("127.0.0.1", 1)
    assert not local_peer.same_user("not an address", 5)


@pytest.fixture
def page() -> Iterator[int]:
    """A loopback HTTP server (the port of a dashboard on the sandbox instance, which is this
    machine) that answers every GET with ``secret page``."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "11")
            self.end_headers()
            self.wfile.write(b"secret page")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


FETCH = ("import sys, urllib.request\n"
         "try:\n"
         "    print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())\n"
         "except Exception as error:\n"
         "    print('refused', type(error).__name__)\n")


def test_a_forward_answers_this_user_and_not_another(box: GPUCloud, page: int) -> None:
    """#34: the dashboard's forward was readable by any local user."""
    command = as_other_user([sys.executable, "-c", FETCH])  # skips where it cannot
    if not LINUX:
        pytest.skip("the owners of sockets are read from /proc/net/tcp")
    instance = launch_active(box)
    with box.instances.forward(instance.id, page) as url:
        assert httpx.get(url).text == "secret page"
        other = subprocess.run([*command, url], capture_output=True, text=True, timeout=60)
        assert other.stdout.startswith("refused "), (other.stdout, other.stderr[-2000:])
        assert httpx.get(url).text == "secret page"  # still served to this user
