"""A Jupyter kernel on a sandbox instance, started and driven with jupyter_client over real SSH.

The kernels here are started by ``jupyter_client.KernelManager`` from the kernelspec that
``gpucloud_nb.kernel.install_kernel`` writes, as JupyterLab would; the provisioner is found through
the ``jupyter_client.kernel_provisioners`` entry point of pyproject.toml.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helpers
import psutil
import pytest
from helpers import as_other_user, wait_for
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import AsyncKernelManager, KernelManager

from gpucloud_nb import GPUCloud, KernelStartError, connect
from gpucloud_nb.client.remote import default_public_key
from gpucloud_nb.errors import GPUCloudError, InvalidInputError
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.sandbox import Sandbox


@pytest.fixture(autouse=True)
def _entry_point(kernel_provisioner_entry_point: Path | None) -> None:
    """The provisioner is found by its entry point, as in JupyterLab."""


@pytest.fixture(autouse=True)
def jupyter_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Kernelspecs go to a temporary JUPYTER_DATA_DIR, never the user's."""
    folder = tmp_path / "jupyter-data"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(folder))
    return folder


@pytest.fixture
def box(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[GPUCloud]:
    """A client of an in-process sandbox, reached the real cloud's way (key and URL from the
    environment, which is also how the provisioner in the Jupyter server finds it)."""
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    with GPUCloud() as cloud:
        yield cloud


def launch(cloud: GPUCloud, name: str = "kernel-test", *, wait: bool = True) -> Any:
    """The shared launch (active unless ``wait=False``) with the key the client offers over SSH
    (a sandbox's client needs none)."""
    start = helpers.launch_active if wait else helpers.launch
    return start(cloud, name, ssh_key=None if cloud.is_sandbox else default_public_key(None))


@pytest.fixture
def notebook_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "my project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "numbers.csv").write_text("a,b\n1,2\n")
    (folder / ".env").write_text("TOKEN=never-copied\n")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / "x-checkpoint.ipynb").write_text("{}")
    return folder


class Kernel:
    """A started remote kernel: its manager, a blocking client, and the output of a cell."""

    def __init__(self, name: str, cwd: Path | None) -> None:
        self.manager = KernelManager(kernel_name=name)
        self.manager.start_kernel(**({} if cwd is None else {"cwd": str(cwd)}))
        self.client: BlockingKernelClient = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 30) -> tuple[str, str]:
        """The reply status (``ok``/``error``) and everything the cell printed or returned."""
        out: list[str] = []

        def hook(message: dict[str, Any]) -> None:
            content = message["content"]
            if "text" in content:
                out.append(content["text"])
            elif "data" in content:
                out.append(content["data"].get("text/plain", ""))
            elif "ename" in content:
                out.append(content["ename"])

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=hook)
        return reply["content"]["status"], "".join(out)

    def shutdown(self) -> None:
        self.client.stop_channels()
        if self.manager.has_kernel:
            self.manager.shutdown_kernel(now=False)


@pytest.fixture
def kernels() -> Iterator[Callable[[str, Path | None], Kernel]]:
    started: list[Kernel] = []

    def start(name: str, cwd: Path | None = None) -> Kernel:
        kernel = Kernel(name, cwd)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.shutdown()


def kernel_processes(instance_id: str) -> list[psutil.Process]:
    """ipykernel processes started on the sandbox instance ``instance_id``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if "ipykernel_launcher" not in " ".join(process.info.get("cmdline") or []):
            continue
        try:
            if process.environ().get("GPUCLOUD_INSTANCE_ID") == instance_id:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def sockets(info: dict[str, Any]) -> list[str]:
    """The local ends of a kernel's five channels: Unix socket paths (ZeroMQ's ipc)."""
    assert info["transport"] == "ipc"
    return [f"{info['ip']}-{info[name]}" for name in PORTS]


def listening(path: str) -> bool:
    """True when a connection to the Unix socket ``path`` is accepted."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


