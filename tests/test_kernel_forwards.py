"""The kernel's forwarded channels (:mod:`gpucloud_nb.kernel.forwards`) across an SSH drop, with
a real kernel on a sandbox instance started by ``jupyter_client.KernelManager``.

After a drop every subscriber reconnects on its own ZeroMQ clock, and a reconnected subscriber's
own ``SUBSCRIBE`` goes out only when the thread that owns its socket next calls into it (traced
byte by byte: a ``BlockingKernelClient`` waiting in ``get_shell_msg`` sent it 10 s later, just
after the reply), so a cell's output went to whichever subscriber was back first (the busy
watcher's) and was lost for the user's. The forwards subscribe each one at its handshake and
hold requests until every cut subscriber is back.
"""

from __future__ import annotations

import queue
import time
from typing import Any

import test_kernel_provisioner as base
import zmq
from helpers import wait_for
from jupyter_client.blocking.client import BlockingKernelClient

from gpucloud_nb import GPUCloud
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.kernel.forwards import Subscribe
from gpucloud_nb.sandbox import Sandbox

_entry_point, jupyter_data, box = base._entry_point, base.jupyter_data, base.box
kernels, launch = base.kernels, base.launch

#: How long the user's IOPub waits before it reconnects (ZeroMQ's default is 0.1 s): the busy
#: watcher's IOPub, on the default, is back well before it.
_SLOW_MS = 2000


class SlowIOPubClient(BlockingKernelClient):
    """A client whose IOPub reconnects after :data:`_SLOW_MS`, as a busy client's may."""

    def connect_iopub(self, identity: bytes | None = None) -> zmq.Socket[Any]:
        sock = self.context.socket(zmq.SUB)
        sock.linger = 1000
        sock.setsockopt(zmq.RECONNECT_IVL, _SLOW_MS)
        sock.connect(self._make_url("iopub"))
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        return sock


def test_after_an_ssh_drop_a_cell_waits_for_the_users_iopub_not_the_busy_watchers(
        sandbox: Sandbox, box: GPUCloud, kernels: Any) -> None:
    instance = launch(box)
    kernel = kernels(install_kernel(box, instance.id))
    assert kernel.manager.provisioner._executing is not None  # the busy watcher listens too
    client = SlowIOPubClient()
    client.load_connection_info(kernel.manager.get_connection_info())
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        assert client.execute_interactive("kept = 'still here'", timeout=30)[
            "content"]["status"] == "ok"

        forwards = kernel.manager.provisioner._forwards
        before = set(forwards.writers)
        server = sandbox.app.state.ssh.server(instance.id)
        dropped = list(server.connections)
        assert dropped
        for connection in dropped:
            connection._loop.call_soon_threadsafe(connection.abort)
        wait_for(lambda: not before & set(forwards.writers), 10)

        msg_id = client.execute("print(kept)")
        reply = client.get_shell_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "ok"
        printed: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                message = client.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])
            if (message["msg_type"] == "status"
                    and message["content"]["execution_state"] == "idle"):
                break
        assert "".join(printed) == "still here\n"  # the output reached the user's own client
    finally:
        client.stop_channels()


_GREETING = b"\xff" + bytes(8) + b"\x7f\x03\x01NULL" + bytes(16) + b"\x00" + bytes(31)
_READY = b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03SUB"
_KERNEL = _GREETING + b"\x04\x1a\x05READY\x0bSocket-Type\x00\x00\x00\x04XPUB"
_OWN = b"\x04\x0a\x09SUBSCRIBE"  # the subscriber's own subscription


def test_a_subscriber_is_subscribed_once_between_frames_after_both_readys() -> None:
    sent = _GREETING + _READY + _OWN + b"\x00\x02\x01a"
    for step in (1, 3, 10, 64, len(sent)):
        subscribe = Subscribe()
        assert subscribe.kernel(_KERNEL) == b""  # the subscriber's READY is not there yet
        out = b"".join(subscribe.client(sent[at:at + step]) for at in range(0, len(sent), step))
        assert out == _GREETING + _READY + Subscribe.ALL + _OWN + b"\x00\x02\x01a"
        assert subscribe.sent


def test_a_subscriber_is_not_subscribed_before_the_kernels_ready() -> None:
    # the kernel takes a message before its own READY for a protocol error and hangs up
    subscribe = Subscribe()
    assert subscribe.client(_GREETING + _READY + _OWN[:5]) == _GREETING + _READY + _OWN[:5]
    assert subscribe.kernel(_KERNEL) == b""  # the subscriber is in the middle of a frame
    assert subscribe.client(_OWN[5:]) == _OWN[5:] + Subscribe.ALL
    assert subscribe.sent
    subscribe = Subscribe()
    assert subscribe.client(_GREETING + _READY) == _GREETING + _READY
    assert subscribe.kernel(_KERNEL[:70]) == b""
    assert subscribe.kernel(_KERNEL[70:]) == Subscribe.ALL


def test_a_handshake_that_is_not_zmtps_is_left_alone() -> None:
    subscribe = Subscribe()
    junk = bytes(64) + b"\x00\xff" + bytes(5000)
    assert subscribe.client(junk) == junk
    assert subscribe.done and not subscribe.sent and subscribe.client(b"more") == b"more"
