"""A lost kernel brought back: its newest checkpoint on a new instance like the lost one.

As the stand-in's tests: a plain ``KernelManager`` from the kernelspec, a real kernel on a sandbox
instance over real SSH; the instance is deleted from outside, the provisioner's own watch finds
the loss, then :func:`gpucloud_nb.kernel.revive.revive` (what the sidebar's Restore button runs)
is called and the same kernel client runs the next cell.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import test_kernel_provisioner as base
from helpers import wait_for
from test_kernel_standin import checkpointed, run

from gpucloud_nb import GPUCloud
from gpucloud_nb.errors import InvalidInputError
from gpucloud_nb.kernel import install_kernel
from gpucloud_nb.kernel.revive import RestoreFailed, is_lost, newest_checkpoint, revive
from gpucloud_nb.kernel.spec import installed

_entry_point, jupyter_data, box = base._entry_point, base.jupyter_data, base.box
kernels, notebook_folder, launch = base.kernels, base.notebook_folder, base.launch


def live(cloud: GPUCloud) -> list[Any]:
    return [i for i in cloud.instances.list() if i.status not in ("deleting", "deleted")]


def lose(cloud: GPUCloud, kernel: Any, instance_id: str) -> None:
    cloud.instances.delete(instance_id)  # from outside; the provisioner's own watch finds it
    wait_for(lambda: is_lost(kernel.manager.provisioner), 120)


def test_a_lost_kernel_comes_back_on_an_instance_like_it_with_its_variables(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    lost = launch(box, "revive-box")
    name = install_kernel(box, lost.id)
    kernel = kernels(name, notebook_folder)
    stem = checkpointed(kernel, notebook_folder)
    lose(box, kernel, lost.id)
    provisioner = kernel.manager.provisioner
    assert newest_checkpoint(provisioner) == f"{stem}.gpucloud"
    said: list[str] = []

    text = asyncio.run(revive(provisioner, say=said.append))

    new = provisioner.instance_id
    assert new != lost.id
    details = box.instances.get(new)
    assert details.status == "active" and details.gpu_model == lost.gpu_model
    assert text.startswith(f"Restored checkpoint {stem}.gpucloud onto {details.name} ({new}) in ")
    assert "1 name; the next cell runs there." in text
    assert any(line.startswith("Launching revive-box-") for line in said)
    assert any(line.startswith("Copying checkpoint") for line in said)
    assert not is_lost(provisioner) and provisioner.lost == ""
    # the same client, the same kernel name: the next cell runs on the new kernel, with kept
    reply, outputs = run(kernel, "import os\nprint(kept, os.environ['GPUCLOUD_INSTANCE_ID'])")
    assert reply["status"] == "ok"
    assert outputs == [("stream", {"name": "stdout", "text": f"7 {new}\n"})]
    assert kernel.manager.is_alive() and kernel.manager.kernel_name == name
    assert installed()[name]["instance_id"] == new
    assert (notebook_folder / ".gpucloud" / "checkpoints" / f"{stem}.gpucloud").exists()
    kernel.shutdown()
    box.instances.delete(new)


def test_a_restore_that_fails_leaves_the_kernel_lost_and_deletes_what_it_launched(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    lost = launch(box, "revive-fragile")
    kernel = kernels(install_kernel(box, lost.id), notebook_folder)
    assert kernel.run("class Fragile:\n    def __setstate__(self, state):\n"
                      "        raise RuntimeError('not here')\n"
                      "fragile = Fragile(); fragile.x = 1")[0] == "ok"
    stem = checkpointed(kernel, notebook_folder)
    lose(box, kernel, lost.id)
    provisioner = kernel.manager.provisioner
    assert run(kernel, "1 + 1")[0]["evalue"] == provisioner.lost  # the stand-in answers

    with pytest.raises(RestoreFailed) as raised:
        asyncio.run(revive(provisioner))

    sentence = str(raised.value)
    assert sentence.startswith("The restore did not happen (fragile could not be restored on ")
    assert "(RuntimeError: not here)): the kernel is still lost and checkpoint " in sentence
    assert f"checkpoint {stem}.gpucloud is kept; instance " in sentence
    assert sentence.endswith(", launched for the move, is deleted.")
    assert "\n" not in sentence
    assert is_lost(provisioner) and provisioner.instance_id == lost.id
    assert live(box) == []  # nothing left billing
    assert run(kernel, "1 + 1")[0]["evalue"] == provisioner.lost  # and still does
    kernel.shutdown()


def test_a_kernel_that_is_not_lost_or_has_no_checkpoint_is_one_sentence(
        box: GPUCloud, notebook_folder: Path, kernels: Any) -> None:
    instance = launch(box, "revive-alive")
    kernel = kernels(install_kernel(box, instance.id), notebook_folder)
    with pytest.raises(InvalidInputError, match="^This kernel is not lost: its instance "):
        asyncio.run(revive(kernel.manager.provisioner))
    lose(box, kernel, instance.id)
    with pytest.raises(InvalidInputError, match="^There is no checkpoint in .*; make one with "):
        asyncio.run(revive(kernel.manager.provisioner))
    assert is_lost(kernel.manager.provisioner)
    assert run(kernel, "1 + 1")[0]["evalue"] == kernel.manager.provisioner.lost
    kernel.shutdown()
