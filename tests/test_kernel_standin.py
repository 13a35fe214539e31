"""A kernel whose instance is lost: its next execution says so, with the exact restore line.

Driven as in the other kernel tests: ``jupyter_client.KernelManager`` from the kernelspec, a
real kernel on a sandbox instance, real SSH. A plain ``KernelManager`` polls nobody, so these
tests never call ``is_alive``: they wait until the provisioner's own watch has found the loss
(a cell sent before that runs on the old kernel, which the sandbox stops a moment after the
delete), then run the next cell.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import test_kernel_provisioner as base
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.sandbox import Sandbox

_entry_point, jupyter_data, box = base._entry_point, base.jupyter_data, base.box
kernels, notebook_folder = base.kernels, base.notebook_folder
kernel_processes, launch = base.kernel_processes, base.launch


def run(kernel: Any, code: str, timeout: float = 120) -> tuple[dict[str, Any], list[Any]]:
    """The reply's content and every output message (type, content) of one cell."""
    outputs: list[Any] = []

    def hook(message: dict[str, Any]) -> None:
        if message["msg_type"] in ("stream", "error", "execute_result", "display_data"):
            outputs.append((message["msg_type"], message["content"]))

    reply = kernel.client.execute_interactive(code, timeout=timeout, output_hook=hook)
    return reply["content"], outputs


def checkpointed(kernel: Any, folder: Path) -> str:
    """Make a checkpoint in the kernel; its stem."""
    assert kernel.run("%load_ext gpucloud_nb\nkept = 7\n%gpucloud checkpoint",
                      timeout=120)[0] == "ok"
    saved = next((folder / ".gpucloud" / "checkpoints").iterdir()).name
    return saved.removesuffix(".gpucloud")


def test_after_a_delete_from_outside_the_next_cell_says_so_with_the_restore_line(
        box: GPUCloud, notebook_folder: Path, kernels: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    lost = launch(box, "standin-box")
    kernel = kernels(install_kernel(box, lost.id), notebook_folder)
    stem = checkpointed(kernel, notebook_folder)
    caplog.set_level("WARNING")

    box.instances.delete(lost.id)  # from outside; nothing here polls the kernel
    wait_for(lambda: kernel.manager.provisioner.lost != "", 120)  # its own watch found it
    reply, outputs = run(kernel, "print(kept)")

    sentence = (f"Instance standin-box ({lost.id}) was deleted from outside this notebook, so "
                "its kernel and variables are gone; to launch an instance like it and restore "
                f"checkpoint {stem} (0 min old), run %gpucloud restore {stem} --gpu "
                f"{shlex.quote(lost.gpu_model)} in a kernel on another instance.")
    assert outputs == [("error", {"ename": "InstanceLost", "evalue": sentence,
                                  "traceback": [sentence]})]  # one line, no traceback
    assert reply["status"] == "error" and reply["evalue"] == sentence
    assert run(kernel, "1 + 1")[0]["evalue"] == sentence  # every later cell, too
    said = [r.getMessage() for r in caplog.records if "gpucloud restore" in r.getMessage()]
    assert said == [f"gpucloud-nb: {sentence}"]  # the log says it once
    assert kernel.manager.is_alive()  # no restart loop: the stand-in answers
    assert "standin-box" not in [i.name for i in box.instances.list()
                                 if i.status not in ("deleting", "deleted")]

    paths = base.sockets(kernel.manager.get_connection_info())
    assert all(base.listening(path) for path in paths)
    kernel.shutdown()  # a shutdown request stops the stand-in; its sockets go
    assert not kernel.manager.is_alive()
    assert not any(Path(path).exists() for path in paths)


def test_under_nbclient_the_next_cell_fails_with_the_sentence(
        box: GPUCloud, notebook_folder: Path) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    lost = launch(box, "nbclient-standin")
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext gpucloud_nb\nkept = 7\n%gpucloud checkpoint"),
        nbformat.v4.new_code_cell("print(kept)")])
    client = NotebookClient(notebook, kernel_name=install_kernel(box, lost.id), timeout=120,
                            resources={"metadata": {"path": str(notebook_folder)}})
    with client.setup_kernel():
        client.execute_cell(notebook.cells[0], 0)
        box.instances.delete(lost.id)  # from outside, between two cells
        wait_for(lambda: client.km.provisioner.lost != "", 120)  # nbclient polls nobody
        with pytest.raises(CellExecutionError) as raised:
            client.execute_cell(notebook.cells[1], 1)
    assert f"Instance nbclient-standin ({lost.id}) was deleted" in str(raised.value)
    assert "%gpucloud restore " in str(raised.value)
    assert notebook.cells[1].outputs[0]["ename"] == "InstanceLost"


