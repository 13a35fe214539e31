"""Run-wide isolation for every pytest run in this repository (tests/ and notebooks/ alike).

The whole run uses a temporary sandbox home (``GPUCLOUD_SANDBOX_HOME``, set in
``pytest_configure`` before anything runs, so nbmake's kernels and every subprocess inherit it)
and a temporary root for personal gateways (``GPUCLOUD_GATEWAY_HOME``): the user's real homes
are never touched. At the end the run stops every sandbox service and personal gateway it
started, then fails if a service it started is still running: one whose home is under the run's
directory, or (wherever its home is) one that inherited this run's ``GPUCLOUD_NB_TEST_RUN``. It
also fails, naming the path, if a sandbox or personal gateway home appeared in the user's own data
dir while it ran (a subprocess given an environment without the run's variables, which
``tests/helpers.py``'s ``without_settings`` keeps), naming the homes and the processes running
there (a process without the run's mark is not stopped: it may be another's).

    def test_something(sandbox_home):       # a fresh home of its own, its service stopped after
        ...
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_HOMES_ROOT: Path | None = None
#: The user's own homes (data dir) as the run found them: path -> the names in it, or None.
_USER_HOMES: dict[Path, set[str] | None] = {}


def user_homes() -> list[Path]:
    """Where a sandbox (its one home) and personal gateways (a home each) live when no
    ``GPUCLOUD_*_HOME`` says otherwise: the user data dir, as ``HOME``/``XDG_DATA_HOME`` say."""
    import platformdirs

    data = Path(platformdirs.user_data_dir("gpucloud-nb", appauthor=False))
    return [data / "sandbox", data / "gateways"]


def _listing(path: Path) -> set[str] | None:
    try:
        return {child.name for child in path.iterdir()}
    except OSError:
        return None


def homes_left_in(before: dict[Path, set[str] | None]) -> list[Path]:
    """The sandbox home and the personal gateway homes that appeared in ``before``'s folders
    since it was taken (:func:`user_homes`)."""
    sandbox, gateways = sorted(before, key=lambda path: path.name != "sandbox")
    appeared = []
    if before[sandbox] is None and _listing(sandbox) is not None:
        appeared.append(sandbox)
    appeared += [gateways / name for name in sorted((_listing(gateways) or set())
                                                    - (before[gateways] or set()))]
    return appeared


def pytest_configure(config: pytest.Config) -> None:
    """Point ``GPUCLOUD_SANDBOX_HOME`` at a temporary directory for the whole run, and keep
    LiteLLM off the network: every Jupyter server a test starts loads jupyter-ai-litellm, whose
    ``import litellm`` otherwise fetches a price list from GitHub (30 s of retries offline)."""
    global _HOMES_ROOT
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get("GPUCLOUD_NB_TEST_HOMES"):
        # An xdist worker: homes of its own under the controller's root, and the controller's
        # mark, so the controller's check at the end finds a service any worker left.
        _HOMES_ROOT = Path(tempfile.mkdtemp(prefix=f"{worker}-",
                                            dir=os.environ["GPUCLOUD_NB_TEST_HOMES"]))
    else:
        _HOMES_ROOT = Path(tempfile.mkdtemp(prefix="gpucloud-nb-test-homes-"))
        _USER_HOMES.update({path: _listing(path) for path in user_homes()})
        os.environ["GPUCLOUD_NB_TEST_HOMES"] = str(_HOMES_ROOT)
        # Every process this run starts inherits the mark, so a service left anywhere is found.
        os.environ["GPUCLOUD_NB_TEST_RUN"] = uuid.uuid4().hex
    os.environ["GPUCLOUD_SANDBOX_HOME"] = str(_HOMES_ROOT / "session")
    # Personal gateways (connect() with a key) keep their homes here too, one per cloud and key.
    os.environ["GPUCLOUD_GATEWAY_HOME"] = str(_HOMES_ROOT / "gateways")
    # A shell starts background jobs with SIGINT ignored, and Python then never raises
    # KeyboardInterrupt: interrupt tests (and Ctrl-C of the subprocesses they start) would hang.
    # Restore the default so the suite behaves the same in the foreground and the background.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Notebooks (nbmake) and browser tests are ``slow``: ``-m "not slow"`` is the fast lane."""
    for item in items:
        if item.path.suffix == ".ipynb" or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)


def find_services(root: Path, run: str | None = None) -> list[Any]:
    """Running sandbox services whose home is under ``root`` (their command line says it), or,
    with ``run``, that carry ``GPUCLOUD_NB_TEST_RUN=run`` in their environment."""
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info.get("cmdline") or []
        if "gpucloud_nb" in command and "--home" in command:
            at = command.index("--home") + 1
            if at < len(command) and Path(command[at]).is_relative_to(root):
                found.append(process)
            elif run is not None:
                try:
                    if process.environ().get("GPUCLOUD_NB_TEST_RUN") == run:
                        found.append(process)
                except (psutil.AccessDenied, psutil.NoSuchProcess):
                    pass
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the services this run started; fail the run if any had to be killed."""
    if _HOMES_ROOT is None:
        return
    from gpucloud_nb.sandbox import service

    # Homes are the root's folders, and in an xdist run the workers' roots' folders.
    for home in [*_HOMES_ROOT.glob("*/"), *_HOMES_ROOT.glob("gw*/*/"),
                 *_HOMES_ROOT.glob("gateways/*/"), *_HOMES_ROOT.glob("gw*/gateways/*/")]:
        service.stop(home)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller checks, once every worker is done
    left = find_services(_HOMES_ROOT, os.environ.get("GPUCLOUD_NB_TEST_RUN"))
    for process in left:
        process.kill()
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nFAILED: {len(left)} sandbox service(s) or personal gateway(s) outlived the "
              f"test run and were killed: {[(p.pid, p.info.get('cmdline')) for p in left]}")
    appeared = homes_left_in(_USER_HOMES) if _USER_HOMES else []
    if appeared:
        # Not stopped from here: without the run's mark a process there may be another's.
        running = [(p.pid, p.info.get("cmdline")) for home in appeared for p in find_services(home)]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nFAILED: the run wrote service homes into the user's own data dir (a test or "
              f"subprocess lost GPUCLOUD_SANDBOX_HOME/GPUCLOUD_GATEWAY_HOME): "
              f"{[str(home) for home in appeared]}; running there: {running}")
    shutil.rmtree(_HOMES_ROOT, ignore_errors=True)


@pytest.fixture
def sandbox_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh sandbox home of its own (``GPUCLOUD_SANDBOX_HOME``); its service stops at teardown."""
    from gpucloud_nb.sandbox import service

    assert _HOMES_ROOT is not None
    home = Path(tempfile.mkdtemp(prefix="home-", dir=_HOMES_ROOT))
    monkeypatch.setenv("GPUCLOUD_SANDBOX_HOME", str(home))
    yield home
    service.stop(home)


@pytest.fixture
def service_processes() -> Callable[[Path], list[Any]]:
    """``service_processes(root)``: the running sandbox services whose home is under ``root``."""
    return find_services
