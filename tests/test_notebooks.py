"""Every notebook in notebooks/ is committed clean and runs top to bottom without a key.

Notebooks are executed with nbclient (not nbmake, so CI runs each exactly once), in a copy of
notebooks/ so relative paths such as ``data/`` resolve, against the in-kernel sandbox. The
executed copies are kept in ``test-artifacts/executed/`` for debugging.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"
EXECUTED = REPO / "test-artifacts" / "executed"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 100  # seconds, for any one cell
NOTEBOOK_TIMEOUT = 120  # seconds, for the whole notebook

by_name = pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"


@by_name
def test_notebook_is_committed_clean(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.get("kernelspec", {}).get("name") == "python3"
    dirty = [
        index for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; clear them"
    assert "widgets" not in notebook.metadata, f"{path.name} carries saved widget state; clear it"


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
@by_name
def test_notebook_runs_without_a_key(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL", "JUPYTER_PATH"):
        monkeypatch.delenv(name, raising=False)
    # A user-level "python3" kernelspec or IPython profile must not change what runs.
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    workdir = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOK_DIR, workdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))

    notebook = nbformat.read(workdir / path.name, as_version=4)
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    try:
        client.execute()  # raises CellExecutionError at the first failing cell
    finally:
        EXECUTED.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, EXECUTED / path.name)

    errors, text = [], []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                errors.append(f"cell {index}: {output.ename}: {output.evalue}")
            elif output.output_type == "stream":
                if output.name == "stderr" and "Traceback" in output.text:
                    errors.append(f"cell {index}: traceback on stderr")
                text.append(output.text)
            else:
                text.append(str(output.get("data", {}).get("text/plain", "")))
    assert not errors, errors
    if any("connect(" in cell.source for cell in notebook.cells if cell.cell_type == "code"):
        assert "gpucloud-nb: SANDBOX" in "".join(text), "connect() did not announce the sandbox"
