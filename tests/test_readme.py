"""The README's code runs as written: a newcomer's first ten minutes, on the sandbox.

Every fenced block is either run (``python`` and ``ipython`` blocks, in order, as the cells of
one notebook in a real kernel, so ``%`` magic lines go through IPython's shell) or skipped for
a reason written here (``bash`` blocks that start long-running servers or the whole test suite),
or is not code at all (unlabelled blocks: layouts, sample output). An unknown kind fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from gpucloud_nb.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

SKIPPED = {
    "./scripts/lab": "starts JupyterLab, a server that runs until stopped",
    "./scripts/test": "runs the whole test suite, this test included",
}


def blocks() -> list[tuple[str, str]]:
    return [(match[1], match[2]) for match in FENCE.finditer(README.read_text())]


def test_every_block_is_run_or_skipped_for_a_reason() -> None:
    found = blocks()
    assert any(kind == "ipython" for kind, _ in found)
    for kind, code in found:
        if kind == "bash":
            assert code.strip() in SKIPPED, f"no reason to skip this bash block: {code!r}"
        else:
            assert kind in ("python", "ipython", ""), f"unknown kind of block: {kind!r}"


def test_readme_code_runs_on_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUCLOUD_SANDBOX_LAUNCH_SECONDS", "0.3")
    with Sandbox() as inference:  # for the block that points the openai SDK at an endpoint
        monkeypatch.setenv("GPUCLOUD_INFERENCE_URL", inference.inference_url)
        monkeypatch.setenv("GPUCLOUD_INFERENCE_SECRET", inference.inference_secret)
        cells = [new_code_cell(code) for kind, code in blocks() if kind in ("python", "ipython")]
        notebook = new_notebook(cells=cells)
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                           "language": "python"}
        NotebookClient(notebook, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in notebook.cells for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    errors = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    assert "Error" not in errors, errors  # the magics print their failures to stderr
    assert "usage: %gpucloud" in text  # %gpucloud --help
    assert re.search(r"Chose provider .+ the cheapest", text)
    assert 'Created volume course data' in text
    assert "ssh " in text  # the taste block prints the instance's ssh command
    nbformat.validate(notebook)


def test_license_matches_pyproject_and_pytest_lists_slow_tests() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^license = "MIT"$', pyproject, re.M)
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "the gpucloud-nb authors" in license_text
    addopts = re.search(r"^addopts = (.*)$", pyproject, re.M)
    assert addopts and "--durations=15" in addopts[1]


def test_the_product_stands_alone() -> None:
    # The README and the code point at the repository's own docs, not at files it lacks.
    for path in [README, *ROOT.glob("gpucloud_nb/**/*.py"), ROOT / "pyproject.toml"]:
        text = path.read_text()
        assert "DESIGN.md" not in text and "spec/gpu-cloud-interface" not in text, path
        for link in re.findall(r"\]\((docs/[^)]+)\)", text):
            assert (ROOT / link).is_file(), link
    assert "OWNER/" not in README.read_text()  # no badge pointing at a placeholder repository
    choices = (ROOT / "docs" / "choices.md").read_text()
    for module in ROOT.glob("gpucloud_nb/**/*.py"):
        doc = module.read_text().split('"""')[1] if module.read_text().startswith('"""') else ""
        if re.search(r"Choices where|not shown|chosen here", doc):
            name = ".".join(module.relative_to(ROOT).with_suffix("").parts)
            assert f"`{name}" in choices, f"docs/choices.md does not list {name}'s choices"
