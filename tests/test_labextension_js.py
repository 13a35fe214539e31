"""The lab extension's own unit tests (jest, in labextension/test/), run from pytest so that the
README's one test command covers them: row formatting, the countdown, the status bar's text,
and prices written exactly as Python's ``format_price`` writes them (pytest sends the cases)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpucloud_nb.display import format_price

# Prices the sidebar may show: spends, hourly and per-GB prices, tiny and large.
PRICES = [0.0, 2.49, 0.1, 0.099, 0.0999, 0.00014, 0.00009, 0.000123, 0.001, 0.0105, 0.5,
          1.005, 12.3456, 999.999, 1234.5, 1234567.891, 1e-7, 3.3e-12, 0.046666, 2.675,
          -0.5, -0.00009, 7.2e-5, 0.03333333]

LABEXTENSION = Path(__file__).resolve().parents[1] / "labextension"
JLPM = Path(sys.executable).parent / "jlpm"


@pytest.mark.timeout(300)
def test_the_frontend_unit_tests_pass() -> None:
    if shutil.which("node") is None or not JLPM.exists():
        reason = "Node and jlpm are needed for the lab extension's jest tests (scripts/test installs Node)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    cases = json.dumps([[value, format_price(value)] for value in PRICES])
    env = {**os.environ, "PATH": f"{JLPM.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "CI": "true", "GPUCLOUD_PRICE_CASES": cases}
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
    for suite in ("formatRow", "formatCountdown", "counts down in m:ss under an hour", "status bar",
                  "matches Python's format_price on every case pytest sends", "formatAutoDelete",
                  "SpendFloor", "formatEndpoint", "formatEndpointsTotal"):
        assert suite in output, f"jest did not run {suite!r}:\n{output[-2000:]}"
    print("jest:", summary.strip())
