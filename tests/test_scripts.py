"""The README's two commands: ``./scripts/lab`` serves notebooks/, ``.ci/run`` runs ``./scripts/test``."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (REPO / "README.md").read_text())


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert readme_commands()[:2] == ["./scripts/lab", "./scripts/test"]
    lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert lines == ["exec ./scripts/test"]


def test_the_test_script_fails_when_pytest_collects_nothing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    ran = subprocess.run(
        ["./scripts/test", "--fast", "-n", "0", "-p", "no:cacheprovider", "-k",
         "no_test_is_called_this"], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=240)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "pytest collected no tests; that is a failure" in ran.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_lab_command_serves_the_notebooks(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUCLOUD_", "JUPYTER"))}
    env |= {"HOME": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
            "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "IPYTHONDIR": str(tmp_path / "ipy")}
    lab = subprocess.Popen(
        ["./scripts/lab", "--no-browser", f"--port={port}", "--IdentityProvider.token=t0k"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/contents", params={"token": "t0k"})
                break
            except httpx.TransportError:
                assert lab.poll() is None, "scripts/lab exited early"
                assert time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        names = {item["name"] for item in answer.json()["content"]}
        assert "01-quickstart.ipynb" in names and "data" in names
        assert httpx.get(f"http://127.0.0.1:{port}/lab", params={"token": "t0k"}).status_code == 200
        # The browser opens lesson 01, with no news pop-up over it.
        home = httpx.get(f"http://127.0.0.1:{port}/", params={"token": "t0k"})
        assert home.status_code == 302
        assert home.headers["location"].split("?")[0].endswith("/lab/tree/01-quickstart.ipynb")
        news = httpx.get(f"http://127.0.0.1:{port}/lab/api/settings/"
                         "@jupyterlab/apputils-extension:notification", params={"token": "t0k"})
        assert news.json()["schema"]["properties"]["fetchNews"]["default"] == "false"  # "Never"
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)


def test_lesson_01_is_saved_as_the_kernel_describes_it() -> None:
    """JupyterLab writes the kernel's language_info into an open notebook: saved the same, lesson
    01 opens unmodified (no "unsaved changes" dot before the student has done anything)."""
    import nbformat
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    try:
        reported = client.kernel_info(reply=True, timeout=30)["content"]["language_info"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    lesson = nbformat.read(REPO / "notebooks" / "01-quickstart.ipynb", as_version=4)
    assert lesson.metadata["language_info"] == reported
    assert "07-serve-a-model-on-your-instance.ipynb" in lesson.cells[-1].source  # "Next" lists 07


def _lab_run(tree: Path, log: Path) -> list[str]:
    """Run a copy of scripts/lab in ``tree`` (whose .venv holds stand-ins for python and jupyter
    that only log their arguments); the lines they logged."""
    log.write_text("")
    env = {**os.environ, "PATH": f"{tree / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["./scripts/lab", "--no-browser"], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return log.read_text().splitlines()


def test_the_lab_command_installs_every_lesson_and_only_when_pyproject_changed(tmp_path: Path) -> None:
    """Lesson 09 needs the [cluster] extra; a second start with nothing changed runs no pip."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "lab", tmp_path / "scripts" / "lab")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    log = tmp_path / "calls.log"
    stand_in = f'#!/bin/sh\necho "$(basename "$0") $*" >>{log}\n' \
               f'case "$1" in -c) echo {tmp_path / "app"};; esac\n'
    for path in (tmp_path / ".venv" / "bin" / "python", tmp_path / ".venv" / "bin" / "jupyter",
                 tmp_path / "bin" / "node"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stand_in)
        path.chmod(0o755)

    def installs(calls: list[str]) -> list[str]:
        return [call for call in calls if " -m pip install " in call and " -e " in call]

    first = _lab_run(tmp_path, log)
    assert installs(first) == [
        "python -m pip install -q --disable-pip-version-check -e .[lab,cluster]"], first
    assert first[-1].startswith("jupyter lab notebooks/")
    again = _lab_run(tmp_path, log)
    assert not [call for call in again if "pip" in call], again
    assert again[-1].startswith("jupyter lab notebooks/")
    with (tmp_path / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n# a new dependency\n")
    assert len(installs(_lab_run(tmp_path, log))) == 1
