"""Drive JupyterLab in Debian's Chromium with Playwright (sync API): the browser-test harness.

The ``conftest.py`` beside this file turns these pieces into fixtures:

* :class:`LabServer` starts ``jupyter lab`` (the venv's) on a free loopback port with a random
  token and throwaway ``HOME``, config, data, runtime and IPython directories. The venv's own
  ``share/jupyter`` stays on the search path, so the ipywidgets lab extension and the ``python3``
  kernel are found. No key reaches the kernels: they talk to the in-kernel sandbox.
* :class:`Lab` is one test's view of it: a fresh browser context and a fresh copy of
  ``notebooks/`` (``lab.root``); ``lab.open(name)`` opens a notebook there and returns the page
  once its kernel is idle and connected.
* :func:`run_all`, :func:`cell_errors`, :func:`output_text` and :func:`save_screenshot` work on
  such a page.

Lab runs with ``windowingMode: none`` (every cell stays in the DOM, so selectors see all
outputs), without news or update checks, and with ``window.jupyterapp`` exposed so helpers can
read the notebook model.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, Page

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
LAB_LOG = ARTIFACTS / "lab.log"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]

# Environment variables that must not reach Lab or its kernels.
SCRUBBED_ENV = ("GPUCLOUD_API_KEY", "GPUCLOUD_BASE_URL", "JUPYTER_PATH", "JUPYTER_TOKEN",
                "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR", "PYTHONPATH")

STARTUP_TIMEOUT = 60.0  # Lab answering /api/status
KERNEL_TIMEOUT = 60.0  # a notebook's kernel idle and connected
RUN_TIMEOUT = 90.0  # Run All Cells to finish

# Page -> (server, notebook path relative to the server root), filled by Lab.open.
_OPENED: weakref.WeakKeyDictionary[Page, tuple[LabServer, str]] = weakref.WeakKeyDictionary()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def this_checkout(base: Path) -> dict[str, str]:
    """Environment for a :class:`LabServer` that runs this checkout: its package on the kernels'
    and the server's ``PYTHONPATH`` and, when built (``gpucloud_nb/labextension``, from
    ``jlpm build``), its lab extension first on Lab's search path (a link made under ``base``)."""
    env = {"PYTHONPATH": str(REPO)}
    built = REPO / "gpucloud_nb" / "labextension"
    if (built / "package.json").exists():
        link = base / "jupyter-path" / "labextensions" / "gpucloud-nb"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(built)
        env["JUPYTER_PATH"] = str(base / "jupyter-path")
    return env


