"""The user's sandbox service: one background sandbox per home, found or started by ``connect()``.

    >>> from gpucloud_nb.sandbox.service import find_or_start
    >>> runtime = find_or_start()          # the running service, or a new detached one
    >>> runtime.management_url  # doctest: +SKIP
    'http://127.0.0.1:41877'

The home (:func:`gpucloud_nb.sandbox.home.default_home`, mode 0700) holds:

- ``state.db``: the SQLite state (instances, volumes, auto-delete timers);
- ``runtime.json`` (mode 0600): URLs, pid, key, secret, start time and ``launch_seconds`` of the
  running service, written by the service once it listens and removed when it stops cleanly;
- ``service.json`` (mode 0600): the home's own API key, inference secret and challenge secret
  (random, made once, so a restarted service is the same account) and the last port (reused when
  free, so clients of a service that was killed keep working once it is started again);
- ``sandbox.log``: what the service prints; ``start.lock``, held by whoever finds or starts the
  service (so two kernels calling ``connect()`` at once end on one service); ``service.lock``,
  held by the running service for its whole life, with its pid written in it.

Nothing secret is sent to a service before it is verified (:func:`verified`), because a runtime
file left by an unclean stop names a port and a pid that another local user may since have
taken. A service is the home's when, in this order, with no request sent until the last step:

1. its pid is alive and belongs to the current user;
2. that pid holds ``service.lock`` (``/proc/locks`` says so on Linux; elsewhere the lock is held
   and the pid written in it is that pid);
3. its port answers ``GET /sandbox/challenge?nonce=N`` (no key) with the HMAC-SHA256, keyed by
   the challenge secret of ``service.json``, of the fresh random nonce, the pid and the port it
   listens on (:func:`challenge_proof`), compared with :func:`hmac.compare_digest`.

Anything else is stale and replaced. The home itself is refused when another user could have
written in it (:func:`gpucloud_nb.sandbox.home.checked_home`). ``stop`` and ``status`` find a
running service by its lock even when its runtime file cannot be read. This module imports no
web framework: the client side of ``connect()`` stays light.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from gpucloud_nb._secrets import mask
from gpucloud_nb.errors import ConnectionFailedError
from gpucloud_nb.sandbox.home import HOME_VARIABLE, checked_home, default_home
from gpucloud_nb.sandbox.processes import (
    SERVICE_LOCK,
    lock_held,
    lock_holder,
    locked,
    owned_by_us,
    pid_alive,
)

__all__ = [
    "LOG_FILE",
    "RUNTIME_FILE",
    "STATE_FILE",
    "Listening",
    "Runtime",
    "challenge_proof",
    "challenge_secret",
    "credentials",
    "find",
    "find_or_start",
    "find_or_start_locked",
    "log_tail",
    "open_log",
    "read_json",
    "read_runtime",
    "running_pid",
    "spawn",
    "start",
    "stop",
    "terminate",
    "verified",
    "write_private",
]

RUNTIME_FILE = "runtime.json"
SETTINGS_FILE = "service.json"
STATE_FILE = "state.db"
LOG_FILE = "sandbox.log"
START_LOCK = "start.lock"
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


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def credentials(home: Path) -> tuple[str, str]:
    """The home's own API key and inference secret, made (random) on first use.

    The challenge secret (see :func:`challenge_secret`) is made at the same time, so a service
    started with these credentials can always prove itself.
    """
    settings = read_json(home / SETTINGS_FILE) or {}
    key, secret = settings.get("api_key"), settings.get("inference_secret")
    made = {}
    if not (isinstance(key, str) and key and isinstance(secret, str) and secret):
        key, secret = f"sandbox-{secrets.token_hex(16)}", f"sandbox-{secrets.token_hex(16)}"
        made = {"api_key": key, "inference_secret": secret}
    if not isinstance(settings.get("challenge"), str):
        made["challenge"] = secrets.token_hex(32)
    if made:
        write_private(home / SETTINGS_FILE, settings | made)
    return key, secret


def challenge_secret(home: Path) -> bytes | None:
    """The secret the home's service proves itself with (``None`` until a service made it)."""
    secret = (read_json(home / SETTINGS_FILE) or {}).get("challenge")
    return secret.encode("ascii", "replace") if isinstance(secret, str) and secret else None


