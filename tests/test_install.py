"""The package alone (no lab or test extras) installs into a fresh venv and every widget works.

This catches a dependency the package uses but does not declare: our own venv has JupyterLab and
the test tools, which pull in much more than a user who runs ``pip install gpucloud-nb`` gets.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import re
    from gpucloud_nb import GPUCloud, InferenceClient
    from gpucloud_nb.sandbox import Sandbox
    from gpucloud_nb.widgets import ChatWidget, InstancesPanel, LaunchForm, OffersBrowser

    def rows(html):
        return len(re.findall(r"<tr", html)) - 1   # minus the header row

    with Sandbox(launch_seconds=0.2) as sandbox:
        cloud = GPUCloud(api_key=sandbox.api_key, base_url=sandbox.management_url)
        offer = cloud.instances.offers(deployment_type="vm", available=True, sort="price")[0]
        cloud.instances.create(name="fresh", cloud_provider=offer.cloud.id,
                               instance_id=offer.instance_id, region=offer.available_regions[0],
                               vm={"os": offer.configuration.os[0]})
        browser = OffersBrowser(cloud)
        panel = InstancesPanel(cloud)
        form = LaunchForm(cloud, offer)
        chat = ChatWidget(InferenceClient(sandbox.inference_url, sandbox.inference_secret))
        turn = chat.send("Hello").wait(30)
        print("offers-rows", rows(browser.table.value), repr(browser.status.text))
        print("instances-rows", rows(panel.table.value), repr(panel.status.text))
        print("form-problem", repr(form.problem))
        print("chat", turn.status, repr(turn.error))
        for widget in (browser, panel, form, chat):
            widget.close()
        cloud.close()
""")


def _uv() -> str | None:
    """uv beside this Python or on PATH, when this machine has it."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_package_alone_builds_every_widget_with_rows(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL")}
    uv = _uv()  # seconds where pip takes a minute or more
    subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if uv else []), str(venv)],
                   check=True, timeout=120)
    installer = ([uv, "pip", "install", "-q", "--python", str(python)] if uv else
                 [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "--no-compile"])
    install = subprocess.run([*installer, str(REPO), "ipykernel"],
                             env=env, capture_output=True, text=True, timeout=800)
    assert install.returncode == 0, install.stderr[-4000:]
    found = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "print(u.find_spec('jupyterlab'), u.find_spec('pytest'))"],
                           env=env, capture_output=True, text=True, check=True).stdout.split()
    assert found == ["None", "None"], "the lab or test extra was installed too"
    done = subprocess.run([str(python), "-c", SCRIPT], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    report = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    offers_rows = int(report["offers-rows"].split()[0])
    instance_rows = int(report["instances-rows"].split()[0])
    assert offers_rows > 0 and report["offers-rows"].endswith("''"), done.stdout
    assert instance_rows == 1 and report["instances-rows"].endswith("''"), done.stdout
    assert report["form-problem"] == "'Give the instance a name.'", done.stdout
    assert report["chat"] == "done None", done.stdout
