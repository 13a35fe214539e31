"""gpucloud_nb.kernel.install_kernel and the gpucloud-<name> kernelspecs, against a sandbox."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import launch_active
from jupyter_client.kernelspec import KernelSpecManager

from gpucloud_nb import AsyncGPUCloud, GPUCloud
from gpucloud_nb.errors import InvalidInputError, NotFoundError
from gpucloud_nb.kernel import install_kernel, install_kernel_async
from gpucloud_nb.kernel.spec import PROVISIONER, installed, kernel_name
from gpucloud_nb.sandbox import Sandbox


@pytest.fixture(autouse=True)
def _entry_point(kernel_provisioner_entry_point: Path | None) -> None:
    """jupyter_client shows a spec only when its provisioner is installed."""


@pytest.fixture(autouse=True)
def jupyter_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "jupyter-data"
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(folder))
    return folder


def test_install_kernel_writes_a_spec_under_jupyter_data_dir(box: GPUCloud, sandbox: Sandbox,
                                                             jupyter_data: Path) -> None:
    two = box.instances.offers(deployment_type="vm", available=True, num_gpus=2, sort="price")[0]
    instance = launch_active(box, "Train 1", offer=two)
    name = install_kernel(box, "Train 1")  # by name

    assert name == "gpucloud-train-1"
    path = jupyter_data / "kernels" / name / "kernel.json"
    spec = json.loads(path.read_text())
    assert spec["display_name"] == f"Python 3 on Train 1 · {instance.gpu_model} × 2"
    assert spec["argv"][:3] == ["python3", "-m", "ipykernel_launcher"]
    assert spec["metadata"]["kernel_provisioner"] == {
        "provisioner_name": PROVISIONER,
        "config": {"instance_id": instance.id, "instance_name": "Train 1", "cloud": "sandbox",
                   "on_shutdown": "keep", "account": box.account},
    }
    assert sandbox.api_key not in path.read_text()
    assert KernelSpecManager().get_kernel_spec(name).display_name == spec["display_name"]

    assert install_kernel(box, instance.id, display_name="GPU box",
                                        on_shutdown="delete") == name  # by id, replaced
    spec = json.loads(path.read_text())
    assert spec["display_name"] == "GPU box"
    assert spec["metadata"]["kernel_provisioner"]["config"]["on_shutdown"] == "delete"


def test_the_spec_of_a_deleted_instance_is_removed_on_the_next_install(box: GPUCloud) -> None:
    old = launch_active(box, "old-one")
    assert install_kernel(box, old.id) == "gpucloud-old-one"
    box.instances.delete(old.id)
    launch_active(box, "new-one")

    assert install_kernel(box, "new-one") == "gpucloud-new-one"
    assert set(installed()) == {"gpucloud-new-one"}


def test_the_async_twin_installs_too(sandbox: Sandbox) -> None:
    with GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url) as cloud:
        instance = launch_active(cloud, "async-one")

    async def main() -> str:
        async with AsyncGPUCloud(api_key=sandbox.api_key,
                                 base_url=sandbox.management_url) as acloud:
            return await install_kernel_async(acloud, "async-one")

    assert asyncio.run(main()) == "gpucloud-async-one"
    assert installed()["gpucloud-async-one"]["instance_id"] == instance.id
    assert installed()["gpucloud-async-one"]["cloud"] == "cloud"


def test_bad_input_is_one_sentence_and_installs_nothing(box: GPUCloud,
                                                       jupyter_data: Path) -> None:
    instance = launch_active(box, "fine")
    cases = [
        (lambda: install_kernel(box, instance.id, on_shutdown="destroy"),
         "on_shutdown must be 'keep' or 'delete', not 'destroy'."),
        (lambda: install_kernel(box, instance.id, display_name=" "),
         "display_name must be a non-empty string."),
    ]
    with pytest.raises(NotFoundError) as missing:
        install_kernel(box, "no-such-instance")
    assert str(missing.value) == ("Instance no-such-instance not found: no instance has that id "
                                  "or name.")
    for call, sentence in cases:
        with pytest.raises(InvalidInputError) as raised:
            call()
        assert str(raised.value) == sentence
    assert not (jupyter_data / "kernels").exists() or installed() == {}

    box.instances.delete(instance.id)
    with pytest.raises(InvalidInputError, match=r"^Instance fine is delet\w+; a kernel needs"):
        install_kernel(box, instance.id)


def test_names_are_slugs() -> None:
    assert kernel_name("My GPU: H100 #1") == "gpucloud-my-gpu-h100-1"
    assert kernel_name("???") == "gpucloud-instance"


def test_names_beyond_ascii_get_a_spec_each(box: GPUCloud) -> None:
    train, test = launch_active(box, "训练"), launch_active(box, "测试")
    names = [install_kernel(box, "训练"), install_kernel(box, "测试")]

    assert len(set(names)) == 2 and all(n.startswith("gpucloud-") and n.isascii() for n in names)
    assert {installed()[n]["instance_id"] for n in names} == {train.id, test.id}
    assert install_kernel(box, "训练") == names[0]  # the same name is the same spec


def test_specs_of_another_key_are_left_alone(box: GPUCloud,
                                             sandbox_factory: Callable[..., Sandbox]) -> None:
    mine = install_kernel(box, launch_active(box, "mine").id)
    other = sandbox_factory(api_key="sk-another-account-0123456789")
    with GPUCloud(api_key=other.api_key, base_url=other.management_url) as theirs:
        sandbox_kind = launch_active(theirs, "theirs")
        theirs.sandbox = other  # the same kind of cloud, another key and home
        assert theirs.account != box.account
        install_kernel(theirs, sandbox_kind.id)  # removes only its own stale specs
    assert set(installed()) == {mine, "gpucloud-theirs"}


def test_the_client_does_not_import_jupyter_client() -> None:
    code = ("import sys, gpucloud_nb.client.instances; "
            "print('jupyter_client' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_the_spec_carries_the_extensions_chip_as_its_logo(box: GPUCloud) -> None:
    """The Launcher shows a kernelspec's logo-svg.svg / logo-64x64.png, else a plain letter."""
    launch_active(box, "with-logo")
    name = install_kernel(box, "with-logo")
    folder = Path(KernelSpecManager().get_all_specs()[name]["resource_dir"])
    assert (folder / "logo-svg.svg").read_text().startswith("<svg")
    assert (folder / "logo-64x64.png").read_bytes().startswith(b"\x89PNG")
