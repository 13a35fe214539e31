"""The lab extension's own unit tests (jest, in labextension/test/), run from pytest so that the
README's one test command covers them: row formatting, the countdown, the status bar's text."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LABEXTENSION = Path(__file__).resolve().parents[1] / "labextension"
JLPM = Path(sys.executable).parent / "jlpm"


@pytest.mark.timeout(300)
def test_the_frontend_unit_tests_pass() -> None:
    if shutil.which("node") is None or not JLPM.exists():
        reason = "Node and jlpm are needed for the lab extension's jest tests (scripts/test installs Node)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    env = {**os.environ, "PATH": f"{JLPM.parent}{os.pathsep}{os.environ.get('PATH', '')}", "CI": "true"}
    if not (LABEXTENSION / "node_modules" / ".bin" / "jest").exists():
        install = subprocess.run([str(JLPM), "install"], cwd=LABEXTENSION, env=env,
                                 capture_output=True, text=True, timeout=240)
        assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    result = subprocess.run([str(JLPM), "test", "--ci", "--verbose"], cwd=LABEXTENSION, env=env,
                            capture_output=True, text=True, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    summary = output.split("Tests:", 1)[-1].splitlines()[0]
    assert "passed" in summary and "failed" not in summary, output[-2000:]
    for suite in ("formatRow", "formatCountdown", "counts down in m:ss under an hour", "status bar"):
        assert suite in output, f"jest did not run {suite!r}:\n{output[-2000:]}"
    print("jest:", summary.strip())