def challenge_proof(secret: bytes, nonce: str, pid: int, port: int) -> str:
    """The answer to a challenge: HMAC-SHA256 of the nonce, the pid and the port, in hex."""
    message = f"gpucloud-nb-challenge:{nonce}:{pid}:{port}".encode("ascii", "replace")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def remembered_port(home: Path) -> int:
    """The port the home's service last listened on (0 when none)."""
    port = (read_json(home / SETTINGS_FILE) or {}).get("port")
    return port if isinstance(port, int) and 0 < port < 65536 else 0


def remember_port(home: Path, port: int) -> None:
    """Keep ``port`` as the one to reuse next time."""
    settings = read_json(home / SETTINGS_FILE) or {}
    if settings.get("port") != port:
        write_private(home / SETTINGS_FILE, settings | {"port": port})


def read_runtime(home: Path) -> Runtime | None:
    """The runtime file of ``home`` as written, or ``None`` (missing or unreadable); not checked."""
    data = read_json(home / RUNTIME_FILE)
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


class Listening(Protocol):
    """What a runtime file says of any home's service: where it listens, and its pid."""

    @property
    def management_url(self) -> str: ...

    @property
    def pid(self) -> int: ...


def verified(runtime: Listening, home: Path, timeout: float = 2.0, *,
             path: str = "/sandbox/challenge") -> bool:
    """True when ``runtime`` is the home's running service (see the module docstring).

    The only request sent is the challenge (``GET path?nonce=N``), which carries no key: a
    server that is not the home's service learns nothing from it. A personal gateway
    (:mod:`gpucloud_nb.gateway.personal`) is verified the same way at ``/gateway/challenge``.
    """
    if not (pid_alive(runtime.pid) and owned_by_us(runtime.pid)
            and lock_holder(home) == runtime.pid):
        return False
    secret = challenge_secret(home)
    parts = urlsplit(runtime.management_url)
    try:
        port = parts.port
    except ValueError:
        return False
    if secret is None or parts.scheme != "http" or port is None:
        return False
    import httpx

    nonce = secrets.token_hex(16)
    try:
        response = httpx.get(f"{runtime.management_url}{path}",
                             params={"nonce": nonce}, timeout=timeout, trust_env=False)
        answer = response.json().get("proof") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    expected = challenge_proof(secret, nonce, runtime.pid, port)
    return isinstance(answer, str) and hmac.compare_digest(
        answer.encode("utf-8", "replace"), expected.encode("ascii"))


def find(home: Path | None = None) -> Runtime | None:
    """The running service of ``home`` (default: the user's), verified; ``None`` if none is.

    Raises :class:`ConnectionFailedError` for a home another user could have written in.
    """
    home = checked_home(home if home is not None else default_home(), create=False)
    runtime = read_runtime(home)
    if runtime is not None and verified(runtime, home):
        return runtime
    return None


# -- starting and stopping -----------------------------------------------------------------------


def log_tail(home: Path, lines: int = 20, name: str = LOG_FILE) -> list[str]:
    """The last ``lines`` lines of the service log (none if there is no log)."""
    try:
        with open(home / name, "rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(size - 64_000 - 200 * lines, 0))
            text = file.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:] if lines > 0 else []


def open_log(home: Path, name: str = LOG_FILE) -> IO[bytes]:
    """The service log of ``home`` opened for appending (0600), rotated past 5 MB."""
    log = home / name
    with contextlib.suppress(OSError):
        if log.stat().st_size > _LOG_ROTATE_BYTES:
            os.replace(log, home / f"{name}.1")
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

    def ready(pid: int) -> Runtime | None:
        runtime = read_runtime(home)
        return runtime if runtime is not None and runtime.pid == pid \
            and verified(runtime, home) else None

    return spawn(home, command, env, ready, timeout=timeout)


T = TypeVar("T")


def spawn(home: Path, command: list[str], env: dict[str, str], ready: Callable[[int], T | None],
          *, timeout: float, what: str = "The sandbox service", log_file: str = LOG_FILE) -> T:
    """Start ``command`` detached as the service of ``home`` (its own session, output to its
    log, in ``home``); wait until ``ready(pid)`` gives its verified runtime, and return that.

    A process that exits, or does not get ready within ``timeout`` seconds, is a
    :class:`ConnectionFailedError` quoting the end of its log.
    """
    with open_log(home, log_file) as log:
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
        runtime = ready(process.pid)
        if runtime is not None:
            return runtime
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            tail = "\n".join(f"    {line}" for line in log_tail(home, 10, log_file))
            why = (f"exited with status {process.returncode}" if process.returncode not in (None, -9)
                   else f"did not answer within {timeout:g} s")
            raise ConnectionFailedError(
                f"{what} in {home} {why}; the end of its log ({home / log_file}):\n{tail}")
        time.sleep(0.05)


