"""Every notebook in notebooks/ is committed clean, with the python3 kernel.

Running them is nbmake's job: pyproject's ``testpaths`` includes ``notebooks/`` and ``addopts``
has ``--nbmake``, so pytest executes each notebook top to bottom as a test of its own
(``scripts/test`` unsets any real-cloud key first, so they run on the sandbox).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

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
