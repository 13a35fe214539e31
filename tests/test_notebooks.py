"""Every notebook in notebooks/ is committed clean, with the python3 kernel.

Running them is nbmake's job: pyproject's ``testpaths`` includes ``notebooks/`` and ``addopts``
has ``--nbmake``, so pytest executes each notebook top to bottom as a test of its own
(``scripts/test`` unsets any real-cloud key first, so they run on the sandbox).
"""

from __future__ import annotations

import re
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


# Tags a lesson's Markdown may use as HTML; anything else in <...> outside code is a placeholder
# that JupyterLab's renderer takes for a tag and hides ("Python 3 on <name>" shows "Python 3 on").
HTML_TAGS = {"a", "b", "br", "code", "details", "div", "em", "i", "img", "kbd", "p", "span",
             "strong", "sub", "summary", "sup"}


@by_name
def test_markdown_shows_every_placeholder(path: Path) -> None:
    from markdown_it import MarkdownIt

    renderer = MarkdownIt("commonmark")
    notebook = nbformat.read(path, as_version=4)
    eaten = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        tokens = renderer.parse(cell.source)
        for token in tokens + [child for block in tokens for child in block.children or []]:
            if token.type in ("html_inline", "html_block"):
                eaten += [f"cell {index}: {tag}" for tag in re.findall(r"</?([A-Za-z][^\s/>]*)",
                                                                       token.content)
                          if tag.lower() not in HTML_TAGS]
    assert not eaten, f"{path.name}: rendered as HTML and hidden: {eaten}; put them in `code`"


def _run(name: str) -> list[str]:
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK_DIR)}}).execute()
    return [output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", [])
            if output.get("output_type") == "stream"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["05-chat-and-vision.ipynb", "06-transcribe-audio.ipynb"])
def test_inference_lessons_with_a_real_key_and_no_endpoint_say_what_to_set(
        name: str, sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under nbclient nobody can answer input(): one line says what to set, nothing raises."""
    monkeypatch.setenv("GPUCLOUD_API_KEY", sandbox.api_key)      # "the real cloud"
    monkeypatch.setenv("GPUCLOUD_BASE_URL", sandbox.management_url)
    monkeypatch.delenv("GPUCLOUD_INFERENCE_URL", raising=False)
    monkeypatch.delenv("GPUCLOUD_INFERENCE_SECRET", raising=False)
    text = "".join(_run(name))
    assert "Set GPUCLOUD_INFERENCE_URL and GPUCLOUD_INFERENCE_SECRET" in text


@pytest.mark.slow
def test_the_chat_lesson_uses_the_endpoint_from_the_environment(
        sandbox_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    cloud_box, model_box = sandbox_factory(), sandbox_factory(inference_secret="sk-env-secret-0123456789")
    monkeypatch.setenv("GPUCLOUD_API_KEY", cloud_box.api_key)
    monkeypatch.setenv("GPUCLOUD_BASE_URL", cloud_box.management_url)
    monkeypatch.setenv("GPUCLOUD_INFERENCE_URL", model_box.inference_url)
    monkeypatch.setenv("GPUCLOUD_INFERENCE_SECRET", model_box.inference_secret)
    text = "".join(_run("05-chat-and-vision.ipynb"))
    assert model_box.inference_url in text            # print(chat) names the endpoint
    assert "Set GPUCLOUD_INFERENCE_URL" not in text
    assert model_box.inference_secret not in text