class LabServer:
    """A ``jupyter lab`` subprocess serving ``root`` on 127.0.0.1, logged to ``log_path``."""

    def __init__(self, root: Path, home: Path, log_path: Path = LAB_LOG,
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.env = env or {}  # set after scrubbing: e.g. a cloud for the GPU-cloud sidebar
        self.home = home
        self.log_path = log_path
        self.token = secrets.token_hex(24)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    # -- life cycle -------------------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in SCRUBBED_ENV}
        dirs = {
            "HOME": self.home / "home",
            "JUPYTER_CONFIG_DIR": self.home / "jupyter-config",
            "JUPYTER_DATA_DIR": self.home / "jupyter-data",  # sys.prefix/share/jupyter still searched
            "JUPYTER_RUNTIME_DIR": self.home / "jupyter-runtime",
            "IPYTHONDIR": self.home / "ipython",
        }
        for key, path in dirs.items():
            path.mkdir(parents=True, exist_ok=True)
            env[key] = str(path)
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        config = dirs["JUPYTER_CONFIG_DIR"]
        # Every cell in the DOM (selectors see all outputs), no news pop-ups.
        _write_json(
            config / "lab" / "user-settings" / "@jupyterlab" / "notebook-extension"
            / "tracker.jupyterlab-settings",
            {"windowingMode": "none"},
        )
        _write_json(
            config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
            / "notification.jupyterlab-settings",
            {"fetchNews": "false", "checkForUpdates": False},
        )
        return env

    def start(self) -> LabServer:
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        command = [
            sys.executable, "-m", "jupyter", "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            "--ServerApp.allow_root=True",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--ServerApp.open_browser=False",
        ]
        self.process = subprocess.Popen(
            command, cwd=self.root, env=self._environment(), stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with {self.process.returncode}; see {self.log_path}:\n"
                    + self.log_tail()
                )
            with contextlib.suppress(OSError, ValueError):
                self.api("GET", "/api/status", timeout=2)
                return
            time.sleep(0.25)
        raise RuntimeError(f"jupyter lab did not answer within {STARTUP_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop Lab and everything it started (its kernels share its process group)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        # Kernels may have outlived the server in its group: sweep it once more.
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- REST -------------------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None, timeout: float = 10) -> Any:
        """Call Lab's REST API with the token; the decoded JSON body (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def sessions(self) -> list[dict[str, Any]]:
        return self.api("GET", "/api/sessions")

    def session_for(self, path: str) -> dict[str, Any] | None:
        for session in self.sessions():
            if session.get("path") == path:
                return session
        return None

    def kernel_state(self, path: str) -> tuple[str | None, int]:
        """``(execution_state, connections)`` of the kernel of the notebook at ``path``."""
        session = self.session_for(path)
        kernel = (session or {}).get("kernel") or {}
        return kernel.get("execution_state"), int(kernel.get("connections") or 0)

    def wait_kernel_idle(self, path: str, timeout: float = KERNEL_TIMEOUT) -> None:
        """Wait until the notebook's kernel is idle with at least one connection."""
        deadline = time.monotonic() + timeout
        state: tuple[str | None, int] = (None, 0)
        while time.monotonic() < deadline:
            state = self.kernel_state(path)
            if state[0] == "idle" and state[1] >= 1:
                return
            time.sleep(0.25)
        raise TimeoutError(
            f"The kernel of {path} was not idle and connected within {timeout:.0f} s "
            f"(state {state[0]!r}, {state[1]} connections); see {self.log_path}"
        )

    def shutdown_sessions(self, under: str = "") -> None:
        """Delete every session (and its kernel) whose notebook path starts with ``under``."""
        for session in self.sessions():
            if session.get("path", "").startswith(under):
                with contextlib.suppress(OSError):
                    self.api("DELETE", f"/api/sessions/{session['id']}")


class Lab:
    """One test's JupyterLab: the shared server, a fresh browser context, a fresh ``root``.

    ``root`` is a copy of ``notebooks/`` made for this test (add notebooks to it freely);
    ``open(name)`` opens ``root / name``.
    """

    def __init__(self, server: LabServer, context: BrowserContext, name: str) -> None:
        self.server = server
        self.context = context
        self.url = server.url
        self.token = server.token
        self.relroot = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]
        self.root = server.root / self.relroot
        if self.root.exists():
            shutil.rmtree(self.root)
        shutil.copytree(NOTEBOOKS, self.root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        self.pages: list[Page] = []

    def path_of(self, name: str) -> str:
        """The server-relative path of ``root / name``."""
        return f"{self.relroot}/{name}"

    def open(self, name: str, timeout: float = KERNEL_TIMEOUT) -> Page:
        """Open ``root / name`` in JupyterLab; return the page once the kernel is idle."""
        if not (self.root / name).is_file():
            raise FileNotFoundError(f"{self.root / name} does not exist")
        path = self.path_of(name)
        page = self.context.new_page()
        page.set_default_timeout(timeout * 1000)
        self.pages.append(page)
        _OPENED[page] = (self.server, path)
        query = urllib.parse.urlencode({"token": self.token, "reset": ""})
        page.goto(f"{self.url}/lab/tree/{urllib.parse.quote(path)}?{query}",
                  wait_until="domcontentloaded")
        page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").first.wait_for(
            state="visible"
        )
        self.server.wait_kernel_idle(path, timeout=timeout)
        # The toolbar's kernel indicator agrees, so a keypress now reaches a live kernel.
        page.wait_for_function(
            """() => { const el = document.querySelector(
                   '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
                 return !el || el.getAttribute('data-status') === 'idle'; }"""
        )
        return page

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.context.close()
        with contextlib.suppress(OSError):
            self.server.shutdown_sessions(self.relroot + "/")


# -- working on a page ----------------------------------------------------------------------

_PROMPTS_JS = """() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt'
  )).map(e => (e.textContent || '').replace(/\\s+/g, ''))"""


def _prompts(page: Page) -> list[str]:
    return page.evaluate(_PROMPTS_JS)