def _is_our_service(pid: int, home: Path) -> bool:
    """True when ``pid`` is ours and runs ``gpucloud_nb sandbox --home <home>`` (or the
    ``gpucloud-nb`` script), checked where possible."""
    if not owned_by_us(pid):
        return False
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
    program = any(Path(part).name in ("gpucloud_nb", "gpucloud-nb", "gpucloud-nb.exe")
                  for part in command[:3])
    return program and "--home" in command and str(home) in command


def terminate(pid: int, home: Path, wait: float = 10.0) -> bool:
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
            if not lock_held(home) and not pid_alive(pid):
                return True
            time.sleep(0.05)
    return False


def running_pid(home: Path) -> int | None:
    """The pid of the home's service found by its lock alone (its runtime file unread), or
    ``None``: the holder of ``service.lock``, ours, running ``gpucloud_nb sandbox --home``."""
    holder = lock_holder(home)
    if holder is None or not pid_alive(holder) or not _is_our_service(holder, home):
        return None
    return holder


def stop(home: Path) -> int | None:
    """Stop the running service of ``home`` cleanly (state kept); its pid, or ``None``.

    The service is found by its lock (:func:`running_pid`), so one whose runtime file cannot be
    read stops too; nothing is sent to it but SIGTERM.
    """
    home = checked_home(home, create=False)
    pid = running_pid(home)
    if pid is None:
        return None
    if not terminate(pid, home):
        raise ConnectionFailedError(f"The sandbox service (pid {pid}) did not stop; kill it by hand.")
    remove_runtime(home, pid)
    return pid


def find_or_start(home: Path | None = None, *, launch_seconds: float | None = None,
                  api_key: str | None = None, inference_secret: str | None = None,
                  timeout: float = START_TIMEOUT) -> Runtime:
    """The running service of ``home`` (default: the user's), or a freshly started one.

    Finding and starting happen under ``start.lock``, so concurrent callers end on one service.
    A stale runtime file (dead pid, or a port that does not answer with that pid) is replaced.
    The options apply only when a service is started; a running one keeps its settings.
    """
    home = checked_home(home if home is not None else default_home())
    found = find(home)
    if found is not None:
        return found
    try:
        return find_or_start_locked(
            home, lambda: find(home),
            lambda: start(home, launch_seconds=launch_seconds, api_key=api_key,
                          inference_secret=inference_secret, timeout=timeout),
            timeout=timeout)
    except OSError as error:  # a full disk, a read-only home: one sentence, not a traceback
        reason = error.strerror.lower() if error.strerror else str(error)
        raise ConnectionFailedError(
            f"The sandbox service cannot start: writing in its home {home} failed ({reason}); "
            f"free space there or set {HOME_VARIABLE} to a writable directory.") from None


def find_or_start_locked(home: Path, find: Callable[[], T | None], start: Callable[[], T], *,
                         timeout: float, what: str = "sandbox service",
                         command: str = "gpucloud-nb sandbox") -> T:
    """Under ``start.lock`` of ``home``: ``find()`` the home's service, or ``start()`` one.

    A service that holds the home's lock but does not answer within 5 s is ended first (one
    sentence when it cannot be). The sandbox service and a personal gateway share this.
    """
    with locked(home / START_LOCK, timeout + 15, f"the {what}", f"{command} logs"):
        found = find()
        if found is not None:
            return found
        if lock_held(home):
            # A service holds the home but does not answer: starting, or hung.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                found = find()
                if found is not None:
                    return found
                if not lock_held(home):
                    break
                time.sleep(0.1)
            else:
                hung = running_pid(home)
                if hung is None or not terminate(hung, home):
                    raise ConnectionFailedError(
                        f"A {what} holds {home / SERVICE_LOCK} but does not answer; "
                        f"stop it (`{command} stop`) or end its process.")
        return start()
