"""Widgets leave no thread behind: on close(), once garbage-collected, and at kernel shutdown.

Against a sandbox over real HTTP. The threads of the widgets are named ``gpucloud-nb-*`` and
``gpucloud-chat-loop``; the launch thread of a form and the chat's shared loop thread count too.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable

import helpers
import httpx
import pytest
from ipywidgets.widgets import widget as ipywidget_module

from gpucloud_nb import GPUCloud, InferenceClient
from gpucloud_nb.widgets import InstancesPanel, OffersBrowser


def wait_for(condition: Callable[[], bool], timeout: float = 6.0) -> None:
    helpers.wait_for(condition, timeout, what=lambda: (
        f"threads: {ours()}; all: {[t.name for t in threading.enumerate()]}"))


LOOP = "gpucloud-chat-loop"
NOT_WIDGETS = ("gpucloud-nb-ssh", "AnyIO worker thread", "asyncio_")
WIDGET_THREADS = ("gpucloud-nb-instances-refresh", "gpucloud-nb-launch", "gpucloud-chat-loop")


def ours() -> list[str]:
    """The widgets' threads now alive (not the sandbox's)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(WIDGET_THREADS))


def collected(dropped: weakref.ref[object]) -> bool:
    gc.collect()  # a refresh in progress holds the widget for a moment: ask again until done
    return dropped() is None


def widgets_now() -> set[str]:
    return set(ipywidget_module._instances)


def forget(since: set[str]) -> None:
    """Drop ipywidgets' own references to the widgets made after ``since``, as a weak registry
    would (its registry's and the comms').

    ipywidgets keeps every widget until ``close()``; this leaves the test's reference the last
    one, so that deleting it really lets the widget be garbage-collected.
    """
    for model_id in widgets_now() - since:
        part = ipywidget_module._instances.pop(model_id)
        if part.comm is not None:
            part.comm.on_msg(None)  # the comm manager keeps the comm, no longer the widget


@pytest.mark.slow  # 20-35 s: the full run has it, the fast lane does not
def test_closing_20_panels_and_browsers_leaves_no_thread(sandbox_factory) -> None:
    sandbox = sandbox_factory(launch_seconds=60)  # instances stay pending: panels poll, forms wait
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        helpers.launch(cloud, "watched")
        warm = InferenceClient(sandbox.inference_url, sandbox.inference_secret)
        warm.chat("Hello!")  # the sandbox's own worker thread starts here, not below
        warm.close()
        from gpucloud_nb.widgets._chat_turn import LoopThread

        others_chatting = len(LoopThread._users) > 0
        baseline = threading.active_count()
        before = ours()
        panels = [InstancesPanel(cloud, interval=0.05) for _ in range(20)]
        # A debounce no loaded machine outlasts: the redraws must still be pending at the close.
        browsers = [OffersBrowser(cloud, debounce=3600) for _ in range(20)]
        for number, browser in enumerate(browsers):
            browser.set_filters(deployment_type="vm")
            browser.min_gpus.value = 2  # a debounced redraw waits in a timer thread
            if number < 3:  # a form that is waiting for its instance to become active
                offer = browser.frame.iloc[0]
                form = browser.select(str(offer["instanceId"]), region=str(offer["region"]),
                                      provider=str(offer["providerId"]))
                form.fill(name=f"form-{number}")
                form.launch()
        from gpucloud_nb.widgets.chat import ChatWidget

        chats = [ChatWidget(InferenceClient(sandbox.inference_url, sandbox.inference_secret))
                 for _ in range(2)]
        for chat in chats:
            chat.send("Hello!").wait(timeout=30)
        wait_for(lambda: ours().count("gpucloud-nb-launch") == 3)
        assert ours().count("gpucloud-nb-instances-refresh") == 20
        assert "gpucloud-chat-loop" in ours()
        assert all(browser._debouncer.pending for browser in browsers)

        for widget in [*panels, *browsers, *chats]:
            widget.close()
        if others_chatting:  # chats another test left open rightly keep the loop thread
            wait_for(lambda: [n for n in ours() if n != LOOP] == [n for n in before if n != LOOP])
        else:
            # Not a widget's: the client's SSH loop (the form asked for the ssh command; it ends
            # with cloud.close()), and the in-process sandbox's pools (its SSH servers started).
            wait_for(lambda: ours() == before and len(
                [t for t in threading.enumerate() if not t.name.startswith(NOT_WIDGETS)])
                <= baseline)


