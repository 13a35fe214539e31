"""The user's sandbox service: one background sandbox per home, found or started by ``connect()``.

    >>> from gpucloud_nb.sandbox.service import find_or_start
    >>> runtime = find_or_start()          # the running service, or a new detached one
    >>> runtime.management_url  # doctest: +SKIP
    'http://127.0.0.1:41877'

The home (:func:`gpucloud_nb.sandbox.home.default_home`, mode 0700) holds:

- ``state.db``: the SQLite state (instances, volumes, auto-delete timers);
- ``runtime.json`` (mode 0600): URLs, pid, key, secret, start time and ``launch_seconds`` of the
  running service, written by the service once it listens and removed when it stops cleanly;
- ``service.json`` (mode 0600): the home's own API key and inference secret (random, made once,
  so a restarted service is the same account) and the last port (reused when free, so clients of
  a service that was killed keep working once it is started again);
- ``sandbox.log``: what the service prints; ``start.lock``, held by whoever finds or starts the
  service (so two kernels calling ``connect()`` at once end on one service); ``service.lock``,
  held by the running service for its whole life.

A runtime file is trusted only when its pid is alive and its port answers
``GET /sandbox/service`` with the same pid; anything else is stale and replaced. This module
imports no web framework: the client side of ``connect()`` stays light.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from gpucloud_nb._secrets import mask
from gpucloud_nb.errors import ConnectionFailedError
from gpucloud_nb.sandbox.home import default_home, private_dir

__all__ = [
    "LOG_FILE",
    "RUNTIME_FILE",
    "STATE_FILE",
    "Runtime",
    "credentials",
    "find",
    "find_or_start",
    "log_tail",
    "read_runtime",
    "service_lock",
    "start",
    "stop",
    "write_private",
]

RUNTIME_FILE = "runtime.json"
SETTINGS_FILE = "service.json"
STATE_FILE = "state.db"
LOG_FILE = "sandbox.log"
START_LOCK = "start.lock"
SERVICE_LOCK = "service.lock"
START_TIMEOUT = 30.0
_LOG_ROTATE_BYTES = 5_000_000

# Windows: the service leaves the kernel's console and process group (setsid does it elsewhere).
if sys.platform == "win32":  # pragma: no cover
    _DETACHED = subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.DETACHED_PROCESS
else:
    _DETACHED = 0


@dataclass(frozen=True)
class Runtime:
    """What ``runtime.json`` says about a running service; ``repr`` masks the key and secret.

    It has the attributes of an in-thread :class:`~gpucloud_nb.sandbox.Sandbox` that clients use
    (``management_url``, ``inference_url``, ``api_key``, ``inference_secret``).
    """

    management_url: str
    inference_url: str
    pid: int
    api_key: str
    inference_secret: str
    started_at: float
    launch_seconds: float
    home: str

    def __repr__(self) -> str:
        return (f"Runtime({self.management_url}, pid={self.pid}, api_key={mask(self.api_key)!r}, "
                f"inference_secret={mask(self.inference_secret)!r}, home={self.home!r})")


def write_private(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically, mode 0600 from the first byte."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file)
        with contextlib.suppress(OSError):
            temporary.chmod(0o600)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def credentials(home: Path) -> tuple[str, str]:
    """The home's own API key and inference secret, made (random) on first use."""
    settings = _read_json(home / SETTINGS_FILE) or {}
    key, secret = settings.get("api_key"), settings.get("inference_secret")
    if not (isinstance(key, str) and key and isinstance(secret, str) and secret):
        key, secret = f"sandbox-{secrets.token_hex(16)}", f"sandbox-{secrets.token_hex(16)}"
        write_private(home / SETTINGS_FILE, settings | {"api_key": key, "inference_secret": secret})
    return key, secret


def remembered_port(home: Path) -> int:
    """The port the home's service last listened on (0 when none)."""
    port = (_read_json(home / SETTINGS_FILE) or {}).get("port")
    return port if isinstance(port, int) and 0 < port < 65536 else 0


def remember_port(home: Path, port: int) -> None:
    """Keep ``port`` as the one to reuse next time."""
    settings = _read_json(home / SETTINGS_FILE) or {}
    if settings.get("port") != port:
        write_private(home / SETTINGS_FILE, settings | {"port": port})


def read_runtime(home: Path) -> Runtime | None:
    """The runtime file of ``home`` as written, or ``None`` (missing or unreadable); not checked."""
    data = _read_json(home / RUNTIME_FILE)
    if data is None:
        return None
    try:
        return Runtime(**{name: data[name] for name in Runtime.__dataclass_fields__})
    except (KeyError, TypeError):
        return None


def write_runtime(home: Path, runtime: Runtime) -> None:
    """Write the runtime file (mode 0600)."""
    write_private(home / RUNTIME_FILE, asdict(runtime))