def test_the_kernel_runs_on_the_instance_in_the_notebook_folder(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    instance = launch(box)
    name = install_kernel(box, instance.name)
    kernel = kernels(name, notebook_folder)

    status, out = kernel.run("import os; print(os.environ['GPUCLOUD_INSTANCE_ID']); "
                             "print(os.getcwd()); print(os.environ['HOME'])")
    assert status == "ok"
    instance_id, cwd, home = out.split()
    assert instance_id == instance.id
    assert Path(cwd).parent == Path(home) and Path(cwd).name == "my-project"
    assert Path(home).name == instance.id  # the instance home, not this process's

    assert kernel.run("rows = open('data/numbers.csv').read().split()") == ("ok", "")
    assert kernel.run("import os; print(rows, sorted(os.listdir('.')))") == (
        "ok", "['a,b', '1,2'] ['data']\n")  # hidden files and checkpoints stayed home

    status, out = kernel.run("!nvidia-smi")
    assert status == "ok" and instance.gpu_model in out


def test_a_folder_of_100k_files_neither_stalls_jupyter_nor_keeps_the_kernel_waiting(
        box: GPUCloud, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook in a home-like folder: the walk runs off Jupyter's event loop and stops at
    the file cap, environments stay here, and the files go over in one archive.

    No fixed clock: the walk's own start and end are noted as it runs (the real walk, wrapped),
    and Jupyter's loop must have kept ticking in between, about as often as while it waits
    for nothing (a walk on the loop lets no tick in)."""
    from gpucloud_nb.kernel import sync

    folder = tmp_path / "home-like"
    (folder / "many").mkdir(parents=True)
    (folder / "node_modules" / "pkg").mkdir(parents=True)
    (folder / "node_modules" / "pkg" / "index.js").write_text("x")
    for index in range(100_000):
        os.close(os.open(folder / "many" / f"{index:06}", os.O_CREAT | os.O_WRONLY, 0o644))
    instance = launch(box)
    name = install_kernel(box, instance.id)
    walks: list[tuple[float, float]] = []
    real_plan = sync.plan

    def noted_plan(*args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        try:
            return real_plan(*args, **kwargs)
        finally:
            walks.append((began, time.monotonic()))

    monkeypatch.setattr(sync, "plan", noted_plan)

    async def start() -> list[float]:
        loop = asyncio.get_running_loop()  # its clock is time.monotonic()
        ticks: list[float] = []

        async def tick() -> None:
            while True:
                await asyncio.sleep(0.05)
                ticks.append(loop.time())

        manager = AsyncKernelManager(kernel_name=name)
        ticker = asyncio.create_task(tick())
        try:
            await asyncio.wait_for(manager.start_kernel(cwd=str(folder)), 180)
        finally:
            ticker.cancel()
            if manager.has_kernel:
                await manager.shutdown_kernel(now=True)
        return ticks

    with caplog.at_level(logging.INFO):
        started = time.monotonic()
        ticks = asyncio.run(start())
    assert len(walks) == 1
    began, ended = walks[0]
    during = [moment for moment in ticks if began < moment < ended]
    print(f"100k files: start and shutdown in {time.monotonic() - started:.1f} s; the walk took "
          f"{ended - began:.2f} s, Jupyter's loop ticked {len(during)} times meanwhile "
          f"({len(ticks) / max(ticks[-1] - ticks[0], 1e-9):.1f}/s over the whole start; "
          f"load {os.getloadavg()[0]:.1f})")
    assert ended - began > 0.2  # a walk long enough for a loop that waits on it to show it
    assert len(during) >= 2  # the loop kept answering while the folder was walked
    copied = box.instances.run(instance.id, "ls home-like/many | wc -l; ls home-like").stdout
    assert copied.split() == ["5000", "many"]
    assert "Stopped at 5000 files" in caplog.text
    assert "Skipped 1 environment or cache folder(s), which belong to this machine: " \
           "node_modules." in caplog.text


PROBE = """
import json, socket, sys
info, opened = json.loads(sys.argv[1]), []
for name in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
    if info["transport"] == "ipc":
        probe, address = socket.socket(socket.AF_UNIX), f"{info['ip']}-{info[name]}"
    else:
        probe, address = socket.socket(), (info["ip"], int(info[name]))
    try:
        probe.connect(address)
        opened.append(name)
    except OSError:
        pass
print(json.dumps(opened))
"""


def test_another_local_user_cannot_open_the_kernels_channels(box: GPUCloud, kernels: Any) -> None:
    """IOPub carries every cell's code and output, signed but not encrypted: the local ends
    are Unix sockets only this user can open, not loopback TCP ports anyone can."""
    kernel = kernels(install_kernel(box, launch(box).id))
    assert kernel.run("1 + 1") == ("ok", "2")
    info = kernel.manager.get_connection_info()
    shown = {"transport": info["transport"], "ip": info["ip"], **{n: info[n] for n in PORTS}}

    command = as_other_user([sys.executable, "-I", "-c", PROBE, json.dumps(shown)])
    probe = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)

    assert json.loads(probe.stdout) == []
    paths = sockets(info)
    assert stat.S_IMODE(os.stat(Path(paths[0]).parent).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(path).st_mode) == 0o600 for path in paths)
    assert all(listening(path) for path in paths)  # this user's own client gets through
    assert kernel.run("print('still here')") == ("ok", "still here\n")


def test_interrupt_stops_a_busy_cell_within_2_s_and_the_kernel_lives_on(
        box: GPUCloud, kernels: Any) -> None:
    kernel = kernels(install_kernel(box, launch(box).id))
    assert kernel.run("x = 7")[0] == "ok"
    kernel.client.execute("while True: pass")
    time.sleep(0.5)
    started = time.monotonic()
    kernel.manager.interrupt_kernel()
    reply = kernel.client.get_shell_msg(timeout=10)
    assert time.monotonic() - started < 2
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # ipykernel aborts a request that reaches it in its after-error window (stop_on_error); on a
    # loaded machine the next cell can land there (seen once in a full run): one abort, not more.
    answer = kernel.run("print(x * 6)")
    if answer == ("aborted", ""):
        answer = kernel.run("print(x * 6)")
    assert answer == ("ok", "42\n")


def test_after_the_server_drops_ssh_the_next_cell_runs_with_its_variables(
        sandbox: Sandbox, box: GPUCloud, kernels: Any) -> None:
    instance = launch(box)
    kernel = kernels(install_kernel(box, instance.id))
    assert kernel.run("kept = 'still here'")[0] == "ok"

    forwards = kernel.manager.provisioner._forwards
    before = set(forwards.writers)  # the connections accepted on the local sockets
    assert before

    server = sandbox.app.state.ssh.server(instance.id)
    dropped = list(server.connections)
    assert dropped
    for connection in dropped:
        connection._loop.call_soon_threadsafe(connection.abort)
    wait_for(lambda: not any(c in server.connections for c in dropped), 5)
    # The client has seen the drop once its connections to the local sockets are gone (a
    # request sent in that very instant is lost, as through any tunnel).
    wait_for(lambda: not before & set(forwards.writers), 5)

    started = time.monotonic()
    assert kernel.run("print(kept)", timeout=10) == ("ok", "still here\n")
    assert time.monotonic() - started < 10
    assert kernel.manager.is_alive()


def test_shutdown_leaves_no_kernel_process_and_no_local_listener(
        box: GPUCloud, kernels: Any) -> None:
    instance = launch(box)
    kernel = kernels(install_kernel(box, instance.id))
    assert kernel.run("1 + 1") == ("ok", "2")
    info = kernel.manager.get_connection_info()
    ports = sockets(info)
    assert len(kernel_processes(instance.id)) == 1
    assert all(listening(port) for port in ports)

    kernel.shutdown()

    assert kernel_processes(instance.id) == []
    assert not any(listening(port) for port in ports)
    assert box.instances.get(instance.id).status == "active"  # on_shutdown="keep"


def test_on_shutdown_delete_deletes_the_sandbox_instance(
        sandbox_home: Path, monkeypatch: pytest.MonkeyPatch, kernels: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("GPUCLOUD_SANDBOX_LAUNCH_SECONDS", "0.3")
    cloud = connect(quiet=True)
    try:
        instance = launch(cloud, "delete-me")
        name = install_kernel(cloud, "delete-me", on_shutdown="delete")
        kernel = kernels(name)
        assert kernel.run("import os; print(os.environ['GPUCLOUD_INSTANCE_ID'])") == (
            "ok", f"{instance.id}\n")
        with caplog.at_level(logging.INFO):
            kernel.shutdown()
        assert cloud.instances.get(instance.id).status in ("deleting", "deleted")
        assert f"Instance delete-me ({instance.id}) is delet" in caplog.text
        assert kernel_processes(instance.id) == []
    finally:
        cloud.close()


def stop_ssh(sandbox: Sandbox, instance_id: str) -> None:
    """Stop the instance's SSH server and drop its connections; the instance stays active, so
    every reconnect is refused (each one costs the client its ~9 s of tries)."""
    server = sandbox.app.state.ssh.server(instance_id)
    loop = next(iter(server.connections))._loop

    async def deaf() -> None:
        server.acceptor.close()
        await server.acceptor.wait_closed()
        for connection in list(server.connections):
            connection.abort()

    asyncio.run_coroutine_threadsafe(deaf(), loop).result(10)


def test_without_ssh_poll_answers_at_once_and_shutdown_still_deletes(
        sandbox: Sandbox, box: GPUCloud, kernels: Any) -> None:
    instance = launch(box, "deaf-box")
    kernel = kernels(install_kernel(box, instance.id, on_shutdown="delete"))
    assert kernel.run("1 + 1") == ("ok", "2")
    info = kernel.manager.get_connection_info()
    ports = sockets(info)

    stop_ssh(sandbox, instance.id)
    time.sleep(3)  # ZeroMQ knocks on every forward: reconnects are under way (and refused)
    polls = []
    for _ in range(3):
        started = time.monotonic()
        assert kernel.manager.is_alive()  # the instance is there: taken as alive
        polls.append(time.monotonic() - started)
    # Well under one reconnect's ~9 s of tries: poll never waits for SSH.
    assert max(polls) < 6

    started = time.monotonic()
    kernel.shutdown()  # interrupt and signals cannot be sent: shutdown goes on all the same
    print(f"SSH down: is_alive() took at most {max(polls):.2f} s, shutdown "
          f"{time.monotonic() - started:.1f} s")

    assert box.instances.get(instance.id).status in ("deleting", "deleted")
    assert not any(listening(port) for port in ports)
    assert not kernel.manager.has_kernel


def test_a_kernel_seen_dead_stays_dead_when_ssh_then_drops(
        sandbox: Sandbox, box: GPUCloud, kernels: Any) -> None:
    """jupyter_client's shutdown calls the provisioner's ``wait()`` once a poll has seen an
    exit, and ``wait()`` polls until it sees one again: an exit seen must stay seen, or a
    shutdown with SSH down (the kernel then counts as alive) waits forever (a CI run: 300 s)."""
    instance = launch(box, "dies-then-deaf")
    kernel = kernels(install_kernel(box, instance.id))
    assert kernel.run("1 + 1") == ("ok", "2")
    for process in kernel_processes(instance.id):
        process.kill()
    wait_for(lambda: not kernel.manager.is_alive(), timeout=60,
             what=lambda: "the killed kernel was still seen alive")

    stop_ssh(sandbox, instance.id)
    for _ in range(3):
        assert not kernel.manager.is_alive()
    started = time.monotonic()
    kernel.shutdown()
    assert not kernel.manager.has_kernel
    print(f"shutdown of a dead kernel with SSH down: {time.monotonic() - started:.1f} s")


def test_a_poll_cut_off_by_a_dropped_connection_is_not_an_exit(
        box: GPUCloud, kernels: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection cut under ``kill -0`` leaves no output and no exit status: that is no
    answer (the kernel lives on), not the kernel's death. A server cannot be made to cut a
    connection at that exact moment, so the cut is stood in for."""
    from gpucloud_nb.client.run_output import RunResult

    instance = launch(box, "cut-poll")
    kernel = kernels(install_kernel(box, instance.id))
    assert kernel.run("1 + 1") == ("ok", "2")
    remote = kernel.manager.provisioner._remote

    async def cut(*args: Any, **kwargs: Any) -> RunResult:
        return RunResult("", "", -1)

    monkeypatch.setattr(remote, "run_async", cut)
    assert kernel.manager.is_alive()
    monkeypatch.undo()
    assert kernel.run("2 + 2") == ("ok", "4")


def test_an_instance_deleted_under_its_kernel_is_answered_for_and_shuts_down_now(
        box: GPUCloud, kernels: Any) -> None:
    """A stand-in answers for the lost kernel (tests/test_kernel_standin.py): it is alive to
    jupyter_client, answers polls at once, and a shutdown now stops it."""
    instance = launch(box, "vanishing")
    kernel = kernels(install_kernel(box, instance.id))
    assert kernel.run("1 + 1") == ("ok", "2")
    info = kernel.manager.get_connection_info()
    ports = sockets(info)

    box.instances.delete(instance.id)
    wait_for(lambda: kernel.manager.provisioner.lost != "", 60)
    started = time.monotonic()
    assert kernel.manager.is_alive()
    assert time.monotonic() - started < 6
    assert all(listening(port) for port in ports)

    kernel.client.stop_channels()
    kernel.manager.shutdown_kernel(now=True)
    assert not any(listening(port) for port in ports)
    assert not kernel.manager.has_kernel


def one_sentence(error: BaseException) -> str:
    text = str(error)
    assert isinstance(error, GPUCloudError), repr(error)
    assert "\n" not in text and text.endswith(".") and "Traceback" not in text
    return text


def test_starting_a_kernel_whose_instance_is_gone_says_so(box: GPUCloud) -> None:
    instance = launch(box, "gone-soon")
    name = install_kernel(box, instance.id)
    box.instances.delete(instance.id)
    manager = KernelManager(kernel_name=name)
    with pytest.raises(InvalidInputError) as raised:
        manager.start_kernel()
    text = one_sentence(raised.value)
    assert "gone-soon" in text and re.search("is delet|no longer exists", text)
    assert "cannot start" in text


def test_a_pending_instance_is_waited_for(sandbox_factory: Any, monkeypatch: pytest.MonkeyPatch,
                                          kernels: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Long enough to be still pending when the kernel starts on a busy machine: the kernel's
    # client first finds or starts the personal gateway (a process of its own).
    sandbox = sandbox_factory(launch_seconds=15)
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    with GPUCloud() as cloud:
        instance = launch(cloud, "slow-start", wait=False)
        assert cloud.instances.get(instance.id).status == "pending"
        with caplog.at_level(logging.INFO):
            kernel = kernels(install_kernel(cloud, "slow-start"))
        assert "is pending; waiting until it is active" in caplog.text
        assert kernel.run("import os; print(os.environ['GPUCLOUD_INSTANCE_ID'])") == (
            "ok", f"{instance.id}\n")


@pytest.mark.parametrize(("python3", "expected"), [
    ("exit 127", "has no working python3"),
    # A Python without site-packages: no ipykernel, and no pip to install it with.
    (f"exec {sys.executable} -S \"$@\"", "Could not install ipykernel on instance"),
], ids=["no-python3", "no-ipykernel-no-pip"])
def test_an_instance_that_cannot_run_ipykernel_is_one_sentence(
        sandbox: Sandbox, box: GPUCloud, python3: str, expected: str) -> None:
    instance = launch(box, "no-python")
    shim = sandbox.app.state.ssh.server(instance.id).bin / "python3"
    shim.write_text(f"#!/bin/sh\n{python3}\n")
    manager = KernelManager(kernel_name=install_kernel(box, instance.id))
    with pytest.raises(KernelStartError) as raised:
        manager.start_kernel()
    assert expected in one_sentence(raised.value)
    assert "no-python" in str(raised.value)
    assert kernel_processes(instance.id) == []


def test_a_folder_that_cannot_be_copied_is_one_sentence(box: GPUCloud,
                                                      notebook_folder: Path) -> None:
    instance = launch(box, "no-room")
    box.instances.run(instance.id, "touch my-project")  # a file where the folder should go
    manager = KernelManager(kernel_name=install_kernel(box, instance.id))
    with pytest.raises(KernelStartError) as raised:
        manager.start_kernel(cwd=str(notebook_folder))
    assert one_sentence(raised.value).startswith(
        "Could not copy the notebook's folder to the instance: ")
    assert kernel_processes(instance.id) == []


def test_a_restart_starts_a_fresh_kernel_behind_the_same_local_ports(
        box: GPUCloud, kernels: Any) -> None:
    instance = launch(box)
    kernel = kernels(install_kernel(box, instance.id))
    assert kernel.run("import glob, os; lost = 1; print([oct(os.stat(p).st_mode & 0o777) for p "
                      "in glob.glob(os.path.expanduser('~/.local/share/jupyter/runtime/*.json'))"
                      "])") == ("ok", "['0o600']\n")  # the key's file is the user's alone
    before = kernel.manager.get_connection_info()
    first = [p.pid for p in kernel_processes(instance.id)]

    kernel.manager.restart_kernel(now=False)
    kernel.client.wait_for_ready(timeout=60)

    assert kernel.run("print('lost' in globals())") == ("ok", "False\n")
    assert kernel.manager.get_connection_info() == before
    assert all(listening(path) for path in sockets(before))  # listened on again at once
    after = [p.pid for p in kernel_processes(instance.id)]
    assert len(after) == 1 and after != first


def test_a_cloud_kernel_without_a_key_in_the_server_says_so(
        box: GPUCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    instance = launch(box, "keyless")
    name = install_kernel(box, instance.id)
    monkeypatch.delenv("GPUCLOUD_API_KEY")
    with pytest.raises(InvalidInputError) as raised:
        KernelManager(kernel_name=name).start_kernel()
    assert one_sentence(raised.value) == (
        f"Instance keyless ({instance.id}) is on the cloud and this Jupyter server has no "
        "GPUCLOUD_API_KEY; set it (and GPUCLOUD_BASE_URL) before starting Jupyter.")