def run_all(page: Page, timeout: float = RUN_TIMEOUT) -> None:
    """Run → Run All Cells, then wait until no cell shows ``[*]`` and the kernel is idle."""
    opened = _OPENED.get(page)
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.click(
        position={"x": 5, "y": 5}
    )
    page.locator("#jp-menu-panel .lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    wait_until_idle(page, timeout=timeout, opened=opened)


def wait_until_idle(page: Page, timeout: float = RUN_TIMEOUT,
                    opened: tuple[LabServer, str] | None = None) -> None:
    """Wait until execution has started and ended: no ``[*]`` prompt and an idle kernel."""
    opened = opened or _OPENED.get(page)
    deadline = time.monotonic() + timeout
    started = False
    calm = 0
    while time.monotonic() < deadline:
        prompts = _prompts(page)
        if not prompts:
            return
        started = started or any(p != "[]:" for p in prompts)
        busy = any("*" in p for p in prompts)
        idle = True
        if opened is not None:
            idle = opened[0].kernel_state(opened[1])[0] == "idle"
        calm = calm + 1 if started and not busy and idle else 0
        if calm >= 3:  # stable for ~0.75 s
            return
        time.sleep(0.25)
    raise TimeoutError(
        f"Run All Cells did not finish within {timeout:.0f} s (prompts: {_prompts(page)})"
    )


_MODEL_ERRORS_JS = """(path) => {
  const app = window.jupyterapp;
  if (!app) return null;
  const errors = [];
  for (const widget of app.shell.widgets('main')) {
    const ctx = widget.context;
    if (!ctx || ctx.path !== path || !widget.content || !widget.content.model) continue;
    const cells = widget.content.model.cells;
    for (let i = 0; i < cells.length; i++) {
      const cell = cells.get(i);
      if (cell.type !== 'code') continue;
      for (const out of cell.outputs.toJSON()) {
        if (out.output_type === 'error') errors.push(`cell ${i}: ${out.ename}: ${out.evalue}`);
      }
    }
  }
  return errors;
}"""

_DOM_ERRORS_JS = """() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) '
    + '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
  )).map(e => e.textContent || '')
   .filter(t => /Traceback|^\\s*\\w+(Error|Exception)\\b.*:/m.test(t))"""

_WIDGET_ERRORS = ("Error displaying widget", "Failed to load model class", "Error rendering output")


def cell_errors(page: Page) -> list[str]:
    """Error outputs of the open notebook: ``ename: evalue`` from the model, tracebacks in
    stderr outputs, and widgets that failed to render. Empty when all went well."""
    opened = _OPENED.get(page)
    errors: list[str] = []
    if opened is not None:
        errors.extend(page.evaluate(_MODEL_ERRORS_JS, opened[1]) or [])
    for text in page.evaluate(_DOM_ERRORS_JS):
        lines = [line for line in text.strip().splitlines() if line.strip()]
        summary = lines[-1].strip() if lines else text.strip()
        if not any(summary in known for known in errors):
            errors.append(summary)
    text = output_text(page)
    errors.extend(marker for marker in _WIDGET_ERRORS if marker in text)
    return errors


def output_text(page: Page) -> str:
    """The text of every output area of the open notebook, as displayed, joined by newlines."""
    return "\n".join(
        page.evaluate(
            """() => Array.from(document.querySelectorAll(
                '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output'
              )).map(e => e.textContent || '')"""
        )
    )


def save_screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot to ``test-artifacts/screenshots/<name>.png``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120]
    path = SCREENSHOTS / f"{safe}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    return path


@contextlib.contextmanager
def keyed_lab(base: Path, url: str, key: str, log_name: str,
              **env: str) -> Iterator[LabServer]:
    """A :class:`LabServer` running this checkout whose sidebar and kernels reach the cloud at
    ``url`` with ``key`` through Lab's personal gateway, kept in a home of its own under
    ``base`` (out of reach of the per-test cleanup of the run's gateways) and stopped with Lab.

        with keyed_lab(base, box.management_url, box.api_key, "lab-x.log") as server: ...
    """
    from gpucloud_nb.gateway import personal

    settings = {"GPUCLOUD_API_KEY": key, "GPUCLOUD_BASE_URL": url,
                "XDG_CACHE_HOME": str(base / "cache"),
                "GPUCLOUD_GATEWAY_HOME": str(base / "gateways"), **this_checkout(base), **env}
    server = LabServer(root=base / "root", home=base / "home", log_path=ARTIFACTS / log_name,
                       env=settings)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        for home in (base / "gateways").glob("*/"):
            personal.stop(home)


@contextlib.contextmanager
def lab_session(server: LabServer, browser: Any, node: Any, *,
                height: int = 1000) -> Iterator[Lab]:
    """One test's :class:`Lab` on ``server`` in a fresh context of ``browser``; the pages are
    saved as screenshots when the test (pytest's ``node``) failed.

        with lab_session(server, chromium, request.node) as lab: ...
    """
    context = browser.new_context(viewport={"width": 1400, "height": height})
    context.set_default_timeout(60_000)
    session = Lab(server, context, node.name)
    try:
        yield session
    finally:
        report = getattr(node, "_report_call", None)
        if report is not None and report.failed:
            for index, page in enumerate(session.pages):
                with contextlib.suppress(Exception):  # a dead page must not hide the failure
                    save_screenshot(page, f"{node.name}-failed-{index}")
        session.close()


def sandbox_fixture(launch_seconds: float = 0.3, delete_seconds: float = 0.2) -> Any:
    """A module-scoped ``box`` fixture: a sandbox with these life-cycle times, stopped after
    the module.

        box = sandbox_fixture(launch_seconds=3, delete_seconds=1)
    """
    import pytest

    from gpucloud_nb.sandbox import Sandbox

    @pytest.fixture(scope="module")
    def box() -> Iterator[Sandbox]:
        sandbox = Sandbox(launch_seconds=launch_seconds, delete_seconds=delete_seconds).start()
        try:
            yield sandbox
        finally:
            sandbox.stop()

    return box