def test_an_instance_unreachable_for_the_set_time_counts_as_lost(
        sandbox: Sandbox, box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    cloud = box
    dark = launch(cloud, "dark-box")
    kernel = kernels(install_kernel(cloud, dark.id), notebook_folder)
    stem = checkpointed(kernel, notebook_folder)
    provisioner = kernel.manager.provisioner
    provisioner.lost_after = 6.0  # settable; 5 min unless set

    base.stop_ssh(sandbox, dark.id)  # the network to it fails; the kernel runs on
    wait_for(lambda: provisioner.lost != "", 120)
    _, outputs = run(kernel, "print(kept)")

    sentence = (f"Instance dark-box ({dark.id}) has not answered over SSH for 6 s (it still "
                "exists and bills until you delete it: %gpucloud delete dark-box), so this "
                "kernel and its variables count as lost; to launch an instance like it and "
                f"restore checkpoint {stem} (0 min old), run %gpucloud restore {stem} --gpu "
                f"{shlex.quote(dark.gpu_model)} in a kernel on another instance.")
    assert outputs == [("error", {"ename": "InstanceLost", "evalue": sentence,
                                  "traceback": [sentence]})]
    assert cloud.instances.get(dark.id).status == "active"  # named as billing, not deleted
    assert kernel_processes(dark.id) != []  # the kernel was only cut off



def test_under_jupyterlabs_restarter_the_kernel_is_not_restarted_and_the_cell_says_so(
        box: GPUCloud, notebook_folder: Path) -> None:
    """JupyterLab's kernel manager with its restarter (polling ``is_alive`` every 3 s): no
    "restart" or "dead" event follows the loss; the next cell gets the sentence."""
    import asyncio

    from jupyter_client.ioloop import AsyncIOLoopKernelManager

    lost = launch(box, "lab-standin")
    name = install_kernel(box, lost.id)

    async def scenario() -> tuple[list[str], dict[str, Any]]:
        manager = AsyncIOLoopKernelManager(kernel_name=name)
        await manager.start_kernel(cwd=str(notebook_folder))
        events: list[str] = []
        manager.add_restart_callback(lambda: events.append("restart"), "restart")
        manager.add_restart_callback(lambda: events.append("dead"), "dead")
        manager.start_restarter()
        client = manager.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=120)
            await client.execute_interactive("kept = 7", timeout=120)
            box.instances.delete(lost.id)
            deadline = asyncio.get_running_loop().time() + 120
            while not manager.provisioner.lost:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.2)
            await asyncio.sleep(10)  # three of the restarter's polls (an absence: no condition)
            reply = await client.execute_interactive("print(kept)", timeout=120,
                                                     output_hook=lambda message: None)
            return events, reply["content"]
        finally:
            client.stop_channels()
            manager.stop_restarter()
            await manager.shutdown_kernel(now=True)

    events, content = asyncio.run(scenario())
    assert events == []
    assert content["status"] == "error" and content["ename"] == "InstanceLost"
    assert content["evalue"].startswith(f"Instance lab-standin ({lost.id}) was deleted from "
                                        "outside this notebook")
