"""The run-wide rules of conftest.py: the fast lane's marker and Ctrl-C in background runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_sigint_raises_keyboard_interrupt_in_the_tests() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_run_started_in_the_background_still_interrupts() -> None:
    """A shell's background job starts with SIGINT ignored; the run restores the default."""
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         f"{Path(__file__).name}::test_sigint_raises_keyboard_interrupt_in_the_tests"],
        cwd=ROOT / "tests", capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_the_fast_lane_leaves_out_notebooks_and_the_browser() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-m", "not slow"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,  # collecting took > 120 s at load 14
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    files = {line.split("::")[0] for line in ran.stdout.splitlines() if "::" in line}
    assert "tests/test_conftest.py" in files
    assert not [f for f in files if f.endswith(".ipynb") or f.startswith("tests/browser/")]


LEAKY_TEST = '''
import tempfile
from pathlib import Path

from gpucloud_nb.sandbox import service


def test_leaves_a_service_running_outside_the_runs_homes():
    service.find_or_start(Path(tempfile.mkdtemp(prefix="leaky-home-")))
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
def test_a_service_a_test_leaves_running_fails_the_run_and_is_killed(
        tmp_path: Path, workers: list[str]) -> None:
    """The run's last check finds a service by the mark it inherited, from any xdist worker."""
    (tmp_path / "test_leaky.py").write_text(LEAKY_TEST)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "-p", "conftest", *workers, str(tmp_path / "test_leaky.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
             "PYTHONPATH": str(ROOT)},  # a run of its own, also when this one is an xdist worker
    )
    assert "1 passed" in ran.stdout, ran.stdout + ran.stderr
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "sandbox service(s) or personal gateway(s) outlived the test run and were killed" \
        in ran.stdout
    assert "leaky-home-" in ran.stdout


LEAKY_GATEWAY_TEST = """
import os, subprocess, sys


def test_connects_from_a_subprocess_that_lost_the_runs_variables():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLOUD_")}
    env.update(GPUCLOUD_API_KEY="k" * 20, GPUCLOUD_BASE_URL="http://127.0.0.1:9")
    subprocess.run([sys.executable, "-c", "import gpucloud_nb; gpucloud_nb.connect(quiet=True)"],
                   env=env, check=True, timeout=120)
"""


def test_a_personal_gateway_home_left_in_the_users_data_dir_fails_the_run_with_its_path(
        tmp_path: Path) -> None:
    """#36: a subprocess given an environment without the run's variables started a personal
    gateway in the user's own data dir, and the run passed; now it fails naming the home and the
    gateway's process. The inner run's user is a home of its own (``HOME``)."""
    from gpucloud_nb.gateway import personal

    (tmp_path / "test_leaky_gateway.py").write_text(LEAKY_GATEWAY_TEST)
    home = tmp_path / "user"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "GPUCLOUD_", "XDG_DATA_HOME"))}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "-p", "conftest", str(tmp_path / "test_leaky_gateway.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**env, "HOME": str(home), "PYTHONPATH": str(ROOT)})
    assert "1 passed" in ran.stdout, ran.stdout + ran.stderr
    assert ran.returncode == 1, ran.stdout + ran.stderr
    [left] = list((home / ".local" / "share" / "gpucloud-nb" / "gateways").iterdir())
    pid = personal.stop(left)  # the leaked gateway, stopped by the test that made it leak
    assert "wrote service homes into the user's own data dir" in ran.stdout
    assert str(left) in ran.stdout and f"({pid}, " in ran.stdout
