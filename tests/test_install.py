"""The package alone (no lab or test extra), in a fresh venv with ipykernel, builds every widget.

A dependency that only the extras bring in (jinja2 for pandas' Styler was one) leaves a bare
install with empty tables; this test installs what a user's ``pip install gpucloud-nb`` would,
and checks that each widget shows rows and no error against a sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

BUILD_EVERY_WIDGET = """
import json
from gpucloud_nb import GPUCloud, InferenceClient
from gpucloud_nb.sandbox import Sandbox
from gpucloud_nb.widgets import InstancesPanel, LaunchForm, OffersBrowser
from gpucloud_nb.widgets.chat import ChatWidget

seen = {}
with Sandbox(launch_seconds=0.2) as box, \\
        GPUCloud(api_key=box.api_key, base_url=box.management_url) as cloud:
    offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
    cloud.instances.create(name="bare", cloud_provider=offer.cloud.id,
                           instance_id=offer.instance_id, region=offer.available_regions[0],
                           vm={"os": offer.configuration.os[0]})
    browser, panel, form = OffersBrowser(cloud), InstancesPanel(cloud), LaunchForm(cloud)
    chat = ChatWidget(InferenceClient(box.inference_url, box.inference_secret))
    turn = chat.send("Hello!").wait(timeout=60)
    for name, widget in (("browser", browser), ("panel", panel)):
        seen[name] = {"rows": widget.table.value.count("<tr") - 1, "status": widget.status.text}
    seen["form"] = {"rows": len(form.offer.options) - 1, "status": form.status.text}
    seen["chat"] = {"rows": len(chat.history), "status": "; ".join(chat.errors)}
    for widget in (browser, panel, form, chat):
        widget.close()
print(json.dumps(seen))
"""


def _uv() -> str | None:
    """uv, when this machine has it: it installs in seconds what pip takes a minute for."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_package_alone_builds_every_widget_with_rows(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    uv = _uv()
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if uv else []), str(venv)],
                   check=True, timeout=120)
    install = ([uv, "pip", "install", "-q", "--python", str(python)] if uv else
               [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                "--no-compile"])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUCLOUD_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = subprocess.run([*install, str(REPO), "ipykernel"], env=env,
                               capture_output=True, text=True, timeout=800)
    assert installed.returncode == 0, installed.stderr[-3000:]
    extras = subprocess.run([str(python), "-c",
                             "import importlib.util as u; print(u.find_spec('jupyterlab'), "
                             "u.find_spec('pytest'))"],
                            capture_output=True, text=True, check=True, env=env)
    assert extras.stdout.split() == ["None", "None"], "the extras got installed too"

    run = subprocess.run([str(python), "-c", BUILD_EVERY_WIDGET], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    for name, shown in seen.items():
        assert shown["status"] == "", f"{name}: {shown['status']}"
        assert shown["rows"] >= 1, f"{name} shows no rows"
