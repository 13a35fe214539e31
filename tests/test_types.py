"""The public types are exact: a user's script type-checks with ``assert_type`` on every method.

mypy reads ``tests/typing/user_script.py`` (never run); a wrong type there is a failure, and a
deliberately wrong ``assert_type`` proves the check can fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "typing" / "user_script.py"
REPO = Path(__file__).resolve().parents[1]


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir=/dev/null",
         "--python-version=3.11", str(path)],
        capture_output=True, text=True, cwd=REPO, timeout=600)


@pytest.mark.slow
def test_every_public_method_has_its_real_type() -> None:
    result = mypy(SCRIPT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_wrong_type_is_caught(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(SCRIPT.read_text(encoding="utf-8").replace(
        'assert_type(cloud.instances.get("x"), InstanceDetails)',
        'assert_type(cloud.instances.get("x"), Instance)'), encoding="utf-8")
    result = mypy(wrong)
    assert result.returncode == 1, result.stdout
    assert 'Expression is of type "InstanceDetails", not "Instance"  [assert-type]' in result.stdout
    assert "Found 1 error" in result.stdout, result.stdout