def remove_runtime(home: Path, pid: int) -> None:
    """Remove the runtime file if it is still that of ``pid``."""
    runtime = read_runtime(home)
    if runtime is not None and runtime.pid == pid:
        with contextlib.suppress(OSError):
            (home / RUNTIME_FILE).unlink()


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        import psutil

        return bool(psutil.pid_exists(pid)) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except ImportError:
        pass
    except Exception:  # psutil.NoSuchProcess between the two calls
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def answers(runtime: Runtime, timeout: float = 2.0) -> bool:
    """True when the runtime's port answers ``GET /sandbox/service`` with the runtime's pid."""
    import httpx

    try:
        response = httpx.get(f"{runtime.management_url}/sandbox/service", timeout=timeout,
                             headers={"x-api-key": runtime.api_key}, trust_env=False)
        return response.status_code == 200 and response.json().get("pid") == runtime.pid
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


def find(home: Path | None = None) -> Runtime | None:
    """The running service of ``home`` (default: the user's), checked; ``None`` if none answers."""
    home = Path(home) if home is not None else default_home()
    runtime = read_runtime(home)
    if runtime is not None and pid_alive(runtime.pid) and answers(runtime):
        return runtime
    return None


# -- locks --------------------------------------------------------------------------------------


def _try_lock(file: IO[bytes]) -> bool:
    """Take an exclusive lock on ``file`` without waiting; True if taken."""
    if sys.platform == "win32":  # pragma: no cover - Windows: a byte-range lock on the first byte
        import msvcrt

        try:
            msvcrt.locking(file.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _locked(path: Path, timeout: float) -> Iterator[None]:
    """Hold the exclusive lock on ``path``, waiting up to ``timeout`` seconds for it."""
    with open(path, "a+b") as file:
        deadline = time.monotonic() + timeout
        while not _try_lock(file):
            if time.monotonic() > deadline:
                raise ConnectionFailedError(
                    f"Another process has been starting the sandbox service in {path.parent} for "
                    f"over {timeout:g} s; see `gpucloud-nb sandbox logs`.")
            time.sleep(0.05)
        yield  # closing the file releases the lock


def service_lock(home: Path) -> IO[bytes] | None:
    """Take ``service.lock`` for the life of a service: the open file, or ``None`` if held."""
    file = open(home / SERVICE_LOCK, "a+b")  # noqa: SIM115 - held open until the service ends
    if _try_lock(file):
        return file
    file.close()
    return None


def _lock_held(home: Path) -> bool:
    file = service_lock(home)
    if file is None:
        return True
    file.close()
    return False


# -- starting and stopping -----------------------------------------------------------------------


def log_tail(home: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of the service log (none if there is no log)."""
    try:
        with open(home / LOG_FILE, "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(size - 64_000 - 200 * lines, 0))
            text = file.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:] if lines > 0 else []


def _open_log(home: Path) -> IO[bytes]:
    log = home / LOG_FILE
    with contextlib.suppress(OSError):
        if log.stat().st_size > _LOG_ROTATE_BYTES:
            os.replace(log, home / f"{LOG_FILE}.1")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "ab")


_children: list[subprocess.Popen[bytes]] = []


def _reap(process: subprocess.Popen[bytes]) -> None:
    process.wait()  # so a stopped service does not linger as a zombie of this process


def start(home: Path, *, launch_seconds: float | None = None, api_key: str | None = None,
          inference_secret: str | None = None, timeout: float = START_TIMEOUT) -> Runtime:
    """Start the service of ``home`` detached (its own session, output to the log); wait for it.

    ``api_key`` / ``inference_secret`` default to the home's own (see :func:`credentials`); they
    reach the service through its environment, never its command line. Call with the start lock
    held (:func:`find_or_start` does).
    """
    env = {key: value for key, value in os.environ.items()
           if key not in ("GPUCLOUD_SANDBOX_API_KEY", "GPUCLOUD_SANDBOX_INFERENCE_SECRET")}
    if api_key:
        env["GPUCLOUD_SANDBOX_API_KEY"] = api_key
    if inference_secret:
        env["GPUCLOUD_SANDBOX_INFERENCE_SECRET"] = inference_secret
    command = [sys.executable, "-m", "gpucloud_nb", "sandbox", "--home", str(home), "--port", "0"]
    if launch_seconds is not None:
        command += ["--launch-seconds", repr(float(launch_seconds))]
    with _open_log(home) as log:
        log.write(f"--- starting: {' '.join(command[1:])}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            cwd=home, close_fds=True, start_new_session=True,  # setsid: outlives the kernel
            creationflags=_DETACHED,
        )
    _children.append(process)
    threading.Thread(target=_reap, args=(process,), name="gpucloud-nb-reap", daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        runtime = read_runtime(home)
        if runtime is not None and runtime.pid == process.pid and answers(runtime):
            return runtime
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            tail = "\n".join(f"    {line}" for line in log_tail(home, 10))
            why = (f"exited with status {process.returncode}" if process.returncode not in (None, -9)
                   else f"did not answer within {timeout:g} s")
            raise ConnectionFailedError(
                f"The sandbox service in {home} {why}; the end of its log ({home / LOG_FILE}):\n"
                f"{tail}")
        time.sleep(0.05)


def _is_our_service(pid: int, home: Path) -> bool:
    """True when ``pid`` runs ``gpucloud_nb sandbox --home <home>`` (checked where possible)."""
    try:
        import psutil

        command = psutil.Process(pid).cmdline()
    except ImportError:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        command = raw.decode("utf-8", "replace").split("\0")
    except Exception:
        return False
    return "gpucloud_nb" in command and "--home" in command and str(home) in command


def _terminate(pid: int, home: Path, wait: float = 10.0) -> bool:
    """SIGTERM the service ``pid`` (SIGKILL after ``wait`` s); True once it and its lock are gone."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
        if hasattr(signal, "SIGCONT"):
            os.kill(pid, signal.SIGCONT)  # a stopped (hung) service handles its SIGTERM too
    for how, seconds in ((None, wait), (getattr(signal, "SIGKILL", signal.SIGTERM), 5.0)):
        if how is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, how)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not _lock_held(home) and not pid_alive(pid):
                return True
            time.sleep(0.05)
    return False


def stop(home: Path) -> Runtime | None:
    """Stop the running service of ``home`` cleanly (state kept); the one stopped, or ``None``."""
    runtime = read_runtime(home)
    if runtime is None or not _lock_held(home) or not pid_alive(runtime.pid):
        return None
    if not (answers(runtime) or _is_our_service(runtime.pid, home)):
        return None
    if not _terminate(runtime.pid, home):
        raise ConnectionFailedError(
            f"The sandbox service (pid {runtime.pid}) did not stop; kill it by hand.")
    remove_runtime(home, runtime.pid)
    return runtime


def find_or_start(home: Path | None = None, *, launch_seconds: float | None = None,
                  api_key: str | None = None, inference_secret: str | None = None,
                  timeout: float = START_TIMEOUT) -> Runtime:
    """The running service of ``home`` (default: the user's), or a freshly started one.

    Finding and starting happen under ``start.lock``, so concurrent callers end on one service.
    A stale runtime file (dead pid, or a port that does not answer with that pid) is replaced.
    The options apply only when a service is started; a running one keeps its settings.
    """
    home = private_dir(home if home is not None else default_home())
    found = find(home)
    if found is not None:
        return found
    with _locked(home / START_LOCK, timeout + 15):
        found = find(home)
        if found is not None:
            return found
        if _lock_held(home):
            # A service holds the home but does not answer: starting, or hung.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                found = find(home)
                if found is not None:
                    return found
                if not _lock_held(home):
                    break
                time.sleep(0.1)
            else:
                runtime = read_runtime(home)
                if runtime is None or not _is_our_service(runtime.pid, home) \
                        or not _terminate(runtime.pid, home):
                    raise ConnectionFailedError(
                        f"A sandbox service holds {home / SERVICE_LOCK} but does not answer; "
                        "stop it (`gpucloud-nb sandbox stop`) or end its process.")
        return start(home, launch_seconds=launch_seconds, api_key=api_key,
                     inference_secret=inference_secret, timeout=timeout)


# -- the service side --------------------------------------------------------------------------


def serve_home(config: Any, home: Path, ready: Any = None) -> None:
    """Serve ``config`` in the foreground as the service of ``home``, until SIGTERM or Ctrl-C.

    Holds ``service.lock`` while serving (refusing with :class:`ConnectionFailedError` when
    another service has it), reuses the remembered port when ``config.port`` is 0 and that port
    is free, writes the runtime file once listening and removes it on the way out.
    """
    import dataclasses

    from gpucloud_nb.sandbox.server import serve

    lock = service_lock(home)
    if lock is None:
        running = read_runtime(home)
        where = f" (pid {running.pid}, {running.management_url})" if running else ""
        raise ConnectionFailedError(f"A sandbox service already runs in {home}{where}; "
                                    "`gpucloud-nb sandbox stop` stops it.")
    listening: list[bool] = []

    def on_ready(management: str, inference: str) -> None:
        listening.append(True)
        remember_port(home, int(management.rsplit(":", 1)[1]))
        write_runtime(home, Runtime(management, inference, os.getpid(), config.api_key,
                                    config.inference_secret, time.time(),
                                    float(config.launch_seconds), str(home)))
        if ready is not None:
            ready(management, inference)

    try:
        remembered = remembered_port(home) if config.port == 0 else 0
        try:
            serve(dataclasses.replace(config, port=remembered or config.port), on_ready)
        except OSError:
            if listening or not remembered:
                raise
            serve(config, on_ready)  # the remembered port is taken: any free one
    finally:
        remove_runtime(home, os.getpid())
        lock.close()
