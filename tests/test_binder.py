"""Binder builds from binder/ alone, and what it installs runs every notebook.

Both tests work on a copy of the repository holding only the files git tracks (or would track:
untracked files that are not ignored count, so the test also passes before a commit), which is
what mybinder.org clones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
BINDER_NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
PYTHON_VERSION = "3.11"


def _clean_env(**extra: str) -> dict[str, str]:
    drop = {"GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME",
            "JUPYTER_PATH"}
    env = {key: value for key, value in os.environ.items() if key not in drop}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's tracked (and trackable, not ignored) files, copied to a temp dir."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to know which files Binder would see")
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode()
    target = tmp_path_factory.mktemp("binder") / "repo"
    copied = 0
    for name in filter(None, listing.split("\0")):
        source = REPO / name
        if not source.is_file():  # deleted in the work tree, or a submodule
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)
        copied += 1
    assert (target / "binder" / "requirements.txt").is_file(), "binder/requirements.txt is not tracked"
    assert copied > 5
    return target


def test_binder_files_pin_python_and_install_the_package_for_jupyterlab() -> None:
    assert (REPO / "binder" / "runtime.txt").read_text().split() == [f"python-{PYTHON_VERSION}"]
    requirements = [
        line.split("#", 1)[0].strip()
        for line in (REPO / "binder" / "requirements.txt").read_text().splitlines()
    ]
    assert ".[lab,cluster]" in requirements


def test_repo2docker_renders_the_binder_build(repo_copy: Path) -> None:
    repo2docker = Path(sys.executable).parent / "jupyter-repo2docker"
    command = [str(repo2docker)] if repo2docker.exists() else [sys.executable, "-m", "repo2docker"]
    result = subprocess.run(
        [*command, "--no-build", "--debug", str(repo_copy)],
        capture_output=True, text=True, timeout=120, env=_clean_env(),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"python={PYTHON_VERSION}" in output, output[-4000:]
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in output, output[-4000:]
    # The requirement is local ("."), so the repository must be copied in before pip runs.
    dockerfile = output[output.index("FROM "):]
    assert dockerfile.index("COPY --chown") < dockerfile.index('-r "binder/requirements.txt"')


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_fresh_venv_from_binder_requirements_runs_every_notebook(repo_copy: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = _clean_env(JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
                     IPYTHONDIR=str(tmp_path / "ipython"))
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    def run(*args: str, cwd: Path = repo_copy, timeout: float = 600) -> str:
        result = subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True,
                                text=True, timeout=timeout)
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{(result.stdout + result.stderr)[-4000:]}"
        return result.stdout

    # What repo2docker runs, from the repository root so "." resolves (--no-compile only saves time).
    # It builds the Lab extension too (npm, webpack): 5-8 min alone, past 10 with a second full
    # run beside it on 2 cores.
    run("-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-compile",
        "-r", "binder/requirements.txt", timeout=1800)
    where = run("-c", "import gpucloud_nb, sys; print(gpucloud_nb.__file__); print(sys.prefix)",
                cwd=tmp_path).split()
    assert Path(where[0]).is_relative_to(venv), where
    assert Path(where[1]) == venv, where

    run("-m", "ipykernel", "install", "--sys-prefix", "--name", "binder-check")
    spec = json.loads((venv / "share" / "jupyter" / "kernels" / "binder-check" / "kernel.json").read_text())
    assert Path(spec["argv"][0]).parent == venv / "bin", spec["argv"]

    out = tmp_path / "executed"
    for name in BINDER_NOTEBOOKS:
        run("-m", "nbconvert", "--to", "notebook", "--execute",
            "--ExecutePreprocessor.kernel_name=binder-check", "--ExecutePreprocessor.timeout=100",
            f"--output-dir={out}", str(repo_copy / "notebooks" / name),
            cwd=repo_copy / "notebooks", timeout=180)
        executed = nbformat.read(out / name, as_version=4)
        outputs = [o for cell in executed.cells for o in cell.get("outputs", [])]
        assert not [o for o in outputs if o.output_type == "error"], name
        if any("connect(" in cell.source for cell in executed.cells if cell.cell_type == "code"):
            assert any("gpucloud-nb: SANDBOX" in o.get("text", "") for o in outputs), name
