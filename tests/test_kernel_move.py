"""Checkpoint, restore and move a kernel on a sandbox instance, driven as JupyterLab drives it:
``jupyter_client.KernelManager`` from the kernelspec, real kernels, real SSH.

The large array is 200 MB (float64 ones), as the issue asks.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import test_kernel_provisioner as base
from helpers import wait_for

from gpucloud_nb import GPUCloud
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.kernel.spec import display_name_of
from tests.samples import NOTEBOOK_DEFINITIONS

# The provisioner tests' fixtures and helpers, used by name here.
_entry_point, jupyter_data, box = base._entry_point, base.jupyter_data, base.box
kernels, notebook_folder = base.kernels, base.notebook_folder
kernel_processes, launch = base.kernel_processes, base.launch

BIG = 25_000_000  # float64: 200 MB

SETUP = f"""
%load_ext gpucloud_nb
import numpy as np, pandas as pd, os
count, text = 42, "héllo"
frame = pd.DataFrame({{"a": [1, 2, 3], "b": ["x", "y", "z"]}})
small = np.arange(1000.0)
big = np.ones({BIG})
{NOTEBOOK_DEFINITIONS}point = Point(3, 4)
square = lambda v: v * v
log = open("moved.log", "w")
"""

CHECK = ("import json, os; print(json.dumps([os.environ['GPUCLOUD_INSTANCE_ID'], count, text, "
         "frame.to_dict(), float(small.sum()), big.shape[0], float(big.sum()), double(21), "
         "point.norm(), isinstance(point, Point), square(5), np.__name__, 'log' in globals()]))")


def expected(instance_id: str, log: bool) -> list[Any]:
    return [instance_id, 42, "héllo", {"a": {"0": 1, "1": 2, "2": 3}, "b": {"0": "x", "1": "y",
            "2": "z"}}, 499500.0, BIG, float(BIG), 42, 5.0, True, 25, "numpy", log]


def state(kernel: Any) -> list[Any]:
    status, out = kernel.run(CHECK, timeout=60)
    assert status == "ok", out
    return json.loads(out)


def live(cloud: GPUCloud) -> list[str]:
    """Names of the instances still billing (not deleting or deleted)."""
    return sorted(i.name for i in cloud.instances.list() if i.status not in ("deleting",
                                                                             "deleted"))


def test_a_move_carries_everything_but_the_file_and_deletes_the_old_instance(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    old, new = launch(box, "from-box"), launch(box, "to-box")
    name = install_kernel(box, old.id)
    kernel = kernels(name, notebook_folder)
    assert kernel.run(SETUP, timeout=120)[0] == "ok"
    info = kernel.manager.get_connection_info()

    status, out = kernel.run("%gpucloud move to-box", timeout=600)

    assert status == "ok", out
    assert "Moving 12 names, 200 MB: big (200 MB)" in out  # the size, before anything moves
    assert "Cannot move: log (an open file)." in out
    assert "Copying 200 MB from from-box" in out and "copied: 200 MB of 200 MB" in out
    assert f"Moved to to-box ({new.id})" in out and "12 names restored" in out
    assert f"Instance from-box ({old.id}) is deleted." in out
    wait_for(lambda: kernel_processes(old.id) == [], 60)  # the swap is done (a person's pause)
    # The next cell runs on the new instance, with every variable but the open file.
    assert state(kernel) == expected(new.id, log=False)
    assert kernel.manager.kernel_name == name and kernel.manager.get_connection_info() == info
    assert box.instances.get(old.id).status in ("deleting", "deleted")
    assert len(kernel_processes(new.id)) == 1
    assert "to-box" in display_name_of(name)  # the kernel menu names the new instance
    assert kernel.run("%gpucloud checkpoint")[0] == "ok"  # its relay answers there too
    assert len(list((notebook_folder / ".gpucloud" / "checkpoints").iterdir())) == 1


def test_a_refused_launch_leaves_the_kernel_with_its_variables(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    old = launch(box, "stay-box")
    kernel = kernels(install_kernel(box, old.id), notebook_folder)
    assert kernel.run(SETUP, timeout=120)[0] == "ok"

    status, out = kernel.run("%gpucloud move --gpu NOPE-9000 --max-price 3", timeout=120)

    assert status == "ok"
    assert out.splitlines()[-1] == (
        "The move did not happen (no available offer fits GPU NOPE-9000 at most $3/h): this "
        f"kernel still runs on stay-box ({old.id}) with its variables.")
    assert state(kernel) == expected(old.id, log=True)
    assert live(box) == ["stay-box"]


def test_a_restore_that_raises_leaves_the_kernel_and_deletes_what_it_launched(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    old = launch(box, "fragile-box")
    kernel = kernels(install_kernel(box, old.id), notebook_folder)
    assert kernel.run(SETUP, timeout=120)[0] == "ok"
    assert kernel.run("class Fragile:\n    def __setstate__(self, state):\n"
                      "        raise RuntimeError('not here')\n"
                      "fragile = Fragile(); fragile.x = 1")[0] == "ok"

    status, out = kernel.run("%gpucloud move --max-price 100", timeout=600)

    assert status == "ok"
    last = out.splitlines()[-1]
    assert last.startswith("The move did not happen (fragile could not be restored on ")
    assert "(RuntimeError: not here)): this kernel still runs on fragile-box" in last
    assert "launched for the move, is deleted." in last
    assert state(kernel) == expected(old.id, log=True)
    assert live(box) == ["fragile-box"]  # nothing left billing
    assert len(kernel_processes(old.id)) == 1


def test_a_move_interrupted_mid_copy_leaves_the_kernel_with_its_variables(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    old, new = launch(box, "cut-box"), launch(box, "far-box")
    kernel = kernels(install_kernel(box, old.id), notebook_folder)
    assert kernel.run(SETUP, timeout=120)[0] == "ok"

    seen: list[str] = []
    msg_id = kernel.client.execute("%gpucloud move far-box")
    interrupted = False
    while True:  # the cell's output until it is idle; interrupted once the copy starts
        message = kernel.client.get_iopub_msg(timeout=300)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "stream":
            seen.append(message["content"]["text"])
        if not interrupted and "Copying" in "".join(seen):
            kernel.manager.interrupt_kernel()
            interrupted = True
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    assert interrupted, seen
    assert ("Interrupted: the move stopped, and this kernel still runs here with its "
            "variables.") in "".join(seen)

    assert state(kernel) == expected(old.id, log=True)
    wait_for(lambda: kernel_processes(new.id) == [], 60)  # the new kernel was stopped
    assert live(box) == ["cut-box", "far-box"]  # far-box was named, not launched: kept


def test_a_checkpoint_is_restored_after_its_instance_is_deleted_from_outside(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    lost = launch(box, "lost-box")
    kernel = kernels(install_kernel(box, lost.id), notebook_folder)
    assert kernel.run(SETUP, timeout=120)[0] == "ok"
    for _ in range(3):
        status, out = kernel.run("%gpucloud checkpoint --keep 2", timeout=300)
        assert status == "ok" and "Checkpoint saved to .gpucloud/checkpoints/" in out, out
    assert "Not saved: log (an open file)." in out
    saved = sorted((notebook_folder / ".gpucloud" / "checkpoints").iterdir())
    assert len(saved) == 2 and all("lost-box" in path.name for path in saved)

    box.instances.delete(lost.id)
    wait_for(lambda: kernel.manager.provisioner.lost != "", 60)

    fresh = launch(box, "fresh-box")
    again = kernels(install_kernel(box, fresh.id), notebook_folder)
    status, out = again.run("%load_ext gpucloud_nb\n%gpucloud restore", timeout=300)
    assert status == "ok", out
    assert f"{saved[-1].name}: Restored 12 names" in out
    assert state(again) == expected(fresh.id, log=False)


@pytest.mark.parametrize("line", ["%gpucloud move", "%gpucloud move --max-price nan"])
def test_a_move_without_a_place_is_one_sentence(line: str, box: GPUCloud,
                                                 kernels: Any) -> None:
    kernel = kernels(install_kernel(box, launch(box, "here-box").id))
    status, out = kernel.run(f"%load_ext gpucloud_nb\nkept = 1\n{line}")
    assert status == "ok"
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out
    assert kernel.run("print(kept)") == ("ok", "1\n")


def test_a_kernel_whose_instance_is_lost_names_its_newest_checkpoint(
        box: GPUCloud, notebook_folder: Path, kernels: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    from jupyter_client.manager import KernelManager

    from gpucloud_nb.errors import InvalidInputError

    lost = launch(box, "gone-box")
    name = install_kernel(box, lost.id)
    kernel = kernels(name, notebook_folder)
    assert kernel.run("%load_ext gpucloud_nb\nkept = 7\n%gpucloud checkpoint")[0] == "ok"
    saved = next((notebook_folder / ".gpucloud" / "checkpoints").iterdir()).name
    stem = saved.removesuffix(".gpucloud")
    caplog.set_level("WARNING")
    box.instances.delete(lost.id)  # from outside: the poll that finds it lost says so, once
    wait_for(lambda: kernel.manager.provisioner.lost != "", 60)
    sentence = (f"Instance gone-box ({lost.id}) was deleted from outside this notebook, so its "
                "kernel and variables are gone; to launch an instance like it and restore "
                f"checkpoint {stem} (0 min old), run %gpucloud restore {stem} --gpu "
                f"{shlex.quote(lost.gpu_model)} in a kernel on another instance.")
    assert kernel.manager.provisioner.lost == sentence
    said = [r.getMessage() for r in caplog.records if "gpucloud restore" in r.getMessage()]
    assert said == [f"gpucloud-nb: {sentence}"]
    assert kernel.manager.is_alive()  # polled again (a stand-in answers): said once only
    assert [r.getMessage() for r in caplog.records if "gpucloud restore" in r.getMessage()] \
        == said
    assert "gone-box" not in live(box)  # nothing keeps billing

    with pytest.raises(InvalidInputError) as raised:  # what a restart says (JupyterLab's too)
        KernelManager(kernel_name=name).start_kernel(cwd=str(notebook_folder))
    said = str(raised.value)
    assert said.startswith(f"Instance gone-box ({lost.id}) ")
    assert said.endswith(
        ", so this kernel cannot start; pick another kernel, or install one for an active "
        f"instance with %gpucloud kernel NAME; its variables are in checkpoint {saved} (0 min "
        "old): start a kernel on another instance and run %gpucloud restore there.")


def test_a_checkpoint_restored_onto_another_instance_moves_the_session_there(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    here, there = launch(box, "here-box"), launch(box, "there-box")
    kernel = kernels(install_kernel(box, here.id), notebook_folder)
    assert kernel.run(SETUP, timeout=120)[0] == "ok"
    assert kernel.run("%gpucloud checkpoint", timeout=300)[0] == "ok"
    assert kernel.run("count = 0")[0] == "ok"  # changed after the checkpoint
    saved = next((notebook_folder / ".gpucloud" / "checkpoints").iterdir()).name

    status, out = kernel.run(f"%gpucloud restore {saved[:20]} there-box", timeout=600)

    assert status == "ok", out
    assert f"Copying checkpoint {saved}" in out and "Moved to there-box" in out
    assert f"Instance here-box ({here.id}) is kept (--keep)." in out
    wait_for(lambda: kernel_processes(here.id) == [], 60)
    assert state(kernel) == expected(there.id, log=False)  # count is the checkpoint's 42
    assert live(box) == ["here-box", "there-box"]


def test_a_cell_queued_behind_the_move_never_runs_on_the_old_kernel(
        box: GPUCloud, kernels: Any) -> None:
    old, new = launch(box, "run-all-from"), launch(box, "run-all-to")
    kernel = kernels(install_kernel(box, old.id))
    assert kernel.run("%load_ext gpucloud_nb\nkept = 5")[0] == "ok"

    moving = kernel.client.execute("%gpucloud move run-all-to")
    queued = kernel.client.execute("marker = 1")  # Run All: sent before the move answers
    replies = {}
    while len(replies) < 2:
        reply = kernel.client.get_shell_msg(timeout=300)
        replies[reply["parent_header"]["msg_id"]] = reply["content"]
    assert replies[moving]["status"] == "ok"
    assert replies[queued]["status"] == "error" and replies[queued]["ename"] == "MovedError"
    assert replies[queued]["evalue"] == (
        f"This cell reached the old kernel while the session moved to run-all-to ({new.id}); "
        "run it again, and it runs there.")

    wait_for(lambda: kernel_processes(old.id) == [], 60)
    assert kernel.run("import os; print(kept, 'marker' in globals(), "
                      "os.environ['GPUCLOUD_INSTANCE_ID'])") == ("ok", f"5 False {new.id}\n")
