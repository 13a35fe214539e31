"""Every Python and IPython block of the README runs, in order, in one fresh IPython shell.

A newcomer copies these first; each must work as printed, on the sandbox, in a shell where no
``GPUCLOUD_*`` variable is set (only the run's private sandbox home stays, so the user's own is
never touched). Shell blocks start long-running programs (JupyterLab, the whole test suite) and
are left to their own tests.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers import RUN_ISOLATION
from IPython.core.interactiveshell import InteractiveShell

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
RUN = ("python", "ipython")


def blocks() -> list[tuple[str, str]]:
    found = FENCE.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert all(kind for kind, _ in found), "every README block names its language"
    return found


def test_every_block_names_a_known_language() -> None:
    assert {kind for kind, _ in blocks()} <= {*RUN, "bash", "text"}
    assert sum(kind in RUN for kind, _ in blocks()) >= 3




def test_every_python_and_ipython_block_runs(monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    import gpucloud_nb._connect as connecting

    for name in list(os.environ):
        if name.startswith("GPUCLOUD_") and name not in RUN_ISOLATION:
            monkeypatch.delenv(name)
    monkeypatch.setattr(connecting, "_announced", set())  # a fresh kernel, leaving no trace
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    try:
        for number, (kind, code) in enumerate(blocks(), start=1):
            if kind not in RUN:
                continue
            result = shell.run_cell(code, store_history=False)
            _, err = capfd.readouterr()
            assert result.success, f"README block {number} failed: {result.error_in_exec!r}\n{err}"
            assert not err.strip(), f"README block {number} wrote to stderr: {err}"
    finally:
        shell.run_cell("import gpucloud_nb.magics as _m; _m.use(None)", store_history=False)
        InteractiveShell.clear_instance()