class CountingTransport(httpx.HTTPTransport):
    """The real transport, counting the requests it sends to the sandbox."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


def test_a_dropped_panel_is_collected_and_stops_polling(sandbox_factory) -> None:
    sandbox = sandbox_factory(launch_seconds=60)
    counter = CountingTransport()
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url,
                  transport=counter) as cloud:
        helpers.launch(cloud, "pending")
        existing = widgets_now()
        refreshing = ours().count("gpucloud-nb-instances-refresh")  # other tests' open panels
        panel = InstancesPanel(cloud, interval=0.05)
        assert panel.auto_refreshing
        sent = counter.sent
        wait_for(lambda: counter.sent >= sent + 4)  # it polls
        forget(existing)
        dropped = weakref.ref(panel)
        del panel
        wait_for(lambda: collected(dropped), timeout=120)  # a refresh under way holds it
        wait_for(lambda: ours().count("gpucloud-nb-instances-refresh") <= refreshing, timeout=120)
        sent = counter.sent
        time.sleep(0.4)  # eight intervals
        assert counter.sent == sent


def test_a_dropped_launch_form_stops_waiting(sandbox_factory) -> None:
    from gpucloud_nb.widgets import LaunchForm, WaitStopped

    sandbox = sandbox_factory(launch_seconds=60)
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
        existing = widgets_now()
        form = LaunchForm(cloud, offer).fill(name="dropped")
        future = form.launch()
        dropped = weakref.ref(form)
        wait_for(lambda: getattr(dropped(), "instance", None) is not None)
        forget(existing)
        del form
        wait_for(lambda: collected(dropped))
        with pytest.raises(WaitStopped, match="Stopped waiting"):
            future.result(timeout=5)
        wait_for(lambda: "gpucloud-nb-launch" not in ours())
        assert [i.status for i in cloud.instances.list()] == ["pending"]  # it keeps launching


SHUTDOWN = textwrap.dedent(f"""
    import atexit, threading, time

    def threads_left():  # registered first, so it runs last: after gpucloud_nb's own handlers
        deadline = time.monotonic() + 30
        left = ["?"]
        while left and time.monotonic() < deadline:
            left = sorted(t.name for t in threading.enumerate()
                          if t.name.startswith(WIDGET_THREADS))
            time.sleep(0.02)
        print("left:", ",".join(left), flush=True)

    atexit.register(threads_left)
    WIDGET_THREADS = {WIDGET_THREADS!r}

    from gpucloud_nb import GPUCloud, InferenceClient
    from gpucloud_nb.sandbox import Sandbox
    from gpucloud_nb.widgets import InstancesPanel, LaunchForm
    from gpucloud_nb.widgets.chat import ChatWidget

    box = Sandbox(launch_seconds=60).start()
    cloud = GPUCloud(api_key=box.api_key, base_url=box.management_url)
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    form = LaunchForm(cloud, offer).fill(name="waiting")
    form.launch()
    while form.instance is None:  # the panel then sees a pending instance and keeps polling
        time.sleep(0.02)
    panel = InstancesPanel(cloud, interval=0.05)
    chat = ChatWidget(InferenceClient(box.inference_url, box.inference_secret))
    chat.send("Hello!").wait(timeout=30)
    assert panel.auto_refreshing
    print("running:", sorted(t.name for t in threading.enumerate()
                             if t.name.startswith(WIDGET_THREADS)), flush=True)
    # the script ends with every widget open, as a kernel shutting down does
""")


def test_kernel_shutdown_stops_every_widget_thread() -> None:
    done = subprocess.run([sys.executable, "-c", SHUTDOWN], env=helpers.without_settings(),
                          capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gpucloud-nb-instances-refresh" in done.stdout and "gpucloud-nb-launch" in done.stdout
    assert "gpucloud-chat-loop" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "left:", done.stdout
