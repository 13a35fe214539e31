"""Checkpoints in the background (``%gpucloud checkpoint --every``) in a real kernel on a sandbox
instance, started by ``jupyter_client.KernelManager`` from the kernelspec, over real SSH.

The interval is 2 s so the test is short; the deadlines are generous (the machine is loaded).
"""

from __future__ import annotations

import gc
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import test_kernel_provisioner as base
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.kernel import install_kernel, namespace

_entry_point, jupyter_data, box = base._entry_point, base.jupyter_data, base.box
kernels, notebook_folder, launch = base.kernels, base.notebook_folder, base.launch


def saved(folder: Path) -> dict[str, Any]:
    """Each checkpoint in the folder now, by name: its ``x`` (files pruned meanwhile skipped)."""
    found = {}
    for path in sorted((folder / ".gpucloud" / "checkpoints").glob("*.gpucloud")):
        try:
            found[path.name] = namespace.load(path).values.get("x")
        except OSError:  # pruned while read
            continue
    return found


def test_every_checkpoints_only_while_idle_keeps_the_newest_and_stops_when_off(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    kernel = kernels(install_kernel(box, launch(box, "every-box").id), notebook_folder)
    status, out = kernel.run("%load_ext gpucloud_nb\nx = 'before'\n"
                             "%gpucloud checkpoint --every 2s --keep 3")
    assert status == "ok"
    assert out == ("Checkpoints every 2s while this kernel is idle (after a cell ran), newest 3 "
                   "kept in .gpucloud/checkpoints/; stop with %gpucloud checkpoint --every off.\n")
    wait_for(lambda: "before" in saved(notebook_folder).values(), 120)

    # A cell that runs for a while: no checkpoint reads its variables half-way.
    msg_id = kernel.client.execute("import time\nx = 'during'\ntime.sleep(8)\nx = 'after'")
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + 180
    while True:
        seen.update(saved(notebook_folder))
        assert len(list((notebook_folder / ".gpucloud" / "checkpoints").glob("*.gpucloud"))) <= 3
        if "after" in seen.values() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    reply = kernel.client.get_shell_msg(timeout=60)
    assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "ok"
    assert "after" in seen.values()  # right after the cell
    assert "during" not in seen.values()
    assert len(list((notebook_folder / ".gpucloud" / "checkpoints").iterdir())) <= 3

    status, out = kernel.run("%gpucloud checkpoint --every")
    assert status == "ok" and out.startswith("Checkpoints every 2s while idle: ") \
        and " made, the last " in out and "failure" not in out

    status, out = kernel.run("%gpucloud checkpoint --every off")
    assert status == "ok" and out.startswith("Background checkpoints stopped (")
    kernel.run("x = 'later'")
    stopped = set(saved(notebook_folder))
    time.sleep(8)  # four intervals: nothing more is made (an absence has no condition to wait on)
    assert set(saved(notebook_folder)) == stopped
    assert "later" not in saved(notebook_folder).values()


def test_a_shutdown_mid_copy_ends_the_copy_quietly_and_keeps_the_last_checkpoint(
        box: GPUCloud, notebook_folder: Path, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    """A kernel shut down while ``--every`` copies a checkpoint: no traceback anywhere, one log
    line at most about the copy, no partial file left, the checkpoint before it unchanged."""
    folder = notebook_folder / ".gpucloud" / "checkpoints"
    kernel = base.Kernel(install_kernel(box, launch(box, "cut-box").id), notebook_folder)
    try:
        status, _ = kernel.run("%load_ext gpucloud_nb\nx = 'before'\n"
                               "%gpucloud checkpoint --every 1s --keep 3")
        assert status == "ok"
        wait_for(lambda: "before" in saved(notebook_folder).values(), 120)
        kept = {path.name: path.read_bytes() for path in folder.glob("*.gpucloud")}
        # A namespace that takes a while to copy: the next checkpoint is cut by the shutdown.
        status, _ = kernel.run("import numpy\nbig = numpy.random.default_rng(0).random("
                               "25_000_000)\nx = 'during'", timeout=120)
        assert status == "ok"
        wait_for(lambda: any(folder.glob(".*gpucloud-partial")), 180)
        capfd.readouterr()
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            kernel.client.stop_channels()
            kernel.manager.shutdown_kernel(now=False)
            gc.collect()  # a task destroyed while pending, or never awaited, says so here
            time.sleep(1)  # what a thread or the SSH loop logs after the shutdown returned
    finally:
        kernel.shutdown()
    out, err = capfd.readouterr()
    shown = caplog.text + out + err
    assert "Traceback" not in shown, shown
    assert "never retrieved" not in shown and "was destroyed" not in shown, shown
    said = [record.getMessage() for record in caplog.records
            if not record.name.startswith("asyncssh") and "cop" in record.getMessage().lower()]
    assert len(said) <= 1, said
    assert not any(folder.glob(".*partial")), list(folder.iterdir())
    now = {path.name: path.read_bytes() for path in folder.glob("*.gpucloud")}
    assert set(now) - set(kept) == set() or all(  # a checkpoint that finished is whole
        namespace.load(folder / name).values.get("x") == "during" for name in set(now) - set(kept))
    assert all(now.get(name) == data for name, data in kept.items())
