"""JupyterLab smoke tests: the quickstart runs in a real browser, and widgets render."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from .lab import output_text

pytestmark = pytest.mark.browser


def test_quickstart_runs_in_jupyterlab(lab, run_all, cell_errors, screenshot) -> None:
    page = lab.open("01-quickstart.ipynb")
    run_all(page)
    screenshot(page)
    assert cell_errors(page) == []
    text = output_text(page)
    assert "gpucloud-nb: SANDBOX" in text
    assert "ssh " in text and "@" in text.split("ssh ", 1)[1].splitlines()[0]
    assert "NVIDIA-SMI" in text and "exit status 0" in text  # step 5 ran on the instance
    assert "is deleted" in text


def test_ipywidgets_render_in_jupyterlab(lab, run_all, cell_errors, screenshot) -> None:
    notebook = new_notebook(
        cells=[new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=7, description='seven')")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(notebook, lab.root / "widget-check.ipynb")
    page = lab.open("widget-check.ipynb")
    run_all(page)
    slider = page.locator(".jp-OutputArea-output .widget-slider")
    slider.wait_for(state="visible", timeout=20_000)
    screenshot(page)
    assert cell_errors(page) == []
    assert "seven" in slider.inner_text()
    assert "Loading widget" not in output_text(page)


def test_cell_errors_reports_a_failing_cell_and_not_a_warning(lab, run_all, cell_errors) -> None:
    notebook = new_notebook(
        cells=[
            new_code_cell("import warnings\nwarnings.warn('only a warning')\nprint('fine')"),
            new_code_cell("1 / 0"),
            new_code_cell("print('never runs')"),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(notebook, lab.root / "failing.ipynb")
    page = lab.open("failing.ipynb")
    run_all(page)  # returns although Run All stops at the error
    errors = cell_errors(page)
    assert errors and all("ZeroDivisionError" in error for error in errors), errors
    text = output_text(page)
    assert "only a warning" in text and "fine" in text and "never runs" not in text
